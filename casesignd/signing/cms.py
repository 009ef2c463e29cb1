"""CMS SignedData for PAdES baseline signatures, assembled as DER by hand.

A PAdES signature (ETSI EN 319 142-1 §5.3, §6.3) is a detached CAdES signature
(ETSI EN 319 122-1) over the PDF's ByteRange. Everything that depends only on
the signer (certificate bytes, issuerAndSerialNumber, the ESSCertIDv2, the
algorithm identifiers) is encoded once into a :class:`SignerInfoTemplate`;
a signature then costs two small concatenations around the key operation.

Layout (RFC 5652 §5):

    ContentInfo ::= SEQUENCE { contentType id-signedData, [0] EXPLICIT SignedData }
    SignedData  ::= SEQUENCE { version 1, digestAlgorithms SET { sha256 },
                               encapContentInfo SEQUENCE { id-data } -- detached
                               certificates [0] IMPLICIT SET OF Certificate,
                               signerInfos SET { SignerInfo } }
    SignerInfo  ::= SEQUENCE { version 1, sid IssuerAndSerialNumber,
                               digestAlgorithm sha256, signedAttrs [0] IMPLICIT,
                               signatureAlgorithm, signature OCTET STRING,
                               unsignedAttrs [1] IMPLICIT OPTIONAL }

Signed attributes: content-type, message-digest, signing-certificate-v2
(RFC 5035) and CMS algorithm protection (RFC 6211). There is deliberately no
signing-time attribute: PAdES puts the claimed time in the signature
dictionary's /M (EN 319 142-1 §5.3, item f).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

# --- minimal DER (X.690 §8, §10) -----------------------------------------------------


def _length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(raw)]) + raw


def tlv(tag: int, content: bytes) -> bytes:
    """One DER element: tag byte, definite length, content."""
    return bytes([tag]) + _length(len(content)) + content


def seq(*parts: bytes) -> bytes:
    """A DER SEQUENCE of already-encoded parts."""
    return tlv(0x30, b"".join(parts))


def der_set(*parts: bytes) -> bytes:
    """A DER SET OF already-encoded parts."""
    # DER SET OF: elements sorted by their encodings (X.690 §11.6).
    return tlv(0x31, b"".join(sorted(parts)))


def octets(data: bytes) -> bytes:
    """A DER OCTET STRING."""
    return tlv(0x04, data)


def integer(n: int) -> bytes:
    """A DER INTEGER (two's complement, minimal length)."""
    size = (n if n >= 0 else ~n).bit_length() // 8 + 1  # room for the sign bit
    return tlv(0x02, n.to_bytes(size, "big", signed=True))


@functools.lru_cache(maxsize=256)
def oid(dotted: str) -> bytes:
    """A DER OBJECT IDENTIFIER from its dotted form (X.690 §8.19)."""
    arcs = [int(a) for a in dotted.split(".")]
    body = bytearray()
    for value in [arcs[0] * 40 + arcs[1], *arcs[2:]]:
        chunk = [value & 0x7F]
        value >>= 7
        while value:
            chunk.append(0x80 | (value & 0x7F))
            value >>= 7
        body.extend(reversed(chunk))
    return tlv(0x06, bytes(body))


NULL = b"\x05\x00"

ID_DATA = "1.2.840.113549.1.7.1"
ID_SIGNED_DATA = "1.2.840.113549.1.7.2"
ID_CONTENT_TYPE = "1.2.840.113549.1.9.3"
ID_MESSAGE_DIGEST = "1.2.840.113549.1.9.4"
ID_ALGORITHM_PROTECTION = "1.2.840.113549.1.9.52"
ID_SIGNING_CERTIFICATE_V2 = "1.2.840.113549.1.9.16.2.47"
ID_SIGNATURE_TIME_STAMP_TOKEN = "1.2.840.113549.1.9.16.2.14"
ID_SHA256 = "2.16.840.1.101.3.4.2.1"
ID_SHA256_WITH_RSA = "1.2.840.113549.1.1.11"
ID_ECDSA_WITH_SHA256 = "1.2.840.10045.4.3.2"

# RFC 5754 §2: SHA-2 identifiers are generated with absent parameters.
SHA256_ALG = seq(oid(ID_SHA256))
# RFC 4055 §5: RSA signature identifiers carry NULL parameters;
# RFC 5758 §3.2: ECDSA identifiers carry none.
SIG_ALGS = {
    "rsa": seq(oid(ID_SHA256_WITH_RSA), NULL),
    "ec": seq(oid(ID_ECDSA_WITH_SHA256)),
}


def _attribute(type_oid: str, *values: bytes) -> bytes:
    return seq(oid(type_oid), der_set(*values))


# --- the per-signer template -----------------------------------------------------


@dataclass(frozen=True)
class SignerInfoTemplate:
    """Everything about a signer that does not change between signatures (all DER)."""

    algorithm: str  # "rsa" or "ec"
    cert_der: bytes
    sid: bytes  # IssuerAndSerialNumber
    sig_alg: bytes  # AlgorithmIdentifier of the signature
    static_attrs: tuple[bytes, ...]  # encoded signed Attributes other than message-digest
    certificates: bytes  # [0] IMPLICIT SET OF Certificate, tagged

    @property
    def signature_bytes_max(self) -> int:
        """An upper bound of the raw signature size, for sizing placeholders."""
        return 520 if self.algorithm == "rsa" else 160


def key_algorithm(cert: x509.Certificate) -> str:
    """``rsa`` or ``ec`` from the certificate's public key."""
    key = cert.public_key()
    if isinstance(key, rsa.RSAPublicKey):
        return "rsa"
    if isinstance(key, ec.EllipticCurvePublicKey):
        return "ec"
    raise ValueError(f"unsupported signing key type {type(key).__name__}")


def _issuer_and_serial(cert: x509.Certificate) -> bytes:
    return seq(cert.issuer.public_bytes(), integer(cert.serial_number))


def _ess_cert_id_v2(cert: x509.Certificate, cert_der: bytes) -> bytes:
    # RFC 5035 §3: hashAlgorithm DEFAULT sha256 is omitted in DER; issuerSerial
    # names the issuer as GeneralNames { directoryName [4] EXPLICIT Name }.
    issuer_serial = seq(seq(tlv(0xA4, cert.issuer.public_bytes())), integer(cert.serial_number))
    return seq(octets(hashlib.sha256(cert_der).digest()), issuer_serial)


@functools.lru_cache(maxsize=32)
def template_for(
    cert: x509.Certificate, chain: tuple[x509.Certificate, ...] = ()
) -> SignerInfoTemplate:
    """Build (once per signer, cached) the encoded parts of a SignerInfo."""
    algorithm = key_algorithm(cert)
    cert_der = cert.public_bytes(serialization.Encoding.DER)
    sig_alg = SIG_ALGS[algorithm]
    signing_cert_v2 = _attribute(
        ID_SIGNING_CERTIFICATE_V2, seq(seq(_ess_cert_id_v2(cert, cert_der)))
    )
    content_type = _attribute(ID_CONTENT_TYPE, oid(ID_DATA))
    # RFC 6211 §2: signatureAlgorithm is [1] IMPLICIT AlgorithmIdentifier.
    protection = _attribute(
        ID_ALGORITHM_PROTECTION, seq(SHA256_ALG, tlv(0xA1, sig_alg[2:]))
    )
    ders = {cert_der}
    ders.update(c.public_bytes(serialization.Encoding.DER) for c in chain)
    return SignerInfoTemplate(
        algorithm=algorithm,
        cert_der=cert_der,
        sid=_issuer_and_serial(cert),
        sig_alg=sig_alg,
        static_attrs=(content_type, signing_cert_v2, protection),
        certificates=tlv(0xA0, b"".join(sorted(ders))),
    )


def build_signed_attrs(digest: bytes, signer_info: SignerInfoTemplate) -> bytes:
    """The DER ``SET OF Attribute`` the key signs (RFC 5652 §5.4: tagged as SET)."""
    if len(digest) != 32:
        raise ValueError("expected a SHA-256 digest")
    message_digest = _attribute(ID_MESSAGE_DIGEST, octets(digest))
    return der_set(message_digest, *signer_info.static_attrs)


def assemble(
    signer_info: SignerInfoTemplate,
    signed_attrs_der: bytes,
    signature: bytes,
    timestamp_token: bytes | None = None,
) -> bytes:
    """The ContentInfo of a detached SignedData (PAdES B-B, or B-T with a token).

    ``timestamp_token`` is an RFC 3161 TimeStampToken over ``signature``; it goes in
    the unsigned attribute id-aa-signatureTimeStampToken (RFC 3161 Appendix A).
    """
    if not signed_attrs_der.startswith(b"\x31"):
        raise ValueError("signed attributes must be the DER SET that was signed")
    parts = [
        integer(1),
        signer_info.sid,
        SHA256_ALG,
        b"\xa0" + signed_attrs_der[1:],  # [0] IMPLICIT replaces the SET tag
        signer_info.sig_alg,
        octets(signature),
    ]
    if timestamp_token is not None:
        unsigned = _attribute(ID_SIGNATURE_TIME_STAMP_TOKEN, timestamp_token)
        parts.append(tlv(0xA1, unsigned))
    signed_data = seq(
        integer(1),
        der_set(SHA256_ALG),
        seq(oid(ID_DATA)),
        signer_info.certificates,
        der_set(seq(*parts)),
    )
    return seq(oid(ID_SIGNED_DATA), tlv(0xA0, signed_data))
