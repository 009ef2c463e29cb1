"""Helpers for the operations tests: scraping /metrics, realistic traffic, and the
personal data that must never show up in the exposition or in the log.

Every value that identifies a person, a case or an order is a module constant, so
the privacy assertions search for exactly what the traffic sent.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import signal
import threading
import time
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.daemon import Daemon
from tests.helpers_pki import reportlab_pdf

# Distinctive values, so a hit in the log or the exposition is never a coincidence.
CASE_ID = "MKT-PRIV-2026-77431"
BAD_CASE_ID = "MKT-PRIV-2026-88502"
SIGNERS = [
    {"id": "seller-qv7731", "name": "Quillon Vantreppe Holdings", "role": "seller"},
    {"id": "buyer-zx9924", "name": "Zephyrine Okonkwo-Lindqvist", "role": "buyer"},
]
STUDENT_NAMES = ["Ximena Oyelaran-Strand", "Bartholomew Nakagawa-Ferreira", "Ängla Þórsdóttir"]
ORDER_IDS = ["EDU-PRIV-93317", "EDU-PRIV-93318", "EDU-PRIV-93319"]
TEST_TAG = "tag-Ottoline-Brzezinski"
# What a log line or a scrape must never contain.
PERSONAL = [CASE_ID, BAD_CASE_ID, TEST_TAG, *ORDER_IDS, *STUDENT_NAMES,
            *(s["name"] for s in SIGNERS), *(s["id"] for s in SIGNERS)]

PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00"
       b"\x90wS\xde\x00\x00\x00\x0cIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00"
       b"\x00IEND\xaeB`\x82")

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


# --- /metrics ------------------------------------------------------------------------


def parse_exposition(text: str) -> tuple[Samples, set[str]]:
    """Samples keyed by (sample name, labels) and the family names of a text exposition."""
    samples: Samples = {}
    families: set[str] = set()
    for family in text_string_to_metric_families(text):
        families.add(family.name)
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples, families


def scrape(d: Daemon) -> tuple[str, Samples, set[str]]:
    """``GET /metrics`` parsed: the raw text, the samples and the family names."""
    r = d.request("GET", "/metrics", auth=False)
    assert r.status == 200, r.body
    assert r.headers["Content-Type"].startswith("text/plain")
    text = r.body.decode()
    samples, families = parse_exposition(text)
    return text, samples, families


def value(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples named ``name`` whose labels include ``labels`` (0 when none)."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def label_values(samples: Samples, name: str, label: str) -> set[str]:
    return {dict(ls)[label] for (n, ls) in samples if n == name and label in dict(ls)}


def wait_metric(d: Daemon, pred: Any, timeout_s: float = 20.0) -> Samples:
    """Scrape until ``pred(samples)`` holds (gauges come from a cache refreshed in the
    background); the last samples."""
    deadline = time.monotonic() + timeout_s
    while True:
        _, samples, _ = scrape(d)
        if pred(samples):
            return samples
        if time.monotonic() > deadline:
            raise TimeoutError("the metric condition did not hold in time")
        time.sleep(0.05)


# --- processes -------------------------------------------------------------------------


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc), children before grandchildren."""
    out: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop(0)
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as f:
                    kids = [int(x) for x in f.read().split()]
            except OSError:
                continue
            out.extend(kids)
            todo.extend(kids)
    return out


def crash(d: Daemon) -> None:
    """``kill -9`` the daemon and every process it started, as systemd's control-group
    kill does after the main process dies: the CPU pool's forkserver and workers would
    otherwise outlive it (they hold their own queue's pipes open)."""
    assert d.proc is not None
    below = descendants(d.proc.pid)
    d.kill9()
    for pid in below:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# --- traffic ---------------------------------------------------------------------------


def upload(d: Daemon, case_id: str, data: bytes) -> dict[str, Any]:
    sha = hashlib.sha256(data).hexdigest()
    r = d.request("PUT", f"/v1/cases/{case_id}/objects/{sha}", raw=data,
                  headers={"Content-Type": "application/octet-stream"})
    assert r.status in (200, 201), r.body
    return {"sha256": sha, "size": len(data), "object_ref": f"sha256:{sha}"}


def case_manifest(d: Daemon, case_id: str, contract: bytes,
                  evidence: Iterable[tuple[str, str, bytes]] = ()) -> dict[str, Any]:
    """Upload a contract and evidence, and return the ``sign_case`` body for them."""
    items = [{"role": "contract", "name": "contract.pdf", "media_type": "application/pdf",
              **upload(d, case_id, contract)}]
    items += [{"role": "evidence", "name": name, "media_type": media, **upload(d, case_id, data)}
              for name, media, data in evidence]
    return {"kind": "sign_case", "case_id": case_id, "items": items, "signers": SIGNERS}


def contract_pdf(directory: Path, pages: int = 2) -> bytes:
    return reportlab_pdf(directory / f"contract-{pages}.pdf", pages=pages,
                         text="Sales contract").read_bytes()


def invoice(order_id: str, student: str, lines: int = 1, sign: bool = True) -> dict[str, Any]:
    items = [{"description": f"Course module {i + 1}", "quantity": 1 + i % 3,
              "unit_price": f"{19 + i}.50"} for i in range(lines)]
    return {"kind": "render_invoice", "template_version": "invoice-v3", "sign": sign,
            "order": {"order_id": order_id, "student_name": student, "currency": "USD",
                      "items": items}}


def kiosk_sign(d: Daemon, case_id: str, pdf: bytes, key: str | None = None) -> Any:
    """``POST /v1/sign``: multipart/form-data with the parts ``manifest`` and ``document``."""
    boundary = "csd-" + secrets.token_hex(8)
    manifest = json.dumps({"case_id": case_id, "signers": SIGNERS}).encode()
    body = b"".join([
        f"--{boundary}\r\nContent-Disposition: form-data; name=\"manifest\"\r\n"
        "Content-Type: application/json\r\n\r\n".encode(), manifest, b"\r\n",
        f"--{boundary}\r\nContent-Disposition: form-data; name=\"document\"; "
        "filename=\"contract.pdf\"\r\nContent-Type: application/pdf\r\n\r\n".encode(),
        pdf, f"\r\n--{boundary}--\r\n".encode(),
    ])
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    if key:
        headers["Idempotency-Key"] = key
    return d.request("POST", "/v1/sign", raw=body, headers=headers)


def find_personal(*texts: str) -> list[str]:
    """The personal values (of :data:`PERSONAL`) found in any of ``texts``."""
    return sorted({p for p in PERSONAL for t in texts if p in t or p.lower() in t.lower()})


class StallingSource:
    """An HTTP source on loopback that sends the first ``stall_after`` bytes of a file,
    then holds the rest until :meth:`release`: a fetch caught half way, for as long as
    a test needs to look at it. Use as a context manager."""

    def __init__(self, data: bytes, stall_after: int) -> None:
        self.data = data
        self.stall_after = stall_after
        self.stalled = threading.Event()
        self.released = threading.Event()
        source = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self.send_response(200)
                self.send_header("Content-Length", str(len(source.data)))
                self.end_headers()
                self.wfile.write(source.data[:source.stall_after])
                self.wfile.flush()
                source.stalled.set()
                source.released.wait(timeout=60)
                self.wfile.write(source.data[source.stall_after:])

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def release(self) -> None:
        self.released.set()

    def __enter__(self) -> StallingSource:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)
