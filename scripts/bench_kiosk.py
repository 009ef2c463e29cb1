#!/usr/bin/env python3
"""Benchmark: kiosk latency (``POST /v1/sign``) idle and under a saturating batch load,
casesignd against a plain pyHanko signing service in the same run.

Eight kiosks (``--kiosks``), each on its own keep-alive connection (a lean client: it
runs on the machine it measures). Every request is a fresh signature (a unique case ID
per request; no replays), so nothing is served from the signature record. Each
phase runs for ``--duration-s`` after ``--warmup-s`` of unrecorded traffic:

- idle: a closed loop, each kiosk sending the next one-page signature when the previous
  one answered: the service saturated by kiosks alone.
- paced: the kiosks together send ``--paced-rps`` requests a second, each at its own
  fixed turns (at once when a turn has passed): the latency a kiosk sees at that rate.
- load: the closed loop under a batch load: ``--batch-inflight`` concurrent ``sign_case``
  jobs over ``--batch-docs`` large PDFs of ``--batch-mb`` MB (uploaded once as
  objects; every job names fresh signers so each is a new signature), resubmitted
  as each finishes so the pool stays busy through the whole measurement.
- the same phases against the baseline: a minimal aiohttp service (the same multipart
  contract) that signs with pyHanko's ``PdfSigner`` + ``SimpleSigner`` from the same
  PKCS#12 in one process pool of ``os.cpu_count()`` workers; its batch load is the
  same large PDFs signed in that same pool (no priority separation).
- hostile (``--hostile``; casesignd only): the closed loop while a second tenant keeps
  ``--hostile-inflight`` decompression bombs in flight (one-page PDFs of as many Flate
  streams of zeros as fit in ``kiosk.max_document_bytes``, each inflating to just under
  the policy's ``max_decoded_stream_bytes``), sending the next as each is answered
  (after ``--hostile-busy-wait-s`` when it was 503). The bombs' answers are counted by
  status and code.

Counted per phase: answers after 2 s, 503 ``busy`` (the kiosk then waits Retry-After,
at most 1 s, before its next request), 504 ``deadline_exceeded``, other errors. Prints a table and, as the last line, one JSON object of all figures.

``--visible``: casesignd's phases run twice in the run, with invisible signatures and
then, from a second daemon whose policies draw a visible stamp (in their default box),
with the stamp (rows ``casesignd/visible``): the stamp's cost, side by side.

``--document``: the one-page document every kiosk sends: ``plain`` (reportlab text),
``links`` (the same with a link out and a mailto link, which are signed as they are),
or ``form`` (a reportlab form that leaves its look to the viewer: each request is
rewritten with its fields drawn, and poppler and MuPDF draw the received page and
the rewrite; the render check's cost on the kiosk's path). ``--baseline-rev REV``
runs casesignd's phases again from a worktree of that commit, in the same run: the
kiosk's latency before and after (with ``--visible``, both appearances there too).

Both services sign with the key ``casesignd init`` makes (``--key-type``): ECDSA P-256
by default, as init does; ``--key-type rsa`` measures RSA-2048, whose signature is
the largest single cost of a one-page kiosk signature.

    .venv/bin/python scripts/bench_kiosk.py [--duration-s 30] [--batch-mb 40] ...

Loopback only; the daemon runs as ``tests.daemon.Daemon`` in a temporary directory,
logging at its default level (info: six lines for each kiosk signature), as it would
in production.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import io
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchlib import run_script  # noqa: E402  (scripts/, beside this file)
from benchlib.e2e import tree_cpu_s  # noqa: E402
from benchlib.kiosk import SIGNERS, Kiosk  # noqa: E402

LATE_S = 2.0


# --- the pyHanko baseline service (runs in its own process) ----------------------------

_SIGNER: Any = None


def _pyhanko_signer(p12: str, password: bytes) -> Any:
    global _SIGNER
    if _SIGNER is None:
        from pyhanko.sign import signers

        _SIGNER = signers.SimpleSigner.load_pkcs12(p12, passphrase=password)
    return _SIGNER


def _pyhanko_sign(p12: str, password: bytes, src: bytes | str) -> bytes | int:
    """Sign ``src`` (bytes, or a path for the large batch PDFs) with pyHanko's defaults."""
    from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
    from pyhanko.sign import signers

    signer = _pyhanko_signer(p12, password)
    meta = signers.PdfSignatureMetadata(field_name="Signature1")
    if isinstance(src, bytes):
        out = io.BytesIO()
        signers.PdfSigner(meta, signer=signer).sign_pdf(
            IncrementalPdfFileWriter(io.BytesIO(src)), output=out)
        return out.getvalue()
    with open(src, "rb") as inf, tempfile.TemporaryFile() as outf:
        signers.PdfSigner(meta, signer=signer).sign_pdf(IncrementalPdfFileWriter(inf), output=outf)
        return outf.tell()


def serve_baseline(port: int, p12: str, password: bytes) -> None:
    """The baseline: ``POST /v1/sign`` (multipart manifest + document) answers the signed
    PDF; ``POST /batch?inflight=N&path=P`` starts N loops signing P; ``DELETE /batch``
    stops them. Kiosk and batch signatures share one process pool."""
    from aiohttp import web

    pool = ProcessPoolExecutor(max_workers=os.cpu_count() or 2)
    state: dict[str, Any] = {"tasks": [], "done": 0}

    async def sign(request: web.Request) -> web.Response:
        reader = await request.multipart()
        manifest = document = None
        while (part := await reader.next()) is not None:
            if part.name == "manifest":
                manifest = json.loads(await part.read())
            elif part.name == "document":
                document = bytes(await part.read())
        if not manifest or document is None:
            return web.json_response({"error": {"code": "invalid_multipart"}}, status=422)
        loop = asyncio.get_running_loop()
        signed = await loop.run_in_executor(pool, _pyhanko_sign, p12, password, document)
        return web.Response(body=signed, content_type="application/pdf")

    async def batch_loop(path: str) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await loop.run_in_executor(pool, _pyhanko_sign, p12, password, path)
            state["done"] += 1

    async def batch_start(request: web.Request) -> web.Response:
        n = int(request.query["inflight"])
        paths = request.query.getall("path")
        state["tasks"] += [asyncio.create_task(batch_loop(paths[i % len(paths)])) for i in range(n)]
        return web.json_response({"started": n})

    async def batch_stop(request: web.Request) -> web.Response:
        for t in state["tasks"]:
            t.cancel()
        state["tasks"] = []
        return web.json_response({"done": state["done"]})

    async def warm(request: web.Request) -> web.Response:
        return web.json_response({})

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/sign", sign)
    app.router.add_post("/batch", batch_start)
    app.router.add_delete("/batch", batch_stop)
    app.router.add_get("/healthz", warm)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# --- measuring --------------------------------------------------------------------------


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (pure)."""
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, int(round(q / 100 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


def summarize(latencies_s: list[float], counts: dict[str, int], duration_s: float) -> dict[str, Any]:
    """The figures of one phase (pure): latencies of 200 answers, and counts of the rest."""
    ok = sorted(latencies_s)
    ms = [x * 1000 for x in ok]
    return {
        "requests": sum(counts.values()),
        "ok": counts.get("ok", 0),
        "per_s": round(counts.get("ok", 0) / duration_s, 1),
        "p50_ms": round(percentile(ms, 50), 1), "p95_ms": round(percentile(ms, 95), 1),
        "p99_ms": round(percentile(ms, 99), 1), "max_ms": round(max(ms), 1) if ms else None,
        "mean_ms": round(statistics.fmean(ms), 1) if ms else None,
        "late_2s": counts.get("late", 0), "busy_503": counts.get("busy", 0),
        "deadline_504": counts.get("deadline", 0), "other_errors": counts.get("error", 0),
    }


async def kiosk_loop(url: str, token: str, document: bytes, tag: str,
                     stop_at: float, record_from: float, lat: list[float],
                     counts: dict[str, int], errors: list[str], interval_s: float = 0.0) -> None:
    """One kiosk: the next request when the previous one answered (or, paced, at its
    next turn every ``interval_s``, at once if that passed), until ``stop_at``."""
    kiosk = Kiosk(url, token, document)
    n = 0
    rng = random.Random(tag)
    next_at = time.monotonic() + rng.uniform(0, interval_s)
    try:
        while (now := time.monotonic()) < stop_at:
            if interval_s:
                if next_at > now:
                    await asyncio.sleep(next_at - now)
                    now = time.monotonic()
                next_at += interval_s
            n += 1
            t = time.perf_counter()
            retry_after_s = 1.0
            try:
                status, headers, payload = await asyncio.wait_for(
                    kiosk.sign({"case_id": f"K-{tag}-{n}", "signers": SIGNERS}), 30)
                retry_after_s = min(1.0, float(headers.get("retry-after", "1")))
            except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as e:
                status, payload = -1, repr(e).encode()
                await kiosk.close()
            took = time.perf_counter() - t
            if now < record_from:
                continue
            if took > LATE_S:
                counts["late"] = counts.get("late", 0) + 1
            if status == 200:
                counts["ok"] = counts.get("ok", 0) + 1
                lat.append(took)
            elif status == 503:
                counts["busy"] = counts.get("busy", 0) + 1
                # A kiosk honours Retry-After (at most 1 s here) instead of spinning.
                await asyncio.sleep(retry_after_s)
            elif status == 504:
                counts["deadline"] = counts.get("deadline", 0) + 1
            else:
                counts["error"] = counts.get("error", 0) + 1
                if len(errors) < 5:
                    errors.append(f"{status} {payload[:200]!r}")
    finally:
        await kiosk.close()


async def run_kiosks(url: str, token: str, document: bytes, kiosks: int, warmup_s: float,
                     duration_s: float, tag: str, rps: float = 0.0,
                     cpu_s: Callable[[], float] | None = None) -> dict[str, Any]:
    """``kiosks`` closed loops, or with ``rps`` that many requests a second between them.
    ``cpu_s``: the service's CPU seconds so far; its share per answer measured goes in
    ``cpu_ms`` (on a shared machine, steadier than the latencies)."""
    lat: list[float] = []
    counts: dict[str, int] = {}
    errors: list[str] = []
    start = time.monotonic()
    interval_s = kiosks / rps if rps else 0.0
    marks: list[float] = []

    async def mark_start() -> None:
        await asyncio.sleep(max(0.0, start + warmup_s - time.monotonic()))
        if cpu_s is not None:
            marks.append(cpu_s())

    await asyncio.gather(mark_start(), *(kiosk_loop(url, token, document, f"{tag}-{i}",
                                                    start + warmup_s + duration_s,
                                                    start + warmup_s, lat, counts, errors,
                                                    interval_s) for i in range(kiosks)))
    out = summarize(lat, counts, duration_s)
    if cpu_s is not None and marks and out.get("ok"):
        out["cpu_ms"] = round((cpu_s() - marks[0]) * 1000 / out["ok"], 2)
    if errors:
        out["error_samples"] = errors
    return out


async def hostile_loop(url: str, token: str, bomb: bytes, tag: str, stop: asyncio.Event,
                       answers: dict[str, int], busy_wait_s: float) -> None:
    """One hostile connection: a bomb in flight, the next as soon as it is answered."""
    kiosk = Kiosk(url, token, bomb)
    n = 0
    try:
        while not stop.is_set():
            n += 1
            try:
                status, _, payload = await asyncio.wait_for(
                    kiosk.sign({"case_id": f"BOMB-{tag}-{n}", "signers": SIGNERS}), 120)
                try:
                    code = json.loads(payload)["error"]["code"]
                except (ValueError, KeyError, TypeError):
                    code = "pdf" if payload.startswith(b"%PDF") else "?"
                key = f"{status} {code}"
            except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as e:
                key = f"no answer {type(e).__name__}"
                status = -1
                await kiosk.close()
            answers[key] = answers.get(key, 0) + 1
            if status == 503:
                await asyncio.sleep(busy_wait_s)
    finally:
        await kiosk.close()


async def run_hostile(args: argparse.Namespace, d: Any, document: bytes) -> dict[str, Any]:
    """The closed loop of legitimate kiosks while another tenant sends bombs."""
    stop = asyncio.Event()
    answers: dict[str, int] = {}
    bombs = [asyncio.create_task(hostile_loop(d.url, args.hostile_token, args.bomb, f"h{i}",
                                              stop, answers, args.hostile_busy_wait_s))
             for i in range(args.hostile_inflight)]
    try:
        res = await run_kiosks(d.url, d.token, document, args.kiosks, args.warmup_s,
                               args.duration_s, "ch")
    finally:
        stop.set()
        # The bombs in flight are answered within the deadline (504 at worst).
        _, late = await asyncio.wait(bombs, timeout=60)
        for t in late:
            t.cancel()
    res["bombs"] = dict(sorted(answers.items()))
    res["bombs_unanswered_at_end"] = len(late)
    res["bomb"] = {"bytes": len(args.bomb), "streams": args.bomb_streams,
                   "stream_decoded_bytes": args.bomb_stream_bytes,
                   "inflight": args.hostile_inflight}
    return res


# --- casesignd batch load -----------------------------------------------------------------


async def casesignd_batch(url: str, token: str, objects: list[dict[str, Any]], inflight: int,
                          stop: asyncio.Event, stats: dict[str, int]) -> None:
    """Keep ``inflight`` sign_case jobs running: submit, poll to the end, submit again."""
    import aiohttp

    auth = {"Authorization": f"Bearer {token}"}

    async def one_loop(i: int, session: aiohttp.ClientSession) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            obj = objects[(i + n) % len(objects)]
            body = {"kind": "sign_case", "case_id": obj["case_id"],
                    "items": [{"role": "contract", "name": "packet.pdf",
                               "media_type": "application/pdf", "object_ref": f"sha256:{obj['sha256']}",
                               "sha256": obj["sha256"], "size": obj["size"]}],
                    "signers": [{"id": f"batch-{i}-{n}-{uuid.uuid4().hex[:8]}", "name": "Batch",
                                 "role": "seller"}]}
            async with session.post(url + "/v1/jobs", json=body, headers=auth) as r:
                job = await r.json()
                if r.status not in (200, 202):
                    stats["submit_errors"] = stats.get("submit_errors", 0) + 1
                    await asyncio.sleep(0.5)
                    continue
            while not stop.is_set():
                await asyncio.sleep(0.25)
                async with session.get(f"{url}/v1/jobs/{job['job_id']}", headers=auth) as r:
                    state = (await r.json())["state"]
                if state in ("ready", "failed", "canceled"):
                    stats[state] = stats.get(state, 0) + 1
                    break

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(one_loop(i, session) for i in range(inflight)))


def upload_objects(d: Any, paths: list[Path]) -> list[dict[str, Any]]:
    import urllib.request

    out = []
    for i, p in enumerate(paths):
        h = hashlib.sha256()
        with open(p, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        sha, size, case_id = h.hexdigest(), p.stat().st_size, f"BATCH-{i}"
        with open(p, "rb") as f:
            req = urllib.request.Request(
                f"{d.url}/v1/cases/{case_id}/objects/{sha}", data=f, method="PUT",
                headers={"Authorization": f"Bearer {d.token}", "Content-Length": str(size),
                         "Content-Type": "application/octet-stream"})
            with urllib.request.urlopen(req, timeout=300) as r:
                assert r.status in (200, 201), r.status
        out.append({"case_id": case_id, "sha256": sha, "size": size})
    return out


# --- phases ---------------------------------------------------------------------------------


async def measure_casesignd(args: argparse.Namespace, d: Any, document: bytes,
                            objects: list[dict[str, Any]]) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if "idle" in args.phases:
        res["idle"] = await run_kiosks(d.url, d.token, document, args.kiosks, args.warmup_s,
                                       args.duration_s, "ci",
                                       cpu_s=lambda: tree_cpu_s(d.proc.pid))
    if "paced" in args.phases:
        res["paced"] = await run_kiosks(d.url, d.token, document, args.kiosks, args.warmup_s,
                                        args.duration_s, "cp", args.paced_rps)
    if "load" in args.phases:
        stop = asyncio.Event()
        stats: dict[str, int] = {}
        load = asyncio.create_task(casesignd_batch(d.url, d.token, objects, args.batch_inflight,
                                                   stop, stats))
        await asyncio.sleep(args.ramp_s)  # let the pool fill before measuring
        res["load"] = await run_kiosks(d.url, d.token, document, args.kiosks, args.warmup_s,
                                       args.duration_s, "cl")
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(load, 120)
        res["load"]["batch_jobs"] = stats
    if "hostile" in args.phases:
        # Last: a bomb's check may go on past its 504 and would weigh on a later phase.
        res["hostile"] = await run_hostile(args, d, document)
    return res


async def measure_baseline(args: argparse.Namespace, url: str, document: bytes,
                           paths: list[Path]) -> dict[str, Any]:
    import aiohttp

    res: dict[str, Any] = {}
    if "idle" in args.phases:
        res["idle"] = await run_kiosks(url, "-", document, args.kiosks, args.warmup_s,
                                       args.duration_s, "bi")
    if "paced" in args.phases:
        res["paced"] = await run_kiosks(url, "-", document, args.kiosks, args.warmup_s,
                                        args.duration_s, "bp", args.paced_rps)
    if "load" not in args.phases:
        return res
    async with aiohttp.ClientSession() as s:
        q = [("inflight", str(args.batch_inflight))] + [("path", str(p)) for p in paths]
        async with s.post(url + "/batch", params=q) as r:
            assert r.status == 200
        await asyncio.sleep(args.ramp_s)
        res["load"] = await run_kiosks(url, "-", document, args.kiosks, args.warmup_s,
                                       args.duration_s, "bl")
        async with s.delete(url + "/batch") as r:
            res["load"]["batch_jobs"] = {"ready": (await r.json())["done"]}
    return res


def start_baseline(port: int, p12: Path, password: bytes, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:  # a file, not a pipe nobody reads (it could fill and block)
        proc = subprocess.Popen([sys.executable, __file__, "--serve-baseline", str(port), str(p12)],
                                env={**os.environ, "BENCH_P12_PASSWORD": password.decode()},
                                stdout=out, stderr=subprocess.STDOUT)
    import urllib.request

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).read()
            return proc
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the baseline service did not start")


def add_hostile_tenant(args: argparse.Namespace, d: Any) -> None:
    """A second tenant in the daemon's configuration (before it starts), and its bomb,
    sized by the daemon's own limits."""
    from tests.daemon import to_toml
    from tests.helpers_bombs import many_stream_bomb

    if not getattr(args, "hostile_token", ""):
        args.hostile_token = f"csd_bench-hostile-{uuid.uuid4().hex}"
    d.config["tenants"].append({"name": "bench-hostile",
                                "token_sha256": hashlib.sha256(args.hostile_token.encode()).hexdigest()})
    d.config_path.write_text(to_toml(d.config))
    policy = next(p for p in d.config["policies"] if p["version"] == d.config["default_policy"])
    args.bomb_stream_bytes = policy["max_decoded_stream_bytes"] - 4096
    if getattr(args, "bomb", None):  # built for the run's first daemon
        return
    t = time.perf_counter()
    args.bomb, args.bomb_streams = many_stream_bomb(d.config["kiosk"]["max_document_bytes"],
                                                    policy["max_decoded_stream_bytes"])
    print(f"built a bomb of {len(args.bomb)} bytes ({args.bomb_streams} streams of "
          f"{args.bomb_stream_bytes} decoded) in {time.perf_counter() - t:.1f} s", file=sys.stderr)


def kiosk_document(kind: str, tmp: Path) -> bytes:
    """The one-page document of ``--document``."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    from tests.helpers_pki import reportlab_pdf

    if kind == "plain":
        return reportlab_pdf(tmp / "kiosk.pdf").read_bytes()
    path = tmp / f"kiosk-{kind}.pdf"
    c = canvas.Canvas(str(path), pagesize=A4)
    c.drawString(72, 770, "Kiosk agreement MKT-2026-00042")
    if kind == "links":
        c.drawString(72, 740, "Terms: example.org/terms; questions: office@example.org")
        c.linkURL("https://example.org/terms", (72, 735, 300, 752), relative=0)
        c.linkURL("mailto:office@example.org", (300, 735, 500, 752), relative=0)
    else:
        c.drawString(72, 740, "Name:")
        c.acroForm.textfield(name="name", x=140, y=732, width=200, height=20, value="J. Doe")
        c.acroForm.checkbox(name="agree", x=140, y=700, size=16, checked=True)
    c.showPage()
    c.save()
    if kind == "links":
        return path.read_bytes()
    # reportlab draws its fields; a viewer-drawn form asks the viewers to.
    import io

    import pikepdf

    with pikepdf.open(path) as pdf:
        pdf.Root.AcroForm.NeedAppearances = True
        out = io.BytesIO()
        pdf.save(out)
    return out.getvalue()


def table(results: dict[str, Any]) -> str:
    cols = ["ok", "per_s", "p50_ms", "p95_ms", "p99_ms", "max_ms", "cpu_ms", "late_2s",
            "busy_503", "deadline_504", "other_errors"]
    key = results.get("config", {}).get("key_type", "?")
    lines = [f"signing key: {key} (both services); latencies in ms",
             f"{'service':<10} {'phase':<7} " + " ".join(f"{c:>12}" for c in cols)]
    services = [*(k for k in results if k.startswith("casesignd")), "pyhanko"]
    width = max(10, *(len(s) for s in services))
    lines[1] = f"{'service':<{width}} {'phase':<7} " + " ".join(f"{c:>12}" for c in cols)
    for svc in services:
        for phase in ("idle", "paced", "load", "hostile"):
            r = results.get(svc, {}).get(phase)
            if r:
                lines.append(f"{svc:<{width}} {phase:<7} "
                             + " ".join(f"{str(r.get(c, '-')):>12}" for c in cols))
    hostile = results.get("casesignd", {}).get("hostile")
    if hostile:
        bomb = hostile["bomb"]
        lines.append(f"hostile: {bomb['inflight']} bombs in flight from a second tenant, each "
                     f"{bomb['bytes']} bytes of {bomb['streams']} streams x "
                     f"{bomb['stream_decoded_bytes']} decoded; their answers: "
                     + (", ".join(f"{k}: {v}" for k, v in hostile["bombs"].items()) or "none"))
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve-baseline":
        serve_baseline(int(sys.argv[2]), sys.argv[3], os.environ["BENCH_P12_PASSWORD"].encode())
        return
    if "--level" in sys.argv:  # the cost per PAdES level: scripts/bench_levels.py
        run_script("bench_levels.py", ["kiosk", *sys.argv[1:]])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kiosks", type=int, default=8)
    ap.add_argument("--duration-s", type=float, default=30.0, help="measured time per phase")
    ap.add_argument("--warmup-s", type=float, default=3.0, help="unrecorded time per phase")
    ap.add_argument("--ramp-s", type=float, default=5.0, help="batch load before measuring")
    ap.add_argument("--batch-mb", type=float, default=40.0, help="size of each large PDF")
    ap.add_argument("--batch-docs", type=int, default=2, help="distinct large PDFs")
    ap.add_argument("--batch-inflight", type=int, default=8, help="concurrent batch signatures")
    ap.add_argument("--workers", type=int, default=4, help="casesignd workers.concurrency")
    ap.add_argument("--key-type", choices=("ec", "rsa"), default="ec",
                    help="the signing key `casesignd init` makes, used by both services: "
                         "ec (P-256, init's default) or rsa (RSA-2048)")
    ap.add_argument("--only", choices=("casesignd", "pyhanko"), default=None)
    ap.add_argument("--phases", type=lambda v: v.split(","), default=["idle", "paced", "load"],
                    help="which phases to run: idle,paced,load,hostile")
    ap.add_argument("--hostile", action="store_true",
                    help="also run the hostile phase: bombs from a second tenant beside the "
                         "kiosks (casesignd only)")
    ap.add_argument("--hostile-inflight", type=int, default=4,
                    help="the hostile phase: decompression bombs kept in flight")
    ap.add_argument("--hostile-busy-wait-s", type=float, default=0.1,
                    help="the hostile phase: the bomb sender's pause after a 503")
    ap.add_argument("--kiosk-share", type=int, default=0,
                    help="casesignd kiosk.max_concurrent_per_tenant (0: its default, half "
                         "of kiosk.max_concurrent)")
    ap.add_argument("--paced-rps", type=float, default=100.0,
                    help="the paced phase: requests a second from all kiosks together")
    ap.add_argument("--document", choices=("plain", "links", "form"), default="plain",
                    help="the one-page document each kiosk sends (see the docstring)")
    ap.add_argument("--visible", action="store_true",
                    help="casesignd's phases again from a daemon whose policies draw a visible "
                         "stamp (appearance = \"visible\"), beside the invisible signature")
    ap.add_argument("--baseline-rev", default="",
                    help="also run casesignd's phases from a worktree of this commit")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--temp-dir", type=Path, default=Path("/dev/shm") if Path("/dev/shm").is_dir() else None,
                    help="where the daemon's working files go (a tmpfs, as in production)")
    ap.add_argument("--keep", action="store_true", help="keep the daemon's directory")
    args = ap.parse_args()
    if args.hostile and "hostile" not in args.phases:
        args.phases.append("hostile")

    from tests.daemon import Daemon, free_port
    from tests.helpers_corpus import build_large_pdf

    tmp = Path(tempfile.mkdtemp(prefix="bench-kiosk-", dir=args.workdir))
    results: dict[str, Any] = {"config": {k: (str(v) if isinstance(v, Path) else v)
                                          for k, v in vars(args).items()},
                               "cpus": os.cpu_count()}
    d = baseline = None
    cleanup = [tmp]
    try:
        document = kiosk_document(args.document, tmp)
        t = time.perf_counter()
        paths = [build_large_pdf(tmp / f"big-{i}.pdf", int(args.batch_mb * 1e6))
                 for i in range(args.batch_docs if "load" in args.phases else 0)]
        print(f"built {len(paths)} x {args.batch_mb} MB in {time.perf_counter() - t:.1f} s",
              file=sys.stderr)
        # Working files on a tmpfs, as under the systemd unit (a size-capped tmpfs):
        # on the state disk, batch copies would contend with every fsync.
        shm = Path(tempfile.mkdtemp(prefix="bench-kiosk-", dir=args.temp_dir))
        cleanup.append(shm)

        def daemon(name: str, visible: bool, env: dict[str, str] | None = None) -> Any:
            made = Daemon(tmp / name, {
                "workers": {"concurrency": args.workers},
                "storage": {"temp_dir": str(shm)},
                "kiosk": {"max_concurrent_per_tenant": args.kiosk_share},
            }, env=env, init_args=["--key-type", args.key_type], test_parts=False)
            if visible:
                from tests.daemon import to_toml

                for policy in made.config["policies"]:
                    policy["appearance"] = "visible"
                made.config_path.write_text(to_toml(made.config))
            if "hostile" in args.phases:
                add_hostile_tenant(args, made)
            return made

        def measure(label: str, made: Any) -> None:
            made.start()
            try:
                objects = upload_objects(made, paths)
                results[label] = asyncio.run(measure_casesignd(args, made, document, objects))
            finally:
                made.stop(timeout_s=120)
            print(table(results), file=sys.stderr)

        appearances = (False, True) if args.visible else (False,)
        d = daemon("daemon", False)
        if args.only in (None, "casesignd"):
            for visible in appearances:
                measure("casesignd/visible" if visible else "casesignd",
                        daemon("daemon-visible", True) if visible else d)
        if args.baseline_rev and args.only in (None, "casesignd"):
            tree = tmp / f"rev-{args.baseline_rev}"
            r = subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach",
                                str(tree), args.baseline_rev], capture_output=True, text=True)
            if r.returncode == 0:
                try:
                    for visible in appearances:
                        label = f"casesignd@{args.baseline_rev}" + ("/visible" if visible else "")
                        measure(label, daemon(f"daemon-rev-{int(visible)}", visible,
                                              env={"PYTHONPATH": str(tree)}))
                finally:
                    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                                    str(tree)], capture_output=True)
            else:
                print(f"(no baseline: {args.baseline_rev} is not a commit here)", file=sys.stderr)
        if args.only in (None, "pyhanko"):
            port = free_port()
            password = (d.dir / "signing.pass").read_bytes().strip()
            baseline = start_baseline(port, d.dir / "signing.p12", password, tmp / "baseline.log")
            results["pyhanko"] = asyncio.run(
                measure_baseline(args, f"http://127.0.0.1:{port}", document, paths))
    finally:
        if d is not None:
            with contextlib.suppress(Exception):
                d.stop(timeout_s=60)
        if baseline is not None:
            baseline.terminate()
            with contextlib.suppress(Exception):
                baseline.wait(timeout=30)
        if not args.keep:
            import shutil

            for path in cleanup:
                shutil.rmtree(path, ignore_errors=True)
    print(table(results))
    print(json.dumps(results, sort_keys=True))


if __name__ == "__main__":
    main()
