"""casesignd verify: the verdict on documents made by the service and by pyHanko, and on
the updates an attacker would append; the pure decisions behind the verdict.

Every document is built at test time (tests/helpers_pki.py, tests/helpers_verify.py);
the command line is run in-process with --json and read back as the report.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID
from pyhanko.sign import fields

from casesignd.cli import commands as cli
from casesignd.ops import devpki
from casesignd.signing import pipeline, tsa
from casesignd.signing.keys import load_pkcs12
from casesignd.verify.validate import (
    FAILED,
    INDETERMINATE,
    PASSED,
    SignatureReport,
    VerifyOptions,
    VerifyReport,
    byte_range_fault,
    level_of,
    modification_of,
    read_trust_roots,
    verdict,
    verify_bytes,
)
from tests.helpers_pki import PASSWORD, Pki, pki, reportlab_pdf, sample_meta
from tests.helpers_tsa import LocalTsa
from tests.helpers_tsa import tsa as tsa_server
from tests.helpers_verify import (
    add_overlay,
    add_text_field,
    drop_signature_field,
    look_alike,
    pyhanko_sign,
    rewrite_page,
    set_text_field,
)

__all__ = ["pki", "tsa_server"]  # fixtures


# --- pure decisions -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "sub", "modification", "want"),
    [
        ("PASSED", "OK", "none", (PASSED, None)),
        ("PASSED", "OK", "form_filling", (PASSED, None)),
        ("PASSED", "OK", "other", (FAILED, "FORMAT_FAILURE")),
        ("INDETERMINATE", "NO_CERTIFICATE_CHAIN_FOUND", "none",
         (INDETERMINATE, "NO_CERTIFICATE_CHAIN_FOUND")),
        # A change to what a reader sees fails the signature, trusted or not.
        ("INDETERMINATE", "NO_CERTIFICATE_CHAIN_FOUND", "other", (FAILED, "FORMAT_FAILURE")),
        # A permanent failure found first stays what it is.
        ("FAILED", "HASH_FAILURE", "other", (FAILED, "HASH_FAILURE")),
        ("FAILED", "REVOKED", "none", (FAILED, "REVOKED")),
        # The AdES process never ran: the signature could not be read, so nothing was
        # found wrong either.
        (None, None, "none", (INDETERMINATE, "FORMAT_FAILURE")),
        (None, "NO_SIGNING_CERTIFICATE_FOUND", "none",
         (INDETERMINATE, "NO_SIGNING_CERTIFICATE_FOUND")),
    ],
)
def test_verdict(status, sub, modification, want) -> None:
    assert verdict(status, sub, modification) == want


@pytest.mark.parametrize(
    ("status", "sub", "modification", "want"),
    [
        # Without any anchor no chain is found, whatever pyHanko tripped on first.
        ("INDETERMINATE", "CHAIN_CONSTRAINTS_FAILURE", "none",
         (INDETERMINATE, "NO_CERTIFICATE_CHAIN_FOUND")),
        ("PASSED", "OK", "none", (INDETERMINATE, "NO_CERTIFICATE_CHAIN_FOUND")),
        ("INDETERMINATE", "NO_CERTIFICATE_CHAIN_FOUND", "other", (FAILED, "FORMAT_FAILURE")),
        ("FAILED", "HASH_FAILURE", "none", (FAILED, "HASH_FAILURE")),
    ],
)
def test_verdict_without_anchors(status, sub, modification, want) -> None:
    assert verdict(status, sub, modification, anchored=False) == want


@pytest.mark.parametrize(
    ("level", "docmdp_ok", "tail", "want"),
    [
        ("NONE", True, False, "none"),
        ("LTA_UPDATES", True, False, "lta_updates"),
        ("FORM_FILLING", True, False, "form_filling"),
        ("FORM_FILLING", None, False, "form_filling"),
        ("ANNOTATIONS", True, False, "annotations"),
        ("OTHER", False, False, "other"),
        (None, None, False, "other"),  # pyHanko's rules refused a change
        ("FORM_FILLING", False, False, "other"),  # beyond the signature's DocMDP
        ("NONE", True, True, "other"),  # bytes after the last revision
    ],
)
def test_modification_of(level, docmdp_ok, tail, want) -> None:
    assert modification_of(level, docmdp_ok, tail) == want


@pytest.mark.parametrize(
    ("args", "want"),
    [
        ((True, True, False, False, False), "B-B"),
        ((True, True, True, False, False), "B-T"),
        ((True, True, True, True, False), "B-LT"),
        ((True, True, True, True, True), "B-LTA"),
        ((True, True, False, True, True), "B-B"),  # each level needs the one below
        ((True, True, True, False, True), "B-T"),
        ((False, True, True, True, True), None),  # not PAdES (adbe.pkcs7.detached)
        ((True, False, True, True, True), None),  # not intact
    ],
)
def test_level_of(args, want) -> None:
    assert level_of(*args) == want


@pytest.mark.parametrize(
    ("byte_range", "want"),
    [
        ([0, 100, 302, 50], None),  # /Contents of 100 bytes: 200 hex digits and < >
        ([0, 100, 302, 49], None),  # a revision ends before the file does
        ([0, 100, 302, 51], "runs past the end"),
        ([0, 312, 302, 50], "overlap"),
        ([0, 90, 302, 50], "besides /Contents unsigned"),
        ([0, 110, 302, 50], "part of /Contents"),
        ([10, 90, 302, 50], "does not start"),
        ([0, 100, 302], "not four offsets"),
        ([0, -1, 302, 50], "not four offsets"),
        ("0 100 302 50", "not four offsets"),
    ],
)
def test_byte_range_fault(byte_range, want) -> None:
    fault = byte_range_fault(byte_range, 352, 100)
    assert fault is None if want is None else want in (fault or ""), fault


def test_report_json_shape() -> None:
    when = dt.datetime(2026, 3, 4, 5, 6, 7, tzinfo=dt.UTC)
    sig = SignatureReport("Signature1", "signature", True, True, True, False, "B-T", "none",
                          "CN=x", when, when, PASSED, None)
    doc = VerifyReport((sig,)).to_json()
    assert doc["passed"] is True
    assert doc["signatures"][0]["signing_time"] == "2026-03-04T05:06:07Z"
    assert doc["signatures"][0]["problems"] == []
    json.dumps(doc)
    assert VerifyReport(()).to_json() == {"signatures": [], "passed": False, "findings": []}
    unchecked = SignatureReport("S", "signature", None, None, None, False, None, None, "",
                                None, None, INDETERMINATE, "FORMAT_FAILURE")
    out = VerifyReport((unchecked,), ("a hybrid-reference file",)).to_json()
    assert out["signatures"][0]["intact"] is None and out["signatures"][0]["modification"] is None
    assert out["findings"] == ["a hybrid-reference file"]
    assert "modification unknown" in unchecked.describe()
    with pytest.raises(ValueError, match="fetch"):
        VerifyOptions(fetch="sometimes")


# --- the command line ------------------------------------------------------------------


def run_verify(pdf: Path, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict | None]:
    """``casesignd verify PDF --json ARGS`` in-process: the exit code and the report."""
    rc = cli.main(["verify", str(pdf), "--json", "--fetch", "never", *args])
    out = capsys.readouterr().out
    return rc, json.loads(out) if out.strip() else None


@pytest.fixture(autouse=True)
def no_ambient_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # verify reads casesignd-state/config.toml when it exists: never the developer's.
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CASESIGND_CONFIG", raising=False)


@pytest.fixture(scope="module")
def signed(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-page contract signed by the service's signer (PAdES B-B)."""
    d = tmp_path_factory.mktemp("signed")
    out = d / "signed.pdf"
    pipeline.sign_file(reportlab_pdf(d / "contract.pdf"), out, pki.signer("ec"), meta=sample_meta())
    return out


def _only(report: dict) -> dict:
    assert len(report["signatures"]) == 1, report
    return report["signatures"][0]


def test_a_clean_signature_passes_with_the_right_anchor(signed, pki, capsys) -> None:
    rc, report = run_verify(signed, "--trust", str(pki.ca_pem), capsys=capsys)
    assert rc == 0 and report["passed"], report
    sig = _only(report)
    assert sig["indication"] == PASSED and sig["sub_indication"] is None
    assert sig["intact"] and sig["valid"] and sig["trusted"] and not sig["revoked"]
    assert sig["level"] == "B-B" and sig["modification"] == "none" and sig["kind"] == "signature"
    assert sig["signer"] == pki.ec.cert.subject.rfc4514_string()
    assert sig["signing_time"] and sig["timestamp_time"] is None and sig["problems"] == []


def test_the_people_line(signed, pki, capsys) -> None:
    assert cli.main(["verify", str(signed), "--trust", str(pki.ca_pem), "--fetch", "never"]) == 0
    line = capsys.readouterr().out
    assert line.startswith("TOTAL-PASSED Signature1: ") and "B-B, modification none" in line


def test_without_anchors_nothing_passes(signed, capsys) -> None:
    rc, report = run_verify(signed, capsys=capsys)
    assert rc == 1 and not report["passed"]
    sig = _only(report)
    assert (sig["indication"], sig["sub_indication"]) == (INDETERMINATE, "NO_CERTIFICATE_CHAIN_FOUND")
    assert sig["intact"] and sig["valid"] and not sig["trusted"]
    assert any("no trust anchors" in p for p in sig["problems"])


def test_anchors_from_the_config(signed, pki, tmp_path, capsys) -> None:
    from tests.daemon import to_toml

    config = tmp_path / "cfg" / "config.toml"
    config.parent.mkdir()
    (config.parent / "roots.pem").write_bytes(pki.ca_pem.read_bytes())
    # A minimal config: its other sections keep their defaults.
    config.write_text(to_toml({"validation": {"trust_roots": ["roots.pem"], "fetch": "never"}}))
    assert cli.main(["verify", str(signed), "--json", "--config", str(config)]) == 0
    assert json.loads(capsys.readouterr().out)["passed"]
    # --trust replaces the config's anchors.
    other = tmp_path / "other.pem"
    other.write_bytes(devpki.cert_pem(devpki.make_ca("another CA", kind="ec").cert))
    assert cli.main(["verify", str(signed), "--json", "--config", str(config),
                     "--trust", str(other)]) == 1
    capsys.readouterr()


def test_two_sequential_approval_signatures_pass(signed, pki, tmp_path, capsys) -> None:
    twice = pyhanko_sign(signed, tmp_path / "twice.pdf", pki, kind="rsa")
    thrice = tmp_path / "thrice.pdf"
    pipeline.sign_file(twice, thrice, pki.signer("ec"), meta=sample_meta())
    rc, report = run_verify(thrice, "--trust", str(pki.ca_pem), capsys=capsys)
    assert rc == 0, report
    sigs = report["signatures"]
    assert [s["field"] for s in sigs] == ["Signature1", "Approval", "Signature2"]
    assert all(s["indication"] == PASSED for s in sigs)
    # A later signature field is form filling (PDF 32000-1 §12.8.2.2); the last is untouched.
    assert [s["modification"] for s in sigs] == ["form_filling", "form_filling", "none"]


def test_b_t_with_the_local_tsa(pki, tsa_server, tmp_path, capsys) -> None:
    out = tmp_path / "bt.pdf"
    pipeline.sign_file(reportlab_pdf(tmp_path / "c.pdf"), out, pki.signer("ec"), meta=sample_meta(),
                       timestamp=lambda sig: tsa.timestamp_blocking(tsa_server.url, sig, 10))
    rc, report = run_verify(out, "--trust", str(pki.ca_pem), capsys=capsys)
    assert rc == 0, report
    sig = _only(report)
    assert sig["level"] == "B-T" and sig["indication"] == PASSED
    stamped = dt.datetime.fromisoformat(sig["timestamp_time"])
    assert abs(stamped - dt.datetime.now(dt.UTC)) < dt.timedelta(minutes=5)


def test_a_timestamp_by_a_certificate_that_is_no_tsa_does_not_count(pki, tmp_path, capsys) -> None:
    out = tmp_path / "impostor.pdf"
    with LocalTsa(pki.rsa) as impostor:  # a document signer's certificate: no timeStamping EKU
        pipeline.sign_file(reportlab_pdf(tmp_path / "c.pdf"), out, pki.signer("ec"),
                           meta=sample_meta(),
                           timestamp=lambda sig: tsa.timestamp_blocking(impostor.url, sig, 10))
    rc, report = run_verify(out, "--trust", str(pki.ca_pem), capsys=capsys)
    sig = _only(report)
    assert rc == 1 and sig["indication"] != PASSED and sig["timestamp_time"] is None
    assert sig["level"] == "B-B"


def test_b_lta_by_pyhanko(pki, tsa_server, tmp_path, capsys) -> None:
    out = pyhanko_sign(reportlab_pdf(tmp_path / "c.pdf"), tmp_path / "lta.pdf", pki,
                       tsa_url=tsa_server.url, lta=True)
    rc, report = run_verify(out, "--trust", str(pki.ca_pem), capsys=capsys)
    assert rc == 0, report
    sig, stamp = report["signatures"]
    assert sig["level"] == "B-LTA" and sig["modification"] == "lta_updates"
    assert stamp["kind"] == "document_timestamp" and stamp["indication"] == PASSED
    assert stamp["level"] is None and stamp["timestamp_time"]


# --- what must fail --------------------------------------------------------------------


def test_a_rewritten_page_fails_alone_and_when_signed_again(signed, pki, tmp_path, capsys) -> None:
    rewritten = rewrite_page(signed, tmp_path / "rewritten.pdf")
    rc, report = run_verify(rewritten, "--trust", str(pki.ca_pem), capsys=capsys)
    sig = _only(report)
    assert rc == 1 and sig["modification"] == "other"
    assert (sig["indication"], sig["sub_indication"]) == (FAILED, "FORMAT_FAILURE")
    assert sig["intact"] and sig["valid"] and sig["trusted"]  # its own bytes are untouched
    assert any("changes what a reader sees" in p for p in sig["problems"])
    # Signing the rewrite again, by pyHanko or by the service, covers the rewrite with a
    # good signature; the first one still fails, and so does the document.
    for name, resign in (
        ("pyhanko", lambda src, dst: pyhanko_sign(src, dst, pki, kind="rsa")),
        ("service", lambda src, dst: pipeline.sign_file(src, dst, pki.signer("rsa"),
                                                        meta=sample_meta())),
    ):
        again = tmp_path / f"again-{name}.pdf"
        resign(rewritten, again)
        rc, report = run_verify(again, "--trust", str(pki.ca_pem), capsys=capsys)
        first, second = report["signatures"]
        assert rc == 1 and not report["passed"], name
        assert first["indication"] == FAILED and first["modification"] == "other", name
        assert second["indication"] == PASSED and second["modification"] == "none", name


def test_an_overlay_after_signing_fails(signed, pki, tmp_path, capsys) -> None:
    # The page's content is untouched; an annotation's appearance covers it. pyHanko's
    # policy explains no annotation after a signature but a signature field's widget.
    overlaid = add_overlay(signed, tmp_path / "overlaid.pdf")
    rc, report = run_verify(overlaid, "--trust", str(pki.ca_pem), capsys=capsys)
    sig = _only(report)
    assert rc == 1 and sig["modification"] == "other" and sig["indication"] == FAILED, sig


def test_a_dropped_signature_then_signed_again_fails(signed, pki, tmp_path, capsys) -> None:
    dropped = drop_signature_field(signed, tmp_path / "dropped.pdf", "Signature1")
    again = pyhanko_sign(dropped, tmp_path / "again.pdf", pki, kind="rsa")
    rc, report = run_verify(again, "--trust", str(pki.ca_pem), capsys=capsys)
    assert rc == 1 and not report["passed"]
    gone, new = report["signatures"]
    assert gone["field"] == "Signature1" and gone["indication"] == FAILED
    assert gone["modification"] == "other" and gone["sub_indication"] == "FORMAT_FAILURE"
    assert any("removed from the form" in p for p in gone["problems"])
    assert new["field"] == "Approval" and new["indication"] == PASSED
    # Without the new signature the dropped one is still found.
    rc, report = run_verify(dropped, "--trust", str(pki.ca_pem), capsys=capsys)
    assert rc == 1 and _only(report)["field"] == "Signature1"


@pytest.mark.parametrize("lock", ["field_mdp", "doc_mdp"])
def test_a_locked_form_field_changed_after_signing_fails(lock, pki, tmp_path, capsys) -> None:
    form = add_text_field(reportlab_pdf(tmp_path / "c.pdf"), tmp_path / "form.pdf", "Price", "100")
    if lock == "field_mdp":
        spec = fields.FieldMDPSpec(fields.FieldMDPAction.INCLUDE, fields=["Price"])
        locked = pyhanko_sign(form, tmp_path / "locked.pdf", pki, lock=spec)
    else:
        locked = pyhanko_sign(form, tmp_path / "locked.pdf", pki, certify=True,
                              docmdp=fields.MDPPerm.NO_CHANGES)
    rc, report = run_verify(locked, "--trust", str(pki.ca_pem), capsys=capsys)
    assert rc == 0, report
    changed = set_text_field(locked, tmp_path / "changed.pdf", "Price", "1")
    rc, report = run_verify(changed, "--trust", str(pki.ca_pem), capsys=capsys)
    sig = _only(report)
    assert rc == 1 and sig["modification"] == "other", sig
    assert (sig["indication"], sig["sub_indication"]) == (FAILED, "FORMAT_FAILURE")


def test_an_unlocked_form_field_may_be_filled_after_an_approval(pki, tmp_path, capsys) -> None:
    # The control of the test above: without a lock, filling a form is what PDF 32000-1
    # §12.8.2.2 allows after an approval signature.
    form = add_text_field(reportlab_pdf(tmp_path / "c.pdf"), tmp_path / "form.pdf", "Note", "a")
    signed = pyhanko_sign(form, tmp_path / "signed.pdf", pki)
    filled = set_text_field(signed, tmp_path / "filled.pdf", "Note", "b")
    rc, report = run_verify(filled, "--trust", str(pki.ca_pem), capsys=capsys)
    assert rc == 0 and _only(report)["modification"] == "form_filling", report


@pytest.mark.parametrize("forgery", ["self-signed", "fake-ca"])
def test_a_look_alike_signer_fails(forgery, pki, tmp_path, capsys) -> None:
    look_alike(pki, tmp_path)
    out = tmp_path / "forged.pdf"
    signer = load_pkcs12(tmp_path / f"{forgery}.p12", PASSWORD)
    pipeline.sign_file(reportlab_pdf(tmp_path / "c.pdf"), out, signer, meta=sample_meta())
    other = tmp_path / "other.pem"
    other.write_bytes(devpki.cert_pem(devpki.make_ca("another CA", kind="ec").cert))
    for anchors in ([], ["--trust", str(other)], ["--trust", str(pki.ca_pem)]):
        rc, report = run_verify(out, *anchors, capsys=capsys)
        sig = _only(report)
        assert rc == 1, (anchors, sig)
        assert sig["indication"] == INDETERMINATE and not sig["trusted"], (anchors, sig)
        # No chain to an anchor; a self-signed one is its own kind of refusal, and a
        # look-alike CA's signature that the real CA's key does not verify another.
        want = ({"NO_CERTIFICATE_CHAIN_FOUND"} if not anchors else
                {"NO_CERTIFICATE_CHAIN_FOUND", "CHAIN_CONSTRAINTS_FAILURE",
                 "CERTIFICATE_CHAIN_GENERAL_FAILURE"})
        assert sig["sub_indication"] in want, sig
        assert sig["signer"] == pki.ec.cert.subject.rfc4514_string()


def test_a_flipped_byte_fails(signed, pki, tmp_path, capsys) -> None:
    data = bytearray(signed.read_bytes())
    data[200] ^= 0x01
    flipped = tmp_path / "flipped.pdf"
    flipped.write_bytes(data)
    rc, report = run_verify(flipped, "--trust", str(pki.ca_pem), capsys=capsys)
    sig = _only(report)
    assert rc == 1 and not sig["intact"]
    assert (sig["indication"], sig["sub_indication"]) == (FAILED, "HASH_FAILURE")


def test_bytes_appended_after_the_last_signature_fail(signed, pki, tmp_path, capsys) -> None:
    appended = tmp_path / "appended.pdf"
    appended.write_bytes(signed.read_bytes() + b"\n% appended: covered by nothing\n")
    rc, report = run_verify(appended, "--trust", str(pki.ca_pem), capsys=capsys)
    sig = _only(report)
    assert rc == 1 and sig["intact"] and sig["modification"] == "other"
    assert any("covered by no signature" in p for p in sig["problems"])
    # An end-of-line after %%EOF is no change (PDF 32000-1 §7.5.5).
    newline = tmp_path / "newline.pdf"
    newline.write_bytes(signed.read_bytes() + b"\r\n")
    assert run_verify(newline, "--trust", str(pki.ca_pem), capsys=capsys)[0] == 0


def test_a_document_without_signatures_does_not_pass(tmp_path, pki, capsys) -> None:
    rc, report = run_verify(reportlab_pdf(tmp_path / "plain.pdf"), "--trust", str(pki.ca_pem),
                            capsys=capsys)
    assert rc == 1 and report == {"signatures": [], "passed": False, "findings": []}
    assert cli.main(["verify", str(tmp_path / "plain.pdf")]) == 1
    assert capsys.readouterr().out.endswith("plain.pdf: no signatures\n")


@pytest.mark.parametrize("body", [b"not a pdf at all", b"%PDF-1.7\nnot really\n", b""])
def test_what_is_not_a_pdf_exits_2(body, tmp_path, capsys) -> None:
    bad = tmp_path / "bad.pdf"
    bad.write_bytes(body)
    assert cli.main(["verify", str(bad), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "malformed_pdf" in captured.err
    assert "Traceback" not in captured.err


def test_a_truncated_signed_pdf_exits_2_or_fails(signed, pki, tmp_path, capsys) -> None:
    cut = tmp_path / "cut.pdf"
    cut.write_bytes(signed.read_bytes()[: signed.stat().st_size // 2])
    rc, _ = run_verify(cut, "--trust", str(pki.ca_pem), capsys=capsys)
    assert rc in (1, 2)


def test_bad_trust_files_exit_2(signed, tmp_path, capsys) -> None:
    (tmp_path / "ca.pem").write_text("not a certificate")
    assert cli.main(["verify", str(signed), "--trust", str(tmp_path / "ca.pem")]) == 2
    assert "no PEM certificate" in capsys.readouterr().err
    assert cli.main(["verify", str(signed), "--trust", str(tmp_path / "missing.pem")]) == 2
    assert cli.main(["verify", str(tmp_path / "missing.pdf")]) == 2


# --- chains ----------------------------------------------------------------------------


def _sub_ca(parent: devpki.Identity, cn: str) -> devpki.Identity:
    key = devpki.new_key("ec")
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
        .issuer_name(parent.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
            encipher_only=False, decipher_only=False), critical=True)
        .sign(parent.key, hashes.SHA256())
    )
    return devpki.Identity(key, cert, [parent.cert])


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    d = tmp_path_factory.mktemp("chain")
    root = devpki.make_ca("chain root", kind="ec")
    inter = _sub_ca(root, "chain intermediate")
    leaf = devpki.issue(inter, "chain leaf", kind="ec")
    # A certificate "issued" by an end-entity key: a leaf must not act as a CA.
    rogue = devpki.issue(devpki.Identity(leaf.key, leaf.cert, []), "rogue", kind="ec")
    # Valid until five minutes ago (devpki backdates by five minutes).
    expired = devpki.issue(inter, "chain expired leaf", kind="ec", days=0)
    src = reportlab_pdf(d / "c.pdf")
    docs = {}
    for name, ident in (("full", devpki.Identity(leaf.key, leaf.cert, [inter.cert])),
                        ("no_intermediate", devpki.Identity(leaf.key, leaf.cert, [])),
                        ("rogue", devpki.Identity(rogue.key, rogue.cert, [leaf.cert, inter.cert])),
                        ("expired", devpki.Identity(expired.key, expired.cert, [inter.cert]))):
        devpki.write_pkcs12(d / f"{name}.p12", ident, PASSWORD)
        docs[name] = d / f"{name}.pdf"
        pipeline.sign_file(src, docs[name], load_pkcs12(d / f"{name}.p12", PASSWORD),
                           meta=sample_meta())
    roots = {"root": root.cert, "inter": inter.cert}
    return {"docs": docs, "roots": roots}


def _verdict(doc: Path, anchor: x509.Certificate) -> tuple[str, str | None]:
    options = VerifyOptions((anchor.public_bytes(Encoding.DER),), "never")
    sig = verify_bytes(doc.read_bytes(), options).signatures[0]
    return sig.indication, sig.sub_indication


def test_chains(chain) -> None:
    docs, roots = chain["docs"], chain["roots"]
    assert _verdict(docs["full"], roots["root"]) == (PASSED, None)
    assert _verdict(docs["full"], roots["inter"]) == (PASSED, None)  # the anchor may be a sub-CA
    assert _verdict(docs["no_intermediate"], roots["root"]) == (
        INDETERMINATE, "NO_CERTIFICATE_CHAIN_FOUND")
    assert _verdict(docs["no_intermediate"], roots["inter"]) == (PASSED, None)
    assert _verdict(docs["rogue"], roots["root"])[0] == INDETERMINATE
    # Expired, and no timestamp proves the signature older: ETSI's OUT_OF_BOUNDS_NO_POE.
    assert _verdict(docs["expired"], roots["root"]) == (INDETERMINATE, "OUT_OF_BOUNDS_NO_POE")


def test_read_trust_roots(pki, tmp_path) -> None:
    both = tmp_path / "both.pem"
    both.write_bytes(pki.ca_pem.read_bytes() + devpki.cert_pem(pki.tsa.cert))
    assert len(read_trust_roots([both, pki.ca_pem])) == 3
    (tmp_path / "empty.pem").write_text("")
    with pytest.raises(ValueError, match="empty.pem"):
        read_trust_roots([tmp_path / "empty.pem"])
