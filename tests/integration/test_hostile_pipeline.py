"""The signing pipeline against hostile, damaged and encrypted PDFs (tests/helpers_hostile.py).

Every entry of the corpus gets its designed outcome from ``pipeline.sign_file``:
refused with its code (and nothing left behind), signed as received, or signed only
after a clean rewrite. Every signed result is then read by independent tools: pyHanko
and poppler's pdfsig validate the signature, ``qpdf --check`` finds no damage, and
qpdf, poppler and pypdf count the same pages and show the same words; a rewrite is
drawn by poppler and MuPDF exactly as the received document.
"""

from __future__ import annotations

import hashlib
import pickle
import re
from pathlib import Path

import pytest

from casesignd.core.codes import REASONS
from casesignd.core.errors import CasesignError
from tests.helpers_corpus import good_corpus  # noqa: F401  (session fixture)
from tests.helpers_hostile import (
    AMBIGUOUS,
    DAMAGE_SOURCES,
    DAMAGES,
    DIFFERENTIAL_CLAIMS,
    HOSTILE_NAMES,
    MALFORMED,
    NORMALIZED,
    NORMALIZED_OR_AMBIGUOUS,
    NORMALIZED_OR_MALFORMED,
    REFUSAL_CODES,
    SIGNED,
    VIEWER_CANNOT_OPEN,
    Hostile,
    _hostile_recipes,
    assert_drawn_alike,
    assert_signed_and_readable,
    drawn_pages,
    hostile_corpus,  # noqa: F401  (session fixture)
    hostile_missing,
    reader_views,
    sha256_file,
)
from tests.helpers_pki import Pki, nss_db, pki, sample_meta

__all__ = ["pki", "good_corpus", "hostile_corpus"]  # fixtures

NEVER_NAMES = tuple(r.name for r in _hostile_recipes(Path(".")) if r.never is not None)


@pytest.fixture(scope="module")
def pipeline():
    from casesignd.signing import pipeline as mod

    return mod


@pytest.fixture(scope="module")
def nssdir(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    return nss_db(tmp_path_factory.mktemp("nss"), pki.ca.cert)


def _limits(entry: Hostile, normalize: str = "when_needed"):
    from casesignd.pdf.inspect import PdfLimits

    kw = dict(entry.limits)
    if "allowed_actions" in kw:
        kw["allowed_actions"] = frozenset(kw["allowed_actions"])  # type: ignore[arg-type]
    return PdfLimits(normalize=normalize, **kw)  # type: ignore[arg-type]


def _entry(corpus: dict[str, Hostile], name: str) -> Hostile:
    if name not in corpus:
        dest = next(iter(corpus.values())).path.parent
        pytest.skip(hostile_missing(dest).get(name, "not built"))
    return corpus[name]


def _eof_prefix_digests(data: bytes) -> set[str]:
    """sha256 of every prefix of ``data`` that ends at an ``%%EOF`` (with its EOL)."""
    out = set()
    for m in re.finditer(rb"%%EOF(\r\n|\r|\n)?", data):
        out.add(hashlib.sha256(data[:m.start() + 5]).hexdigest())
        out.add(hashlib.sha256(data[:m.end()]).hexdigest())
    return out


def _assert_refused(err: CasesignError, code: str, work: Path, dst: Path) -> None:
    assert err.code == code, f"expected {code}, got {err.code}: {err.message}"
    assert err.message and "Traceback" not in err.message and "Traceback" not in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is type(err)
    assert (again.code, again.message) == (err.code, err.message)
    assert not dst.exists()
    assert sorted(p.name for p in work.iterdir()) == [], "temporary files were left behind"


def _sign(pipeline, entry: Hostile, pki: Pki, tmp_path: Path, normalize: str = "when_needed"):
    work = tmp_path / "work"
    work.mkdir()
    dst = work / "signed.pdf"
    try:
        outcome = pipeline.sign_file(entry.path, dst, pki.signer("ec"), meta=sample_meta(),
                                     limits=_limits(entry, normalize))
    except CasesignError as e:
        return None, e, work, dst
    return outcome, None, work, dst


# --- the corpus itself (no pipeline needed) -------------------------------------------


def test_name_lists_match_the_builders(tmp_path: Path) -> None:
    assert tuple(r.name for r in _hostile_recipes(tmp_path)) == HOSTILE_NAMES
    assert len(set(HOSTILE_NAMES)) == len(HOSTILE_NAMES)
    assert set(DIFFERENTIAL_CLAIMS) <= set(HOSTILE_NAMES)
    for r in _hostile_recipes(tmp_path):
        assert r.expect in REFUSAL_CODES | {SIGNED, NORMALIZED, NORMALIZED_OR_AMBIGUOUS,
                                            NORMALIZED_OR_MALFORMED}, r.name
        assert (r.never is not None) == (r.expect not in REFUSAL_CODES | {SIGNED}), r.name


def test_corpus_is_built(hostile_corpus: dict[str, Hostile]) -> None:  # noqa: F811
    dest = next(iter(hostile_corpus.values())).path.parent
    for name, why in hostile_missing(dest).items():
        # Only entries made from a real producer's file may be missing (no producer here).
        assert "good corpus" in why or "not installed" in why, (name, why)
    for e in hostile_corpus.values():
        assert e.path.stat().st_size > 0, e.name


def test_differential_entries_are_what_they_claim(hostile_corpus: dict[str, Hostile]) -> None:  # noqa: F811
    """pypdf, poppler and qpdf really read the "readers" entries differently, and
    MuPDF reads them as poppler and qpdf do; the "latent" ones carry the structure
    they claim."""
    views = {name: reader_views(hostile_corpus[name].path) for name in DIFFERENTIAL_CLAIMS}
    v = views["dup_key_contents"]
    assert "FIRST CONTENTS SHOWN" in v.pypdf_text and "SECOND" not in v.pypdf_text
    assert "SECOND CONTENTS SHOWN" in v.poppler_text and "FIRST" not in v.poppler_text
    assert "SECOND CONTENTS SHOWN" in v.qpdf_content
    assert "SECOND CONTENTS SHOWN" in v.mupdf_text and "FIRST" not in v.mupdf_text
    v = views["object_defined_twice_xref_damaged"]
    assert "FIRST DEFINITION SHOWN" in v.pypdf_text
    assert "SECOND DEFINITION SHOWN" in v.poppler_text
    assert "SECOND DEFINITION SHOWN" in v.qpdf_content
    assert "SECOND DEFINITION SHOWN" in v.mupdf_text and "FIRST" not in v.mupdf_text
    v = views["page_count_mismatch"]
    assert v.pypdf_pages == 2 and v.poppler_pages == 1 and v.qpdf_pages == 1
    assert "COUNTED PAGE" in v.mupdf_text and "UNCOUNTED" not in v.mupdf_text


def test_damaged_entries_a_viewer_cannot_open_are_what_they_claim(
    hostile_corpus: dict[str, Hostile],  # noqa: F811
) -> None:
    """The engine VIEWER_CANNOT_OPEN names draws nothing of the entry, the other does."""
    for name, engine in VIEWER_CANNOT_OPEN.items():
        if name not in hostile_corpus:
            continue
        path = hostile_corpus[name].path
        for which in ("poppler", "mupdf"):
            if which == engine:
                with pytest.raises(AssertionError):
                    drawn_pages(path, which, dpi=20)
            else:
                assert drawn_pages(path, which, dpi=20), (name, which)

    # latent: the xref entry of object 5 holds "7 0 obj", and 5 and 7 show other text
    data = hostile_corpus["xref_wrong_object_header"].path.read_bytes()
    at = data.index(b"xref\n0 ")
    entry5 = data[at:].split(b"\n")[2 + 5]
    assert data[int(entry5[:10]):].startswith(b"7 0 obj")
    assert b"(OBJECT FIVE SHOWN)" in data and b"(OBJECT SEVEN SHOWN)" in data
    # latent: two bodies of object 5, the xref names the first
    data = hostile_corpus["object_defined_twice"].path.read_bytes()
    bodies = [m.start() for m in re.finditer(rb"(?m)^5 0 obj", data)]
    assert len(bodies) == 2
    at = data.index(b"xref\n0 ")
    assert int(data[at:].split(b"\n")[2 + 5][:10]) == bodies[0]
    assert data.index(b"FIRST DEFINITION") < bodies[1] < data.index(b"SECOND DEFINITION")
    # latent: /Length is 5 short of the data before endstream
    data = hostile_corpus["stream_length_short"].path.read_bytes()
    m = re.search(rb"<< /Length (\d+) >>\nstream\n(.*?)\nendstream", data, re.S)
    assert m is not None and int(m.group(1)) == len(m.group(2)) - 5


def test_encrypted_entries_are_encrypted(hostile_corpus: dict[str, Hostile]) -> None:  # noqa: F811
    for e in hostile_corpus.values():
        if e.expect == "encrypted_pdf":
            data = e.path.read_bytes()
            assert b"/Encrypt" in data, e.name
    assert b"/Adobe.PubSec" in hostile_corpus["encrypted_pubsec"].path.read_bytes()
    assert b"/Recipients" in hostile_corpus["encrypted_pubsec"].path.read_bytes()


# --- the pipeline ------------------------------------------------------------------------


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_entry_gets_its_outcome(name: str, hostile_corpus: dict[str, Hostile],  # noqa: F811
                                pipeline, pki: Pki, nssdir: Path | None, tmp_path: Path) -> None:
    entry = _entry(hostile_corpus, name)
    received = entry.path.read_bytes()
    outcome, err, work, dst = _sign(pipeline, entry, pki, tmp_path)
    if entry.refused:
        assert err is not None, f"{name}: expected {entry.expect}, but it was signed " \
            f"(normalized={outcome.checked.normalized}, reasons={outcome.checked.reasons})"
        _assert_refused(err, entry.expect, work, dst)
        assert err.reason in REASONS and REASONS[err.reason].code == err.code, err.reason
        if entry.reason:
            assert err.reason == entry.reason, f"{name}: {err.reason}: {err.message}"
        return
    if err is not None:
        allowed = {NORMALIZED_OR_AMBIGUOUS: AMBIGUOUS,
                   NORMALIZED_OR_MALFORMED: MALFORMED}.get(entry.expect)
        if allowed is not None and err.code == allowed:
            _assert_refused(err, allowed, work, dst)
            return
        pytest.fail(f"{name}: expected {entry.expect}, refused with {err.code}: {err.message}")

    checked = outcome.checked
    assert entry.path.read_bytes() == received  # the input is never touched
    assert checked.received_sha256 == hashlib.sha256(received).hexdigest()
    assert sorted(p.name for p in work.iterdir()) == [dst.name], "temporary files were left behind"
    signed = dst.read_bytes()
    assert signed.startswith(b"%PDF-")
    if entry.expect == SIGNED:
        assert not checked.normalized, f"{name}: rewritten for {checked.reasons}"
        assert checked.source_sha256 == checked.received_sha256
        assert signed.startswith(received)  # an incremental update of what was received
    else:
        assert checked.normalized, f"{name}: signed as received, expected a rewrite"
        assert checked.source_sha256 != checked.received_sha256
        assert checked.reasons and all(isinstance(r, str) and r for r in checked.reasons)
        assert checked.source_sha256 in _eof_prefix_digests(signed), \
            "the signature update is not appended to the document checked.source_sha256 names"
        assert not signed.startswith(received)
    if name == "zip_polyglot":
        assert b"PK\x05\x06" not in signed and b"PK\x03\x04" not in signed
    pages = assert_signed_and_readable(dst, pki.ca.cert, nssdir, markers=entry.markers,
                                       exact_text=entry.exact_text)
    assert checked.pages == pages
    assert outcome.path == dst and outcome.size == len(signed)
    if checked.normalized:
        # What was signed is what poppler and MuPDF showed of what was received (an
        # engine that cannot open the received file showed nothing, and is not asked).
        assert_drawn_alike(entry.path, dst, engines=tuple(
            e for e in ("poppler", "mupdf") if VIEWER_CANNOT_OPEN.get(name) != e))


@pytest.mark.parametrize("name", NEVER_NAMES)
def test_never_normalize_refuses_what_needs_a_rewrite(
    name: str, hostile_corpus: dict[str, Hostile], pipeline, pki: Pki, tmp_path: Path  # noqa: F811
) -> None:
    entry = _entry(hostile_corpus, name)
    outcome, err, work, dst = _sign(pipeline, entry, pki, tmp_path, normalize="never")
    assert err is not None, f"{name}: signed under normalize='never' (checked={outcome.checked})"
    _assert_refused(err, entry.never, work, dst)  # type: ignore[arg-type]


def test_always_normalize_rewrites_a_clean_file(
    hostile_corpus: dict[str, Hostile], pipeline, pki: Pki, nssdir: Path | None,  # noqa: F811
    tmp_path: Path,
) -> None:
    entry = _entry(hostile_corpus, "allowed_reportlab_plain")
    outcome, err, work, dst = _sign(pipeline, entry, pki, tmp_path, normalize="always")
    assert err is None, f"{err.code}: {err.message}"
    assert outcome.checked.normalized
    assert outcome.checked.source_sha256 != outcome.checked.received_sha256
    assert outcome.checked.source_sha256 in _eof_prefix_digests(dst.read_bytes())
    assert sorted(p.name for p in work.iterdir()) == [dst.name]
    assert outcome.checked.pages == assert_signed_and_readable(
        dst, pki.ca.cert, nssdir, markers=entry.markers, exact_text=entry.exact_text)


def test_always_normalize_never_rewrites_a_signed_file(
    good_corpus: dict[str, Path], pipeline, pki: Pki, nssdir: Path | None,  # noqa: F811
    tmp_path: Path,
) -> None:
    from casesignd.pdf.inspect import PdfLimits

    if "already_signed" not in good_corpus:
        pytest.skip("already_signed was not built")
    src = good_corpus["already_signed"]
    work = tmp_path / "work"
    work.mkdir()
    dst = work / "signed.pdf"
    outcome = pipeline.sign_file(src, dst, pki.signer("ec"), meta=sample_meta(),
                                 limits=PdfLimits(normalize="always"))
    assert not outcome.checked.normalized  # a rewrite would break the earlier signature
    assert outcome.checked.source_sha256 == outcome.checked.received_sha256 == sha256_file(src)
    assert dst.read_bytes().startswith(src.read_bytes())
    assert sorted(p.name for p in work.iterdir()) == [dst.name]
    assert_signed_and_readable(dst, pki.ca.cert, nssdir, markers=DAMAGE_SOURCES[
        "reportlab_plain"][0], signatures=2)


def test_check_file_decides_like_sign_file(
    hostile_corpus: dict[str, Hostile], pipeline, tmp_path: Path  # noqa: F811
) -> None:
    """check_file (no signing) refuses with the same codes, reports rewrites as
    sign_file does, and leaves its workdir empty either way."""
    picks = ["page_count_mismatch", "random_bytes", "encrypted_aes_256", "encrypted_pubsec",
             "link_unc", "embedded_txt_is_pe", "budget_40_streams_of_8mib"]
    wrong = []
    for i, name in enumerate(picks):
        if name not in hostile_corpus:
            continue
        entry = hostile_corpus[name]
        workdir = tmp_path / f"w{i}"
        workdir.mkdir()
        try:
            checked = pipeline.check_file(entry.path, _limits(entry), workdir)
            wrong.append(f"{name}: expected {entry.expect}, passed ({checked})")
        except CasesignError as e:
            if e.code != entry.expect:
                wrong.append(f"{name}: expected {entry.expect}, got {e.code}: {e.message}")
        if list(workdir.iterdir()):
            wrong.append(f"{name}: left {[p.name for p in workdir.iterdir()]}")
    for name, normalized, pages in (("html_prefix", True, 1), ("allowed_goto_and_named", False, 2),
                                    ("dup_key_contents", True, 1)):
        entry = hostile_corpus[name]
        workdir = tmp_path / f"ok-{name}"
        workdir.mkdir()
        try:
            checked = pipeline.check_file(entry.path, _limits(entry), workdir)
        except CasesignError as e:
            wrong.append(f"{name}: expected a pass, got {e.code}: {e.message}")
            continue
        if (checked.normalized is not normalized or checked.pages != pages
                or checked.received_sha256 != sha256_file(entry.path)
                or (checked.source_sha256 == checked.received_sha256) is normalized):
            wrong.append(f"{name}: {checked}")
        if list(workdir.iterdir()):  # check_file removes its rewrite again
            wrong.append(f"{name}: left {[p.name for p in workdir.iterdir()]}")
    assert not wrong, "\n".join(wrong)


def test_checks_do_not_depend_on_the_logging_configuration(
    hostile_corpus: dict[str, Hostile], pipeline, tmp_path: Path  # noqa: F811
) -> None:
    """A process that quiets third-party loggers (a daemon's logging setup, a test
    helper) must not switch the checks off: pypdf reports what it repaired through
    logging, and the verdict may not depend on whether those records are emitted."""
    import logging

    loggers = [logging.getLogger(), logging.getLogger("pypdf")]
    saved = [lg.level for lg in loggers]
    wrong = []
    try:
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        for name in ("dup_key_contents", "dup_key_same_value", "xref_shift3_hand",
                     "prev_loop_hand"):
            entry = hostile_corpus[name]
            want = entry.expect if entry.refused else entry.never
            workdir = tmp_path / name
            workdir.mkdir()
            try:
                checked = pipeline.check_file(entry.path, _limits(entry, "never"), workdir)
                wrong.append(f"{name}: expected {want}, passed ({checked})")
            except CasesignError as e:
                if e.code != want:
                    wrong.append(f"{name}: expected {want}, got {e.code}: {e.message}")
    finally:
        for lg, level in zip(loggers, saved, strict=True):
            lg.setLevel(level)
    assert not wrong, "\n".join(wrong)


def test_damage_matrix_is_complete() -> None:
    # Every damage kind is applied to the hand-made file and to every real producer.
    for source in DAMAGE_SOURCES:
        for damage in DAMAGES:
            assert f"{damage}_{source}" in HOSTILE_NAMES
