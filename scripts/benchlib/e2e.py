"""End to end through a real daemon on loopback: one-page ``sign_case`` jobs, each a
fresh signature, submitted by one of two clients, with the CPU the daemon and its
worker processes spent on them.

- ``aiohttp``: the bench client, 32 submitters on kept-alive connections, polling
  each job every 50 ms once every job is in;
- ``plain``: what a small team writes first: 16 threads, a new connection for every
  request (``http.client``), each thread polling its jobs every 0.2 s;
- ``listing``: the bench client's submitters, then, instead of a GET per job, the
  tenant's queue watched with ``GET /v1/jobs?state=…&limit=1`` every 50 ms until it
  drains and the finished jobs read 200 to a page (``cursor``): what a batch client
  that submits thousands of jobs does;
- ``kiosk``: the same contract through the synchronous path instead (``POST
  /v1/sign``), 8 kiosks on kept-alive connections, each sending its next request when
  the last one answered, every request a fresh signature: the batch rows' yardstick.
  Its jobs are read once the clock has stopped, for their own clocks.

The client runs on the same machine, so its CPU (``client_cpu_ms_per_job``, this
process's own) comes out of the same two cores as the daemon's.

With ``distinct``, every job signs a contract of its own (uploaded before the clock
starts, which waits until the daemon is idle again: the uploads' own work is counted
apart, ``upload_cpu_ms_per_contract``), so that nothing a worker process learnt from one job's document serves the
next; otherwise every job signs the same stored contract, as when one contract is
signed for many signers.

Throughput is counted from the jobs' own clocks (first admission to last finish) and,
for the plain client, also as that client saw it (first request to the last job it
saw ready). CPU is the daemon's process tree (its forkserver and worker processes
included), read from ``/proc`` before and after.

``daemon_src`` runs the daemon from another checkout (a worktree of an earlier commit)
to compare both in the same run.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import http.client
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.daemon import Daemon  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int | str) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command name (``state`` first)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2:].split()


def tree_cpu_s(pid: int) -> float:
    """User and system CPU of ``pid`` and every process below it (and of their children
    that ended and were waited for)."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = _stat(entry)
        except OSError:
            continue
        stats[int(entry)] = fields
        children.setdefault(int(fields[1]), []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        f = stats.get(p)
        if f is not None:
            total += sum(int(x) for x in f[11:15])  # utime stime cutime cstime
        todo.extend(children.get(p, ()))
    return total / TICKS


def own_cpu_s(pid: int) -> float:
    """User and system CPU of ``pid`` alone (a daemon's main process, without its
    worker processes)."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime stime


def settle(pid: int, window_s: float = 0.25, idle_share: float = 0.03,
           most_s: float = 5.0) -> None:
    """Wait until the process tree ``pid`` spends under ``idle_share`` of a core over
    ``window_s`` (at most ``most_s``): what earlier requests left running is done."""
    end = time.monotonic() + most_s
    while time.monotonic() < end:
        before = tree_cpu_s(pid)
        time.sleep(window_s)
        if tree_cpu_s(pid) - before < idle_share * window_s:
            return


def _ts(text: str) -> float:
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC).timestamp()


Doc = tuple[str, int]  # a stored contract: its SHA-256 and size


def body(doc: Doc, i: int, tag: str, fields: dict[str, Any] | None = None) -> dict[str, Any]:
    """Job ``i``'s ``sign_case`` body: ``doc`` signed for a signer of its own, with
    ``fields`` (``{"webhook": "bench"}``) on top."""
    sha, size = doc
    return {**(fields or {}), "kind": "sign_case", "case_id": "E2E-1",
            "items": [{"role": "contract", "name": "c.pdf", "media_type": "application/pdf",
                       "object_ref": f"sha256:{sha}", "sha256": sha, "size": size}],
            "signers": [{"id": f"signer-{tag}-{i}", "name": "Bench", "role": "buyer"}]}


def aiohttp_client(urls: list[str], token: str, docs: list[Doc], jobs: int,
                   tag: str, *, listing: bool = False,
                   fields: dict[str, Any] | None = None) -> list[dict]:
    """The bench client: 32 submitters on kept-alive connections, each to one of
    ``urls`` in turn (daemons of one service), then every job polled until it ends
    (with ``listing``: the queue watched until it drains, then the jobs read by page).
    Job ``i`` signs ``docs[i % len(docs)]``, its body with ``fields`` on top."""
    import aiohttp

    async def run() -> list[dict]:
        ids: list[str] = []
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as s:
            queue: asyncio.Queue[int] = asyncio.Queue()
            for i in range(jobs):
                queue.put_nowait(i)

            async def submitter(k: int) -> None:
                url = urls[k % len(urls)]
                while not queue.empty():
                    i = queue.get_nowait()
                    async with s.post(f"{url}/v1/jobs",
                                      json=body(docs[i % len(docs)], i, tag, fields)) as r:
                        ids.append((await r.json())["job_id"])

            await asyncio.gather(*(submitter(k) for k in range(32)))
            if listing:
                return await by_listing(s, urls[0], set(ids))
            out = []
            for n, job_id in enumerate(ids):
                url = urls[n % len(urls)]
                while True:
                    async with s.get(f"{url}/v1/jobs/{job_id}") as r:
                        job = await r.json()
                    if job["state"] in ("ready", "failed"):
                        out.append(job)
                        break
                    await asyncio.sleep(0.05)
            return out

    return asyncio.run(run())


async def by_listing(s: Any, url: str, ids: set[str]) -> list[dict]:
    """The jobs ``ids`` once none of the tenant's jobs waits or runs: the queue watched
    every 50 ms, then every finished job read 200 to a page, newest first."""

    async def page(query: str) -> dict[str, Any]:
        async with s.get(f"{url}/v1/jobs?{query}") as r:
            assert r.status == 200, await r.text()
            return await r.json()

    async def waiting() -> bool:
        for state in ("queued", "processing"):
            if (await page(f"state={state}&limit=1"))["jobs"]:
                return True
        return False

    while await waiting():
        await asyncio.sleep(0.05)
    out: list[dict] = []
    for state in ("ready", "failed"):
        cursor = ""
        while True:
            got = await page(f"state={state}&limit=200" + (f"&cursor={cursor}" if cursor else ""))
            out += [j for j in got["jobs"] if j["job_id"] in ids]
            cursor = got["next_cursor"]
            if not cursor:
                break
    return out


def kiosk_client(url: str, token: str, doc: bytes, jobs: int, tag: str,
                 kiosks: int = 8) -> list[str]:
    """``jobs`` signatures of ``doc`` through ``POST /v1/sign`` from ``kiosks`` closed
    loops (benchlib.kiosk, bench_kiosk's client); the job IDs of the answers."""
    from benchlib.kiosk import SIGNERS, Kiosk

    async def run() -> list[str]:
        ids: list[str] = []
        left = iter(range(jobs))

        async def loop() -> None:
            kiosk = Kiosk(url, token, doc)
            try:
                for i in left:
                    status, headers, payload = await kiosk.sign(
                        {"case_id": f"E2E-K-{tag}-{i}", "signers": SIGNERS})
                    assert status == 200, payload[:300]
                    ids.append(headers["x-job-id"])
            finally:
                await kiosk.close()

        await asyncio.gather(*(loop() for _ in range(kiosks)))
        return ids

    return asyncio.run(run())


def _plain_request(d: Daemon, method: str, path: str, data: dict | None = None) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
    try:
        headers = {"Authorization": f"Bearer {d.token}"}
        payload = None
        if data is not None:
            payload = json.dumps(data).encode()
            headers["Content-Type"] = "application/json"
        conn.request(method, path, payload, headers)
        resp = conn.getresponse()
        return json.loads(resp.read())
    finally:
        conn.close()


def _plain_client(d: Daemon, docs: list[Doc], jobs: int, tag: str,
                  threads: int = 16, poll_s: float = 0.2) -> tuple[list[dict], float, float]:
    done: list[dict] = []
    lock = threading.Lock()
    started = time.time()
    last_ready = [started]
    polls = [0]

    def worker(k: int) -> None:
        mine = list(range(k, jobs, threads))
        pending: list[str] = []
        next_poll = time.monotonic() + poll_s
        while mine or pending:
            if mine and time.monotonic() < next_poll:
                i = mine.pop(0)
                pending.append(_plain_request(d, "POST", "/v1/jobs",
                                              body(docs[i % len(docs)], i, tag))["job_id"])
                continue
            if not mine:
                time.sleep(max(0.0, next_poll - time.monotonic()))
            next_poll = time.monotonic() + poll_s
            still = []
            with lock:
                polls[0] += len(pending)
            for job_id in pending:
                job = _plain_request(d, "GET", f"/v1/jobs/{job_id}")
                if job["state"] in ("ready", "failed"):
                    with lock:
                        done.append(job)
                        last_ready[0] = max(last_ready[0], time.time())
                else:
                    still.append(job_id)
            pending = still

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return done, len(done) / (last_ready[0] - started), polls[0] / max(1, len(done))


def upload_and_warm(service: Any, urls: list[str], doc: bytes, warm_jobs: int) -> Doc:
    """Upload the contract every job signs (case E2E-1) to ``service`` (a daemon, or
    several of one store) and run ``warm_jobs`` jobs through ``urls`` first, so that the
    worker processes are started and their imports done; the contract's digest and size."""
    sha = hashlib.sha256(doc).hexdigest()
    r = service.request("PUT", f"/v1/cases/E2E-1/objects/{sha}", raw=doc,
                        headers={"Content-Type": "application/pdf"})
    assert r.status in (200, 201), r.body
    warm = aiohttp_client(urls, service.token, [(sha, len(doc))], warm_jobs, "warm")
    assert all(j["state"] == "ready" for j in warm), warm
    return sha, len(doc)


def one_page(i: int) -> bytes:
    """A one-page contract of its own (reportlab, like the shared one)."""
    import io

    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    out = io.BytesIO()
    c = canvas.Canvas(out, pagesize=A4)
    for line in range(40):
        c.drawString(60, 800 - 18 * line, f"Contract {i}, line {line + 1}: terms and conditions apply.")
    c.showPage()
    c.save()
    return out.getvalue()


def upload_distinct(url: str, token: str, n: int) -> list[Doc]:
    """``n`` contracts of their own, uploaded to case E2E-1 by 16 clients at once."""
    import aiohttp

    docs = [one_page(i) for i in range(n)]

    async def upload() -> list[Doc]:
        sem = asyncio.Semaphore(16)
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as s:
            async def put(doc: bytes) -> Doc:
                sha = hashlib.sha256(doc).hexdigest()
                async with sem, s.put(f"{url}/v1/cases/E2E-1/objects/{sha}", data=doc,
                                      headers={"Content-Type": "application/pdf"}) as r:
                    assert r.status in (200, 201), await r.text()
                return sha, len(doc)

            return list(await asyncio.gather(*(put(d) for d in docs)))

    return asyncio.run(upload())


def run(workdir: Path, doc: bytes, jobs: int, client: str, *, daemon_src: Path | None = None,
        concurrency: int = 8, distinct: bool = False,
        settings: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """One daemon, ``jobs`` jobs through ``client`` (each its own contract with
    ``distinct``; ``settings``: config sections of its own, ``{"workers": {...}}``);
    the figures."""
    env = {"PYTHONPATH": str(daemon_src)} if daemon_src is not None else {}
    settings = settings or {}
    d = Daemon(workdir, {**settings, "logging": {"level": "warning"},
                         "workers": {"concurrency": concurrency, "max_queue_depth": jobs + 10,
                                     **settings.get("workers", {})}},
               env=env, test_parts=False)
    d.start()
    try:
        docs = [upload_and_warm(d, [d.url], doc, 8)]
        assert d.proc is not None
        up0 = tree_cpu_s(d.proc.pid)
        if distinct:
            docs = upload_distinct(d.url, d.token, jobs)
        # What the uploads leave to do (their writes' checkpoints, a collection) is
        # theirs, not the jobs': the clock starts once the daemon is idle again.
        settle(d.proc.pid)
        upload_cpu = tree_cpu_s(d.proc.pid) - up0
        cpu0, main0 = tree_cpu_s(d.proc.pid), own_cpu_s(d.proc.pid)
        own0 = os.times()
        polls = None
        if client == "plain":
            done, seen_rate, polls = _plain_client(d, docs, jobs, "run")
        elif client == "kiosk":
            ids, seen_rate = kiosk_client(d.url, d.token, doc, jobs, "run"), None
        else:
            done, seen_rate = aiohttp_client([d.url], d.token, docs, jobs, "run",
                                             listing=client == "listing"), None
        own1 = os.times()
        cpu, main = tree_cpu_s(d.proc.pid) - cpu0, own_cpu_s(d.proc.pid) - main0
        if client == "kiosk":
            done = [d.request("GET", f"/v1/jobs/{job_id}").json() for job_id in ids]
    finally:
        d.stop()
    out = {"client": client, "documents": "distinct" if distinct else "one",
           **summarize(done, cpu)}
    out["main_cpu_ms_per_job"] = round(main * 1000 / max(1, out["ready"]), 2)
    if distinct:
        out["upload_cpu_ms_per_contract"] = round(upload_cpu * 1000 / max(1, len(docs)), 2)
    client_s = own1.user + own1.system - own0.user - own0.system
    out["client_cpu_ms_per_job"] = round(client_s * 1000 / max(1, out["ready"]), 2)
    if seen_rate is not None:
        out["client_seen_jobs_per_s"] = round(seen_rate, 1)
    if polls is not None:
        out["polls_per_job"] = round(polls, 2)
    return out


def ended_at(job: dict[str, Any]) -> float:
    """When a finished job ended (Unix seconds), by its own clocks."""
    return _ts(job["created_at"]) + job["timings"]["total_ms"] / 1000


def summarize(done: list[dict], cpu_s: float) -> dict[str, Any]:
    """The figures of finished jobs: rate by their own clocks (first admission to last
    finish), CPU per ready job, the median processing time."""
    start = min(_ts(j["created_at"]) for j in done)
    end = max(ended_at(j) for j in done)
    ready = sum(j["state"] == "ready" for j in done)
    processing = sorted(j["timings"]["processing_ms"] for j in done)
    return {"jobs": len(done), "ready": ready,
            "jobs_per_s": round(ready / (end - start), 1),
            "cpu_ms_per_job": round(cpu_s * 1000 / max(1, ready), 2),
            "processing_p50_ms": round(processing[len(processing) // 2], 2)}
