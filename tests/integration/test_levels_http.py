"""Signature levels through the daemon, against a real PKI on loopback (Certomancer).

Every B-LTA artifact, batch and kiosk, passes pyHanko's ``ades_lta_validation``
with fetching off and every PKI service down, and poppler calls it valid. A
revoked or expired certificate never signs; revocation data or a TSA that cannot
be had makes the job wait and retry, never sign at a lower level. A renewal adds
a document timestamp, and the result still validates.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time
from io import BytesIO
from pathlib import Path

import pytest
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.sign.ades.report import AdESPassed
from pyhanko.sign.validation.ades import ades_lta_validation
from pyhanko.sign.validation.policy_decl import (
    PdfSignatureValidationSpec,
    RevinfoOnlineFetchingRule,
    RevocationInfoGatheringSpec,
    SignatureValidationSpec,
)
from pyhanko_certvalidator.context import CertValidationPolicySpec
from pyhanko_certvalidator.policy_decl import REQUIRE_REVINFO, CertRevTrustPolicy
from pyhanko_certvalidator.registry import SimpleTrustManager

from tests.helpers_chaos import db_scalar
from tests.helpers_ltv import LtvPki, ltv_pki
from tests.helpers_ops import case_manifest
from tests.helpers_pki import nss_db, pdfsig, reportlab_pdf
from tests.integration.test_faults import event_codes, wait_until
from tests.integration.test_kiosk_http import sign

__all__ = ["ltv_pki"]  # fixture


def offline_spec(pki: LtvPki) -> PdfSignatureValidationSpec:
    return PdfSignatureValidationSpec(SignatureValidationSpec(
        cert_validation_policy=CertValidationPolicySpec(
            trust_manager=SimpleTrustManager.build(trust_roots=[pki.root_asn1]),
            revinfo_policy=CertRevTrustPolicy(REQUIRE_REVINFO)),
        revinfo_gathering_policy=RevocationInfoGatheringSpec(
            online_fetching_rule=RevinfoOnlineFetchingRule.LOCAL_ONLY)))


def assert_b_lta(pki: LtvPki, signed: bytes, tmp_path: Path, timestamps: int = 1) -> None:
    """pyHanko's AdES LTA validation passes with every PKI service down; the
    document carries a DSS (no VRI) and ``timestamps`` document timestamps; poppler
    calls every signature valid."""
    reader = PdfFileReader(BytesIO(signed))
    dss = reader.root["/DSS"]
    assert "/Certs" in dss and ("/OCSPs" in dss or "/CRLs" in dss) and "/VRI" not in dss
    sigs = reader.embedded_signatures
    assert [s.sig_object_type for s in sigs].count("/DocTimeStamp") == timestamps
    before = pki.requests.copy()
    with pki.down("ocsp", "crl", "certs", "tsa"):
        result = asyncio.run(ades_lta_validation(sigs[0], offline_spec(pki)))
    assert result.ades_subindic == AdESPassed.OK, result.failure_msg
    assert pki.requests == before
    path = tmp_path / "signed.pdf"
    path.write_bytes(signed)
    report = pdfsig(path, nss_db(tmp_path, pki.root))
    # poppler checks the CMS of every approval signature; it cannot check an RFC 3161
    # document timestamp ("Unimplemented Feature").
    approvals = [s for s in sigs if s.sig_object_type != "/DocTimeStamp"]
    assert report.count("Signature Validation: Signature is Valid.") == len(approvals), report


def assert_verify_passes(d, pki: LtvPki, signed: bytes, tmp_path: Path, level: str) -> None:
    """``casesignd verify``: every signature and document timestamp TOTAL-PASSED, the
    signature at ``level``; from the document's own data only when it carries them
    (B-LTA), else fetching what it lacks."""
    path = tmp_path / "to-verify.pdf"
    path.write_bytes(signed)
    offline = level == "B-LTA"
    with pki.down("ocsp", "crl", "certs") if offline else contextlib.nullcontext():
        out = d.cli("verify", str(path), "--trust", str(pki.root_pem), "--fetch",
                    "never" if offline else "missing", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["passed"] and report["signatures"][0]["level"] == level, report


def download(d, job: dict) -> bytes:
    r = d.request("GET", job["result"]["download_url"], auth=False)
    assert r.status == 200, r.body[:300]
    return r.body


def timestamped(sig) -> bool:
    """Whether a signature carries a signature timestamp (RFC 3161 Appendix A)."""
    attrs = sig.signer_info["unsigned_attrs"]
    return attrs.native is not None and any(
        a["type"].native == "signature_time_stamp_token" for a in attrs)


def started_unready(daemon_factory, overrides: dict):
    """A daemon that answers but is not ready (its signing certificate is refused, or
    its revocation data cannot be had)."""
    d = daemon_factory(overrides, start=False)
    d.start(wait=False)
    wait_until(lambda: _answers(d), 30, "the daemon never answered")
    return d


def _answers(d) -> bool:
    try:
        d.request("GET", "/healthz", auth=False)
    except OSError:
        return False
    return True


def readiness(d) -> dict:
    return d.request("GET", "/readyz", auth=False).json()["checks"]["signing_certificate"]


def signed_levels(d, job_id: str) -> list[str]:
    return [e["detail"]["level"] for e in d.events(job_id) if e["type"] == "signed"]


@pytest.fixture
def lta_daemon(daemon_factory, ltv_pki: LtvPki):
    return daemon_factory({**ltv_pki.casesignd_config("signer", level="B-LTA"),
                           # Enough attempts to outlast the outage on a slow machine: the job waits.
            "retry": {"base_delay_s": 0.3, "max_delay_s": 1.0,
                      "max_attempts": {"sign_case": 100}}})


def test_batch_jobs_at_b_lta_validate_offline(lta_daemon, ltv_pki: LtvPki, tmp_path) -> None:
    d = lta_daemon
    contract = reportlab_pdf(tmp_path / "c.pdf").read_bytes()
    # One contract alone is signed in memory; with evidence, in a temp area as files.
    alone = d.submit(case_manifest(d, "LTA-1", contract)).json()["job_id"]
    with_evidence = d.submit(case_manifest(d, "LTA-2", contract,
                                           [("note.txt", "text/plain", b"a note\n")])
                             ).json()["job_id"]
    for job_id in (alone, with_evidence):
        job = d.wait_job(job_id, timeout_s=60)
        assert job["state"] == "ready", job
        assert signed_levels(d, job_id) == ["B-LTA"]
        assert_b_lta(ltv_pki, download(d, job), tmp_path)
        assert_verify_passes(d, ltv_pki, download(d, job), tmp_path, "B-LTA")


def test_kiosk_at_b_lta_validates_and_reuses_the_revocation_data(lta_daemon, ltv_pki: LtvPki,
                                                                  tmp_path) -> None:
    d = lta_daemon
    first = sign(d, reportlab_pdf(tmp_path / "k1.pdf").read_bytes(), case_id="LTA-K1")
    assert first.status == 200, first.body[:300]
    assert_b_lta(ltv_pki, first.body, tmp_path)
    assert signed_levels(d, first.headers["X-Job-Id"]) == ["B-LTA"]
    before = ltv_pki.requests.copy()
    for i in range(3):
        r = sign(d, reportlab_pdf(tmp_path / f"k{i}.pdf", text=f"kiosk {i}").read_bytes(),
                 case_id=f"LTA-K{i + 2}")
        assert r.status == 200, r.body[:300]
    # Two timestamps per signature; no OCSP, CRL or certificate fetch: the chains'
    # data is cached.
    assert ltv_pki.requests - before == {"tsa": 6}


@pytest.mark.parametrize("level", ["B-B", "B-T", "B-LT"])
def test_each_level_signs_as_promised(daemon_factory, ltv_pki: LtvPki, tmp_path, level) -> None:
    d = daemon_factory(ltv_pki.casesignd_config("signer", level=level))
    r = sign(d, reportlab_pdf(tmp_path / "c.pdf").read_bytes(), case_id=f"LVL-{level}")
    assert r.status == 200, r.body[:300]
    assert signed_levels(d, r.headers["X-Job-Id"]) == [level]
    reader = PdfFileReader(BytesIO(r.body))
    assert ("/DSS" in reader.root) == (level == "B-LT")
    if level != "B-LT":  # offline, B-LT has no proof of when its DSS existed (NO_POE)
        assert_verify_passes(d, ltv_pki, r.body, tmp_path, level)
    (sig,) = reader.embedded_signatures
    assert timestamped(sig) == (level != "B-B")


@pytest.mark.parametrize(("signer", "code"), [("revoked", "certificate_revoked"),
                                             ("expired", "certificate_expired")])
def test_a_certificate_that_must_not_sign_never_signs(daemon_factory, ltv_pki: LtvPki, tmp_path,
                                                      signer, code) -> None:
    d = started_unready(daemon_factory, ltv_pki.casesignd_config(signer, level="B-LTA"))
    wait_until(lambda: readiness(d).get("detail") == code, 30, "readyz never said so")
    contract = reportlab_pdf(tmp_path / "c.pdf").read_bytes()
    job = d.wait_job(d.submit(case_manifest(d, "BAD-1", contract)).json()["job_id"], timeout_s=60)
    assert job["state"] == "failed" and job["error"]["code"] == code, job
    assert job["attempts"] == 1
    r = sign(d, contract, case_id="BAD-K1")
    assert r.status == 422 and r.json()["error"]["code"] == code, r.body[:300]
    assert db_scalar(d.db, "SELECT count(*) FROM signatures") == 0


@pytest.mark.parametrize(("down", "code"), [(("ocsp", "crl"), "revocation_unavailable"),
                                           (("tsa",), "tsa_unavailable")])
def test_pki_down_makes_the_job_wait_never_sign_lower(daemon_factory, ltv_pki: LtvPki, tmp_path,
                                                      down, code) -> None:
    # Revocation data cached by an earlier daemon is gone with it: this one starts
    # with the services down, so its first check cannot be had.
    with ltv_pki.down(*down):
        d = started_unready(daemon_factory, {
            **ltv_pki.casesignd_config("signer", level="B-LTA"),
            # Enough attempts to outlast the outage on a slow machine: the job waits.
            "retry": {"base_delay_s": 0.3, "max_delay_s": 1.0,
                      "max_attempts": {"sign_case": 100}}})
        contract = reportlab_pdf(tmp_path / "c.pdf").read_bytes()
        job_id = d.submit(case_manifest(d, f"DOWN-{code}", contract)).json()["job_id"]
        wait_until(lambda: len(event_codes(d, job_id)) >= 2, 40, "no retries")
        assert set(event_codes(d, job_id)) == {code}
        assert d.job(job_id)["state"] in ("queued", "processing")
        assert db_scalar(d.db, "SELECT count(*) FROM signatures") == 0
        r = sign(d, contract, case_id=f"DOWN-K-{code}")
        assert r.status == 503 and r.json()["error"]["code"] == code, r.body[:300]
    job = d.wait_job(job_id, timeout_s=60)
    assert job["state"] == "ready", job
    assert signed_levels(d, job_id) == ["B-LTA"]
    assert_b_lta(ltv_pki, download(d, job), tmp_path)


def test_extend_signature_adds_a_timestamp_and_keeps_the_original(lta_daemon, ltv_pki: LtvPki,
                                                                  tmp_path) -> None:
    d = lta_daemon
    contract = reportlab_pdf(tmp_path / "c.pdf").read_bytes()
    signed = d.wait_job(d.submit(case_manifest(d, "EXT-1", contract)).json()["job_id"],
                        timeout_s=60)
    original = download(d, signed)
    artifact_id = signed["result"]["artifact_id"]
    r = d.submit({"kind": "extend_signature", "artifact_id": artifact_id})
    assert r.status == 202, r.body
    job = d.wait_job(r.json()["job_id"], timeout_s=60)
    assert job["state"] == "ready", job
    assert job["result"]["artifact_id"] != artifact_id
    extended = download(d, job)
    assert extended.startswith(original) and len(extended) > len(original)
    assert_b_lta(ltv_pki, extended, tmp_path, timestamps=2)
    assert_verify_passes(d, ltv_pki, extended, tmp_path, "B-LTA")
    assert download(d, signed) == original
    (done,) = [e for e in d.events(job["job_id"]) if e["type"] == "succeeded"]
    assert done["detail"]["result"]["detail"]["extended_from"] == artifact_id, done


def test_extend_signature_refuses_what_it_cannot_renew(lta_daemon, ltv_pki: LtvPki,
                                                       tmp_path) -> None:
    d = lta_daemon
    r = d.submit({"kind": "extend_signature", "artifact_id": "nope"})
    assert r.status == 422 and r.json()["error"]["field"] == "artifact_id"
    job = d.wait_job(d.submit({"kind": "extend_signature", "artifact_id": "art_" + "0" * 32}
                              ).json()["job_id"], timeout_s=30)
    assert job["state"] == "failed" and job["error"]["code"] == "artifact_not_found", job


def test_an_artifact_whose_timestamp_ages_is_renewed_on_schedule(daemon_factory, ltv_pki: LtvPki,
                                                                 tmp_path) -> None:
    d = daemon_factory({**ltv_pki.casesignd_config("signer", level="B-LTA"),
                        "archive": {"renew_before_days": 30, "renew_interval_s": 0.5}})
    contract = reportlab_pdf(tmp_path / "c.pdf").read_bytes()
    signed = d.wait_job(d.submit(case_manifest(d, "RENEW-1", contract)).json()["job_id"],
                        timeout_s=60)
    artifact_id = signed["result"]["artifact_id"]
    # Its timestamp's chain lasts years: nothing is due.
    time.sleep(1.5)
    assert db_scalar(d.db, "SELECT count(*) FROM jobs WHERE kind = 'extend_signature'") == 0
    # The artifact ages: its chain now expires within the window (the TSA's current
    # one still lasts years), so the daemon renews it, once.
    with sqlite3.connect(d.db, timeout=10) as db:
        db.execute("UPDATE artifacts SET timestamp_expires_at = :t WHERE artifact_id = :a",
                   {"t": time.time() + 86400, "a": artifact_id})
    wait_until(lambda: db_scalar(d.db, "SELECT count(*) FROM jobs WHERE kind = 'extend_signature'"
                                       " AND state = 'succeeded'") == 1, 30, "no renewal")
    time.sleep(1.5)
    assert db_scalar(d.db, "SELECT count(*) FROM jobs WHERE kind = 'extend_signature'") == 1
    renewed_by = db_scalar(d.db, f"SELECT renewed_by FROM artifacts WHERE artifact_id = '{artifact_id}'")
    assert renewed_by is not None and renewed_by != artifact_id
    job_id = db_scalar(d.db, "SELECT job_id FROM jobs WHERE kind = 'extend_signature'")
    assert_b_lta(ltv_pki, download(d, d.job(job_id)), tmp_path, timestamps=2)
