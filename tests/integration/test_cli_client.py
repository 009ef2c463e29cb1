"""The CLI and its HTTP client against a stub server on loopback.

``StubServer`` is a test double: just enough of the contract (routes, the error
body, idempotent replay, a job that moves on each poll) to check what the CLI
sends, prints and exits with. The real daemon has its own tests.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from casesignd.cli import commands as cli
from casesignd.cli.client import (
    Client,
    ClientError,
    error_from_response,
    multipart_body,
    next_poll_delay,
    parse_env_file,
    resolve_settings,
)

TOKEN = "csd_test-token"
HEX = "a" * 64
CLI_TIMEOUT_S = 30


# --- the stub server ------------------------------------------------------------------


def _error(status: int, code: str, message: str, field: str | None = None,
           headers: dict[str, str] | None = None) -> web.Response:
    err: dict[str, Any] = {"code": code, "message": message, "correlation_id": f"corr-{code}"}
    if field:
        err["field"] = field
    return web.json_response({"error": err}, status=status, headers=headers)


class StubServer:
    """Minimal stand-in for the daemon. Case IDs steer its behaviour:
    ``bad`` → 422 with a field, ``full`` → 429 queue_full, ``fail`` → the job fails,
    ``stuck`` → the job stays processing, ``corrupt`` → upload digest_mismatch,
    ``huge`` → upload refused with 413 before its body is read,
    ``lie`` → /v1/sign answers a wrong X-Artifact-SHA256."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], bytes] = {}
        self.jobs: dict[str, dict[str, Any]] = {}
        self.keys: dict[str, str] = {}
        self.requests: list[tuple[str, str, dict[str, str]]] = []

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.auth])
        app.router.add_put("/v1/cases/{case_id}/objects/{sha256}", self.put_object)
        app.router.add_post("/v1/jobs", self.submit)
        app.router.add_get("/v1/jobs", self.list_jobs)
        app.router.add_get("/v1/jobs/{job_id}", self.get_job)
        app.router.add_get("/v1/jobs/{job_id}/events", self.events)
        app.router.add_post("/v1/jobs/{job_id}/retry", self.retry)
        app.router.add_post("/v1/jobs/{job_id}/cancel", self.cancel)
        app.router.add_post("/v1/sign", self.sign)
        app.router.add_get("/v1/artifacts/{artifact_id}", self.artifact)
        app.router.add_get("/proxy-error", self.proxy_error)
        return app

    @web.middleware
    async def auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.requests.append((request.method, request.path_qs, dict(request.headers)))
        public = request.path.startswith("/v1/artifacts/") and "sig" in request.query
        if not public and request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return _error(401, "unauthorized", "missing or unknown bearer token")
        return await handler(request)

    async def put_object(self, request: web.Request) -> web.Response:
        case_id, digest = request.match_info["case_id"], request.match_info["sha256"]
        if case_id == "huge":  # refuse by Content-Length, without reading the body
            return _error(413, "too_large", "the body is larger than 1024 bytes")
        body = await request.read()
        if case_id == "corrupt" or hashlib.sha256(body).hexdigest() != digest:
            return _error(422, "digest_mismatch", "the body does not match its digest",
                          field="sha256")
        new = (case_id, digest) not in self.objects
        self.objects[(case_id, digest)] = body
        return web.json_response({"case_id": case_id, "sha256": digest, "size": len(body),
                                  "object_ref": f"sha256:{digest}"}, status=201 if new else 200)

    def _new_job(self, case_id: str, kind: str = "sign_case") -> dict[str, Any]:
        job_id = f"job-{len(self.jobs) + 1}"
        job = {"job_id": job_id, "kind": kind, "case_id": case_id, "state": "queued",
               "attempts": 1, "created_at": "2026-01-01T00:00:00Z",
               "updated_at": "2026-01-01T00:00:00Z", "timings": {}}
        self.jobs[job_id] = job
        return job

    async def submit(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "bad_request", "not JSON")
        case_id = body.get("case_id", "")
        if case_id == "bad":
            return _error(422, "invalid_field", "sha256 must be 64 lowercase hex digits",
                          field="items[0].sha256")
        if case_id == "full":
            return _error(429, "queue_full", "the queue is full", headers={"Retry-After": "3"})
        key = request.headers.get("Idempotency-Key")
        if key and key in self.keys:
            return web.json_response(self.jobs[self.keys[key]], status=200)
        job = self._new_job(case_id, body.get("kind", "sign_case"))
        if key:
            self.keys[key] = job["job_id"]
        return web.json_response(job, status=202)

    async def get_job(self, request: web.Request) -> web.Response:
        job = self.jobs.get(request.match_info["job_id"])
        if job is None:
            return _error(404, "not_found", "no such job")
        # Each poll moves the job on, so --wait sees it progress.
        if job["state"] == "queued":
            job["state"] = "processing"
        elif job["state"] == "processing" and job["case_id"] != "stuck":
            if job["case_id"] == "fail":
                job["state"] = "failed"
                job["error"] = {"category": "permanent_input", "code": "malformed_pdf",
                                "correlation_id": "corr-job"}
            else:
                job["state"] = "ready"
                job["result"] = {"artifact_id": "art-1", "sha256": HEX, "size": 3,
                                 "download_url": "/v1/artifacts/art-1?expires=9&sig=ok",
                                 "expires_at": "2026-01-01T01:00:00Z"}
        return web.json_response(job)

    async def list_jobs(self, request: web.Request) -> web.Response:
        jobs = list(reversed(self.jobs.values()))
        if "state" in request.query:
            jobs = [j for j in jobs if j["state"] == request.query["state"]]
        limit = int(request.query.get("limit", "50"))
        more = len(jobs) > limit
        return web.json_response({"jobs": jobs[:limit], "next_cursor": "c2" if more else None})

    async def events(self, request: web.Request) -> web.Response:
        job_id = request.match_info["job_id"]
        if job_id not in self.jobs:
            return _error(404, "not_found", "no such job")
        return web.json_response({"events": [{"seq": 1, "job_id": job_id, "type": "admitted"}]})

    async def retry(self, request: web.Request) -> web.Response:
        job = self.jobs.get(request.match_info["job_id"])
        if job is None:
            return _error(404, "not_found", "no such job")
        if job["state"] != "failed":
            return _error(409, "not_failed", f"the job is {job['state']}")
        job.update(state="queued", attempts=job["attempts"] + 1)
        return web.json_response(job, status=202)

    async def cancel(self, request: web.Request) -> web.Response:
        job = self.jobs.get(request.match_info["job_id"])
        if job is None:
            return _error(404, "not_found", "no such job")
        if job["state"] != "queued":
            return _error(409, "not_cancelable", f"the job is {job['state']}")
        job["state"] = "canceled"
        return web.json_response(job)

    async def sign(self, request: web.Request) -> web.Response:
        if not request.content_type.startswith("multipart/form-data"):
            return _error(415, "unsupported_media_type", "expected multipart/form-data")
        parts: dict[str, tuple[str, bytes, str | None]] = {}
        reader = await request.multipart()
        async for part in reader:
            parts[part.name] = (part.headers.get("Content-Type", ""), await part.read(),
                                part.filename)
        if set(parts) != {"manifest", "document"}:
            return _error(400, "bad_request", f"parts {sorted(parts)}")
        mtype, mbody, _ = parts["manifest"]
        dtype, document, _ = parts["document"]
        if mtype != "application/json" or dtype != "application/pdf":
            return _error(415, "unsupported_media_type", f"{mtype}, {dtype}")
        manifest = json.loads(mbody)
        if manifest.get("sha256") != hashlib.sha256(document).hexdigest():
            return _error(422, "digest_mismatch", "document digest", field="sha256")
        signed = document + b"\n%signed for " + json.dumps(manifest["signers"]).encode()
        job = self._new_job(manifest["case_id"])
        digest = hashlib.sha256(signed).hexdigest()
        if manifest["case_id"] == "lie":
            digest = HEX
        return web.Response(body=signed, content_type="application/pdf",
                            headers={"X-Job-Id": job["job_id"], "X-Artifact-SHA256": digest})

    async def artifact(self, request: web.Request) -> web.Response:
        if request.query.get("sig", "ok") != "ok":
            return _error(403, "link_invalid", "bad signature")
        return web.Response(body=b"PDF", content_type="application/pdf")

    async def proxy_error(self, request: web.Request) -> web.Response:
        return web.Response(status=502, text="<html>Bad Gateway</html>")


@pytest.fixture
async def stub(aiohttp_server: Any, monkeypatch: pytest.MonkeyPatch) -> StubServer:
    s = StubServer()
    server = await aiohttp_server(s.app(), host="127.0.0.1")
    s.url = str(server.make_url("")).rstrip("/")  # type: ignore[attr-defined]
    monkeypatch.setenv("CASESIGND_URL", s.url)  # type: ignore[attr-defined]
    monkeypatch.setenv("CASESIGND_TOKEN", TOKEN)
    monkeypatch.delenv("CASESIGND_CONFIG", raising=False)
    return s


async def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the CLI in a thread (it blocks on HTTP) while the stub serves on this loop."""
    capsys.readouterr()
    rc = await asyncio.wait_for(asyncio.to_thread(cli.main, list(argv)), CLI_TIMEOUT_S)
    out, err = capsys.readouterr()
    return rc, out, err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- commands against the stub --------------------------------------------------------


async def test_upload(stub: StubServer, tmp_path: Path, capsys) -> None:
    f = tmp_path / "photo.jpg"
    f.write_bytes(b"jpeg bytes")
    digest = hashlib.sha256(b"jpeg bytes").hexdigest()
    rc, out, _ = await run_cli(capsys, "upload", str(f), "--case", "C-1")
    assert rc == 0
    first = json.loads(out)
    assert first == {"case_id": "C-1", "sha256": digest, "size": 10,
                     "object_ref": f"sha256:{digest}", "created": True}
    rc, out, _ = await run_cli(capsys, "upload", str(f), "--case", "C-1")
    assert rc == 0 and json.loads(out)["created"] is False
    method, path, headers = stub.requests[-1]
    assert (method, path) == ("PUT", f"/v1/cases/C-1/objects/{digest}")
    assert headers["Content-Length"] == "10"


async def test_error_line_names_code_field_and_correlation_id(stub, tmp_path, capsys) -> None:
    f = tmp_path / "x.pdf"
    f.write_bytes(b"%PDF-1.7")
    rc, out, err = await run_cli(capsys, "upload", str(f), "--case", "corrupt")
    assert rc == 1 and out == ""
    assert err == ("error: digest_mismatch: the body does not match its digest "
                   "(field sha256, correlation id corr-digest_mismatch)\n")


async def test_upload_refused_before_the_body_is_read(stub, tmp_path, capsys) -> None:
    f = tmp_path / "big.bin"
    f.write_bytes(b"\0" * (16 * 1024 * 1024))
    rc, out, err = await run_cli(capsys, "upload", str(f), "--case", "huge")
    assert (rc, out) == (1, "")
    assert err.startswith("error: too_large: the body is larger than 1024 bytes")


async def test_submit_and_wait(stub: StubServer, tmp_path: Path, capsys) -> None:
    m = tmp_path / "m.json"
    m.write_text(json.dumps({"kind": "sign_case", "case_id": "C-1", "items": [], "signers": []}))
    rc, out, _ = await run_cli(capsys, "submit", str(m))
    assert rc == 0 and json.loads(out)["state"] == "queued"
    rc, out, err = await run_cli(capsys, "submit", str(m), "--wait", "--timeout", "20")
    assert rc == 0, err
    job = json.loads(out)
    assert job["state"] == "ready" and job["result"]["artifact_id"] == "art-1"


async def test_submit_idempotency_key_replays(stub: StubServer, tmp_path: Path, capsys) -> None:
    m = tmp_path / "m.json"
    m.write_text(json.dumps({"kind": "sign_case", "case_id": "C-1"}))
    _, out1, _ = await run_cli(capsys, "submit", str(m), "--idempotency-key", "k-1")
    _, out2, _ = await run_cli(capsys, "submit", str(m), "--idempotency-key", "k-1")
    assert json.loads(out1)["job_id"] == json.loads(out2)["job_id"]
    assert stub.requests[-1][2]["Idempotency-Key"] == "k-1"


async def test_submit_wait_failed_job_exits_1(stub, tmp_path, capsys) -> None:
    m = tmp_path / "m.json"
    m.write_text(json.dumps({"kind": "sign_case", "case_id": "fail"}))
    rc, out, err = await run_cli(capsys, "submit", str(m), "--wait", "--timeout", "20")
    assert rc == 1
    assert json.loads(out)["state"] == "failed"
    assert err == ("error: malformed_pdf: job job-1 failed "
                   "(category permanent_input, correlation id corr-job)\n")


async def test_submit_wait_timeout_exits_1(stub, tmp_path, capsys) -> None:
    m = tmp_path / "m.json"
    m.write_text(json.dumps({"kind": "sign_case", "case_id": "stuck"}))
    rc, out, err = await run_cli(capsys, "submit", str(m), "--wait", "--timeout", "0.5")
    assert rc == 1
    assert json.loads(out)["state"] == "processing"
    assert err.startswith("error: timed_out: job job-1 still processing after 0.5 s")


@pytest.mark.parametrize(
    ("case_id", "line"),
    [
        ("bad", "error: invalid_field: sha256 must be 64 lowercase hex digits "
                "(field items[0].sha256, correlation id corr-invalid_field)"),
        ("full", "error: queue_full: the queue is full "
                 "(retry after 3 s, correlation id corr-queue_full)"),
    ],
)
async def test_submit_refused(stub, tmp_path, capsys, case_id: str, line: str) -> None:
    m = tmp_path / "m.json"
    m.write_text(json.dumps({"kind": "sign_case", "case_id": case_id}))
    rc, out, err = await run_cli(capsys, "submit", str(m))
    assert (rc, out, err) == (1, "", line + "\n")


async def test_submit_bad_manifest_is_a_usage_error(stub, tmp_path, capsys) -> None:
    m = tmp_path / "m.json"
    m.write_text("{not json")
    rc, _, err = await run_cli(capsys, "submit", str(m))
    assert rc == 2 and err.startswith(f"error: {m}: not valid JSON")
    rc, _, err = await run_cli(capsys, "submit", str(tmp_path / "missing.json"))
    assert rc == 2 and "cannot read" in err
    assert stub.requests == []


async def test_jobs_commands(stub: StubServer, tmp_path: Path, capsys) -> None:
    m = tmp_path / "m.json"
    for case in ("C-1", "C-2", "C-3"):
        m.write_text(json.dumps({"kind": "sign_case", "case_id": case}))
        assert (await run_cli(capsys, "submit", str(m)))[0] == 0
    rc, out, err = await run_cli(capsys, "jobs", "list", "--limit", "2")
    assert rc == 0
    assert [line.split()[0] for line in out.splitlines()] == ["job-3", "job-2"]
    assert err == "more: --cursor c2\n"
    rc, out, _ = await run_cli(capsys, "jobs", "list", "--json")
    assert len(json.loads(out)["jobs"]) == 3
    rc, out, _ = await run_cli(capsys, "jobs", "show", "job-1")
    assert rc == 0 and json.loads(out)["job_id"] == "job-1"
    rc, out, _ = await run_cli(capsys, "jobs", "events", "job-1")
    assert rc == 0 and json.loads(out)["events"][0]["type"] == "admitted"
    rc, _, err = await run_cli(capsys, "jobs", "retry", "job-1")
    assert rc == 1 and err.startswith("error: not_failed: the job is processing")
    rc, out, _ = await run_cli(capsys, "jobs", "cancel", "job-3")
    assert rc == 0 and json.loads(out)["state"] == "canceled"
    rc, _, err = await run_cli(capsys, "jobs", "show", "nope")
    assert rc == 1 and err.startswith("error: not_found: no such job (correlation id")


async def test_sign_writes_the_signed_pdf(stub: StubServer, tmp_path: Path, capsys) -> None:
    doc = tmp_path / "contract.pdf"
    doc.write_bytes(b"%PDF-1.7 contract")
    rc, out, err = await run_cli(capsys, "sign", str(doc), "--case", "K-1", "--policy",
                                 "contract-v1", "--signer", "s-1:Acme Ltd:seller",
                                 "--idempotency-key", "kiosk-1")
    assert rc == 0, err
    signed = tmp_path / "contract.signed.pdf"
    data = signed.read_bytes()
    assert data.startswith(b"%PDF-1.7 contract\n%signed for ")
    assert b"Acme Ltd" in data
    assert out == (f"job job-1 sha256 {hashlib.sha256(data).hexdigest()} wrote {signed}\n")
    assert stub.requests[-1][2]["Idempotency-Key"] == "kiosk-1"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]


async def test_sign_refuses_bytes_that_do_not_match_their_digest(stub, tmp_path, capsys) -> None:
    doc = tmp_path / "contract.pdf"
    doc.write_bytes(b"%PDF-1.7")
    out_path = tmp_path / "out.pdf"
    rc, _, err = await run_cli(capsys, "sign", str(doc), "--case", "lie", "-o", str(out_path))
    assert rc == 1 and err.startswith("error: digest_mismatch: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["contract.pdf"]


async def test_jobs_download_refuses_a_job_not_ready_and_bytes_not_its_own(
        stub, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    m = tmp_path / "m.json"
    m.write_text(json.dumps({"kind": "sign_case", "case_id": "C-1"}))
    await run_cli(capsys, "submit", str(m))
    rc, out, err = await run_cli(capsys, "jobs", "download", "job-1")
    assert (rc, out, err) == (1, "", "error: not_ready: job job-1 is processing\n")
    # Ready now, but the stub's artifact is not the sha256 the job names.
    rc, out, err = await run_cli(capsys, "jobs", "download", "job-1")
    assert (rc, out) == (1, "") and err.startswith("error: digest_mismatch: the artifact of job job-1")
    assert list(tmp_path.iterdir()) == [m]


async def test_token_problems(stub, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("CASESIGND_TOKEN", "csd_wrong")
    rc, _, err = await run_cli(capsys, "jobs", "list")
    assert rc == 1 and err.startswith("error: unauthorized: missing or unknown bearer token")
    monkeypatch.delenv("CASESIGND_TOKEN")
    rc, _, err = await run_cli(capsys, "jobs", "list", "--config", str(tmp_path / "c.toml"))
    assert rc == 2 and err.startswith("error: no token: ")


async def test_client_env_next_to_the_config(stub, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("CASESIGND_URL")
    monkeypatch.delenv("CASESIGND_TOKEN")
    (tmp_path / "client.env").write_text(f"# written by init\nCASESIGND_URL={stub.url}\n"
                                         f"CASESIGND_TOKEN={TOKEN}\n")
    config = str(tmp_path / "config.toml")
    rc, out, err = await run_cli(capsys, "jobs", "list", "--config", config)
    assert (rc, out, err) == (0, "", "")
    monkeypatch.setenv("CASESIGND_CONFIG", config)
    assert (await run_cli(capsys, "jobs", "list"))[0] == 0
    # The environment comes first.
    monkeypatch.setenv("CASESIGND_URL", f"http://127.0.0.1:{free_port()}")
    assert (await run_cli(capsys, "jobs", "list", "--config", config))[0] == 3


async def test_bad_url_is_a_usage_error(capsys, monkeypatch) -> None:
    monkeypatch.setenv("CASESIGND_URL", "ftp://example")
    monkeypatch.setenv("CASESIGND_TOKEN", TOKEN)
    rc, _, err = await run_cli(capsys, "jobs", "list")
    assert (rc, err) == (2, "error: CASESIGND_URL: not an http(s) URL: 'ftp://example'\n")


async def test_unreachable_server_exits_3(capsys, monkeypatch) -> None:
    monkeypatch.setenv("CASESIGND_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("CASESIGND_TOKEN", TOKEN)
    rc, _, err = await run_cli(capsys, "jobs", "list")
    assert rc == 3
    assert err.startswith("error: server_unreachable: cannot reach http://127.0.0.1:")
    assert "connection refused" in err and err.count("\n") == 1


async def test_download_and_non_json_errors(stub: StubServer) -> None:
    client = Client(stub.url, TOKEN, timeout_s=10)
    data = await asyncio.to_thread(client.download, "/v1/artifacts/art-1?expires=9&sig=ok")
    assert data == b"PDF"
    # The token goes only to the base URL's origin; a signed link needs none.
    await asyncio.to_thread(client.download, f"{stub.url}/v1/artifacts/art-1?expires=9&sig=ok")
    assert stub.requests[-1][2].get("Authorization") == f"Bearer {TOKEN}"
    other = Client("http://127.0.0.2:1", TOKEN, timeout_s=10)
    await asyncio.to_thread(other.download, f"{stub.url}/v1/artifacts/art-1?expires=9&sig=ok")
    assert "Authorization" not in stub.requests[-1][2]
    with pytest.raises(ClientError) as e:
        await asyncio.to_thread(client.download, "/v1/artifacts/art-1?expires=9&sig=bad")
    assert (e.value.status, e.value.code) == (403, "link_invalid")
    with pytest.raises(ClientError) as e:
        await asyncio.to_thread(client.request, "GET", "/proxy-error")
    assert e.value.line() == "error: http_502: HTTP 502 Bad Gateway: <html>Bad Gateway</html>"


# --- pure parts -----------------------------------------------------------------------


def test_parse_env_file() -> None:
    text = "# c\n\nCASESIGND_URL=http://h:1\nexport CASESIGND_TOKEN='csd_x'\nJUNK\nA = \"b\"\n"
    assert parse_env_file(text) == {"CASESIGND_URL": "http://h:1", "CASESIGND_TOKEN": "csd_x",
                                    "A": "b"}


@pytest.mark.parametrize(
    ("environ", "env_file", "want"),
    [
        ({}, {}, ("http://127.0.0.1:8787", None, "default", None)),
        ({}, {"CASESIGND_URL": "http://f:1/", "CASESIGND_TOKEN": "t"},
         ("http://f:1", "t", "client.env", "client.env")),
        ({"CASESIGND_URL": "http://e:1", "CASESIGND_TOKEN": "e"},
         {"CASESIGND_URL": "http://f:1", "CASESIGND_TOKEN": "t"},
         ("http://e:1", "e", "CASESIGND_URL", "CASESIGND_TOKEN")),
        ({"CASESIGND_URL": "http://e:1"}, {"CASESIGND_TOKEN": "t"},
         ("http://e:1", "t", "CASESIGND_URL", "client.env")),
        ({"CASESIGND_TOKEN": ""}, {"CASESIGND_TOKEN": "t"},
         ("http://127.0.0.1:8787", "t", "default", "client.env")),
    ],
)
def test_settings_precedence(environ, env_file, want) -> None:
    s = resolve_settings(environ, env_file, "client.env")
    assert (s.url, s.token, s.url_from, s.token_from) == want


@pytest.mark.parametrize(
    ("status", "body", "headers", "line"),
    [
        (422, b'{"error": {"code": "digest_mismatch", "message": "m", "field": "items[0].sha256",'
              b' "correlation_id": "c1"}}', {},
         "error: digest_mismatch: m (field items[0].sha256, correlation id c1)"),
        (503, b'{"error": {"code": "busy", "message": "no key slot", "correlation_id": "c2"}}',
         {"retry-after": "2"}, "error: busy: no key slot (retry after 2 s, correlation id c2)"),
        (500, b"", {}, "error: http_500: HTTP 500 Internal Server Error"),
        (404, b'{"detail": "x"}', {}, 'error: http_404: HTTP 404 Not Found: {"detail": "x"}'),
    ],
)
def test_error_lines(status, body, headers, line) -> None:
    from http import HTTPStatus

    from casesignd.cli.client import _Caseless

    err = error_from_response(status, HTTPStatus(status).phrase, body, _Caseless(headers))
    assert err.status == status
    assert err.line() == line


def test_poll_delays_grow_and_cap() -> None:
    delays = []
    d = None
    for _ in range(10):
        d = next_poll_delay(d)
        delays.append(d)
    assert delays[0] == 0.2 and delays == sorted(delays) and max(delays) == 2.0


def test_multipart_body_quotes_names() -> None:
    body, ctype = multipart_body([("document", 'a"b.pdf', "application/pdf", b"%PDF")])
    boundary = ctype.split("boundary=")[1]
    assert body.startswith(f"--{boundary}\r\n".encode())
    assert b'filename="a%22b.pdf"' in body
    assert body.endswith(f"--{boundary}--\r\n".encode())
