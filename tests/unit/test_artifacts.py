"""The artifact store: deterministic IDs, first-writer-wins publication, signed links."""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from urllib.parse import parse_qs, urlsplit

import pytest

from casesignd.core.errors import Forbidden
from casesignd.core.outcomes import Artifact
from casesignd.files.artifacts import ARTIFACT_ID_PATTERN, ArtifactStore

SECRET = b"s" * 32
NOW = 1_800_000_000


@pytest.fixture
def store(tmp_path):
    return ArtifactStore(tmp_path / "artifacts", SECRET)


def test_ids_are_deterministic_keyed_and_not_personal(store, tmp_path):
    a = store.artifact_id("tenant-a", "MKT-42|J. Doe")
    assert ARTIFACT_ID_PATTERN.match(a)
    assert a == store.artifact_id("tenant-a", "MKT-42|J. Doe")
    assert a == ArtifactStore(tmp_path / "elsewhere", SECRET).artifact_id(
        "tenant-a", "MKT-42|J. Doe"
    )
    assert a != store.artifact_id("tenant-b", "MKT-42|J. Doe")
    assert a != store.artifact_id("tenant-a", "MKT-43|J. Doe")
    # Field boundaries matter: ("ab", "c") is not ("a", "bc").
    assert store.artifact_id("ab", "c") != store.artifact_id("a", "bc")
    assert a != ArtifactStore(tmp_path, b"t" * 32).artifact_id("tenant-a", "MKT-42|J. Doe")
    assert "MKT" not in a and "Doe" not in a


def test_publish_is_private_and_describes_the_bytes(store, tmp_path):
    src = tmp_path / "signed.pdf"
    data = os.urandom(3 * 1024 * 1024 + 5)
    src.write_bytes(data)
    aid = store.artifact_id("t", "k")
    art = store.publish(src, aid, "application/pdf")
    assert (art.artifact_id, art.size, art.sha256) == (
        aid,
        len(data),
        hashlib.sha256(data).hexdigest(),
    )
    p = store.open_path(aid)
    assert p is not None and p.read_bytes() == data
    assert stat.S_IMODE(p.stat().st_mode) == 0o600
    assert stat.S_IMODE(p.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(store.root.stat().st_mode) == 0o700
    assert [n for n in os.listdir(p.parent) if n.endswith(".tmp")] == []


def test_the_first_publication_wins(store, tmp_path):
    aid = store.artifact_id("t", "k")
    first, second = tmp_path / "1", tmp_path / "2"
    first.write_bytes(b"first result")
    second.write_bytes(b"a different second result")
    a1 = store.publish(first, aid, "application/pdf")
    a2 = store.publish(second, aid, "application/pdf")
    assert a1 == a2
    assert store.open_path(aid).read_bytes() == b"first result"


def test_concurrent_publications_settle_on_one(store, tmp_path):
    aid = store.artifact_id("t", "race")
    results = []
    srcs = []
    for i in range(6):
        src = tmp_path / f"src{i}"
        src.write_bytes(str(i).encode() * 100_000)
        srcs.append(src)
    threads = [
        threading.Thread(
            target=lambda s=s: results.append(store.publish(s, aid, "application/pdf"))
        )
        for s in srcs
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(results) == 6 and len(set(results)) == 1
    assert hashlib.sha256(store.open_path(aid).read_bytes()).hexdigest() == results[0].sha256


@pytest.mark.parametrize("bad", ["", "art_", "art_" + "0" * 31, "../etc/passwd", "art_" + "G" * 32])
def test_malformed_ids_are_never_paths(store, tmp_path, bad):
    assert store.open_path(bad) is None
    with pytest.raises(ValueError):
        store.publish(tmp_path, bad, "application/pdf")


def test_open_path_of_a_missing_artifact_is_none(store):
    assert store.open_path(store.artifact_id("t", "nothing")) is None


def parts_of(link: str) -> tuple[str, str, str]:
    u = urlsplit(link)
    q = parse_qs(u.query, strict_parsing=True)
    return u.path.rsplit("/", 1)[1], q["expires"][0], q["sig"][0]


def test_a_signed_link_checks_out(store):
    aid = store.artifact_id("t", "k")
    link = store.sign_link(aid, "t", NOW + 60)
    assert link.startswith(f"/v1/artifacts/{aid}?expires={NOW + 60}&sig=")
    got_id, expires, sig = parts_of(link)
    assert "=" not in sig and "+" not in sig and "/" not in sig
    store.check_link(got_id, "t", expires, sig, now=NOW)


def _tamper_sig(sig: str) -> str:
    return ("A" if sig[0] != "A" else "B") + sig[1:]


@pytest.mark.parametrize(
    "change, code",
    [
        ({"artifact_id": "art_" + "0" * 32}, "link_invalid"),
        ({"tenant": "other-tenant"}, "link_invalid"),
        ({"expires": str(NOW + 61)}, "link_invalid"),  # extended expiry
        ({"expires": str(NOW - 10)}, "link_invalid"),  # a forged past expiry is not "expired"
        ({"sig": "tamper"}, "link_invalid"),
        ({"sig": ""}, "link_invalid"),
        ({"sig": "!!!notbase64!!!"}, "link_invalid"),
        ({"sig": "AAAA"}, "link_invalid"),  # right alphabet, wrong length
        ({"expires": ""}, "link_invalid"),
        ({"expires": "-5"}, "link_invalid"),
        ({"expires": "1e9"}, "link_invalid"),
        ({"expires": " 1800000060"}, "link_invalid"),
        ({"expires": "9" * 40}, "link_invalid"),
        ({"now": NOW + 60}, "link_expired"),  # genuine link, at its expiry
        ({"now": NOW + 10**6}, "link_expired"),
    ],
)
def test_tampered_or_expired_links_are_refused(store, change, code):
    aid = store.artifact_id("t", "k")
    _, expires, sig = parts_of(store.sign_link(aid, "t", NOW + 60))
    args = {"artifact_id": aid, "tenant": "t", "expires": expires, "sig": sig, "now": NOW}
    args.update(change)
    if args["sig"] == "tamper":
        args["sig"] = _tamper_sig(sig)
    with pytest.raises(Forbidden) as e:
        store.check_link(**args)
    assert e.value.code == code and e.value.status == 403


def test_a_link_from_another_secret_is_invalid(store, tmp_path):
    aid = store.artifact_id("t", "k")
    other = ArtifactStore(tmp_path, b"x" * 32)
    _, expires, sig = parts_of(other.sign_link(aid, "t", NOW + 60))
    with pytest.raises(Forbidden) as e:
        store.check_link(aid, "t", expires, sig, now=NOW)
    assert e.value.code == "link_invalid"


def test_a_short_secret_is_refused(tmp_path):
    with pytest.raises(ValueError):
        ArtifactStore(tmp_path, b"short")


def test_sweep_removes_half_done_publications(store, tmp_path):
    assert store.sweep() == 0
    src = tmp_path / "s"
    src.write_bytes(b"x")
    aid = store.artifact_id("t", "k")
    store.publish(src, aid, "application/pdf")
    fanout = store.open_path(aid).parent
    (fanout / ".local.0123456789abcdef.tmp").write_bytes(b"half")
    (fanout / ".other-node.0123456789abcdef.tmp").write_bytes(b"another node's, in flight")
    assert store.sweep() == 1
    assert (fanout / ".other-node.0123456789abcdef.tmp").exists()
    assert store.open_path(aid).read_bytes() == b"x"


def test_a_file_written_in_flight_is_published_by_a_link(store, tmp_path):
    aid = store.artifact_id("t", "in-flight")
    target = store.in_flight(aid)
    assert target is not None and target.key is None  # the envelope does not seal
    assert target.path.parent == store.root / aid[4:6] and target.path.name.startswith(".local.")
    data = os.urandom(100_000)
    target.path.write_bytes(data)
    written = Artifact(aid, hashlib.sha256(data).hexdigest(), len(data))
    art, ours = store.publish_written(target, written)
    assert ours and art == written and not target.path.exists()
    assert store.open_path(aid).read_bytes() == data
    assert store.in_flight(aid) is None  # published: nothing is written again


def test_the_first_of_two_files_in_flight_wins(store, tmp_path):
    aid = store.artifact_id("t", "race in flight")
    first, second = store.in_flight(aid), store.in_flight(aid)
    assert first is not None and second is not None and first.path != second.path
    first.path.write_bytes(b"first result")
    second.path.write_bytes(b"a different second result")
    a1, ours1 = store.publish_written(first, Artifact(aid, hashlib.sha256(b"first result").hexdigest(), 12))
    a2, ours2 = store.publish_written(second, Artifact(aid, "0" * 64, 25))
    assert (ours1, ours2) == (True, False) and a1 == a2
    assert store.open_path(aid).read_bytes() == b"first result"
    assert [n for n in os.listdir(store.root / aid[4:6]) if n.endswith(".tmp")] == []
