"""A small local RFC 3161 time-stamping authority for tests.

``LocalTsa`` serves TimeStampResp answers on 127.0.0.1 (ephemeral port) from a
thread, signed with a certificate from :func:`casesignd.ops.devpki.make_tsa`. Set
``mode`` to ``"ok"``, ``"503"``, ``"garbage"`` or ``"wrong_nonce"`` to test the
failure paths. Use the ``tsa`` fixture (needs the ``pki`` fixture of
tests/helpers_pki.py) or the class directly as a context manager.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from asn1crypto import algos, cms, core, tsp
from asn1crypto import x509 as ax509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding

from casesignd.ops import devpki

POLICY_OID = "1.3.6.1.4.1.55555.3161.1"  # a private arc, test use only


def _asn1_cert(cert: object) -> ax509.Certificate:
    return ax509.Certificate.load(cert.public_bytes(serialization.Encoding.DER))  # type: ignore[attr-defined]


def make_response(ident: devpki.Identity, request_der: bytes, serial: int, nonce_delta: int = 0) -> bytes:
    """A granted TimeStampResp for ``request_der`` signed by ``ident`` (RSA or EC)."""
    req = tsp.TimeStampReq.load(request_der)
    tst = tsp.TSTInfo(
        {
            "version": "v1",
            "policy": POLICY_OID,
            "message_imprint": req["message_imprint"],
            "serial_number": serial,
            "gen_time": dt.datetime.now(dt.UTC),
            "accuracy": {"seconds": 1},
            "nonce": (req["nonce"].native or 0) + nonce_delta,
        }
    )
    tst_der = tst.dump()
    cert = _asn1_cert(ident.cert)
    ess = tsp.ESSCertIDv2(
        {"cert_hash": hashlib.sha256(cert.dump()).digest()}
    )
    attrs = cms.CMSAttributes(
        [
            cms.CMSAttribute({"type": "content_type", "values": ["tst_info"]}),
            cms.CMSAttribute(
                {"type": "message_digest", "values": [hashlib.sha256(tst_der).digest()]}
            ),
            cms.CMSAttribute(
                {"type": "signing_certificate_v2", "values": [tsp.SigningCertificateV2({"certs": [ess]})]}
            ),
        ]
    )
    if isinstance(ident.key, ec.EllipticCurvePrivateKey):
        signature = ident.key.sign(attrs.dump(), ec.ECDSA(hashes.SHA256()))
        algorithm = "sha256_ecdsa"
    else:
        signature = ident.key.sign(attrs.dump(), padding.PKCS1v15(), hashes.SHA256())
        algorithm = "sha256_rsa"
    signer_info = cms.SignerInfo(
        {
            "version": "v1",
            "sid": cms.SignerIdentifier(
                {
                    "issuer_and_serial_number": {
                        "issuer": cert.issuer,
                        "serial_number": cert.serial_number,
                    }
                }
            ),
            "digest_algorithm": algos.DigestAlgorithm({"algorithm": "sha256"}),
            "signed_attrs": attrs,
            "signature_algorithm": algos.SignedDigestAlgorithm({"algorithm": algorithm}),
            "signature": signature,
        }
    )
    signed_data = cms.SignedData(
        {
            "version": "v3",
            "digest_algorithms": [algos.DigestAlgorithm({"algorithm": "sha256"})],
            "encap_content_info": {
                "content_type": "tst_info",
                "content": core.ParsableOctetString(tst_der),
            },
            "certificates": [cert, *(_asn1_cert(c) for c in ident.chain)],
            "signer_infos": [signer_info],
        }
    )
    token = cms.ContentInfo({"content_type": "signed_data", "content": signed_data})
    resp = tsp.TimeStampResp({"status": {"status": "granted"}, "time_stamp_token": token})
    return resp.dump()


class LocalTsa:
    """A threaded RFC 3161 server on loopback. ``url`` is set once started."""

    def __init__(self, ident: devpki.Identity) -> None:
        self.ident = ident
        self.mode = "ok"
        self.requests = 0
        # Cleared, a request waits (``waiting`` set) until it is set again: a job held
        # at its timestamp, after the key and before publishing.
        self.answer = threading.Event()
        self.answer.set()
        self.waiting = threading.Event()
        self._serials = itertools.count(1)
        tsa = self

        class Handler(BaseHTTPRequestHandler):
            # Headers and body are written separately: without this the body waits
            # for the client's delayed ACK (40 ms), which no real TSA adds.
            disable_nagle_algorithm = True

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                tsa.requests += 1
                if not tsa.answer.is_set():
                    tsa.waiting.set()
                    tsa.answer.wait(120)
                if tsa.mode == "503":
                    self._answer(503, b"busy", "text/plain")
                elif tsa.mode == "garbage":
                    self._answer(200, b"\x30\x03garbage", "application/timestamp-reply")
                else:
                    delta = 1 if tsa.mode == "wrong_nonce" else 0
                    der = make_response(tsa.ident, body, next(tsa._serials), delta)
                    self._answer(200, der, "application/timestamp-reply")

            def _answer(self, status: int, body: bytes, ctype: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.timeout = 5
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/tsa"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> LocalTsa:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


@pytest.fixture
def tsa(pki: object) -> Iterator[LocalTsa]:
    with LocalTsa(pki.tsa) as server:  # type: ignore[attr-defined]
        yield server
