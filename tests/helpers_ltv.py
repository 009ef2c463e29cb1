"""A real PKI on loopback for long-term validation tests: Certomancer's OCSP
responders, CRLs, certificate repositories and TSA, served in-process.

``ltv_pki`` (session scope) generates every key at test time, writes a Certomancer
config for them and serves it on 127.0.0.1 from a thread. The hierarchy::

    root                      self-signed trust anchor
    ├── root-ocsp             OCSP responder for root's certificates (id-pkix-ocsp-nocheck)
    └── interm                intermediate CA
        ├── interm-ocsp       OCSP responder for interm's certificates (nocheck)
        ├── signer            good: digitalSignature + nonRepudiation
        ├── revoked           revoked a day ago (keyCompromise)
        ├── expired           validity ended a day ago
        └── tsa               critical EKU id-kp-timeStamping; Certomancer's TSA signs with it

Every certificate below the root carries AIA (OCSP URL and caIssuers) and a CRL
distribution point on the loopback server, so pyhanko-certvalidator finds all its
revocation data with ``allow_fetching=True``. OCSP responses and CRLs have a
nextUpdate a day after thisUpdate.

Tests can switch each service off (``with ltv_pki.down("ocsp", "crl"): ...``) and
read how many requests each one got (``ltv_pki.requests["ocsp"]``, counted when they
arrive, refused or not). The fixture is shared by the session, so compare counts
before and after, and leave services up when done (``down`` restores them).

Import the fixture by name into a test module, as with tests/helpers_pki.py.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from asn1crypto import x509 as ax509
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from casesignd.ops import devpki

ARCH = "casesignd"
PASSWORD = b"ltv-test-password"
# What the middleware can count and switch off, by the first path segment after
# the architecture in Certomancer's service URLs.
SERVICES = {"ocsp": "ocsp", "crls": "crl", "tsa": "tsa", "certs": "certs"}
# How a switched-off service answers: HTTP 503, a connection closed without an
# answer, or no answer until it is switched on again (for client timeouts).
DOWN_MODES = ("503", "drop", "hang")
HANG_MAX_S = 30.0
SIGNERS = ("signer", "revoked", "expired", "tsa")
# Keys Certomancer signs with, on every OCSP, CRL and time-stamp request: EC P-256,
# because it parses the key for each signature and cryptography's check of an RSA
# key on loading takes about 50 ms. The signers' keys (``kind``) it only needs the
# public half of.
SERVICE_KEYS = ("root", "interm", "root-ocsp", "interm-ocsp", "tsa")
SIGNING_KEYS = ("signer", "revoked", "expired")


@dataclass
class LtvSigner:
    """One end-entity of the PKI, with what casesignd and pyHanko load it from."""

    name: str
    key: devpki.PrivateKey
    cert: x509.Certificate
    cert_asn1: ax509.Certificate
    pkcs12: Path  # key, certificate and the intermediate; 0600
    password_file: Path  # the PKCS#12 password; 0600

    @property
    def password(self) -> bytes:
        return self.password_file.read_bytes()


class Switchboard:
    """WSGI middleware in front of Certomancer's Animator: counts requests per
    service, keeps the ``traceparent`` each came with, and answers for the services
    switched off."""

    def __init__(self) -> None:
        self.app: Any = None  # the Animator, once the config (which needs our port) is loaded
        self.requests: Counter[str] = Counter()
        # (service, its traceparent header or None) of every request, in order.
        self.traceparents: list[tuple[str, str | None]] = []
        self.off: dict[str, str] = {}
        self._back = threading.Event()
        self._lock = threading.Lock()

    @staticmethod
    def service_of(path: str) -> str:
        parts = path.strip("/").split("/")
        return SERVICES.get(parts[1], "other") if len(parts) > 1 and parts[0] == ARCH else "other"

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        service = self.service_of(environ.get("PATH_INFO", ""))
        with self._lock:
            self.requests[service] += 1
            self.traceparents.append((service, environ.get("HTTP_TRACEPARENT")))
            how = self.off.get(service)
        if how == "hang":
            self._back.wait(HANG_MAX_S)
            how = self.off.get(service)
        if how == "drop":
            # Close the connection before any byte of an answer; werkzeug treats the
            # failed write that follows as a dropped connection.
            environ["werkzeug.socket"].shutdown(socket.SHUT_RDWR)
            start_response("503 Service Unavailable", [("Content-Length", "0")])
            return []
        if how is not None:
            body = f"{service} is down\n".encode()
            start_response("503 Service Unavailable",
                           [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
            return [body]
        return self.app(environ, start_response)


class _QuietHandler(WSGIRequestHandler):
    def setup(self) -> None:
        super().setup()
        # The server writes a response's headers and body separately: with Nagle's
        # algorithm the body waits for the client's delayed ACK (40 ms a request),
        # which no real TSA or responder would add.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_request(self, *args: object, **kwargs: object) -> None:
        return None


@dataclass
class LtvPki:
    """The served PKI. ``pki["signer"]`` (also ``"revoked"``, ``"expired"``,
    ``"tsa"``) is an :class:`LtvSigner`; ``root_pem`` is the trust anchor::

        daemon_factory(ltv_pki.casesignd_config("signer", level="B-LTA"))
        with ltv_pki.down("ocsp"):          # CRLs only
            ...
        assert ltv_pki.requests["ocsp"] == before["ocsp"]
    """

    dir: Path
    url: str  # http://127.0.0.1:PORT, the external-url-prefix of every AIA/CRL DP URL
    root: x509.Certificate
    intermediate: x509.Certificate
    root_pem: Path
    intermediate_pem: Path
    signers: dict[str, LtvSigner]
    config_yaml: Path
    switchboard: Switchboard

    @property
    def tsa_url(self) -> str:
        return f"{self.url}/{ARCH}/tsa/tsa"

    @property
    def ocsp_urls(self) -> dict[str, str]:
        return {ca: f"{self.url}/{ARCH}/ocsp/{ca}" for ca in ("root", "interm")}

    @property
    def crl_urls(self) -> dict[str, str]:
        return {ca: f"{self.url}/{ARCH}/crls/{ca}/latest.crl" for ca in ("root", "interm")}

    @property
    def root_asn1(self) -> ax509.Certificate:
        return _asn1(self.root)

    @property
    def intermediate_asn1(self) -> ax509.Certificate:
        return _asn1(self.intermediate)

    @property
    def requests(self) -> Counter[str]:
        """Requests received per service ("ocsp", "crl", "tsa", "certs", "other")."""
        return self.switchboard.requests

    def __getitem__(self, name: str) -> LtvSigner:
        return self.signers[name]

    @contextlib.contextmanager
    def down(self, *services: str, how: str = "503") -> Iterator[None]:
        """Switch ``services`` off for the block: they answer 503 (``how="503"``),
        close the connection unanswered (``"drop"``) or answer nothing until the
        block ends (``"hang"``)."""
        if how not in DOWN_MODES:
            raise ValueError(f"how must be one of {DOWN_MODES}, got {how!r}")
        unknown = set(services) - set(SERVICES.values())
        if unknown or not services:
            raise ValueError(f"services must be some of {sorted(SERVICES.values())}, got {services}")
        board = self.switchboard
        saved = {s: board.off.get(s) for s in services}
        board._back.clear()
        board.off.update({s: how for s in services})
        try:
            yield
        finally:
            for s, was in saved.items():
                if was is None:
                    board.off.pop(s, None)
                else:
                    board.off[s] = was
            board._back.set()

    def validation_context(self, *, fetch: bool = True, revocation_mode: str = "require",
                           **kw: Any) -> Any:
        """A pyhanko-certvalidator context trusting this PKI's root only."""
        from pyhanko_certvalidator import ValidationContext

        return ValidationContext(trust_roots=[self.root_asn1], allow_fetching=fetch,
                                 revocation_mode=revocation_mode, **kw)

    def casesignd_config(self, signer: str = "signer", level: str = "B-LTA",
                         policy: str = "contract-v1") -> dict[str, Any]:
        """The settings a daemon needs to sign with ``signer`` at ``level`` against
        this PKI, in the shape of ``daemon_factory`` overrides (tests/daemon.py's
        ``to_toml`` renders them as TOML)."""
        s = self.signers[signer]
        pol: dict[str, Any] = {"version": policy, "level": level}
        if level != "B-B":
            pol["tsa_url"] = self.tsa_url
        return {
            "default_policy": policy,
            "signing": {"pkcs12_path": str(s.pkcs12), "pkcs12_password_file": str(s.password_file),
                        "chain_file": ""},
            "policies": [pol],
            "validation": {"trust_roots": [str(self.root_pem)], "fetch": "missing",
                           "fetch_timeout_s": 5.0},
        }


def _asn1(cert: x509.Certificate) -> ax509.Certificate:
    return ax509.Certificate.load(cert.public_bytes(serialization.Encoding.DER))


# --- the Certomancer configuration -------------------------------------------------


def _iso(t: dt.datetime) -> str:
    return t.replace(microsecond=0).isoformat()


def _validity(now: dt.datetime, start_days: int, end_days: int) -> dict[str, str]:
    return {"valid-from": _iso(now + dt.timedelta(days=start_days)),
            "valid-to": _iso(now + dt.timedelta(days=end_days))}


def _key_usage(*usages: str) -> dict[str, Any]:
    return {"id": "key_usage", "critical": True,
            "smart-value": {"schema": "key-usage", "params": list(usages)}}


def _revocation_pointers(issuer: str) -> list[dict[str, Any]]:
    """CRL DP and AIA (OCSP, caIssuers) extensions for a certificate issued by ``issuer``."""
    return [
        {"id": "crl_distribution_points",
         "smart-value": {"schema": "crl-dist-url", "params": {"crl-repo-names": [issuer]}}},
        {"id": "authority_information_access",
         "smart-value": {"schema": "aia-urls",
                         "params": {"ocsp-responder-names": [issuer],
                                    "ca-issuer-links": [{"repo": issuer}]}}},
    ]


def _ee(issuer: str, validity: dict[str, str], *exts: dict[str, Any]) -> dict[str, Any]:
    return {"issuer": issuer, "validity": validity,
            "extensions": [*exts, *_revocation_pointers(issuer)]}


def certomancer_config(url: str, key_dir: Path, now: dt.datetime) -> dict[str, Any]:
    """The Certomancer config (as data) of the hierarchy in this module's docstring."""
    ca_exts = [_key_usage("digital_signature", "key_cert_sign", "crl_sign")]
    responder = (_key_usage("digital_signature"),
                 {"id": "extended_key_usage", "critical": True, "value": ["ocsp_signing"]},
                 {"id": "ocsp_no_check"})
    day = {"days": 1}
    certs: dict[str, Any] = {
        "root": {"issuer": "root", "validity": _validity(now, -3 * 365, 10 * 365),
                 "extensions": [{"id": "basic_constraints", "critical": True, "value": {"ca": True}},
                                *ca_exts]},
        "interm": _ee("root", _validity(now, -2 * 365, 8 * 365),
                      {"id": "basic_constraints", "critical": True,
                       "value": {"ca": True, "path_len_constraint": 0}}, *ca_exts),
        "root-ocsp": _ee("root", _validity(now, -365, 5 * 365), *responder),
        "interm-ocsp": _ee("interm", _validity(now, -365, 5 * 365), *responder),
        "signer": _ee("interm", _validity(now, -365, 2 * 365),
                      _key_usage("digital_signature", "non_repudiation")),
        "expired": _ee("interm", _validity(now, -400, -1),
                       _key_usage("digital_signature", "non_repudiation")),
        "tsa": _ee("interm", _validity(now, -365, 5 * 365), _key_usage("digital_signature"),
                   {"id": "extended_key_usage", "critical": True, "value": ["time_stamping"]}),
    }
    certs["revoked"] = {
        **_ee("interm", _validity(now, -365, 2 * 365),
              _key_usage("digital_signature", "non_repudiation")),
        # A day ago: before the thisUpdate of the CRL in force now (Certomancer's CRLs
        # list what was revoked at their thisUpdate, which is at most a day old here).
        "revocation": {"revoked-since": _iso(now - dt.timedelta(days=1)), "reason": "key_compromise"},
    }
    for spec in certs.values():
        # Certomancer numbers certificates 0x1000, 0x1001, ... per issuer: the same
        # issuer name and serial, with another key, in every session. Random ones
        # (RFC 5280 §4.1.2.2) keep an (issuer, serial) unique to one PKI.
        spec["serial"] = x509.random_serial_number()
    entities = {
        "root": {"common-name": "casesignd LTV test root CA"},
        "interm": {"common-name": "casesignd LTV test intermediate CA"},
        "root-ocsp": {"common-name": "casesignd LTV test root OCSP responder"},
        "interm-ocsp": {"common-name": "casesignd LTV test intermediate OCSP responder"},
        "signer": {"common-name": "casesignd LTV test signer"},
        "revoked": {"common-name": "casesignd LTV test revoked signer"},
        "expired": {"common-name": "casesignd LTV test expired signer"},
        "tsa": {"common-name": "casesignd LTV test TSA"},
    }
    return {
        "external-url-prefix": url,
        "keysets": {ARCH: {"path-prefix": str(key_dir), "keys": {
            **{name: {"path": f"{name}.key.pem"} for name in SERVICE_KEYS},
            **{name: {"path": f"{name}.pub.pem", "public-only": True} for name in SIGNING_KEYS},
        }}},
        "pki-architectures": {ARCH: {
            "keyset": ARCH,
            "entity-defaults": {"country-name": "BE", "organization-name": "casesignd tests"},
            "entities": entities,
            "certs": certs,
            "services": {
                "ocsp": {ca: {"for-issuer": ca, "responder-cert": f"{ca}-ocsp",
                              "signing-key": f"{ca}-ocsp", "validity-period": day}
                         for ca in ("root", "interm")},
                "crl-repo": {ca: {"for-issuer": ca, "signing-key": ca,
                                  "simulated-update-schedule": "P1D"}
                             for ca in ("root", "interm")},
                "cert-repo": {ca: {"for-issuer": ca, "publish-issued-certs": True}
                              for ca in ("root", "interm")},
                # A TSA's token carries the chain below the root, as a real one does.
                "time-stamping": {"tsa": {"signing-cert": "tsa", "signing-key": "tsa",
                                          "certs-to-embed": ["interm"]}},
            },
        }},
    }


# --- serving -------------------------------------------------------------------------


def _crypto_cert(cert: ax509.Certificate) -> x509.Certificate:
    return x509.load_der_x509_certificate(cert.dump())


@contextlib.contextmanager
def serve_ltv_pki(directory: Path, kind: str = "rsa") -> Iterator[LtvPki]:
    """Generate keys and certificates in ``directory`` and serve the PKI while in the
    block; ``kind`` ("rsa" or "ec") is that of the signer, revoked and expired keys."""
    from certomancer.integrations.animator import Animator, AnimatorArchStore
    from certomancer.registry import ArchLabel, CertLabel, CertomancerConfig

    keys_dir = directory / "keys"
    keys_dir.mkdir(mode=0o700, parents=True)
    keys = {name: devpki.new_key("ec") for name in SERVICE_KEYS}
    for name, key in keys.items():
        devpki.write_private(keys_dir / f"{name}.key.pem", devpki.key_pem(key))
    for name in SIGNING_KEYS:
        keys[name] = devpki.new_key(kind)
        (keys_dir / f"{name}.pub.pem").write_bytes(keys[name].public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))

    board = Switchboard()
    server: BaseWSGIServer = make_server("127.0.0.1", 0, board, threaded=True,
                                         request_handler=_QuietHandler)
    url = f"http://127.0.0.1:{server.server_port}"
    now = dt.datetime.now(dt.UTC)
    config_yaml = directory / "certomancer.yml"
    config_yaml.write_text(yaml.safe_dump(certomancer_config(url, keys_dir, now), sort_keys=False))
    cfg = CertomancerConfig.from_file(str(config_yaml), key_search_dir=str(keys_dir))
    arch = cfg.get_pki_arch(ArchLabel(ARCH))
    board.app = Animator(AnimatorArchStore(cfg.pki_archs), with_web_ui=False,
                         allow_time_override=False)

    def cert(label: str) -> x509.Certificate:
        return _crypto_cert(arch.get_cert(CertLabel(label)))

    root, interm = cert("root"), cert("interm")
    (directory / "root.pem").write_bytes(devpki.cert_pem(root))
    (directory / "intermediate.pem").write_bytes(devpki.cert_pem(interm))
    signers = {}
    for name in SIGNERS:
        c = cert(name)
        p12, pw = directory / f"{name}.p12", directory / f"{name}.pass"
        devpki.write_pkcs12(p12, devpki.Identity(keys[name], c, [interm]), PASSWORD)
        devpki.write_private(pw, PASSWORD)
        signers[name] = LtvSigner(name, keys[name], c, _asn1(c), p12, pw)

    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              name="ltv-pki", daemon=True)
    thread.start()
    try:
        yield LtvPki(directory, url, root, interm, directory / "root.pem",
                     directory / "intermediate.pem", signers, config_yaml, board)
    finally:
        board._back.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(scope="session")
def ltv_pki(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LtvPki]:
    with serve_ltv_pki(tmp_path_factory.mktemp("ltv-pki")) as pki:
        yield pki
