"""The console (CONTRACT.md, "Console"): a page for people at ``GET /console``, and the
two tenant-scoped reads it needs beyond the jobs API.

- ``GET /console`` and ``GET /console/{asset}``: the page, plain HTML, CSS and
  JavaScript modules shipped in the package (``casesignd/http/static/``). No asset comes
  from anywhere else, and every answer carries a strict Content-Security-Policy
  (scripts, styles and requests from this origin only, no inline script, never
  framed), ``nosniff`` and ``Referrer-Policy: no-referrer``. The page holds the token
  in a JavaScript variable, so it lives as long as the tab's page and nowhere else.
- ``GET /v1/stats?window_s=``: the tenant's jobs waiting, processing and failed now,
  the oldest wait, and the jobs that ended within the window per bucket with the
  mean and longest of each clock.
- ``GET /v1/audit/head``: the chain's head and a cheap check of two samples of it
  (its last events, and the events of the tenant's newest jobs), each event's hash
  recomputed and linked to the one before it. ``casesignd audit verify`` is the
  whole check.

The page's files are data beside this module (``casesignd/http/static/``, no
``__init__.py``): ``import casesignd.http.console`` finds this module, which a plain module
always wins over a directory without one, and the files are read with
:mod:`importlib.resources`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from importlib import resources
from typing import Any

from aiohttp import web

from casesignd.core import audit
from casesignd.core.fields import query_integer
from casesignd.core.hashing import sha256_hex
from casesignd.http.common import authenticate, json_response, services_of
from casesignd.store import Activity

# The page's own files only: what the package ships under static/, by name.
_CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}
# Every answer of the page. 'self' alone: the page works with nothing from outside
# the daemon; no inline script or style, so injected markup cannot run; never in a
# frame (clickjacking); no base or form target elsewhere.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}

WINDOW_S_DEFAULT = 3600
WINDOW_S_MAX = 86400
MAX_BUCKETS = 60
TAIL_EVENTS = 256  # the chain's last events checked by GET /v1/audit/head
TENANT_JOBS = 20  # the tenant's newest jobs whose events it checks
_CLOCKS = ("admission", "queue_wait", "processing", "total")
_CLIENT = {"succeeded": "ready", "failed": "failed", "canceled": "canceled"}


@dataclass(frozen=True)
class Asset:
    body: bytes
    content_type: str
    etag: str


def load_assets() -> dict[str, Asset]:
    """The console's files, read once from the package: name -> asset."""
    out: dict[str, Asset] = {}
    for entry in resources.files("casesignd.http").joinpath("static").iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in _CONTENT_TYPES:
            body = entry.read_bytes()
            out[entry.name] = Asset(body, _CONTENT_TYPES[suffix],
                                    '"' + sha256_hex(body)[:32] + '"')
    return out


_ASSETS = web.AppKey("console_assets", dict)


def _serve(request: web.Request, name: str) -> web.Response:
    asset = request.app[_ASSETS].get(name)
    if asset is None:
        raise web.HTTPNotFound()
    # Revalidated on every load (a cheap 304): an upgraded daemon's page is never
    # mixed with an old module from the cache.
    headers = {**_SECURITY_HEADERS, "Cache-Control": "no-cache", "ETag": asset.etag}
    if asset.etag in request.headers.get("If-None-Match", ""):
        return web.Response(status=304, headers=headers)
    return web.Response(body=asset.body, headers={**headers, "Content-Type": asset.content_type})


async def page(request: web.Request) -> web.Response:
    return _serve(request, "index.html")


async def asset(request: web.Request) -> web.Response:
    return _serve(request, request.match_info["name"])


# --- GET /v1/stats ----------------------------------------------------------------------


def window_of(raw: str | None) -> tuple[int, int]:
    """(window_s, bucket_s) for a ``window_s`` query value: whole seconds from 60 to a
    day, in at most MAX_BUCKETS buckets of whole minutes."""
    window_s = query_integer(raw, "window_s", WINDOW_S_DEFAULT, 60, WINDOW_S_MAX)
    return window_s, 60 * math.ceil(window_s / 60 / MAX_BUCKETS)


def window_start(now: float, window_s: int, bucket_s: int) -> float:
    """The first bucket's start: on a bucket boundary, so the buckets are whole minutes."""
    return math.floor((now - window_s) / bucket_s) * bucket_s


def stats_body(act: Activity, now: float, window_s: int, bucket_s: int,
               since: float) -> dict[str, Any]:
    """The answer of GET /v1/stats, from the store's rows (pure)."""
    live = act.live
    waits = [t for s in ("queued", "retry_wait") if s in live for t in [live[s][1]] if t]
    buckets: dict[int, dict[str, Any]] = {}
    ended = {"ready": 0, "failed": 0, "canceled": 0}
    for row in sorted(act.ended, key=lambda r: (int(r["bucket"]), r["state"])):
        state, n = _CLIENT[row["state"]], int(row["n"])
        ended[state] += n
        b = buckets.setdefault(int(row["bucket"]), {
            "start": audit.rfc3339(since + int(row["bucket"]) * bucket_s),
            "ready": 0, "failed": 0, "canceled": 0, "_ran": 0,
            **{f"{c}_ms": {"mean": 0.0, "max": 0.0} for c in _CLOCKS}})
        b[state] += n
        if state == "canceled":
            continue  # it never ran: its clocks would pull the means down
        ran = b["_ran"] + n
        for c in _CLOCKS:
            clock = b[f"{c}_ms"]
            clock["mean"] = (clock["mean"] * b["_ran"] + float(row[f"{c}_mean"]) * n) / ran
            clock["max"] = max(clock["max"], float(row[f"{c}_max"]))
        b["_ran"] = ran
    out_buckets = []
    for _, b in sorted(buckets.items()):
        b.pop("_ran")
        for c in _CLOCKS:
            b[f"{c}_ms"] = {k: round(max(0.0, v), 3) for k, v in b[f"{c}_ms"].items()}
        out_buckets.append(b)
    return {
        "at": audit.rfc3339(now), "window_s": window_s, "bucket_s": bucket_s,
        "since": audit.rfc3339(since),
        "now": {"queued": sum(live.get(s, (0, None))[0] for s in ("queued", "retry_wait")),
                "processing": live.get("running", (0, None))[0],
                "failed": live.get("failed", (0, None))[0]},
        "oldest_queued_age_s": round(max(0.0, now - min(waits)), 3) if waits else None,
        "ended": ended,
        "buckets": out_buckets,
    }


async def get_stats(request: web.Request) -> web.Response:
    tenant = authenticate(request)
    window_s, bucket_s = window_of(request.query.get("window_s"))
    now = time.time()
    since = window_start(now, window_s, bucket_s)
    act = await services_of(request).store.tenant_activity(tenant, since, float(bucket_s))
    return json_response(stats_body(act, now, window_s, bucket_s, since))


# --- GET /v1/audit/head -----------------------------------------------------------------


def _sample(report: audit.AuditReport, events: list[dict[str, Any]], *, own: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"events": len(events), "ok": report.ok}
    if events:
        out["from_seq"], out["to_seq"] = int(events[0]["seq"]), int(events[-1]["seq"])
    if report.first_bad is not None:
        bad = report.first_bad
        # Of another tenant's event, only where it is in the chain.
        out["first_bad"] = ({k: bad[k] for k in ("seq", "event_id", "job_id", "reason")}
                            if own else {"seq": bad["seq"], "reason": bad["reason"]})
    return out


async def audit_head(request: web.Request) -> web.Response:
    tenant = authenticate(request)
    store = services_of(request).store
    tail = await store.chain_tail(TAIL_EVENTS)
    mine = await store.tenant_recent_events(tenant, TENANT_JOBS)
    wanted = {int(e["seq"]) - 1 for e in [*tail[:1], *mine]} - {0}
    before = await store.event_hashes(sorted(wanted))
    tail_report = audit.verify_sample(tail, before)
    mine_report = audit.verify_sample(mine, before)
    head = tail[-1] if tail else None
    return json_response({
        "head": {"seq": int(head["seq"]), "hash": head["hash"], "at": head["at"]}
        if head else None,
        "tail": _sample(tail_report, tail, own=False),
        "tenant": {"jobs": TENANT_JOBS, **_sample(mine_report, mine, own=True)},
        "ok": tail_report.ok and mine_report.ok,
        "complete": False,
    })


def add_routes(app: web.Application) -> None:
    app[_ASSETS] = load_assets()
    r = app.router
    r.add_get("/console", page)
    r.add_get("/console/{name}", asset)
    r.add_get("/v1/stats", get_stats)
    r.add_get("/v1/audit/head", audit_head)
