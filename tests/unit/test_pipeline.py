"""The pipeline's decision, as a pure function, and what it records."""

from __future__ import annotations

import pytest

from casesignd.pdf.frame import AMBIGUITY, DAMAGE, Finding
from casesignd.pdf.inspect import PdfReport
from casesignd.signing.pipeline import REFUSE, REWRITE, SIGN_AS_IS, Checked, decide

CLEAN = PdfReport(pages=1, producer=None, pdf_version="1.7", has_signatures=False,
                  has_xref_stream=False)
AMBIGUOUS = PdfReport(pages=1, producer=None, pdf_version="1.7", has_signatures=False,
                      has_xref_stream=False, findings=(Finding(AMBIGUITY, "duplicate key"),))
DAMAGED = PdfReport(pages=1, producer=None, pdf_version="1.7", has_signatures=False,
                    has_xref_stream=False, findings=(Finding(DAMAGE, "no %%EOF"),))
SIGNED = PdfReport(pages=1, producer=None, pdf_version="1.7", has_signatures=True,
                   has_xref_stream=False)
SIGNED_DAMAGED = PdfReport(pages=1, producer=None, pdf_version="1.7", has_signatures=True,
                           has_xref_stream=False, findings=(Finding(DAMAGE, "no %%EOF"),))


@pytest.mark.parametrize(("report", "mode", "verdict"), [
    (CLEAN, "never", SIGN_AS_IS),
    (CLEAN, "when_needed", SIGN_AS_IS),
    (CLEAN, "always", REWRITE),
    (AMBIGUOUS, "never", REFUSE),
    (AMBIGUOUS, "when_needed", REWRITE),
    (AMBIGUOUS, "always", REWRITE),
    (DAMAGED, "never", REFUSE),
    (DAMAGED, "when_needed", REWRITE),
    # A signed document is never rewritten, whatever the policy says.
    (SIGNED, "always", SIGN_AS_IS),
    (SIGNED, "when_needed", SIGN_AS_IS),
    (SIGNED_DAMAGED, "when_needed", REFUSE),
    (SIGNED_DAMAGED, "always", REFUSE),
])
def test_decide(report, mode, verdict) -> None:
    assert decide(report, mode) == verdict


def test_refusal_codes_follow_the_findings() -> None:
    assert AMBIGUOUS.refusal().code == "ambiguous_pdf"
    assert DAMAGED.refusal().code == "malformed_pdf"
    both = PdfReport(pages=1, producer=None, pdf_version="1.7", has_signatures=False,
                     has_xref_stream=False,
                     findings=(Finding(DAMAGE, "xref"), Finding(AMBIGUITY, "before header")))
    assert both.refusal().code == "ambiguous_pdf"


def test_audit_detail_holds_digests_and_reasons_only() -> None:
    plain = Checked("a" * 64, "a" * 64, False, (), 1)
    assert plain.audit_detail() == {"received_sha256": "a" * 64, "normalized": False}
    rewritten = Checked("a" * 64, "b" * 64, True, ("no %%EOF",), 1)
    assert rewritten.audit_detail() == {"received_sha256": "a" * 64, "normalized": True,
                                        "source_sha256": "b" * 64,
                                        "normalize_reasons": ["no %%EOF"]}
    # With evidence, how it is bound: "digest" when the contract carried a signature.
    bound = Checked("a" * 64, "a" * 64, False, (), 1, evidence="digest")
    assert bound.audit_detail() == {"received_sha256": "a" * 64, "normalized": False,
                                    "evidence": "digest"}


def test_a_repair_finding_never_quotes_the_document() -> None:
    from casesignd.pdf.guard import warning_finding

    quoted = ('PdfReadError("Invalid Elementary Object starting with b\'R\' @234: '
              'b\'e /Page (Quentin Abernathy-Sole)\'")')
    finding = warning_finding(quoted)
    assert "Quentin" not in finding.reason and "b'" not in finding.reason
    assert warning_finding("Multiple definitions in dictionary at byte 0x1a for key /Contents"
                           ).kind == "ambiguity"


def test_a_stored_object_is_checked_before_it_is_read(tmp_path):
    import datetime as dt
    import hashlib
    import os

    from casesignd.core.errors import CasesignError
    from casesignd.pdf.inspect import PdfLimits
    from casesignd.signing.pades import SignatureMeta
    from casesignd.signing.worker import sign_stored

    data = b"%PDF-1.7\n%%EOF\n"
    sha = hashlib.sha256(data).hexdigest()
    real = tmp_path / "obj"
    real.write_bytes(data)
    os.symlink(real, tmp_path / "link")
    meta = SignatureMeta(signing_time=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), name="x")

    def code(path, digest=sha, size=None):
        with pytest.raises(CasesignError) as e:
            sign_stored(str(path), digest, len(data) if size is None else size, PdfLimits(),
                        meta, 8192, True)
        return e.value.code

    assert code(tmp_path / "missing") == "object_not_found"
    assert code(tmp_path / "link") == "object_not_found"  # never followed
    assert code(tmp_path) == "object_not_found"  # not a regular file
    assert code(real, size=len(data) + 1) == "size_mismatch"
    assert code(real, digest="0" * 64) == "digest_mismatch"


@pytest.mark.parametrize("chunk_bytes", [None, 1024])  # read whole; a reader's path
def test_a_sealed_stored_object_is_read_in_place_or_refused(tmp_path, chunk_bytes) -> None:
    import hashlib

    from casesignd.core.errors import CasesignError
    from casesignd.core.sealed import SealedWriter, SealKey, seal_bytes
    from casesignd.signing.worker import _read_stored
    from tests.helpers_pki import big_pdf

    data = big_pdf(tmp_path / "in.pdf", 3_000).read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    key = SealKey.generate()
    if chunk_bytes is None:
        blob = seal_bytes(data, key)
    else:  # not the size a default chunk gives: opened by a reader, as before
        with open(tmp_path / "w", "wb") as f, SealedWriter(f, key, chunk_plain_bytes=chunk_bytes) as w:
            w.write(data)
        blob = (tmp_path / "w").read_bytes()

    def sign(content: bytes, size: int = len(data), with_key: SealKey | None = key) -> bytes:
        (tmp_path / "obj").write_bytes(content)
        return _read_stored(str(tmp_path / "obj"), sha, size, with_key)

    def code(content: bytes, **kw) -> str:
        with pytest.raises(CasesignError) as e:
            sign(content, **kw)
        return e.value.code

    assert sign(blob) == data
    flipped = bytearray(blob)
    flipped[-20] ^= 1
    assert code(bytes(flipped)) == "io_error"
    assert code(blob[:-1]) == "io_error"
    assert code(blob, with_key=SealKey.generate()) == "io_error"
    assert code(blob, with_key=None) == "io_error"
    assert code(blob, size=len(data) - 1) == "size_mismatch"
    assert code(blob, size=len(data) + 1) == "size_mismatch"


@pytest.mark.parametrize("payload_bytes", [20_000, 5_000_000])  # one chunk; the threaded copy
def test_a_files_digest_is_that_of_the_bytes_signed_and_costs_no_pass_of_its_own(
        tmp_path, monkeypatch, payload_bytes):
    import datetime as dt
    import hashlib

    from casesignd.pdf.inspect import PdfLimits
    from casesignd.signing import pipeline
    from casesignd.signing.pades import SignatureMeta
    from tests.helpers_pki import big_pdf

    src = big_pdf(tmp_path / "in.pdf", payload_bytes)
    data = src.read_bytes()
    hashed: list[object] = []
    monkeypatch.setattr(pipeline, "_sha256", lambda s: hashed.append(s) or "unused")
    meta = SignatureMeta(signing_time=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), name="x")
    dst = tmp_path / "out.pdf"
    checked, prepared = pipeline.prepare_file(src, dst, limits=PdfLimits(), attachments=[],
                                              meta=meta, contents_bytes=8192)
    want = hashlib.sha256(data).hexdigest()
    assert not checked.normalized
    assert checked.received_sha256 == checked.source_sha256 == prepared.source_sha256 == want
    assert hashlib.sha256(dst.read_bytes()[:len(data)]).hexdigest() == want
    assert hashed == []  # the copy that the signature's hash reads is the only pass


def test_a_verdict_is_kept_under_the_digest_computed_not_the_one_claimed(tmp_path) -> None:
    import datetime as dt
    import hashlib

    from casesignd.pdf.inspect import PdfLimits
    from casesignd.signing import pipeline
    from casesignd.signing.pades import SignatureMeta
    from tests.helpers_pki import big_pdf

    document = big_pdf(tmp_path / "doc.pdf", 2_000).read_bytes()
    claimed = hashlib.sha256(b"another document").hexdigest()
    meta = SignatureMeta(signing_time=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), name="x")
    limits = PdfLimits()
    checked, _base, _update = pipeline.prepare_document(document, limits=limits, meta=meta,
                                                        contents_bytes=8192, sha256=claimed)
    real = hashlib.sha256(document).hexdigest()
    assert checked.received_sha256 == checked.source_sha256 == real
    assert pipeline.VERDICTS.get(claimed, limits) is None
    assert pipeline.VERDICTS.get(real, limits) is not None


def test_a_file_not_of_the_digest_expected_is_refused_before_the_key_and_leaves_nothing(
        tmp_path, monkeypatch) -> None:
    import datetime as dt
    import hashlib

    from casesignd.core.errors import DigestMismatch
    from casesignd.pdf.inspect import PdfLimits
    from casesignd.signing import worker
    from casesignd.signing.pades import SignatureMeta
    from tests.helpers_pki import big_pdf

    src = big_pdf(tmp_path / "in.pdf", 2_000)
    used: list[bytes] = []
    monkeypatch.setattr(worker, "_process_sign", lambda attrs: used.append(attrs))
    meta = SignatureMeta(signing_time=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), name="x")
    dst = tmp_path / "out" / "signed.pdf"
    dst.parent.mkdir()
    with pytest.raises(DigestMismatch):
        worker.sign_prepared_file(src, dst, PdfLimits(), [], meta, 8192, True,
                                  hashlib.sha256(b"another document").hexdigest())
    assert used == [] and list(dst.parent.iterdir()) == []
