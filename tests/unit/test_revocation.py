"""The pure parts of revocation caching: when data is good until, when it is fetched
again, and what a certificate's own dates and key usage refuse."""

from __future__ import annotations

import datetime as dt

import pytest
from asn1crypto import x509 as ax509
from cryptography.hazmat.primitives.serialization import Encoding

from casesignd.core.errors import CertificateExpired
from casesignd.ops import devpki
from casesignd.signing.revocation import check_signing_usage, check_validity, freshness

T0 = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
H = dt.timedelta(hours=1)


@pytest.mark.parametrize(("updates", "ahead_s", "good_until", "refresh_at"), [
    # A day of validity, an hour ahead: fetched again an hour before it ends.
    ([T0 + 24 * H], 3600, T0 + 24 * H, T0 + 23 * H),
    # The earliest nextUpdate of several responses counts.
    ([T0 + 24 * H, T0 + 10 * H], 3600, T0 + 10 * H, T0 + 9 * H),
    # Validity shorter than twice the lead: halfway there instead.
    ([T0 + H], 3600, T0 + H, T0 + H / 2),
    # No nextUpdate anywhere: good for the lead, fetched again halfway.
    ([], 3600, T0 + H, T0 + H / 2),
])
def test_freshness(updates, ahead_s, good_until, refresh_at) -> None:
    assert freshness(T0, updates, ahead_s) == (good_until, refresh_at)


def _cert(**kw) -> ax509.Certificate:
    ca = devpki.make_ca("revocation test CA")
    ident = devpki.issue(ca, "revocation test signer", **kw)
    return ax509.Certificate.load(ident.cert.public_bytes(Encoding.DER))


def test_a_certificate_outside_its_validity_is_refused() -> None:
    cert = _cert()
    validity = cert["tbs_certificate"]["validity"]
    check_validity(cert, validity["not_before"].native + H, "signing")
    with pytest.raises(CertificateExpired, match="not valid before"):
        check_validity(cert, validity["not_before"].native - H, "signing")
    with pytest.raises(CertificateExpired, match="expired"):
        check_validity(cert, validity["not_after"].native + H, "signing")


def _encipherment_only() -> ax509.Certificate:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "encipherment only")])
    usage = x509.KeyUsage(digital_signature=False, content_commitment=False,
                          key_encipherment=True, data_encipherment=False, key_agreement=False,
                          key_cert_sign=False, crl_sign=False, encipher_only=False,
                          decipher_only=False)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(T0 - 24 * H).not_valid_after(T0 + 24 * H)
            .add_extension(usage, critical=True).sign(key, hashes.SHA256()))
    return ax509.Certificate.load(cert.public_bytes(Encoding.DER))


def test_a_signing_certificate_needs_a_signing_key_usage() -> None:
    check_signing_usage(_cert())
    with pytest.raises(CertificateExpired, match="key usage"):
        check_signing_usage(_encipherment_only())
