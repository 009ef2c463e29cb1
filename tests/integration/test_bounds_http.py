"""Every resource bounded, every refusal clean, on one daemon on loopback: uploads by
total time, by how many run at once (per tenant and in all) and by their bytes in
flight; a retry within the queue depth; JSON that cannot be read; a client that goes
away; and what aiohttp's parser refuses, in the contract's error shape, echoing
nothing and naming no versions."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon import Daemon, kill_all, multipart, to_toml

OTHER_TOKEN = "csd_bounds-other-tenant-token"
UPLOAD_MAX_S = 2.0
QUOTA = 256 * 1024
BOUNDS = {
    "server": {"upload_max_s": UPLOAD_MAX_S, "request_timeout_s": 10.0, "max_uploads": 3,
               "max_uploads_per_tenant": 2, "max_object_bytes": QUOTA},
    "storage": {"upload_quota_bytes": QUOTA},
    "workers": {"concurrency": 1, "max_queue_depth": 1},
}
SHA = "0" * 64


@pytest.fixture(scope="module")
def d(tmp_path_factory) -> Iterator[Daemon]:
    daemon = Daemon(tmp_path_factory.mktemp("bounds") / "state", BOUNDS)
    daemon.config["tenants"].append(
        {"name": "other", "token_sha256": hashlib.sha256(OTHER_TOKEN.encode()).hexdigest()})
    daemon.config_path.write_text(to_toml(daemon.config))
    daemon.start()
    yield daemon
    kill_all([daemon])


def in_flight(d: Daemon) -> list[Path]:
    tmp = d.dir / d.config["storage"].get("state_dir", ".") / "objects" / "tmp"
    return list(tmp.glob("*.part"))


def metric(d: Daemon, name: str) -> float:
    text = d.request("GET", "/metrics", auth=False).body.decode()
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def wait_for(check, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.02)


def put_head(token: str, case: str, length: int | None, expect: bool = False) -> bytes:
    framing = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    if expect:
        framing += "\r\nExpect: 100-continue"
    return (f"PUT /v1/cases/{case}/objects/{SHA} HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/octet-stream\r\n"
            f"{framing}\r\n\r\n").encode()


async def opened(d: Daemon, data: bytes = b"") -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", d.port)
    if data:
        writer.write(data)
        await writer.drain()
    return reader, writer


async def answer(reader: asyncio.StreamReader, timeout_s: float = 10.0) -> tuple[int, dict, bytes]:
    """(status, headers, body) of one answer; the body by its Content-Length."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout_s)
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
    body = await asyncio.wait_for(reader.readexactly(int(headers.get("content-length", 0))),
                                  timeout_s)
    return int(lines[0].split()[1]), headers, body


async def ask(d: Daemon, data: bytes) -> tuple[int, dict, bytes]:
    reader, writer = await opened(d, data)
    try:
        return await answer(reader)
    finally:
        writer.close()


def refused(status: int, headers: dict, body: bytes, want_status: int, code: str) -> dict:
    assert status == want_status, body
    err = json.loads(body)["error"]
    assert err["code"] == code and err["correlation_id"], err
    assert headers["server"] == "casesignd"
    return err


# --- uploads ------------------------------------------------------------------------------


async def test_an_upload_trickled_past_upload_max_s_is_cut_off_and_leaves_nothing(d):
    before = metric(d, 'casesignd_upload_refusals_total{reason="upload_max_s"}')
    reader, writer = await opened(d, put_head(d.token, "TRICKLE", 1000))
    try:
        answered = asyncio.ensure_future(answer(reader))
        # Each byte well within request_timeout_s; the whole body never within upload_max_s.
        for _ in range(int(4 * UPLOAD_MAX_S / 0.2)):
            if answered.done():
                break
            writer.write(b"x")
            await writer.drain()
            await asyncio.sleep(0.2)
        status, headers, body = await answered
    finally:
        writer.close()
    refused(status, headers, body, 408, "request_timeout")
    assert in_flight(d) == []
    assert metric(d, 'casesignd_upload_refusals_total{reason="upload_max_s"}') == before + 1


async def test_uploads_at_once_are_bounded_per_tenant_and_in_all_before_the_body(d):
    held = []
    try:
        # Two of this tenant's uploads, each with part of its body in, wait for the rest;
        # one asked to be invited to send it (Expect: 100-continue), and was.
        held.append(await opened(d, put_head(d.token, "HELD-0", 1000) + b"abc"))
        reader, writer = await opened(d, put_head(d.token, "HELD-1", 1000, expect=True))
        held.append((reader, writer))
        assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10) == \
            b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"abc")
        await asyncio.to_thread(wait_for, lambda: metric(d, "casesignd_uploads_in_flight") == 2)
        # A third from the same tenant is refused before its body is read (none is sent),
        # and one that waits for an invitation gets the refusal instead.
        err = refused(*await ask(d, put_head(d.token, "THIRD", 1000)), 429, "too_many_uploads")
        assert "tenant" in err["message"]
        refused(*await ask(d, put_head(d.token, "THIRD", 1000, expect=True)), 429,
                "too_many_uploads")
        held.append(await opened(d, put_head(OTHER_TOKEN, "OTHER-1", 1000) + b"abc"))
        await asyncio.to_thread(wait_for, lambda: metric(d, "casesignd_uploads_in_flight") == 3)
        status, headers, body = await ask(d, put_head(OTHER_TOKEN, "OTHER-2", 1000))
        refused(status, headers, body, 429, "too_many_uploads")
        assert int(headers["retry-after"]) > 0
    finally:
        # The clients go away mid-upload: one info line each, no traceback, no file left.
        for _, writer in held:
            writer.close()
    await asyncio.to_thread(wait_for, lambda: metric(d, "casesignd_uploads_in_flight") == 0)
    assert in_flight(d) == []
    assert metric(d, 'casesignd_upload_refusals_total{reason="max_uploads"}') >= 1
    assert metric(d, 'casesignd_upload_refusals_total{reason="max_uploads_per_tenant"}') >= 1
    await asyncio.to_thread(wait_for, lambda: d.logs().count('"http.client_gone"') >= 3)
    logs = d.logs()
    assert "Traceback" not in logs and '"level":"error"' not in logs


async def test_upload_bytes_in_flight_stay_within_the_quota(d):
    big = await opened(d, put_head(d.token, "BIG", QUOTA - 1000) + b"abc")
    try:
        await asyncio.to_thread(wait_for, lambda: metric(d, "casesignd_uploads_in_flight") == 1)
        assert metric(d, "casesignd_upload_inflight_bytes") == QUOTA - 1000
        status, headers, body = await ask(d, put_head(OTHER_TOKEN, "SMALL", 2000))
        refused(status, headers, body, 503, "upload_quota")
        assert int(headers["retry-after"]) > 0
        # A chunked body declares nothing: it is charged as it streams, and cut off.
        reader, writer = await opened(d, put_head(OTHER_TOKEN, "CHUNKED", None))
        try:
            answered = asyncio.ensure_future(answer(reader))
            for _ in range(20):
                if answered.done():
                    break
                writer.write(b"400\r\n" + b"y" * 0x400 + b"\r\n")
                await writer.drain()
                await asyncio.sleep(0.02)
            refused(*await answered, 503, "upload_quota")
        finally:
            writer.close()
    finally:
        big[1].close()
    await asyncio.to_thread(wait_for, lambda: metric(d, "casesignd_uploads_in_flight") == 0)
    assert in_flight(d) == []
    # Within the quota again, an upload is stored.
    data = b"fits now"
    sha = hashlib.sha256(data).hexdigest()
    r = d.request("PUT", f"/v1/cases/FITS/objects/{sha}", raw=data)
    assert r.status == 201, r.body


# --- jobs, JSON -------------------------------------------------------------------------------


def test_a_retry_waits_its_turn_behind_a_full_queue(d):
    failed = d.submit({"kind": "test", "behavior": "fail_permanent", "tag": "retry"}).json()
    assert d.wait_job(failed["job_id"])["state"] == "failed"
    running = d.submit({"kind": "test", "behavior": "hang", "hang_s": 60, "tag": "busy"}).json()
    d.wait_job(running["job_id"], states=("processing",))
    queued = d.submit({"kind": "test", "tag": "behind"}).json()
    r = d.request("POST", f"/v1/jobs/{failed['job_id']}/retry")
    assert r.status == 429 and r.json()["error"]["code"] == "queue_full", r.body
    assert int(r.headers["Retry-After"]) > 0
    assert d.job(failed["job_id"])["state"] == "failed"
    assert d.request("POST", f"/v1/jobs/{queued['job_id']}/cancel").status == 200
    r = d.request("POST", f"/v1/jobs/{failed['job_id']}/retry")
    assert r.status == 202 and r.json()["state"] == "queued", r.body


# The kiosk's manifest part holds 64 KiB: nested as deep as fits there.
UNREADABLE_JSON = {"nested deep": lambda n: b"[" * n + b"]" * n,
                   "not UTF-8": lambda n: b'{"kind": "test", "tag": "\xff\xfe"}'}


@pytest.mark.parametrize("raw", UNREADABLE_JSON.values(), ids=UNREADABLE_JSON.keys())
def test_json_that_cannot_be_read_is_malformed_json(d, raw):
    r = d.request("POST", "/v1/jobs", raw=raw(100_000), headers={"Content-Type": "application/json"})
    assert r.status == 400 and r.json()["error"]["code"] == "malformed_json", r.body
    body, ctype = multipart({}, b"%PDF-1.4\n")
    body = body.replace(b"{}", raw(30_000))
    r = d.request("POST", "/v1/sign", raw=body, headers={"Content-Type": ctype})
    assert r.status == 400, r.body
    assert r.json()["error"] | {"correlation_id": ""} == {
        "code": "malformed_json", "message": "the manifest is not valid JSON",
        "field": "manifest", "correlation_id": ""}


# --- what the parser refuses ------------------------------------------------------------------


def parser_faults(token: str) -> dict[str, bytes]:
    auth = f"Authorization: Bearer {token}\r\n"
    return {
        "folded header": f"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer\r\n "
                         f"{token}\r\n\r\n".encode(),
        "bad request line": b"GARBAGE\r\n\r\n",
        "bad method": f"G{{}}T /v1/jobs HTTP/1.1\r\nHost: x\r\n{auth}\r\n".encode(),
        "header without a colon": f"GET /v1/jobs HTTP/1.1\r\nHost: x\r\n{auth}"
                                  f"X-{token}\r\n\r\n".encode(),
        "control character": f"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nX-Copy: {token}\x01\r\n"
                             f"\r\n".encode(),
        "too long header": f"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nX-Copy: {token}"
                           f"{'a' * 20000}\r\n\r\n".encode(),
        "bad chunked framing": f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\n{auth}"
                               f"Content-Type: application/json\r\nTransfer-Encoding: chunked"
                               f"\r\n\r\nzz{token}\r\nabc\r\n".encode(),
        "two lengths": f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 2\r\n"
                       f"Content-Length: 3\r\n\r\n{{}}".encode(),
    }


async def test_parser_refusals_have_the_error_shape_and_echo_nothing(d):
    for name, data in parser_faults(d.token).items():
        status, headers, body = await ask(d, data)
        err = refused(status, headers, body, 400, "bad_request")
        assert set(err) == {"code", "message", "correlation_id"}, name
        assert d.token not in body.decode() and d.token[4:20] not in body.decode(), name
        assert headers["x-correlation-id"] == err["correlation_id"], name
    assert d.request("GET", "/v1/jobs").status == 200
    logs = d.logs()
    assert d.token not in logs and d.token[4:20] not in logs
    assert "Traceback" not in logs


def test_no_answer_names_the_versions_behind_it(d):
    for method, path, auth in (("GET", "/healthz", False), ("GET", "/v1/jobs", True),
                               ("GET", "/v1/jobs", "csd_wrong"), ("GET", "/nowhere", True),
                               ("GET", "/metrics", False)):
        r = d.request(method, path, auth=auth)
        assert r.headers["Server"] == "casesignd", (path, r.headers["Server"])
