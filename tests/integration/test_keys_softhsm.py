"""Signing with a key on a PKCS#11 token (SoftHSM2), validated like any other signature."""

from __future__ import annotations

from pathlib import Path

import pytest

from casesignd import config
from casesignd.core.errors import ConfigError, SigningError
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
    signer = load_signer(_config(tmp_path, softhsm, 0o600, cert_file="cert.pem"))
    assert signer.cert == pki.ec.cert and signer.algorithm == "ec"
    with pytest.raises(ConfigError) as info:
        load_signer(_config(tmp_path, softhsm, 0o600, cert_file="missing.pem"))
    assert info.value.key == "signing.pkcs11.cert_file"


def test_load_signer_uses_the_configured_token(
    softhsm: SoftHsm, pki: Pki, samples: dict[str, Path], nssdir: Path | None, tmp_path: Path
) -> None:
    signer = load_signer(_config(tmp_path, softhsm, 0o600))
    assert isinstance(signer, Pkcs11Signer) and signer.cert == pki.ec.cert
    out = tmp_path / "signed.pdf"
    pipeline.sign_file(samples["xref_stream"], out, signer, meta=sample_meta())
    assert_validates(out, pki, nssdir)


def test_load_signer_refuses_a_readable_pin_file(softhsm: SoftHsm, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_signer(_config(tmp_path, softhsm, 0o644))
    assert info.value.key == "signing.pkcs11.pin_file"


def test_a_daemon_with_a_token_key_answers_kiosk_requests(
    softhsm: SoftHsm, pki: Pki, nssdir: Path | None, daemon_factory, tmp_path: Path
) -> None:
    # A token's key cannot be handed to the kiosk's worker processes: the daemon signs
    # with it in a thread, under the same validation and the same audit events.
    from tests.helpers_pki import reportlab_pdf
    from tests.integration.test_kiosk_http import sign

    d = daemon_factory({"signing": {"pkcs11": {
        "module": softhsm.module, "token_label": softhsm.token_label,
        "key_label": softhsm.labels["rsa"], "pin_file": "token.pin"}}}, start=False)
    pin = d.dir / "token.pin"
    pin.write_text(softhsm.pin + "\n")
    pin.chmod(0o600)
    d.start()
    r = sign(d, reportlab_pdf(tmp_path / "doc.pdf").read_bytes(), key="token-1")
    assert r.status == 200, r.body[:300]
    out = tmp_path / "signed.pdf"
    out.write_bytes(r.body)
    assert_validates(out, pki, nssdir)
    assert [e["type"] for e in d.events(r.headers["X-Job-Id"])] == [
        "admitted", "claimed", "signature_recorded", "signed", "succeeded"]
