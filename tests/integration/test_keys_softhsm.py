"""Signing with a key on a PKCS#11 token (SoftHSM2), validated like any other signature."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from casesignd import config
from casesignd.core.errors import ConfigError, SigningError
from casesignd.job_kinds.signing import key_settings
from casesignd.ops import devpki
from casesignd.signing import pipeline
from casesignd.signing.keys import KeySigner, Pkcs11Signer, load_signer
from tests.helpers_pki import Pki, SoftHsm, pki, sample_meta, softhsm
from tests.integration.test_pades import assert_validates, nssdir, samples

__all__ = ["nssdir", "pki", "samples", "softhsm"]  # fixtures

pytestmark = pytest.mark.needs_softhsm


@pytest.mark.parametrize("kind", ["rsa", "ec"])
def test_token_key_signs_valid_pdfs(
    kind: str, softhsm: SoftHsm, pki: Pki, samples: dict[str, Path], nssdir: Path | None, tmp_path: Path
) -> None:
    signer = Pkcs11Signer(softhsm.module, softhsm.token_label, softhsm.labels[kind], softhsm.pin)
    assert isinstance(signer, KeySigner)
    assert signer.algorithm == kind
    assert signer.cert == getattr(pki, kind).cert  # read from the token
    out = tmp_path / "signed.pdf"
    pipeline.sign_file(samples["reportlab"], out, signer, meta=sample_meta())
    assert_validates(out, pki, nssdir)


def test_wrong_pin_and_missing_key_are_signing_errors(softhsm: SoftHsm) -> None:
    with pytest.raises(SigningError):
        Pkcs11Signer(softhsm.module, softhsm.token_label, softhsm.labels["rsa"], "9999")
    with pytest.raises(SigningError):
        Pkcs11Signer(softhsm.module, softhsm.token_label, "no-such-key", softhsm.pin)
    with pytest.raises(SigningError):
        Pkcs11Signer(softhsm.module, "no-such-token", softhsm.labels["rsa"], softhsm.pin)


def _config(tmp_path: Path, softhsm: SoftHsm, pin_mode: int, cert_file: str = "") -> config.Config:
    pin = tmp_path / "pin"
    pin.write_text(softhsm.pin + "\n")
    pin.chmod(pin_mode)
    text = f"""
[signing.pkcs11]
module = "{softhsm.module}"
token_label = "{softhsm.token_label}"
key_label = "{softhsm.labels['ec']}"
pin_file = "pin"
cert_file = "{cert_file}"
"""
    return config.loads(text, base_dir=str(tmp_path))


def test_load_signer_takes_the_certificate_from_a_file(softhsm: SoftHsm, pki: Pki, tmp_path: Path) -> None:
    (tmp_path / "cert.pem").write_bytes(devpki.cert_pem(pki.ec.cert))
    signer = load_signer(key_settings(_config(tmp_path, softhsm, 0o600, cert_file="cert.pem")))
    assert signer.cert == pki.ec.cert and signer.algorithm == "ec"
    with pytest.raises(ConfigError) as info:
        load_signer(key_settings(_config(tmp_path, softhsm, 0o600, cert_file="missing.pem")))
    assert info.value.key == "signing.pkcs11.cert_file"


def test_load_signer_uses_the_configured_token(
    softhsm: SoftHsm, pki: Pki, samples: dict[str, Path], nssdir: Path | None, tmp_path: Path
) -> None:
    signer = load_signer(key_settings(_config(tmp_path, softhsm, 0o600)))
    assert isinstance(signer, Pkcs11Signer) and signer.cert == pki.ec.cert
    out = tmp_path / "signed.pdf"
    pipeline.sign_file(samples["xref_stream"], out, signer, meta=sample_meta())
    assert_validates(out, pki, nssdir)


def test_load_signer_refuses_a_readable_pin_file(softhsm: SoftHsm, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_signer(key_settings(_config(tmp_path, softhsm, 0o644)))
    assert info.value.key == "signing.pkcs11.pin_file"


def _token_daemon(softhsm: SoftHsm, daemon_factory: Any) -> Any:
    """A daemon whose key is the token's RSA key."""
    d = daemon_factory({"signing": {"pkcs11": {
        "module": softhsm.module, "token_label": softhsm.token_label,
        "key_label": softhsm.labels["rsa"], "pin_file": "token.pin"}}}, start=False)
    pin = d.dir / "token.pin"
    pin.write_text(softhsm.pin + "\n")
    pin.chmod(0o600)
    d.start()
    return d


def test_a_daemon_with_a_token_key_answers_kiosk_requests(
    softhsm: SoftHsm, pki: Pki, nssdir: Path | None, daemon_factory, tmp_path: Path
) -> None:
    # A token's key cannot be handed to the kiosk's worker processes: the daemon signs
    # with it in a thread, under the same validation and the same audit events.
    from tests.helpers_pki import reportlab_pdf
    from tests.integration.test_kiosk_http import sign

    d = _token_daemon(softhsm, daemon_factory)
    r = sign(d, reportlab_pdf(tmp_path / "doc.pdf").read_bytes(), key="token-1")
    assert r.status == 200, r.body[:300]
    out = tmp_path / "signed.pdf"
    out.write_bytes(r.body)
    assert_validates(out, pki, nssdir)
    assert [e["type"] for e in d.events(r.headers["X-Job-Id"])] == [
        "admitted", "claimed", "signature_recorded", "signed", "succeeded"]


def test_a_daemon_with_a_token_key_signs_every_batch_path(
    softhsm: SoftHsm, pki: Pki, nssdir: Path | None, daemon_factory, tmp_path: Path
) -> None:
    # The batch worker processes cannot hold a token's key either: a lone stored
    # contract (signed in memory), a packet with evidence (signed as a file in its
    # temp area) and a signed invoice each take the ladder's token branch.
    from tests.helpers_ops import upload
    from tests.helpers_pki import reportlab_pdf
    from tests.integration.test_invoice_http import ORDER
    from tests.integration.test_sign_case_http import manifest

    d = _token_daemon(softhsm, daemon_factory)
    contract = reportlab_pdf(tmp_path / "contract.pdf").read_bytes()
    lone = manifest("TOKEN-1", upload(d, "TOKEN-1", contract), [])
    packet = manifest("TOKEN-2", upload(d, "TOKEN-2", contract),
                      [("note.txt", "text/plain", upload(d, "TOKEN-2", b"seen\n"))])
    invoice = {"kind": "render_invoice", "template_version": "invoice-v3", "sign": True,
               "order": ORDER}
    for i, body in enumerate((lone, packet, invoice)):
        r = d.submit(body)
        assert r.status == 202, r.body
        job = d.wait_job(r.json()["job_id"])
        assert job["state"] == "ready", job
        got = d.request("GET", job["result"]["download_url"], auth=False)
        out = tmp_path / f"signed-{i}.pdf"
        out.write_bytes(got.body)
        assert_validates(out, pki, nssdir)
        if body is not invoice:
            assert [e["type"] for e in d.events(job["job_id"])] == [
                "admitted", "claimed", "signature_recorded", "signed", "succeeded"]
