"""Sources: object_ref parsing, the retry schedule, and real fetches from a case's
objects, a directory root and a flaky HTTP server on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from casesignd.core.errors import (
    DigestMismatch,
    LimitExceeded,
    PermanentJobError,
    SizeMismatch,
    SourceUnavailable,
    ValidationError,
)
from casesignd.core.sealed import SealedPath, is_sealed
from casesignd.core.source_settings import Source
from casesignd.files.objects import ObjectStore
from casesignd.files.sources import (
    Fetcher,
    SourceRef,
    backoff_s,
    classify_status,
    parse_ref,
    retry_after_s,
)
from casesignd.files.temp import TempManager

# The shared test helpers live in tests/, beside the unit and integration folders.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers_http_source import (  # noqa: E402
    Body,
    Cut,
    Hang,
    Status,
    Trickle,
    http_source_fixture,  # noqa: F401  (the http_source fixture)
)

SHA = "ab" * 32


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- pure parts ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ref, expected",
    [
        (f"sha256:{SHA}", SourceRef(source=None, sha256=SHA)),
        (f"sha256:{SHA.upper()}", SourceRef(source=None, sha256=SHA)),
        ("inbox:2026/contract.pdf", SourceRef(source="inbox", path="2026/contract.pdf")),
        ("inbox:a//b/./c.pdf", SourceRef(source="inbox", path="a/b/c.pdf")),
        ("web:x y%20z.pdf", SourceRef(source="web", path="x y%20z.pdf")),
        ("inbox:a:b", SourceRef(source="inbox", path="a:b")),
    ],
)
def test_parse_ref_accepts(ref, expected):
    assert parse_ref(ref, {"inbox", "web"}) == expected
    assert str(expected) == (f"sha256:{SHA}" if expected.source is None else str(expected))


@pytest.mark.parametrize(
    "ref, code",
    [
        ("", "invalid_object_ref"),
        ("contract.pdf", "invalid_object_ref"),
        ("sha256:abc", "invalid_object_ref"),
        (f"sha256:{SHA}0", "invalid_object_ref"),
        (f"sha256:{SHA[:-1]}g", "invalid_object_ref"),
        ("nosuch:file.pdf", "invalid_object_ref"),
        ("inbox:", "invalid_object_ref"),
        ("inbox:./", "invalid_object_ref"),
        ("inbox:a\x00b", "invalid_object_ref"),
        ("inbox:" + "a" * 1025, "invalid_object_ref"),
        (":x", "invalid_object_ref"),
        ("../inbox:x", "invalid_object_ref"),
        ("inbox:../etc/passwd", "path_outside_source"),
        ("inbox:a/../../b", "path_outside_source"),
        ("inbox:a/..", "path_outside_source"),
        ("inbox:/etc/passwd", "path_outside_source"),
        ("inbox:a\\..\\b", "path_outside_source"),
        (42, "invalid_object_ref"),
    ],
)
def test_parse_ref_refuses(ref, code):
    with pytest.raises(ValidationError) as e:
        parse_ref(ref, {"inbox"}, field="items[0].object_ref")
    assert e.value.code == code
    assert e.value.field == "items[0].object_ref"
    assert e.value.status == 422


def test_parse_ref_without_source_list_leaves_the_name_to_the_fetcher():
    assert parse_ref("anything:x.pdf") == SourceRef(source="anything", path="x.pdf")


@pytest.mark.parametrize(
    "attempt, base, cap, rand, delay",
    [
        (0, 0.2, 5.0, 0.5, 0.0),
        (1, 0.2, 5.0, 0.999, 0.1998),
        (1, 0.2, 5.0, 0.5, 0.1),
        (2, 0.2, 5.0, 0.5, 0.2),
        (3, 0.2, 5.0, 1.0, 0.8),
        (5, 0.2, 5.0, 1.0, 3.2),
        (6, 0.2, 5.0, 1.0, 5.0),  # 6.4 capped
        (50, 0.2, 5.0, 0.5, 2.5),
        (10_000, 0.2, 5.0, 0.5, 2.5),  # no overflow
        (4, 0.2, 5.0, 0.0, 0.0),  # full jitter reaches zero
        (4, 0.2, 5.0, 7.0, 1.6),  # rand clamped into [0, 1]
    ],
)
def test_backoff_table(attempt, base, cap, rand, delay):
    assert backoff_s(attempt, base, cap, rand) == pytest.approx(delay)


@pytest.mark.parametrize(
    "header, delay",
    [
        (None, None),
        ("", None),
        ("3", 3.0),
        ("120", 30.0),  # capped
        ("soon", None),
        ("-1", None),
        ("Wed, 21 Oct 2015 07:28:10 GMT", 10.0),
        ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0),  # in the past
        ("Wed, 21 Oct 2015 09:00:00 GMT", 30.0),
    ],
)
def test_retry_after_table(header, delay):
    now = 1445412480.0  # Wed, 21 Oct 2015 07:28:00 GMT
    assert retry_after_s(header, now, cap=30.0) == delay


@pytest.mark.parametrize(
    "status, verdict",
    [
        (200, "ok"),
        (206, "source_rejected"),
        (204, "source_rejected"),
        (301, "source_rejected"),
        (400, "source_rejected"),
        (403, "source_rejected"),
        (404, "object_not_found"),
        (410, "object_not_found"),
        (429, "http_429"),
        (500, "http_5xx"),
        (503, "http_5xx"),
    ],
)
def test_classify_status(status, verdict):
    assert classify_status(status) == verdict


# --- fetching ----------------------------------------------------------------------------


class Harness:
    def __init__(self, tmp_path: Path, sources: list[Source]):
        self.temp = TempManager(tmp_path / "tmp", 50 * 1024 * 1024)
        self.temp.sweep()
        self.objects = ObjectStore(tmp_path / "objects")
        self.objects.sweep()
        self.retries: list[tuple[str, str]] = []
        self.sleeps: list[float] = []

        async def fake_sleep(s: float) -> None:
            self.sleeps.append(s)

        self.fetcher = Fetcher(
            sources,
            self.objects,
            max_bytes=10 * 1024 * 1024,
            on_retry=lambda name, reason: self.retries.append((name, reason)),
            sleep=fake_sleep,
            rand=lambda: 0.5,
            clock=lambda: 1445412480.0,
        )

    async def fetch(self, ref: str, data_sha: str, size: int | None, **kw) -> bytes:
        async with self.temp.attempt("job", 1, 0) as area:
            p = await self.fetcher.fetch(
                parse_ref(ref), "tenant", "case-1", area, "item-0", data_sha, size, **kw
            )
            # Sealed in the area (never plain there), or a stored object read where it is
            # stored.
            if isinstance(p, SealedPath):
                assert p.path.parent == area.path and p.key == area.key.for_name("item-0")
                assert is_sealed(p.path.read_bytes()[:8])
                with p.open() as f:
                    return f.read()
            assert p == self.objects.path("tenant", "case-1", data_sha)
            return p.read_bytes()


@pytest.fixture
def dir_root(tmp_path):
    root = tmp_path / "inbox"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "doc.pdf").write_bytes(b"%PDF-1.7 inside")
    (tmp_path / "secret.txt").write_bytes(b"outside the root")
    os.symlink(tmp_path / "secret.txt", root / "escape.pdf")
    os.symlink(tmp_path, root / "updir")
    os.symlink(root / "sub" / "doc.pdf", root / "alias.pdf")  # stays inside: allowed
    os.symlink("sub", root / "subalias")
    os.mkfifo(root / "pipe.pdf")
    return root


@pytest.fixture
async def harness(tmp_path, dir_root):
    h = Harness(tmp_path, [Source(name="inbox", kind="dir", root=str(dir_root))])
    yield h
    await h.fetcher.close()


async def test_a_tenant_object_is_read_where_it_is_stored(harness):
    data = os.urandom(100_000)

    async def body():
        yield data

    await harness.objects.put("tenant", "case-1", sha(data), body(), 10**6, None)
    assert await harness.fetch(f"sha256:{sha(data)}", sha(data), len(data)) == data


async def test_a_tenant_object_is_neither_linked_nor_copied_into_the_area(
        harness, monkeypatch):
    data = os.urandom(100_000)

    async def body():
        yield data

    await harness.objects.put("tenant", "case-1", sha(data), body(), 10**6, None)

    def cross_device(src, dst):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", cross_device)
    async with harness.temp.attempt("job", 1, 0) as area:
        p = await harness.fetcher.fetch(parse_ref(f"sha256:{sha(data)}"), "tenant", "case-1",
                                        area, "item-0", sha(data), len(data))
        assert p == harness.objects.path("tenant", "case-1", sha(data))
        assert p.read_bytes() == data
        # Neither a copy nor a link of it in the temp area, whose files are all sealed.
        assert list(Path(area.path).iterdir()) == []


@pytest.mark.parametrize(
    "setup, expect, error, code",
    [
        ("other_tenant", None, PermanentJobError, "object_not_found"),
        ("other_case", None, PermanentJobError, "object_not_found"),
        ("none", None, PermanentJobError, "object_not_found"),
        ("mine", "wrong_sha", DigestMismatch, "digest_mismatch"),
        ("mine", "wrong_size", SizeMismatch, "size_mismatch"),
    ],
)
async def test_tenant_object_failures(harness, setup, expect, error, code):
    data = b"evidence"

    async def body():
        yield data

    owner = {"other_tenant": ("t2", "case-1"), "other_case": ("tenant", "case-2")}
    if setup in owner:
        await harness.objects.put(*owner[setup], sha(data), body(), 100, None)
    if setup == "mine":
        await harness.objects.put("tenant", "case-1", sha(data), body(), 100, None)
    want_sha = "0" * 64 if expect == "wrong_sha" else sha(data)
    size = 9 if expect == "wrong_size" else len(data)
    with pytest.raises(error) as e:
        await harness.fetch(f"sha256:{sha(data)}", want_sha, size)
    assert e.value.code == code


@pytest.mark.parametrize("path", ["sub/doc.pdf", "alias.pdf", "subalias/doc.pdf"])
async def test_dir_source_reads_inside_the_root(harness, path):
    data = b"%PDF-1.7 inside"
    assert await harness.fetch(f"inbox:{path}", sha(data), len(data)) == data


@pytest.mark.parametrize(
    "path, code",
    [
        ("escape.pdf", "path_outside_source"),
        ("updir/secret.txt", "path_outside_source"),
        ("missing.pdf", "object_not_found"),
        ("sub/doc.pdf/x", "object_not_found"),
        ("sub", "source_rejected"),
        ("pipe.pdf", "source_rejected"),
    ],
)
async def test_dir_source_refuses(harness, path, code):
    with pytest.raises(PermanentJobError) as e:
        await asyncio.wait_for(harness.fetch(f"inbox:{path}", SHA, None), 10)
    assert e.value.code == code


@pytest.mark.parametrize(
    "ref",
    [
        SourceRef(source="inbox", path="../secret.txt"),
        SourceRef(source="inbox", path="/etc/passwd"),
        SourceRef(source="inbox", path="sub/\x00doc.pdf"),
    ],
)
async def test_dir_source_refuses_hand_made_refs(harness, ref):
    async with harness.temp.attempt("job", 1, 0) as area:
        with pytest.raises(PermanentJobError) as e:
            await harness.fetcher.fetch(ref, "tenant", "case-1", area, "x", SHA, None)
    assert e.value.code == "path_outside_source"


async def test_dir_source_digest_and_limit_are_checked(harness):
    data = b"%PDF-1.7 inside"
    with pytest.raises(DigestMismatch):
        await harness.fetch("inbox:sub/doc.pdf", "0" * 64, None)
    with pytest.raises(LimitExceeded):
        await harness.fetch("inbox:sub/doc.pdf", sha(data), None, max_bytes=4)


# --- HTTP --------------------------------------------------------------------------------


def http_harness(tmp_path, server, **over) -> Harness:
    settings = dict(
        name="web",
        kind="http",
        base_url=server.base_url + "/files/",
        connect_timeout_s=2.0,
        read_timeout_s=0.3,
        max_attempts=4,
        base_delay_s=0.2,
        max_delay_s=5.0,
        retry_after_cap_s=30.0,
    )
    settings.update(over)
    return Harness(tmp_path, [Source(**settings)])


async def test_http_retries_5xx_then_succeeds(tmp_path, http_source):
    data = os.urandom(200_000)
    http_source.script("/files/a/doc.pdf", [Status(503), Status(500), Body(data)])
    h = http_harness(tmp_path, http_source)
    try:
        assert await h.fetch("web:a/doc.pdf", sha(data), len(data)) == data
    finally:
        await h.fetcher.close()
    assert http_source.hits["/files/a/doc.pdf"] == 3
    assert h.retries == [("web", "http_5xx"), ("web", "http_5xx")]
    assert h.sleeps == pytest.approx([0.1, 0.2])  # rand 0.5 of 0.2, 0.4


class RecordedCalls:
    """A :class:`casesignd.core.calls.Calls` that keeps each call's name, parent,
    attributes and the traceparent it handed out."""

    PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def current(self) -> str:
        return self.PARENT

    @contextlib.contextmanager
    def call(self, name, parent, attributes):
        n = len(self.calls)
        rec = {"name": name, "parent": parent, "attributes": dict(attributes),
               "traceparent": f"00-4bf92f3577b34da6a3ce929d0e0e4736-{n + 1:016x}-01"}
        self.calls.append(rec)

        class Noted:
            traceparent = rec["traceparent"]

            def note(self, key, value):
                rec["attributes"][key] = value

        yield Noted()


async def test_each_http_try_is_a_call_span_carrying_its_traceparent(tmp_path, http_source):
    data = b"%PDF-1.7 Avery Chen's contract"
    http_source.script("/files/Avery Chen/contract.pdf", [Status(503), Body(data)])
    h = http_harness(tmp_path, http_source)
    h.fetcher.calls = calls = RecordedCalls()
    try:
        assert await h.fetch("web:Avery Chen/contract.pdf", sha(data), len(data)) == data
    finally:
        await h.fetcher.close()
    assert [c["name"] for c in calls.calls] == ["source.fetch", "source.fetch"]
    assert all(c["parent"] == RecordedCalls.PARENT for c in calls.calls)
    first, second = (c["attributes"] for c in calls.calls)
    assert first["http.response.status_code"] == 503 and first["casesignd.try"] == 1
    assert second["http.response.status_code"] == 200 and second["casesignd.try"] == 2
    assert second["casesignd.source"] == "web" and second["server.address"] == "127.0.0.1"
    # The path names a person and a file: never in a span.
    assert not [v for c in calls.calls for v in c["attributes"].values()
                if "Avery" in str(v) or "contract" in str(v)]
    sent = [{k.lower(): v for k, v in hd.items()}.get("traceparent") for hd in http_source.headers]
    assert sent == [c["traceparent"] for c in calls.calls]


async def test_http_honours_retry_after_on_429(tmp_path, http_source):
    data = b"invoice"
    http_source.script(
        "/files/x",
        [Status(429, {"Retry-After": "7"}), Status(429, {"Retry-After": "999"}), Body(data)],
    )
    h = http_harness(tmp_path, http_source)
    try:
        assert await h.fetch("web:x", sha(data), None) == data
    finally:
        await h.fetcher.close()
    assert h.retries == [("web", "http_429"), ("web", "http_429")]
    assert h.sleeps == [7.0, 30.0]


async def test_http_gives_up_after_max_attempts(tmp_path, http_source):
    http_source.script("/files/x", [Status(502)])
    h = http_harness(tmp_path, http_source, max_attempts=3)
    try:
        with pytest.raises(SourceUnavailable) as e:
            await h.fetch("web:x", SHA, None)
    finally:
        await h.fetcher.close()
    assert e.value.retryable and e.value.code == "source_unavailable"
    assert http_source.hits["/files/x"] == 3
    assert h.retries == [("web", "http_5xx")] * 2
    assert list(h.temp.root.iterdir()) == []


async def test_http_read_timeout_is_retried(tmp_path, http_source):
    data = b"late but fine"
    http_source.script("/files/slow", [Hang(2.0), Body(data)])
    h = http_harness(tmp_path, http_source)
    try:
        assert await asyncio.wait_for(h.fetch("web:slow", sha(data), None), 10) == data
    finally:
        await h.fetcher.close()
    assert h.retries == [("web", "timeout")]


async def test_http_hanging_source_becomes_unavailable(tmp_path, http_source):
    http_source.script("/files/slow", [Hang(2.0)])
    h = http_harness(tmp_path, http_source, max_attempts=2)
    try:
        with pytest.raises(SourceUnavailable) as e:
            await asyncio.wait_for(h.fetch("web:slow", SHA, None), 10)
    finally:
        await h.fetcher.close()
    assert e.value.detail["reason"] == "timeout"


async def test_http_cut_body_is_retried_without_leftovers(tmp_path, http_source):
    data = os.urandom(300_000)
    http_source.script("/files/big", [Cut(data, 100_000), Body(data)])
    h = http_harness(tmp_path, http_source)
    try:
        assert await h.fetch("web:big", sha(data), len(data)) == data
    finally:
        await h.fetcher.close()
    assert h.retries == [("web", "connect")]


async def test_http_slow_trickle_within_the_read_timeout_succeeds(tmp_path, http_source):
    data = os.urandom(20_000)
    http_source.script("/files/t", [Trickle(data, chunk_bytes=2000, delay_s=0.02)])
    h = http_harness(tmp_path, http_source)
    try:
        assert await h.fetch("web:t", sha(data), len(data)) == data
    finally:
        await h.fetcher.close()
    assert h.retries == []


async def test_http_connection_refused_is_retried_then_unavailable(tmp_path, http_source):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    h = Harness(
        tmp_path,
        [Source(name="web", kind="http", base_url=f"http://127.0.0.1:{port}", max_attempts=2)],
    )
    try:
        with pytest.raises(SourceUnavailable):
            await asyncio.wait_for(h.fetch("web:x", SHA, None), 10)
    finally:
        await h.fetcher.close()
    assert h.retries == [("web", "connect")]


@pytest.mark.parametrize(
    "step, code",
    [
        (Status(404), "object_not_found"),
        (Status(403), "source_rejected"),
        (Status(302, {"Location": "http://example.invalid/"}), "source_rejected"),
    ],
)
async def test_http_final_answers_are_not_retried(tmp_path, http_source, step, code):
    http_source.script("/files/x", [step, Body(b"never")])
    h = http_harness(tmp_path, http_source)
    try:
        with pytest.raises(PermanentJobError) as e:
            await h.fetch("web:x", SHA, None)
    finally:
        await h.fetcher.close()
    assert e.value.code == code
    assert http_source.hits["/files/x"] == 1 and h.retries == []


async def test_http_digest_mismatch_is_permanent(tmp_path, http_source):
    http_source.script("/files/x", [Body(b"tampered")])
    h = http_harness(tmp_path, http_source)
    try:
        with pytest.raises(DigestMismatch):
            await h.fetch("web:x", SHA, None)
    finally:
        await h.fetcher.close()
    assert http_source.hits["/files/x"] == 1


async def test_http_path_components_are_quoted(tmp_path, http_source):
    data = b"quoted"
    http_source.script("/files/a b/c%2Fd?.pdf", [Body(data)])
    h = http_harness(tmp_path, http_source)
    try:
        assert await h.fetch("web:a b/c%2Fd?.pdf", sha(data), None) == data
    finally:
        await h.fetcher.close()
    assert http_source.raw_paths == ["/files/a%20b/c%252Fd%3F.pdf"]


@pytest.mark.parametrize(
    "declared, max_bytes, error",
    [(5, None, SizeMismatch), (None, 10, LimitExceeded)],
)
async def test_http_content_length_is_checked_before_the_body(
    tmp_path, http_source, declared, max_bytes, error
):
    http_source.script("/files/x", [Body(b"x" * 100)])
    h = http_harness(tmp_path, http_source)
    kw = {} if max_bytes is None else {"max_bytes": max_bytes}
    try:
        with pytest.raises(error):
            await h.fetch("web:x", SHA, declared, **kw)
    finally:
        await h.fetcher.close()
    assert http_source.hits["/files/x"] == 1


async def test_http_asks_for_identity_encoding(tmp_path, http_source):
    data = b"plain " * 1000
    http_source.script("/files/x", [Body(data)])
    h = http_harness(tmp_path, http_source)
    try:
        assert await h.fetch("web:x", sha(data), None) == data
    finally:
        await h.fetcher.close()
    assert http_source.headers[-1].get("Accept-Encoding") == "identity"


@given(st.text(alphabet=st.sampled_from("ab./\\\x00:"), max_size=24))
@settings(max_examples=400, deadline=None)
def test_no_accepted_path_leaves_the_root(path):
    try:
        ref = parse_ref("inbox:" + path)
    except ValidationError as e:
        assert e.code in ("invalid_object_ref", "path_outside_source")
        return
    joined = os.path.normpath(os.path.join("/root", ref.path))
    assert joined.startswith("/root/") and "\x00" not in joined
