"""Loading the service key from PKCS#12 and the configuration."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding

from casesignd import config
from casesignd.core.errors import ConfigError, SigningError
from casesignd.job_kinds.signing import key_settings
from casesignd.ops import devpki
from casesignd.signing.keys import KeySigner, configured, load_pkcs12, load_signer

PASSWORD = b"pw-123"


@pytest.fixture(scope="module")
def ca() -> devpki.Identity:
    return devpki.make_ca("keys unit CA")


def _write(tmp_path: Path, ident: devpki.Identity, mode: int = 0o600, pw_mode: int = 0o600) -> config.Config:
    devpki.write_pkcs12(tmp_path / "key.p12", ident, PASSWORD)
    (tmp_path / "key.p12").chmod(mode)
    (tmp_path / "key.pw").write_bytes(PASSWORD + b"\n")
    (tmp_path / "key.pw").chmod(pw_mode)
    text = '[signing]\npkcs12_path = "key.p12"\npkcs12_password_file = "key.pw"\n'
    return config.loads(text, base_dir=str(tmp_path))


@pytest.mark.parametrize("kind", ["rsa", "ec"])
def test_pkcs12_signer_signs_with_sha256(ca: devpki.Identity, kind: str, tmp_path: Path) -> None:
    ident = devpki.issue(ca, f"unit {kind}", kind)
    signer = load_signer(key_settings(_write(tmp_path, ident)))
    assert isinstance(signer, KeySigner)
    assert signer.algorithm == kind and signer.cert == ident.cert and signer.chain == [ca.cert]
    sig = signer.sign(b"data")
    key = ident.cert.public_key()
    if kind == "rsa":
        key.verify(sig, b"data", padding.PKCS1v15(), hashes.SHA256())  # type: ignore[call-arg]
    else:
        key.verify(sig, b"data", ec.ECDSA(hashes.SHA256()))  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("mode", "pw_mode", "key"),
    [
        (0o640, 0o600, "signing.pkcs12_path"),
        (0o604, 0o600, "signing.pkcs12_path"),
        (0o600, 0o644, "signing.pkcs12_password_file"),
    ],
)
def test_readable_secrets_are_refused(ca: devpki.Identity, tmp_path: Path, mode: int, pw_mode: int, key: str) -> None:
    cfg = _write(tmp_path, devpki.issue(ca, "unit", "ec"), mode, pw_mode)
    with pytest.raises(ConfigError) as info:
        load_signer(key_settings(cfg))
    assert info.value.key == key


def test_missing_key_file_names_the_setting(tmp_path: Path) -> None:
    cfg = config.loads('[signing]\npkcs12_path = "nope.p12"\n', base_dir=str(tmp_path))
    with pytest.raises(ConfigError) as info:
        load_signer(key_settings(cfg))
    assert info.value.key == "signing.pkcs12_path"
    with pytest.raises(ConfigError):
        load_signer(key_settings(config.loads("", base_dir=str(tmp_path))))


def test_wrong_password_is_a_signing_error(ca: devpki.Identity, tmp_path: Path) -> None:
    devpki.write_pkcs12(tmp_path / "k.p12", devpki.issue(ca, "unit", "ec"), PASSWORD)
    with pytest.raises(SigningError):
        load_pkcs12(tmp_path / "k.p12", b"wrong")


def test_credentials_directory_is_preferred(ca: devpki.Identity, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    ident = devpki.issue(ca, "from credentials", "ec")
    devpki.write_pkcs12(creds / "key.p12", ident, PASSWORD)
    devpki.write_private(creds / "key.pw", PASSWORD)
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    cfg = config.loads('[signing]\npkcs12_path = "key.p12"\npkcs12_password_file = "key.pw"\n',
                       base_dir=str(tmp_path))
    signer = load_signer(key_settings(cfg))
    assert signer.cert == ident.cert
    assert hashlib.sha256(signer.sign(b"x")).digest()  # usable


@pytest.mark.parametrize("kind", ["rsa", "ec"])
def test_a_key_in_memory_signs_the_same_in_a_worker_process(
    ca: devpki.Identity, kind: str, tmp_path: Path
) -> None:
    import pickle
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    ident = devpki.issue(ca, f"unit {kind}", kind)
    signer = load_signer(key_settings(_write(tmp_path, ident)))
    with ProcessPoolExecutor(1, mp_context=get_context("forkserver")) as pool:
        sig = pool.submit(_sign_there, signer.for_process(), b"data").result(timeout=60)
    _verify(ident, sig, b"data")
    # Only this daemon's processes receive it: it pickles as the key itself.
    assert pickle.loads(pickle.dumps(signer.for_process())).sign(b"x")


def _sign_there(key, data: bytes) -> bytes:
    return key.sign(data)


def _verify(ident: devpki.Identity, sig: bytes, data: bytes) -> None:
    key = ident.cert.public_key()
    if isinstance(key, ec.EllipticCurvePublicKey):
        key.verify(sig, data, ec.ECDSA(hashes.SHA256()))
    else:
        key.verify(sig, data, padding.PKCS1v15(), hashes.SHA256())


def test_no_configured_key_is_refused_as_unavailable(ca: devpki.Identity, tmp_path: Path) -> None:
    with pytest.raises(SigningError) as refused:
        configured(None)
    assert refused.value.code == "signing_key_unavailable"
    signer = load_signer(key_settings(_write(tmp_path, devpki.issue(ca, "unit", "rsa"))))
    assert configured(signer) is signer
