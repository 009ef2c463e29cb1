"""Hostile input over HTTP: malformed PDFs through both signing paths, slow and endless
clients, huge headers and idle connections. Each is refused with its code, nothing
crashes, memory stays bounded, and the next ordinary request is answered."""

from __future__ import annotations

import contextlib
import hashlib
import json
import select
import socket
from pathlib import Path

import pytest

from casesignd.core.codes import REASONS
from tests.daemon import Daemon
from tests.helpers_corpus import REPAIRED_BY_PIPELINE, bad_corpus  # noqa: F401 - session fixture
from tests.helpers_pki import reportlab_pdf

SIGNERS = [{"id": "clerk-1", "name": "Desk", "role": "clerk"}]
REQUEST_TIMEOUT_S = 2.0
MAX_JSON_BYTES = 64 * 1024
MAX_OBJECT_BYTES = 4 << 20
KIOSK_MAX_DOCUMENT_BYTES = 2 << 20
# The decompression bombs decode to 1 GiB; a process that held one would pass this.
RSS_BOUND_BYTES = 600 << 20

HOSTILE = {
    "server": {"request_timeout_s": REQUEST_TIMEOUT_S, "max_json_bytes": MAX_JSON_BYTES,
               "max_object_bytes": MAX_OBJECT_BYTES},
    # The deadline is generous so that each refusal shows its own code, not 504.
    "kiosk": {"deadline_ms": 60000, "max_document_bytes": KIOSK_MAX_DOCUMENT_BYTES},
}


@pytest.fixture
def hostile(daemon_factory) -> Daemon:
    return daemon_factory(HOSTILE)


# --- helpers ------------------------------------------------------------------------------


def upload(d: Daemon, case_id: str, data: bytes) -> dict:
    sha = hashlib.sha256(data).hexdigest()
    r = d.request("PUT", f"/v1/cases/{case_id}/objects/{sha}", raw=data,
                  headers={"Content-Type": "application/octet-stream"})
    assert r.status in (200, 201), r.body
    return {"role": "contract", "name": "contract.pdf", "media_type": "application/pdf",
            "object_ref": f"sha256:{sha}", "sha256": sha, "size": len(data)}


def multipart(manifest: dict, document: bytes, boundary: str = "hostileboundary") -> bytes:
    return (f"--{boundary}\r\nContent-Disposition: form-data; name=\"manifest\"\r\n"
            f"Content-Type: application/json\r\n\r\n{json.dumps(manifest)}\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"document\"; "
            f"filename=\"doc.pdf\"\r\nContent-Type: application/pdf\r\n\r\n").encode() \
        + document + f"\r\n--{boundary}--\r\n".encode()


def kiosk(d: Daemon, case_id: str, document: bytes):
    body = multipart({"case_id": case_id, "signers": SIGNERS}, document)
    return d.request("POST", "/v1/sign", raw=body, timeout_s=90,
                     headers={"Content-Type": "multipart/form-data; boundary=hostileboundary"})


def good_job_succeeds(d: Daemon, tmp: Path, tag: str) -> None:
    data = reportlab_pdf(tmp / f"good-{tag}.pdf", text=f"good {tag}").read_bytes()
    r = d.submit({"kind": "sign_case", "case_id": f"GOOD-{tag}", "signers": SIGNERS,
                  "items": [upload(d, f"GOOD-{tag}", data)]})
    assert r.status == 202, r.body
    assert d.wait_job(r.json()["job_id"], timeout_s=90)["state"] == "ready"


def descendants(pid: int) -> list[int]:
    """The daemon's process tree below it (CPU workers are the forkserver's children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        out += [int(k) for k in kids]
        todo += [int(k) for k in kids]
    return out


def memory(pid: int) -> dict[str, int]:
    """VmHWM and VmRSS of one process, in bytes."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            fields[key] = int(rest.split()[0]) * 1024
    return fields


def connect(d: Daemon, timeout_s: float = 10.0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", d.port), timeout=timeout_s)
    s.settimeout(timeout_s)
    return s


def read_status(s: socket.socket) -> int | None:
    """The status of the answer on ``s``; None when the server closed without one."""
    buf = b""
    try:
        while b"\r\n" not in buf:
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    # aiohttp answers a request it could not parse as HTTP/1.0.
    if not buf.startswith((b"HTTP/1.1 ", b"HTTP/1.0 ")):
        return None
    return int(buf[9:12])


def closed_by_server(s: socket.socket, within_s: float) -> bool:
    """Whether the server ends the connection (EOF or reset) within ``within_s``."""
    s.settimeout(within_s)
    try:
        while s.recv(4096):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def headers(method: str, path: str, d: Daemon, extra: str = "") -> bytes:
    return (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{d.port}\r\n"
            f"Authorization: Bearer {d.token}\r\n{extra}").encode()


def endless_body(d: Daemon, head: bytes, limit: int) -> int | None:
    """Send a chunked body that never ends; the status the server answers with, or None
    when it cut the connection. Fails if the server takes far more than ``limit``."""
    s = connect(d)
    try:
        s.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"%x\r\n" % 65536 + b"7" * 65536 + b"\r\n"
        sent = 0
        s.settimeout(REQUEST_TIMEOUT_S)
        while sent < 20 * limit + (8 << 20):
            try:
                s.sendall(chunk)
            except TimeoutError:
                break  # the server stopped reading
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(chunk)
            if select.select([s], [], [], 0)[0]:
                break  # an answer (or the close) is there
        else:
            pytest.fail(f"the server read {sent} bytes of an endless body (limit {limit})")
        s.settimeout(10)
        return read_status(s)
    finally:
        s.close()


def stalled_body(d: Daemon, head: bytes) -> int | None:
    """Send part of a body, then nothing: the server must give up on its own."""
    s = connect(d, timeout_s=30)
    try:
        part = b'{"kind": "test",'  # a valid beginning, then silence
        s.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(part) + part
                  + b"\r\n")
        return read_status(s)
    finally:
        s.close()


# --- malformed PDFs -----------------------------------------------------------------------


def test_bad_pdfs_are_refused_on_both_paths_with_bounded_memory(hostile, bad_corpus, tmp_path):  # noqa: F811
    d = hostile
    assert d.proc is not None
    submitted = {}
    for name, (path, code) in sorted(bad_corpus.items()):
        case_id = f"BAD-{name.replace('_', '-')}"
        r = d.submit({"kind": "sign_case", "case_id": case_id, "signers": SIGNERS,
                      "items": [upload(d, case_id, path.read_bytes())]})
        assert r.status == 202, (name, r.body)
        submitted[name] = (r.json()["job_id"], code)
    refusals = {}
    for name, (job_id, code) in submitted.items():
        job = d.wait_job(job_id, timeout_s=120)
        if name in REPAIRED_BY_PIPELINE:
            assert job["state"] == "ready", (name, job)
            continue
        assert job["state"] == "failed", (name, job)
        err = job["error"]
        # A refused document says why: a reason word of its code, where, and words.
        assert REASONS[err["reason"]].code == code, (name, err)
        assert isinstance(err["message"], str) and err["message"], (name, err)
        assert {k: err[k] for k in ("category", "code")} == {
            "category": "permanent_input", "code": code}, (name, job)
        assert set(err) <= {"category", "code", "correlation_id", "reason", "where",
                            "message"}, err
        refusals[name] = (err["reason"], err.get("where"))
    good_job_succeeds(d, tmp_path, "after-jobs")

    for name, (path, code) in sorted(bad_corpus.items()):
        r = kiosk(d, f"KBAD-{name.replace('_', '-')}", path.read_bytes())
        if name in REPAIRED_BY_PIPELINE:
            assert r.status == 200 and r.body.startswith(b"%PDF-"), (name, r.status, r.body[:300])
            continue
        assert r.status == 422, (name, r.status, r.body[:300])
        assert r.json()["error"]["code"] == code, (name, r.body)
        # The same reason and where as the job's.
        assert (r.json()["error"]["reason"], r.json()["error"].get("where")) == \
            refusals[name], (name, r.body)
        assert r.headers["Content-Type"].startswith("application/json")
    good = reportlab_pdf(tmp_path / "kiosk-good.pdf", text="kiosk good").read_bytes()
    r = kiosk(d, "KGOOD-1", good)
    assert r.status == 200 and r.body.startswith(b"%PDF"), r.body[:300]
    good_job_succeeds(d, tmp_path, "after-kiosk")

    procs = [d.proc.pid, *descendants(d.proc.pid)]
    figures = {pid: memory(pid) for pid in procs}
    print("memory after the bad corpus (pid: VmHWM, VmRSS MiB):",
          {p: (m["VmHWM"] >> 20, m["VmRSS"] >> 20) for p, m in figures.items()})
    assert len(procs) >= 3, "the CPU worker processes are missing from the daemon's tree"
    for pid, m in figures.items():
        assert m["VmHWM"] < RSS_BOUND_BYTES, (pid, m)
    assert d.request("GET", "/readyz", auth=False).status == 200


# --- slow, huge and endless clients -------------------------------------------------------


def test_headers_sent_byte_by_byte_are_cut_off(hostile):
    d = hostile
    s = connect(d)
    try:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        cut = False
        for i in range(int(6 * REQUEST_TIMEOUT_S / 0.2)):  # well past the server's timeout
            try:
                s.sendall(b"X-Slow-%d: y\r\n" % i)
            except (BrokenPipeError, ConnectionResetError):
                cut = True
                break
            if closed_by_server(s, 0.2):
                cut = True
                break
        assert cut, "a client sending headers slowly kept its connection"
    finally:
        s.close()
    assert d.request("GET", "/healthz", auth=False).status == 200


def test_huge_headers_get_431_or_400(hostile):
    d = hostile
    # A too-long line that begins with a real token (and one in a path with a case id):
    # refused, and neither reaches the log.
    for extra in ("X-Big: " + "a" * 100_000 + "\r\n",
                  "".join(f"X-Many-{i}: v\r\n" for i in range(2000)),
                  f"X-Auth-Copy: Bearer {d.token}" + "a" * 100_000 + "\r\n"):
        s = connect(d)
        try:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                s.sendall(headers("GET", "/v1/jobs", d, extra) + b"\r\n")
            status = read_status(s)
        finally:
            s.close()
        assert status in (400, 431), status
    s = connect(d)
    try:
        s.sendall(b"GET /v1/cases/SECRET-CASE-9" + b"x" * 100_000 + b" HTTP/1.1\r\n\r\n")
        assert read_status(s) in (400, 414, 431)
    finally:
        s.close()
    assert d.request("GET", "/v1/jobs").status == 200
    logs = d.logs()
    assert d.token not in logs and d.token[4:20] not in logs
    assert "SECRET-CASE-9" not in logs
    assert "Traceback" not in logs


@pytest.mark.parametrize("target", ["jobs", "object", "kiosk"])
def test_endless_and_stalled_bodies_are_cut_off(hostile, target):
    d = hostile
    sha = "0" * 64
    head, limit = {
        "jobs": (headers("POST", "/v1/jobs", d, "Content-Type: application/json\r\n"),
                 MAX_JSON_BYTES),
        "object": (headers("PUT", f"/v1/cases/ENDLESS/objects/{sha}", d,
                           "Content-Type: application/octet-stream\r\n"), MAX_OBJECT_BYTES),
        "kiosk": (headers("POST", "/v1/sign", d,
                          "Content-Type: multipart/form-data; boundary=b\r\n"),
                  KIOSK_MAX_DOCUMENT_BYTES),
    }[target]
    status = endless_body(d, head, limit)
    # The kiosk reads its multipart framing first: an endless body without one is 400.
    assert status in (413, 400, None), (status, d.logs()[-2000:])
    status = stalled_body(d, head)
    assert status == 408, (status, d.logs()[-2000:])
    assert d.request("GET", "/v1/jobs").status == 200


def test_many_idle_connections_do_not_block_the_next_request(hostile, tmp_path):
    d = hostile
    idle = [connect(d) for _ in range(200)]
    try:
        assert d.request("GET", "/v1/jobs").status == 200
        good_job_succeeds(d, tmp_path, "idle")
        # Connections that never send a request are closed by the server in time.
        assert all(closed_by_server(s, 6 * REQUEST_TIMEOUT_S) for s in idle[:5])
    finally:
        for s in idle:
            s.close()
    assert d.request("GET", "/healthz", auth=False).status == 200


def test_a_json_body_trickled_byte_by_byte_is_cut_off(hostile):
    d = hostile
    body = json.dumps({"kind": "test", "tag": "t" * 200}).encode()
    s = connect(d)
    try:
        s.sendall(headers("POST", "/v1/jobs", d, "Content-Type: application/json\r\n"
                          f"Content-Length: {len(body)}\r\n\r\n"))
        status = None
        # Each byte comes well within the timeout; the whole body never does.
        for i in range(len(body)):
            try:
                s.sendall(body[i:i + 1])
            except (BrokenPipeError, ConnectionResetError):
                break
            if select.select([s], [], [], REQUEST_TIMEOUT_S / 8)[0]:
                break
        else:
            pytest.fail("the server waited for a body trickled past server.request_timeout_s")
        status = read_status(s)
    finally:
        s.close()
    assert status == 408, status
    assert d.request("GET", "/v1/jobs").json()["jobs"] == []


def test_an_upload_that_keeps_sending_may_outlast_the_timeout(hostile):
    """Objects may be large: the timeout bounds each pause of an upload, not its length."""
    d = hostile
    pieces = [bytes([i]) * 4096 for i in range(int(3 * REQUEST_TIMEOUT_S / 0.25))]
    data = b"".join(pieces)
    sha = hashlib.sha256(data).hexdigest()
    s = connect(d, timeout_s=30)
    try:
        s.sendall(headers("PUT", f"/v1/cases/SLOW-UP/objects/{sha}", d,
                          "Content-Type: application/octet-stream\r\n"
                          f"Content-Length: {len(data)}\r\n\r\n"))
        for piece in pieces[:-1]:
            s.sendall(piece)
            if select.select([s], [], [], 0.25)[0]:
                pytest.fail(f"answered {read_status(s)} before the body was in")
        s.sendall(pieces[-1])
        assert read_status(s) == 201
    finally:
        s.close()
