#!/usr/bin/env python3
"""Benchmark: what casesignd tells the systems around it, traces and webhooks.

    scripts/bench webhooks [--jobs 1000] [--rounds 3] [--quick] [--dir DIR]
    scripts/bench sign --tracing [the same options]     (this program)

1. **Tracing's cost.** One-page ``sign_case`` jobs end to end through a real daemon on
   loopback (scripts/benchlib/e2e.py, the bench client: 32 submitters, every job
   polled), three ways in turn: tracing off (``[tracing] otlp_endpoint`` empty: nothing
   of OpenTelemetry imported); on with its exporter unable to send (the endpoint a
   closed loopback port: every span made and batched, each export refused at once and
   its spans dropped, so the figure is the cost of making spans, nearly without that
   of sending them); and on with an exporter (a loopback OTLP/HTTP receiver in this
   process that decodes each export with ``opentelemetry-proto`` and answers 200).
   Jobs a second (by the jobs' own clocks) and CPU per job (the daemon and its worker
   processes, from ``/proc``); each row is the median of ``--rounds`` runs, the three
   ways in turn so that a shared machine's drift falls on all alike.
2. **Webhooks.** The same jobs, each naming an endpoint on a loopback receiver in this
   process (it answers 204 at once, without checking signatures): deliveries a second
   (from the first receipt to the last) beside the jobs' own rate, and how long each
   delivery arrived after its job ended (the job's ``created_at`` plus ``total_ms``,
   on the same machine's clock): median, 95th percentile and longest.

The client and the receivers run on the same machine, so their CPU comes out of the
same cores as the daemon's. The last line is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchlib import e2e, loadavg  # noqa: E402  (scripts/, beside this file)
from benchlib.documents import make_pages  # noqa: E402
from benchlib.sink import Sink  # noqa: E402

from tests.daemon import Daemon, free_port, to_toml  # noqa: E402

WAYS = ("off", "on, exporter unreachable", "on, OTLP receiver")


class SpanCount:
    """What the loopback OTLP receiver got: exports and spans."""

    def __init__(self) -> None:
        self.exports = 0
        self.spans = 0

    def __call__(self, _at: float, _headers: Any, body: bytes) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        self.exports += 1
        self.spans += sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)


def tracing_rows(work: Path, doc: bytes, jobs: int, rounds: int) -> list[dict[str, Any]]:
    """The three ways of :data:`WAYS`, ``rounds`` times each in turn; the median run of
    each by jobs/s, with the spans the receiver got per job."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    seen: dict[str, list[dict[str, Any]]] = {w: [] for w in WAYS}
    for n in range(rounds):
        for way in (WAYS if n % 2 == 0 else WAYS[::-1]):
            counted = SpanCount()
            with Sink("/v1/traces", counted, body=ExportTraceServiceResponse().SerializeToString(),
                      content_type="application/x-protobuf") as otlp:
                endpoint = {"off": "", "on, OTLP receiver": otlp.url}.get(
                    way, f"http://127.0.0.1:{free_port()}/v1/traces")
                row = e2e.run(work / f"t-{WAYS.index(way)}-{n}", doc, jobs, "aiohttp",
                              settings={"tracing": {"otlp_endpoint": endpoint}})
                # The exporter sends what is left when the daemon stops.
            row["spans_exported_per_job"] = round(counted.spans / max(1, row["jobs"]), 1)
            seen[way].append({"tracing": way, **row})
    rows = []
    for way in WAYS:
        by_rate = sorted(seen[way], key=lambda r: r["jobs_per_s"])
        row = dict(by_rate[len(by_rate) // 2])
        if rounds > 1:
            row["jobs_per_s_range"] = [by_rate[0]["jobs_per_s"], by_rate[-1]["jobs_per_s"]]
            row["cpu_ms_per_job_median"] = statistics.median(r["cpu_ms_per_job"]
                                                             for r in seen[way])
        rows.append(row)
    return rows


def webhook_run(work: Path, doc: bytes, jobs: int) -> dict[str, Any]:
    """``jobs`` jobs naming a loopback endpoint; the deliveries' rate and lag."""
    receipts: dict[str, tuple[float, str]] = {}  # by webhook-id: (arrival, job id)

    def seen(at: float, headers: Any, body: bytes) -> None:
        receipts.setdefault(headers["webhook-id"], (at, json.loads(body)["job_id"]))

    with Sink("/hook", seen, status=204) as hook:
        d = Daemon(work / "w", {"logging": {"level": "warning"},
                                "workers": {"concurrency": 8, "max_queue_depth": jobs + 10}},
                   test_parts=False)
        secret = "whsec_" + base64.b64encode(os.urandom(24)).decode()  # made for the run
        (d.dir / "bench-hook.secret").write_text(secret + "\n")
        d.config["tenants"][0]["webhooks"] = [{
            "name": "bench", "url": hook.url, "secret_file": str(d.dir / "bench-hook.secret")}]
        d.config_path.write_text(to_toml(d.config))
        d.start()
        try:
            docs = [e2e.upload_and_warm(d, [d.url], doc, 8)]
            end = time.monotonic() + 60
            while len(receipts) < 8 and time.monotonic() < end:  # the warm-up's, first
                time.sleep(0.05)
            warm = len(receipts)
            assert d.proc is not None
            cpu0 = e2e.tree_cpu_s(d.proc.pid)
            done = e2e.aiohttp_client([d.url], d.token, docs, jobs, "run",
                                      fields={"webhook": "bench"})
            end = time.monotonic() + 120
            while len(receipts) < warm + jobs and time.monotonic() < end:
                time.sleep(0.05)
            cpu = e2e.tree_cpu_s(d.proc.pid) - cpu0
        finally:
            d.stop()
    ended = {j["job_id"]: e2e.ended_at(j) for j in done}
    mine = sorted((at, ended[job_id]) for at, job_id in receipts.values() if job_id in ended)
    lags = sorted((at - end) * 1000 for at, end in mine)
    out = {**e2e.summarize(done, cpu), "delivered": len(mine)}
    if len(mine) > 1:
        out["deliveries_per_s"] = round(len(mine) / (mine[-1][0] - mine[0][0]), 1)
        out["lag_p50_ms"] = round(lags[len(lags) // 2], 1)
        out["lag_p95_ms"] = round(lags[int(len(lags) * 0.95) - 1], 1)
        out["lag_max_ms"] = round(lags[-1], 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000, help="jobs a run (default 1000)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="runs of each tracing way, in turn (default 3; --quick: 1)")
    ap.add_argument("--quick", action="store_true", help="300 jobs, one round")
    ap.add_argument("--tracing", action="store_true", help=argparse.SUPPRESS)  # bench sign's
    ap.add_argument("--dir", default="/dev/shm" if Path("/dev/shm").is_dir() else None,
                    help="working directory (default: tmpfs)")
    args = ap.parse_args()
    jobs = 300 if args.quick else args.jobs
    rounds = max(1, args.rounds or (1 if args.quick else 3))
    with tempfile.TemporaryDirectory(prefix="bench-webhooks-", dir=args.dir) as tmp:
        work = Path(tmp)
        doc = make_pages(work / "e2e.pdf", 1).read_bytes()
        load0 = loadavg.snapshot()
        traced = tracing_rows(work, doc, jobs, rounds)
        hooks = webhook_run(work, doc, jobs)
        load1 = loadavg.snapshot()
    print(f"tracing, one-page sign_case jobs end to end ({jobs} a run"
          + (f", the median of {rounds} runs each, in turn" if rounds > 1 else "") + ")")
    print(f"{'tracing':<26} {'jobs/s':>8} {'CPU ms/job':>11} {'main':>6} {'client':>7} "
          f"{'spans/job':>10}")
    off = traced[0]
    for r in traced:
        extra = r["cpu_ms_per_job"] - off["cpu_ms_per_job"]
        print(f"{r['tracing']:<26} {r['jobs_per_s']:>8.1f} {r['cpu_ms_per_job']:>11.2f} "
              f"{r['main_cpu_ms_per_job']:>6.2f} {r['client_cpu_ms_per_job']:>7.2f} "
              f"{r['spans_exported_per_job']:>10.1f}"
              + (f"  ({extra:+.2f} ms/job)" if r is not off else "")
              + (" (jobs/s {:.0f}–{:.0f})".format(*r["jobs_per_s_range"])
                 if "jobs_per_s_range" in r else ""))
    print(f"webhooks: {hooks['delivered']} of {hooks['jobs']} jobs delivered to a loopback "
          f"receiver; jobs {hooks['jobs_per_s']:.1f}/s, deliveries "
          f"{hooks.get('deliveries_per_s', 0):.1f}/s; after the job's end: p50 "
          f"{hooks.get('lag_p50_ms', 0):.0f} ms, p95 {hooks.get('lag_p95_ms', 0):.0f} ms, "
          f"max {hooks.get('lag_max_ms', 0):.0f} ms; CPU {hooks['cpu_ms_per_job']:.2f} ms/job")
    print("(a shared machine: " + loadavg.describe(load0, load1) + ")")
    print(json.dumps({"tracing": traced, "webhooks": hooks, "load": [load0, load1],
                      "cores": os.cpu_count()}))


if __name__ == "__main__":
    main()
