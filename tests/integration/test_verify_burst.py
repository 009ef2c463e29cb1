"""The security probe's burst as a test (issue 41): one tenant sends many-signature and
large-/Contents verifications, another tenant's verify, kiosk request and sign_case job
meanwhile all finish, none answered 503, and its verify is not held behind the burst.
Outcomes and their order are counted; nothing is timed."""

from __future__ import annotations

import hashlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from tests.daemon import Daemon, multipart, to_toml
from tests.helpers_pki import pki, reportlab_pdf
from tests.helpers_sigcorpus import large_contents, many_signatures, sign

__all__ = ["pki"]  # fixture

OTHER = "csd_verify-burst-other-tenant-0123456789abcdef"
SIGNERS = [{"id": "seller-1", "name": "Quintessa Marlowe", "role": "seller"}]


def _daemon(daemon_factory) -> Daemon:
    d = daemon_factory({
        "validation": {"trust_roots": ["ca.pem"], "fetch": "never",
                       "budget": {"processes": 2, "process_share": 1,
                                  "max_inflight_per_tenant": 3}},
        "kiosk": {"max_document_bytes": 4 * 1024 * 1024, "deadline_ms": 60000},
    }, start=False)
    d.config["tenants"].append({"name": "other",
                                "token_sha256": hashlib.sha256(OTHER.encode()).hexdigest()})
    d.config_path.write_text(to_toml(d.config))
    return d.start()


def _verify(d: Daemon, data: bytes, token: str | None = None):
    return d.request("POST", "/v1/verify", raw=data, auth=token or True, timeout_s=120,
                     headers={"Content-Type": "application/pdf"})


def test_one_tenant_s_burst_holds_no_one_else(daemon_factory, pki, tmp_path) -> None:
    d = _daemon(daemon_factory)
    base = reportlab_pdf(tmp_path / "base.pdf")
    signed = sign(base, tmp_path / "signed.pdf", pki)
    many = many_signatures(signed, tmp_path / "many.pdf", 60).read_bytes()
    large = large_contents(signed, tmp_path / "large.pdf", 1_500_000).read_bytes()
    burst = [many] * 8 + [large] * 2

    answered: list[int] = []  # statuses of the burst's processed requests, in order
    reasons: list[str] = []
    busy = [0]
    lock = threading.Lock()

    def one(doc: bytes) -> None:
        while True:
            r = _verify(d, doc)
            if r.status == 503:  # its own tenant's limit: it waits its turn
                with lock:
                    busy[0] += 1
                time.sleep(0.05)
                continue
            with lock:
                answered.append(r.status)
                if r.status == 422:
                    err = r.json()["error"]
                    reasons.append(f"{err['code']}/{err.get('reason')}")
            return

    def done_so_far() -> int:
        with lock:
            return len(answered)

    with ThreadPoolExecutor(len(burst)) as pool:
        futures = [pool.submit(one, doc) for doc in burst]
        while not busy[0] and not answered:  # the burst is under way
            time.sleep(0.01)
        # The other tenant, meanwhile: a verify, a kiosk signature, a sign_case job.
        theirs = _verify(d, signed.read_bytes(), OTHER)
        burst_done_at_verify = done_so_far()
        body, ctype = multipart({"case_id": "B-1", "signers": []}, base.read_bytes())
        kiosk = d.request("POST", "/v1/sign", raw=body, auth=OTHER, timeout_s=120,
                          headers={"Content-Type": ctype})
        data = base.read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        assert d.request("PUT", f"/v1/cases/B-2/objects/{sha}", raw=data, auth=OTHER,
                         headers={"Content-Type": "application/octet-stream"}).status == 201
        job = d.request("POST", "/v1/jobs", auth=OTHER, body={
            "kind": "sign_case", "case_id": "B-2", "signers": SIGNERS,
            "items": [{"role": "contract", "name": "c.pdf", "media_type": "application/pdf",
                       "object_ref": f"sha256:{sha}", "sha256": sha, "size": len(data)}]})
        assert job.status == 202, job.body
        for f in futures:
            f.result()

    assert theirs.status == 200 and theirs.json()["signatures"][0]["intact"] is True
    assert kiosk.status == 200, kiosk.body[:300]
    job_id = job.json()["job_id"]
    for _ in range(600):
        state = d.request("GET", f"/v1/jobs/{job_id}", auth=OTHER).json()["state"]
        if state in ("ready", "failed", "canceled"):
            break
        time.sleep(0.1)
    assert state == "ready"
    # Not held behind the burst: answered while the burst still had work to do.
    assert burst_done_at_verify < len(burst), (burst_done_at_verify, answered)
    # The burst itself: every document answered, each a report or a refusal by budget.
    assert sorted(answered) == [200] * 8 + [422] * 2, answered
    assert reasons == ["limit_exceeded/contents_too_large"] * 2, reasons
    assert "Traceback" not in d.logs()
