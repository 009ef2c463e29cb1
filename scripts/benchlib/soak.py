"""The soak benchmarks' workload and measures (scripts/bench_soak.py compares
retention on and off with them, scripts/soak_day.py runs a compressed day): the
mix of arrivals against a daemon, what its clients saw, the state directory's bytes,
the daemon's RSS and gauges."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import random
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.daemon import Daemon, multipart

MiB = 1024 * 1024
SIGNERS = [{"id": "seller-1", "name": "Acme Ltd", "role": "seller"}]
# What one arrival is, and how often (weights of the mix).
MIX = {"sign_case": 35, "sign_case_evidence": 15, "kiosk": 25, "invoice": 15,
       "refused_job": 5, "refused_kiosk": 5}
# Written into each contract's uncompressed text and replaced by a unique id of the
# same length, so every document is new bytes without moving the xref offsets.
MARK = b"SOAK-" + b"0" * 32
# Looks like a PDF to the upload (the header) but has no body: the worker refuses it.
MALFORMED = b"%PDF-1.7\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\ntrailer\n%%EOF\n"
PNG_SIDE = 48


def contract_template(pages: int) -> bytes:
    """A contract of ``pages`` pages of uncompressed text with :data:`MARK` on the first."""
    import io

    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    buf = io.BytesIO()
    c = canvas.Canvas(buf, pagesize=A4, pageCompression=0, invariant=1)
    for p in range(pages):
        c.drawString(60, 810, MARK.decode() if p == 0 else f"page {p + 1}")
        for line in range(40):
            c.drawString(60, 780 - 18 * line, f"Clause {p + 1}.{line + 1}: the parties agree "
                                              "to the terms set out in this contract.")
        c.showPage()
    c.save()
    data = buf.getvalue()
    assert data.count(MARK) == 1
    return data


def png(seed: int) -> bytes:
    """A small PNG of its own pixels (no image library needed)."""
    import struct
    import zlib

    rnd = random.Random(seed)
    raw = b"".join(b"\x00" + rnd.randbytes(PNG_SIDE * 3) for _ in range(PNG_SIDE))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + tag + data
                + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF))

    ihdr = struct.pack(">IIBBBBB", PNG_SIDE, PNG_SIDE, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw))
            + chunk(b"IEND", b""))


def item(role: str, name: str, media: str, data: bytes) -> dict[str, Any]:
    sha = hashlib.sha256(data).hexdigest()
    return {"role": role, "name": name, "media_type": media, "object_ref": f"sha256:{sha}",
            "sha256": sha, "size": len(data)}


# --- measuring ----------------------------------------------------------------------


def state_bytes(state: Path, db: Path) -> dict[str, int]:
    """Bytes under objects/ and artifacts/ (a hard-linked blob once) and of the
    SQLite files: what the state directory holds, as ``du --apparent-size`` would."""
    out = {}
    for area in ("objects", "artifacts"):
        seen: set[int] = set()
        total = 0
        for dirpath, _, files in os.walk(state / area):
            for f in files:
                with contextlib.suppress(OSError):  # removed by a sweep meanwhile
                    st = os.lstat(os.path.join(dirpath, f))
                    if st.st_ino not in seen:
                        seen.add(st.st_ino)
                        total += st.st_size
        out[area] = total
    out["store"] = sum(p.stat().st_size for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm"))
                       if p.exists())
    out["total"] = out["objects"] + out["artifacts"] + out["store"]
    out["audit"] = audit_bytes(db)
    return out


def audit_bytes(db: Path) -> int:
    """Pages of the audit log (the events table and its indexes) in the SQLite file:
    the part of the store that retention never removes (CONTRACT: audit events stay)."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True,
                                                timeout=1)) as c:
            row = c.execute("SELECT sum(pgsize) FROM dbstat WHERE name IN (SELECT name FROM "
                            "sqlite_master WHERE tbl_name = 'events')").fetchone()
    except sqlite3.Error:  # no dbstat in this SQLite build, or the file is busy
        return 0
    return int(row[0] or 0)


def rss_kib(pid: int) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def tree_rss_kib(pid: int) -> int:
    """RSS of ``pid`` and every process below it (its CPU worker processes)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                text = Path(f"/proc/{entry}/stat").read_text()
                children.setdefault(int(text[text.rindex(")") + 2:].split()[1]), []).append(
                    int(entry))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss_kib(p)
        todo.extend(children.get(p, ()))
    return total


def parse_metrics(text: str) -> dict[str, Any]:
    """The gauges this bench follows, out of the Prometheus text exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    disk: dict[str, int] = {}
    removed: dict[str, int] = {}
    jobs: dict[str, int] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "casesignd_disk_bytes":
                disk[s.labels["area"]] = int(s.value)
            elif s.name == "casesignd_removed_total":
                removed[f"{s.labels['what']}/{s.labels['reason']}"] = int(s.value)
            elif s.name == "casesignd_jobs":
                jobs[s.labels["state"]] = int(s.value)
    return {"disk": disk, "removed": removed, "jobs": jobs}


# --- the mix --------------------------------------------------------------------------


@dataclass
class Tally:
    """What the clients saw in one configuration."""

    admitted: int = 0
    sent: Counter[str] = field(default_factory=Counter)
    # Answers that were not 2xx, as "route status code"; the deliberate refusals apart.
    unexpected: Counter[str] = field(default_factory=Counter)
    refused_as_meant: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)  # "kind state" of polled jobs
    dropped: int = 0  # arrivals not sent: too many already in flight
    samples: list[dict[str, Any]] = field(default_factory=list)


class Mix:
    def __init__(self, d: Daemon, template: bytes, tally: Tally, tag: str) -> None:
        import aiohttp

        self.url = d.url
        self.template = template
        self.tally = tally
        self.tag = tag
        self.n = 0
        self.session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {d.token}"},
            connector=aiohttp.TCPConnector(limit=32),
            timeout=aiohttp.ClientTimeout(total=60))

    def fresh(self) -> tuple[str, bytes]:
        """A new case id and a contract of new bytes."""
        self.n += 1
        uid = uuid.uuid4().hex
        return f"SOAK-{self.tag}-{self.n}", self.template.replace(MARK, f"SOAK-{uid}".encode())

    async def _answer(self, route: str, r: Any, meant: int | None = None) -> Any:
        body = await r.read()
        code = ""
        if r.status >= 300:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                code = json.loads(body)["error"]["code"]
            key = f"{route} {r.status} {code}".strip()
            (self.tally.refused_as_meant if r.status == meant else self.tally.unexpected)[key] += 1
            return None
        return json.loads(body) if r.content_type == "application/json" else body

    async def upload(self, case: str, data: bytes, media: str) -> bool:
        sha = hashlib.sha256(data).hexdigest()
        async with self.session.put(f"{self.url}/v1/cases/{case}/objects/{sha}", data=data,
                                    headers={"Content-Type": media}) as r:
            return await self._answer("PUT object", r) is not None

    async def job(self, kind: str, body: dict[str, Any], meant_to_fail: bool = False) -> None:
        async with self.session.post(f"{self.url}/v1/jobs", json=body) as r:
            job = await self._answer("POST /v1/jobs", r)
        if job is None:
            return
        self.tally.admitted += 1
        # Poll slowly: the bench watches outcomes, it must not become the load itself.
        await asyncio.sleep(0.5)
        for _ in range(120):
            async with self.session.get(f"{self.url}/v1/jobs/{job['job_id']}") as r:
                view = await self._answer("GET /v1/jobs/{id}", r)
            if view is None:
                return
            if view["state"] in ("ready", "failed", "canceled"):
                meant = meant_to_fail and view["state"] == "failed"
                self.tally.outcomes[f"{kind} {view['state']}{' (meant)' if meant else ''}"] += 1
                return
            await asyncio.sleep(1.0)
        self.tally.outcomes[f"{kind} unfinished"] += 1

    async def kiosk(self, case: str, document: bytes, meant: int | None = None) -> None:
        body, ctype = multipart({"case_id": case, "signers": SIGNERS}, document)
        async with self.session.post(f"{self.url}/v1/sign", data=body,
                                     headers={"Content-Type": ctype}) as r:
            ok = await self._answer("POST /v1/sign", r, meant) is not None
        if ok or r.status == meant:  # a refused kiosk request is a job row too
            self.tally.admitted += 1

    async def one(self, what: str) -> None:
        import aiohttp

        self.tally.sent[what] += 1
        try:
            await self._one(what)
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            # No answer at all is a failure of the soak too: counted with the others.
            self.tally.unexpected[f"{what} no answer {type(e).__name__}"] += 1

    async def _one(self, what: str) -> None:
        case, contract = self.fresh()
        if what in ("sign_case", "sign_case_evidence", "refused_job"):
            doc = MALFORMED + uuid.uuid4().hex.encode() if what == "refused_job" else contract
            items = [item("contract", "contract.pdf", "application/pdf", doc)]
            uploads = [(doc, "application/pdf")]
            if what == "sign_case_evidence":
                photo = png(self.n)
                items.append(item("evidence", "photo.png", "image/png", photo))
                uploads.append((photo, "image/png"))
            for data, media in uploads:
                if not await self.upload(case, data, media):
                    return
            await self.job("sign_case", {"kind": "sign_case", "case_id": case, "items": items,
                                         "signers": SIGNERS}, what == "refused_job")
        elif what == "kiosk":
            await self.kiosk(case, contract)
        elif what == "refused_kiosk":
            await self.kiosk(case, MALFORMED + uuid.uuid4().hex.encode(), meant=422)
        else:
            order = {"order_id": case, "student_name": "Avery Chen", "currency": "USD",
                     "items": [{"description": f"Course module {k + 1}", "quantity": 1 + k % 3,
                                "unit_price": f"{10 + k}.50"} for k in range(1 + self.n % 5)]}
            await self.job("render_invoice", {"kind": "render_invoice", "sign": self.n % 2 == 0,
                                              "template_version": "invoice-v3", "order": order})


def slope_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, bytes), in bytes a minute (pure)."""
    if len(points) < 2:
        return 0.0
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    den = sum((x - mx) ** 2 for x, _ in points)
    return 60 * sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0
