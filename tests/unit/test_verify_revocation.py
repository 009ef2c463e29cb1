"""casesignd verify and revocation: a signer whose certificate names a CRL, the CRL in
the document's DSS or on a local server, and what each fetch mode does with them.

The CA is the test PKI's; the signer certificates here name a CRL distribution point
(RFC 5280 §4.2.1.13) on 127.0.0.1, served by a thread, or unreachable.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.serialization import Encoding
from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
from pyhanko.sign.validation.dss import DocumentSecurityStore

from casesignd.ops import devpki
from casesignd.signing import pipeline, tsa
from casesignd.signing.keys import load_pkcs12
from casesignd.verify.validate import FAILED, INDETERMINATE, PASSED, VerifyOptions, verify_file
from tests.helpers_pki import PASSWORD, Pki, pki, reportlab_pdf, sample_meta
from tests.helpers_tsa import tsa as tsa_server

__all__ = ["pki", "tsa_server"]  # fixtures


class CrlServer:
    """Serves ``self.crl`` (DER) at /ca.crl on loopback; counts the requests."""

    def __init__(self) -> None:
        self.crl = b""
        self.requests = 0
        self.delay_s = 0.0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                server.requests += 1
                time.sleep(server.delay_s)
                # A client that gave up has gone: nothing to answer.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.send_response(200)
                    self.send_header("Content-Type", "application/pkix-crl")
                    self.send_header("Content-Length", str(len(server.crl)))
                    self.end_headers()
                    self.wfile.write(server.crl)

            def log_message(self, *args: object) -> None:
                return None

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/ca.crl"
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture(scope="module")
def crl_server() -> Iterator[CrlServer]:
    server = CrlServer()
    yield server
    server.close()


def issue_with_crl(ca: devpki.Identity, cn: str, url: str) -> devpki.Identity:
    """A document signer's certificate naming ``url`` as its CRL distribution point."""
    key = devpki.new_key("ec")
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    point = x509.DistributionPoint([x509.UniformResourceIdentifier(url)], None, None, None)
    cert = (
        x509.CertificateBuilder().subject_name(x509.Name([
            x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, cn)]))
        .issuer_name(ca.cert.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=True, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.CRLDistributionPoints([point]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
                       critical=False)
        .sign(ca.key, hashes.SHA256()))
    return devpki.Identity(key, cert, [ca.cert])


def make_crl(ca: devpki.Identity, revoked: list[x509.Certificate] = ()) -> bytes:  # type: ignore[assignment]
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    builder = (x509.CertificateRevocationListBuilder().issuer_name(ca.cert.subject)
               .last_update(now).next_update(now + dt.timedelta(days=7))
               .add_extension(x509.CRLNumber(1), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                   ca.key.public_key()), critical=False))
    for cert in revoked:
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(cert.serial_number)
            .revocation_date(now - dt.timedelta(minutes=2)).build())
    return builder.sign(ca.key, hashes.SHA256()).public_bytes(Encoding.DER)


def sign_as(ident: devpki.Identity, src: Path, dst: Path, directory: Path,
            tsa_url: str | None = None) -> Path:
    p12 = directory / f"{ident.cert.serial_number}.p12"
    devpki.write_pkcs12(p12, ident, PASSWORD)
    stamp = (lambda sig: tsa.timestamp_blocking(tsa_url, sig, 10)) if tsa_url else None
    pipeline.sign_file(src, dst, load_pkcs12(p12, PASSWORD), meta=sample_meta(), timestamp=stamp)
    return dst


def with_dss(src: Path, dst: Path, certs: list[x509.Certificate], crls: list[bytes]) -> Path:
    """An incremental update adding a DSS with ``certs`` and ``crls`` (a B-LT update)."""
    from asn1crypto import crl as acrl
    from asn1crypto import x509 as ax509

    with open(src, "rb") as inf:
        w = IncrementalPdfFileWriter(inf, strict=False)
        DocumentSecurityStore.supply_dss_in_writer(
            w, None, certs=[ax509.Certificate.load(c.public_bytes(Encoding.DER)) for c in certs],
            crls=[acrl.CertificateList.load(c) for c in crls])
        with open(dst, "wb") as out:
            w.write(out)
    return dst


def options(pki: Pki, fetch: str, timeout_s: float = 5.0) -> VerifyOptions:
    return VerifyOptions((pki.ca.cert.public_bytes(Encoding.DER),), fetch, timeout_s)


def test_revocation_data_in_the_dss_makes_b_lt(pki, tsa_server, tmp_path) -> None:
    signer = issue_with_crl(pki.ca, "crl signer", "http://127.0.0.1:9/never-fetched.crl")
    bt = sign_as(signer, reportlab_pdf(tmp_path / "c.pdf"), tmp_path / "bt.pdf", tmp_path,
                 tsa_server.url)
    # Without the CRL the chain is undecided: the certificate names a source nobody asked.
    sig = verify_file(bt, options(pki, "never")).signatures[0]
    assert sig.indication == INDETERMINATE and not sig.passed and sig.level == "B-T"
    lt = with_dss(bt, tmp_path / "lt.pdf", [signer.cert, pki.ca.cert, pki.tsa.cert],
                  [make_crl(pki.ca)])
    sig = verify_file(lt, options(pki, "never")).signatures[0]
    assert sig.passed, sig.describe()
    assert sig.level == "B-LT" and sig.modification == "lta_updates" and not sig.revoked


def test_a_revoked_signer_is_reported_revoked(pki, tmp_path) -> None:
    signer = issue_with_crl(pki.ca, "revoked signer", "http://127.0.0.1:9/never-fetched.crl")
    signed = sign_as(signer, reportlab_pdf(tmp_path / "c.pdf"), tmp_path / "s.pdf", tmp_path)
    lt = with_dss(signed, tmp_path / "lt.pdf", [signer.cert], [make_crl(pki.ca, [signer.cert])])
    sig = verify_file(lt, options(pki, "never")).signatures[0]
    assert sig.revoked and not sig.trusted and sig.intact and sig.valid
    # No timestamp proves the signature older than the revocation: ETSI's REVOKED_NO_POE.
    assert sig.indication in (INDETERMINATE, FAILED)
    assert sig.sub_indication in ("REVOKED_NO_POE", "REVOKED"), sig.describe()


def test_fetch_modes(pki, crl_server, tmp_path) -> None:
    crl_server.crl = make_crl(pki.ca)
    signer = issue_with_crl(pki.ca, "online signer", crl_server.url)
    signed = sign_as(signer, reportlab_pdf(tmp_path / "c.pdf"), tmp_path / "s.pdf", tmp_path)
    before = crl_server.requests
    assert verify_file(signed, options(pki, "never")).signatures[0].indication == INDETERMINATE
    assert crl_server.requests == before  # never: no connection at all
    sig = verify_file(signed, options(pki, "missing")).signatures[0]
    assert sig.indication == PASSED, sig.describe()
    assert crl_server.requests > before
    assert verify_file(signed, options(pki, "always")).signatures[0].indication == PASSED
    # What the document holds is used first: with the CRL in its DSS, "missing" asks nothing.
    lt = with_dss(signed, tmp_path / "lt.pdf", [signer.cert], [crl_server.crl])
    before = crl_server.requests
    assert verify_file(lt, options(pki, "missing")).signatures[0].indication == PASSED
    assert crl_server.requests == before
    # Revoked online: the answer says so.
    crl_server.crl = make_crl(pki.ca, [signer.cert])
    sig = verify_file(signed, options(pki, "always")).signatures[0]
    assert sig.revoked and not sig.passed


def test_an_unreachable_source_leaves_it_undecided(pki, tmp_path) -> None:
    # Port 9 (discard) on loopback: nothing listens, the fetch fails at once.
    signer = issue_with_crl(pki.ca, "unreachable signer", "http://127.0.0.1:9/ca.crl")
    signed = sign_as(signer, reportlab_pdf(tmp_path / "c.pdf"), tmp_path / "s.pdf", tmp_path)
    for fetch in ("missing", "always"):
        sig = verify_file(signed, options(pki, fetch, timeout_s=2.0)).signatures[0]
        assert sig.indication == INDETERMINATE and sig.problems, (fetch, sig.describe())


def test_a_slow_source_is_given_up_on(pki, crl_server, tmp_path) -> None:
    crl_server.crl = make_crl(pki.ca)
    signer = issue_with_crl(pki.ca, "slow signer", crl_server.url)
    signed = sign_as(signer, reportlab_pdf(tmp_path / "c.pdf"), tmp_path / "s.pdf", tmp_path)
    crl_server.delay_s = 3.0
    try:
        for fetch in ("missing", "always"):
            sig = verify_file(signed, options(pki, fetch, timeout_s=0.3)).signatures[0]
            # What the document's own data say: undecided, and why.
            assert sig.indication == INDETERMINATE and sig.intact and sig.valid, sig.describe()
            assert any("could not be fetched" in p or "fetch" in p.lower()
                       for p in sig.problems), sig.problems
    finally:
        crl_server.delay_s = 0.0
