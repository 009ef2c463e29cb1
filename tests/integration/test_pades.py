"""PAdES signatures checked by independent validators: pyHanko, poppler's pdfsig, and ours."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import threading
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import aiohttp
import pytest
from pyhanko.sign.diff_analysis import ModificationLevel
from pyhanko.sign.validation.status import SignatureCoverageLevel
from pypdf import PdfReader

from casesignd.core.errors import (
    AmbiguousPdf,
    CertifiedPdf,
    EncryptedPdf,
    MalformedPdf,
    SignatureTooLarge,
    TsaUnavailable,
)
from casesignd.ops import devpki
from casesignd.pdf.inspect import PdfLimits
from casesignd.signing import cms, pades, pipeline, tsa
from casesignd.verify.validate import SignatureReport, VerifyOptions, verify_file
from tests.helpers_pki import (
    PASSWORD,
    Pki,
    embedded_files,
    nss_db,
    pdfsig,
    pki,
    pyhanko_statuses,
    sample_meta,
    sample_pdfs,
)
from tests.helpers_tsa import LocalTsa
from tests.helpers_tsa import tsa as tsa_server

__all__ = ["pki", "tsa_server"]  # fixtures


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return sample_pdfs(tmp_path_factory.mktemp("samples"))


@pytest.fixture(scope="module")
def nssdir(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    return nss_db(tmp_path_factory.mktemp("nss"), pki.ca.cert)


def ours(path: Path, trust: list | None) -> list[SignatureReport]:
    """casesignd verify's report of each signature, local revocation data only."""
    from cryptography.hazmat.primitives.serialization import Encoding

    roots = tuple(c.public_bytes(Encoding.DER) for c in trust or [])
    return list(verify_file(path, VerifyOptions(roots, "never")).signatures)


def assert_validates(path: Path, pki: Pki, nssdir: Path | None, *, timestamped: bool = False,
                     hybrid: bool = False) -> None:
    """The last signature validates for pyHanko, pdfsig and casesignd verify; earlier ones
    stay intact."""
    statuses = pyhanko_statuses(path, [pki.ca.cert])
    assert statuses
    last = statuses[-1]
    assert last.intact and last.valid and last.trusted, last.pretty_print_details()
    assert last.coverage == SignatureCoverageLevel.ENTIRE_FILE
    if timestamped:
        assert last.timestamp_validity is not None
        assert last.timestamp_validity.intact and last.timestamp_validity.valid
        assert last.timestamp_validity.trusted
    for earlier in statuses[:-1]:
        assert earlier.intact and earlier.valid
        assert earlier.coverage == SignatureCoverageLevel.ENTIRE_REVISION
    report = pdfsig(path, nssdir)
    assert report.count("Signature is Valid") == len(statuses), report
    if nssdir is not None:
        assert report.count("Certificate is Trusted") >= 1, report
        assert report.rstrip().endswith("Certificate is Trusted."), report
    last_ours = ours(path, [pki.ca.cert])[-1]
    if hybrid:
        # A hybrid-reference file (PDF 32000-1 §7.5.8.4) is read as PDF 1.5 readers,
        # pyHanko's tolerant mode and pdfsig read it; the strictness is a finding.
        from cryptography.hazmat.primitives.serialization import Encoding

        roots = (pki.ca.cert.public_bytes(Encoding.DER),)
        findings = verify_file(path, VerifyOptions(roots, "never")).findings
        assert any("hybrid-reference" in f for f in findings), findings
    assert last_ours.passed and last_ours.modification == "none", last_ours.describe()
    assert (last_ours.level == "B-T") == timestamped


@pytest.mark.parametrize("kind", ["rsa", "ec"])
@pytest.mark.parametrize(
    "producer", ["reportlab", "xref_stream", "classic", "hybrid", "no_final_eol", "pdflatex"]
)
def test_b_b_validates(
    producer: str, kind: str, samples: dict[str, Path], pki: Pki, nssdir: Path | None, tmp_path: Path
) -> None:
    if producer not in samples:
        pytest.skip(f"{producer} unavailable on this machine")
    out = tmp_path / "signed.pdf"
    pipeline.sign_file(samples[producer], out, pki.signer(kind), meta=sample_meta())
    assert_validates(out, pki, nssdir, hybrid=producer == "hybrid")


@pytest.mark.parametrize("kind", ["rsa", "ec"])
@pytest.mark.parametrize("producer", ["reportlab", "xref_stream"])
def test_b_t_validates(
    producer: str, kind: str, samples: dict[str, Path], pki: Pki, nssdir: Path | None,
    tsa_server: LocalTsa, tmp_path: Path,
) -> None:
    out = tmp_path / "signed.pdf"
    outcome = pipeline.sign_file(
        samples[producer], out, pki.signer(kind), meta=sample_meta(),
        timestamp=lambda sig: tsa.timestamp_blocking(tsa_server.url, sig, 10),
    )
    assert outcome.timestamped and tsa_server.requests == 1
    assert_validates(out, pki, nssdir, timestamped=True)


def test_update_keeps_the_xref_kind(samples: dict[str, Path], pki: Pki, tmp_path: Path) -> None:
    # A hybrid file's last section is a table (with /XRefStm): the update is a table too.
    for producer, want_stream in (("classic", False), ("xref_stream", True), ("hybrid", False)):
        out = tmp_path / f"{producer}.pdf"
        pipeline.sign_file(samples[producer], out, pki.signer("ec"), meta=sample_meta())
        data = out.read_bytes()
        startxref = int(data.rsplit(b"startxref", 1)[1].split()[0])
        section = data[startxref : startxref + 40]
        assert section.startswith(b"xref") != want_stream, section
        prev = data[: len(samples[producer].read_bytes())].rsplit(b"startxref", 1)[1].split()[0]
        assert b"/Prev " + prev in data[startxref:]


def test_attachments_embedded_with_their_digests(samples: dict[str, Path], pki: Pki, nssdir: Path | None, tmp_path: Path) -> None:
    photo = tmp_path / "photo-1.jpg"
    photo.write_bytes(os.urandom(300_000))
    note = tmp_path / "note.txt"
    note.write_bytes("evidence — ünïcode\n".encode())
    out = tmp_path / "signed.pdf"
    pipeline.sign_file(
        samples["reportlab"], out, pki.signer("rsa"), meta=sample_meta(),
        attachments=[
            pades.Attachment(photo, "photo-1.jpg", "image/jpeg", "evidence"),
            pades.Attachment(note, "note.txt", "text/plain"),
        ],
    )
    assert_validates(out, pki, nssdir)
    assert embedded_files(out) == {"photo-1.jpg": photo.read_bytes(), "note.txt": note.read_bytes()}
    with open(out, "rb") as f:
        root = PdfReader(f).trailer["/Root"]
        specs = [s.get_object() for s in root["/AF"]]
        spec = next(s for s in specs if s["/F"] == "photo-1.jpg")
        stream = spec["/EF"]["/F"].get_object()
        assert stream["/Subtype"] == "/image/jpeg"
        assert stream["/Params"]["/Size"] == 300_000
        # No MD5 /CheckSum (optional): the file is bound by its SHA-256, read once.
        assert "/CheckSum" not in stream["/Params"]
        assert hashlib.sha256(photo.read_bytes()).hexdigest() in spec["/Desc"]
        assert spec["/AFRelationship"] == "/Supplement"


def test_signature_records_case_policy_and_signers(samples: dict[str, Path], pki: Pki, tmp_path: Path) -> None:
    out = tmp_path / "signed.pdf"
    meta = sample_meta()
    pipeline.sign_file(samples["reportlab"], out, pki.signer("ec"), meta=meta)
    with open(out, "rb") as f:
        field = PdfReader(f).trailer["/Root"]["/AcroForm"]["/Fields"][0].get_object()
        sig = field["/V"].get_object()
        assert sig["/SubFilter"] == "/ETSI.CAdES.detached"
        assert sig["/M"] == pades.pdf_date(meta.signing_time)
        assert "policy contract-v1" in sig["/Reason"] and "J. Doe (buyer, buyer-19)" in sig["/Reason"]
        assert sig["/Location"] == "Testville"
        case = sig["/CasesignCase"]
        assert case["/PolicyVersion"] == "contract-v1" and case["/CaseId"] == "MKT-2026-00042"
        assert [s["/Id"] for s in case["/Signers"]] == ["seller-881", "buyer-19"]


def test_signing_twice_keeps_the_first_signature(
    samples: dict[str, Path], pki: Pki, nssdir: Path | None, tmp_path: Path
) -> None:
    att = tmp_path / "a.txt"
    att.write_bytes(b"first evidence")
    once, twice = tmp_path / "once.pdf", tmp_path / "twice.pdf"
    pipeline.sign_file(samples["xref_stream"], once, pki.signer("ec"), meta=sample_meta(),
                    attachments=[pades.Attachment(att, "a.txt", "text/plain")])
    pipeline.sign_file(once, twice, pki.signer("rsa"), meta=sample_meta())
    assert_validates(twice, pki, nssdir)
    first = pyhanko_statuses(twice, [pki.ca.cert])[0]
    # Adding a signature field is an allowed change (§12.8.2.2, P=2 level).
    assert first.docmdp_ok and first.trusted
    reports = ours(twice, [pki.ca.cert])
    assert [r.field for r in reports] == ["Signature1", "Signature2"]
    assert all(r.passed for r in reports)
    assert [r.modification for r in reports] == ["form_filling", "none"]


def test_attachments_merge_with_an_existing_name_tree(samples: dict[str, Path], pki: Pki, tmp_path: Path) -> None:
    from pypdf import PdfWriter

    writer = PdfWriter(clone_from=str(samples["classic"]))
    writer.add_attachment("e.txt", b"one")
    attached = tmp_path / "attached.pdf"
    writer.write(attached)
    b = tmp_path / "b.txt"
    b.write_bytes(b"two")
    out = tmp_path / "signed.pdf"
    outcome = pipeline.sign_file(attached, out, pki.signer("ec"), meta=sample_meta(),
                                 attachments=[pades.Attachment(b, "e.txt", "text/plain")])
    assert outcome.checked.evidence == "embedded"
    assert embedded_files(out) == {"e.txt": b"one", "e (2).txt": b"two"}
    (status,) = pyhanko_statuses(out, [pki.ca.cert])
    assert status.intact and status.valid


def _corpus_names() -> list[str]:
    # Names are known before anything is built; the files are made once per module.
    try:
        from tests import helpers_corpus

        return [name for name, _, _ in helpers_corpus._good_recipes(Path("."))]
    except (ImportError, AttributeError):
        return []


@pytest.fixture(scope="module")
def good_corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    corpus_mod = pytest.importorskip("tests.helpers_corpus")
    return corpus_mod.build_good_corpus(tmp_path_factory.mktemp("good-corpus"))


@pytest.mark.parametrize("name", _corpus_names() or [pytest.param("none", marks=pytest.mark.skip)])
def test_good_corpus_signs_and_validates(
    name: str, good_corpus: dict[str, Path], pki: Pki, nssdir: Path | None, tmp_path: Path
) -> None:
    if name not in good_corpus:
        pytest.skip(f"{name} could not be built on this machine")
    att = tmp_path / "evidence.txt"
    att.write_bytes(b"evidence\n" * 50)
    out = tmp_path / "signed.pdf"
    # hyperref's links are URI actions: a policy that allows them signs the file.
    allowed = frozenset({"/GoTo", "/Named", "/URI"}) if "hyperref" in name else None
    limits = PdfLimits(allowed_actions=allowed) if allowed else PdfLimits()
    outcome = pipeline.sign_file(good_corpus[name], out, pki.signer("ec"), meta=sample_meta(),
                                 attachments=[pades.Attachment(att, "evidence.txt", "text/plain")],
                                 limits=limits)
    # Real producers' files are signed as they are: nothing in them needs a rewrite.
    assert not outcome.checked.normalized, outcome.checked.reasons
    statuses = pyhanko_statuses(out, [pki.ca.cert])
    last = statuses[-1]
    assert last.intact and last.valid and last.trusted, last.pretty_print_details()
    assert last.coverage == SignatureCoverageLevel.ENTIRE_FILE
    assert all(s.intact and s.valid for s in statuses)
    report = pdfsig(out, nssdir)
    assert report.count("Signature is Valid") == len(statuses), report
    assert report.rstrip().endswith("Certificate is Trusted."), report
    if len(statuses) == 1:
        assert outcome.checked.evidence == "embedded"
        assert embedded_files(out)["evidence.txt"] == att.read_bytes()
    else:  # signed before: the evidence is bound by digest, and the earlier signature holds
        assert outcome.checked.evidence == "digest" and "evidence.txt" not in embedded_files(out)
        assert all(s.modification_level <= ModificationLevel.FORM_FILLING and s.docmdp_ok
                   for s in statuses[:-1])
    reports = ours(out, [pki.ca.cert])
    assert reports[-1].passed and reports[-1].modification == "none", reports[-1].describe()
    assert all(r.intact for r in reports)


def test_placeholder_too_small_fails_cleanly(samples: dict[str, Path], pki: Pki, tmp_path: Path) -> None:
    out = tmp_path / "signed.pdf"
    with pytest.raises(SignatureTooLarge):
        pipeline.sign_file(samples["reportlab"], out, pki.signer("rsa"), meta=sample_meta(), contents_bytes=256)
    assert not out.exists()  # never half-written: nothing is left


def test_encrypted_and_garbage_inputs_are_refused(samples: dict[str, Path], pki: Pki, tmp_path: Path) -> None:
    enc = tmp_path / "enc.pdf"
    subprocess.run(["qpdf", "--encrypt", "u", "o", "256", "--", str(samples["reportlab"]), str(enc)],
                   check=True, timeout=60)
    with pytest.raises(EncryptedPdf):
        pipeline.sign_file(enc, tmp_path / "o1.pdf", pki.signer("rsa"), meta=sample_meta())
    junk = tmp_path / "junk.pdf"
    junk.write_bytes(b"%PDF-1.7\nnot really\n")
    with pytest.raises(MalformedPdf):
        pipeline.sign_file(junk, tmp_path / "o2.pdf", pki.signer("rsa"), meta=sample_meta())
    assert not list(tmp_path.glob("o*.pdf"))  # nothing half-written is left
    # Junk before the header shifts every offset: signed only after a clean rewrite.
    shifted = tmp_path / "shifted.pdf"
    shifted.write_bytes(b"%junk before the header\n" + samples["classic"].read_bytes())
    with pytest.raises(AmbiguousPdf):
        pipeline.sign_file(shifted, tmp_path / "o3.pdf", pki.signer("rsa"), meta=sample_meta(),
                           limits=PdfLimits(normalize="never"))
    outcome = pipeline.sign_file(shifted, tmp_path / "o3.pdf", pki.signer("rsa"), meta=sample_meta())
    assert outcome.checked.normalized and outcome.checked.received_sha256 != outcome.checked.source_sha256
    assert (tmp_path / "o3.pdf").read_bytes().startswith(b"%PDF-")
    last = pyhanko_statuses(tmp_path / "o3.pdf", [pki.ca.cert])[-1]
    assert last.intact and last.valid


def test_verify_detects_tampering_and_appending(samples: dict[str, Path], pki: Pki, tmp_path: Path) -> None:
    out = tmp_path / "signed.pdf"
    pipeline.sign_file(samples["reportlab"], out, pki.signer("ec"), meta=sample_meta())
    data = bytearray(out.read_bytes())
    flipped = tmp_path / "flipped.pdf"
    data[200] ^= 0x01
    flipped.write_bytes(data)
    report = ours(flipped, [pki.ca.cert])[0]
    assert not report.intact and report.sub_indication == "HASH_FAILURE"
    appended = tmp_path / "appended.pdf"
    appended.write_bytes(out.read_bytes() + b"\n% appended\n")
    report = ours(appended, [pki.ca.cert])[0]
    assert report.intact and not report.passed and report.modification == "other"
    # Without anchors nothing passes: the signature is sound, its signer unknown.
    unanchored = ours(out, None)[0]
    assert unanchored.valid and not unanchored.trusted and not unanchored.passed
    stranger = ours(out, [devpki.make_ca("another CA", kind="ec").cert])[0]
    assert stranger.intact and stranger.valid and not stranger.trusted
    assert stranger.describe().startswith("INDETERMINATE/NO_CERTIFICATE_CHAIN_FOUND Signature1")


def test_prepare_runs_in_a_worker_process(samples: dict[str, Path], pki: Pki, nssdir: Path | None, tmp_path: Path) -> None:
    out = tmp_path / "signed.pdf"
    with ProcessPoolExecutor(max_workers=1) as pool:
        prepared = pool.submit(
            pades.prepare, samples["reportlab"], out, attachments=[], meta=sample_meta()
        ).result(timeout=60)
    signer = pki.signer("rsa")
    template = cms.template_for(signer.cert, tuple(signer.chain))
    attrs = cms.build_signed_attrs(prepared.digest, template)
    pades.finalize(prepared, cms.assemble(template, attrs, signer.sign(attrs)))
    assert_validates(out, pki, nssdir)


@pytest.mark.parametrize("mode", ["503", "garbage", "wrong_nonce"])
async def test_tsa_failures_are_retryable(mode: str, tsa_server: LocalTsa) -> None:
    tsa_server.mode = mode
    async with aiohttp.ClientSession() as session:
        with pytest.raises(TsaUnavailable) as info:
            await tsa.timestamp(session, tsa_server.url, b"signature", timeout_s=5)
    assert info.value.retryable


async def test_tsa_unreachable_and_slow_are_retryable() -> None:
    async with aiohttp.ClientSession() as session:
        with pytest.raises(TsaUnavailable):
            await tsa.timestamp(session, "http://127.0.0.1:9/tsa", b"sig", timeout_s=2)
        # A server that accepts and never answers: the timeout must fire.
        import socket

        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        try:
            url = f"http://127.0.0.1:{silent.getsockname()[1]}/tsa"
            with pytest.raises(TsaUnavailable):
                await asyncio.wait_for(tsa.timestamp(session, url, b"sig", timeout_s=0.5), 10)
        finally:
            silent.close()


async def test_tsa_async_token_validates(tsa_server: LocalTsa) -> None:
    async with aiohttp.ClientSession() as session:
        token = await tsa.timestamp(session, tsa_server.url, b"signature", timeout_s=5)
    assert tsa.token_time(token) is not None


def test_concurrent_signing_shares_one_key(samples: dict[str, Path], pki: Pki, tmp_path: Path) -> None:
    signer = pki.signer("ec")
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            pipeline.sign_file(samples["reportlab"], tmp_path / f"s{i}.pdf", signer, meta=sample_meta())
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert all(ours(tmp_path / f"s{i}.pdf", [pki.ca.cert])[0].passed for i in range(8))


def test_evidence_after_an_earlier_signature_is_bound_by_digest(
    samples: dict[str, Path], pki: Pki, tmp_path: Path
) -> None:
    """Embedding files is not a change DocMDP allows after a signature (§12.8.2.2), and
    pyHanko would class it beyond form filling: after a signature, the evidence is
    listed by digest in the signature dictionary instead, and the earlier signature
    keeps its form-filling level."""
    att = tmp_path / "late.txt"
    att.write_bytes(b"late evidence")
    once, twice = tmp_path / "once.pdf", tmp_path / "twice.pdf"
    pipeline.sign_file(samples["reportlab"], once, pki.signer("ec"), meta=sample_meta())
    outcome = pipeline.sign_file(once, twice, pki.signer("ec"), meta=sample_meta(),
                                 attachments=[pades.Attachment(att, "late.txt", "text/plain")])
    assert outcome.checked.evidence == "digest"
    assert outcome.checked.audit_detail()["evidence"] == "digest"
    first, second = pyhanko_statuses(twice, [pki.ca.cert])
    assert first.intact and first.valid and first.trusted and first.docmdp_ok
    assert first.modification_level == ModificationLevel.FORM_FILLING
    assert second.bottom_line
    assert embedded_files(twice) == {}
    with open(twice, "rb") as f:
        sig = PdfReader(f).trailer["/Root"]["/AcroForm"]["/Fields"][-1].get_object()["/V"]
        case = sig["/CasesignCase"]
        assert case["/EvidenceBinding"] == "/Digest"
        assert [dict(e) for e in case["/Evidence"]] == [{
            "/Name": "late.txt", "/MediaType": "text/plain", "/Size": len(b"late evidence"),
            "/SHA256": hashlib.sha256(b"late evidence").hexdigest()}]


def _certify(src: Path, dst: Path, pki: Pki, perm: str) -> Path:
    from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
    from pyhanko.sign import fields, signers

    signer = signers.SimpleSigner.load_pkcs12(str(pki.pkcs12("rsa")), passphrase=PASSWORD)
    meta = signers.PdfSignatureMetadata(
        field_name="Certification", certify=True, docmdp_permissions=fields.MDPPerm[perm]
    )
    with open(src, "rb") as inf, open(dst, "wb") as outf:
        signers.PdfSigner(meta, signer=signer).sign_pdf(IncrementalPdfFileWriter(inf), output=outf)
    return dst


def test_certified_inputs_follow_their_docmdp(samples: dict[str, Path], pki: Pki, nssdir: Path | None, tmp_path: Path) -> None:
    locked = _certify(samples["reportlab"], tmp_path / "p1.pdf", pki, "NO_CHANGES")
    with pytest.raises(CertifiedPdf):
        pipeline.sign_file(locked, tmp_path / "o1.pdf", pki.signer("ec"), meta=sample_meta())
    fillable = _certify(samples["reportlab"], tmp_path / "p2.pdf", pki, "FILL_FORMS")
    att = tmp_path / "a.txt"
    att.write_bytes(b"x")
    # P=2 allows signing, not embedding: the evidence is bound by digest.
    outcome = pipeline.sign_file(fillable, tmp_path / "o2.pdf", pki.signer("ec"),
                                 meta=sample_meta(),
                                 attachments=[pades.Attachment(att, "a.txt", "text/plain")])
    assert outcome.checked.evidence == "digest" and embedded_files(tmp_path / "o2.pdf") == {}
    certification = pyhanko_statuses(tmp_path / "o2.pdf", [pki.ca.cert])[0]
    assert certification.docmdp_ok
    assert certification.modification_level == ModificationLevel.FORM_FILLING
    out = tmp_path / "o3.pdf"
    pipeline.sign_file(fillable, out, pki.signer("ec"), meta=sample_meta())
    assert_validates(out, pki, nssdir)
    assert pyhanko_statuses(out, [pki.ca.cert])[0].docmdp_ok


def test_verify_refuses_a_timestamp_from_a_non_tsa_certificate(
    samples: dict[str, Path], pki: Pki, tmp_path: Path
) -> None:
    out = tmp_path / "signed.pdf"
    with LocalTsa(pki.rsa) as impostor:  # a document-signing certificate, no timeStamping EKU
        pipeline.sign_file(samples["reportlab"], out, pki.signer("ec"), meta=sample_meta(),
                        timestamp=lambda sig: tsa.timestamp_blocking(impostor.url, sig, 10))
    report = ours(out, [pki.ca.cert])[0]
    assert report.level == "B-B" and report.timestamp_time is None and not report.passed
    assert report.valid and report.trusted  # the signature itself is sound


def test_unicode_names_and_empty_attachments(samples: dict[str, Path], pki: Pki, nssdir: Path | None, tmp_path: Path) -> None:
    photo, empty = tmp_path / "p", tmp_path / "e"
    photo.write_bytes(b"photo")
    empty.write_bytes(b"")
    out = tmp_path / "signed.pdf"
    meta = sample_meta(reason="Vertrag über Äpfel", location="Zürich",
                       parties=(pades.Party("b-1", "Jürgen «J» Müller", "buyer"),))
    pipeline.sign_file(samples["reportlab"], out, pki.signer("ec"), meta=meta, attachments=[
        pades.Attachment(photo, "фото (1).jpg", "image/jpeg"),
        pades.Attachment(empty, "empty.txt", "text/plain"),
    ])
    assert_validates(out, pki, nssdir)
    assert embedded_files(out) == {"фото (1).jpg": b"photo", "empty.txt": b""}
    with open(out, "rb") as f:
        sig = PdfReader(f).trailer["/Root"]["/AcroForm"]["/Fields"][0].get_object()["/V"]
        assert "Jürgen «J» Müller (buyer, b-1)" in sig["/Reason"] and sig["/Location"] == "Zürich"
