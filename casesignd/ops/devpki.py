"""A development PKI: a local CA and a signing certificate, for `casesignd init` and tests.

Nothing here is meant for production keys; operators bring their own PKCS#12 or
PKCS#11 token. Keys are generated fresh on every call and never committed.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


@dataclass
class Identity:
    key: PrivateKey
    cert: x509.Certificate
    chain: list[x509.Certificate]


def new_key(kind: str = "rsa") -> PrivateKey:
    """A fresh private key: ``rsa`` (2048 bits) or ``ec`` (P-256)."""
    if kind == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if kind == "ec":
        return ec.generate_private_key(ec.SECP256R1())
    raise ValueError(f"unknown key kind {kind!r}")


def _name(cn: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, cn),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "casesignd development"),
        ]
    )


def make_ca(cn: str = "casesignd development CA", kind: str = "rsa", days: int = 3650) -> Identity:
    """A self-signed CA certificate with its key."""
    key = new_key(kind)
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Identity(key, cert, [])


def issue(
    ca: Identity,
    cn: str,
    kind: str = "rsa",
    days: int = 825,
    eku: list[x509.ObjectIdentifier] | None = None,
    key: PrivateKey | None = None,
) -> Identity:
    """An end-entity certificate for document signing (or, with ``eku``, e.g. time stamping)."""
    key = key or new_key(kind)
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=True, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=False,
                crl_sign=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False
        )
    )
    if eku:
        builder = builder.add_extension(x509.ExtendedKeyUsage(eku), critical=True)
    cert = builder.sign(ca.key, hashes.SHA256())
    return Identity(key, cert, [ca.cert])


def make_tsa(ca: Identity, cn: str = "casesignd development TSA") -> Identity:
    """A time-stamping certificate (RFC 3161 §2.3: critical EKU id-kp-timeStamping only)."""
    return issue(ca, cn, eku=[ExtendedKeyUsageOID.TIME_STAMPING])


def _private_write(path: Path, data: bytes) -> None:
    # O_EXCL: never overwrite; 0600 from the first byte.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def write_pkcs12(path: Path, ident: Identity, password: bytes) -> None:
    """Write key, certificate and chain as PKCS#12 (0600, never overwriting)."""
    data = pkcs12.serialize_key_and_certificates(
        b"casesignd", ident.key, ident.cert, ident.chain or None,
        serialization.BestAvailableEncryption(password),
    )
    _private_write(path, data)


def write_private(path: Path, data: bytes) -> None:
    """Write a secret file with mode 0600, refusing to overwrite."""
    _private_write(path, data)


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
