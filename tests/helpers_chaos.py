"""Chaos helpers shared by the crash and fault tests and ``scripts/bench_chaos.py``.

- :class:`ThreadedSource`: the scripted HTTP source of tests/helpers_http_source.py,
  run on its own thread and event loop so that blocking test code can drive it, with
  a count of requests in flight (to aim a kill at a download).
- :func:`make_workload`: a mix of ``sign_case`` packets (sizes, evidence, duplicates
  of an earlier signature under a new key, contracts from a trickling HTTP source),
  ``render_invoice`` jobs with and without a signature, and kiosk requests.
- :class:`Driver`: submits the workload from client threads that retry through
  restarts with the same Idempotency-Key, and records what was acknowledged; given
  several daemons of one store (tests/daemon.py: shared_nodes), a client that finds
  one down or busy tries the next.
- :func:`Driver.run_with_kills`: ``kill -9`` at aimed and random moments, restarting.
- :func:`check_invariants`: what must hold afterwards, read from the API, the store
  (the SQLite file, or the PostgreSQL database of several daemons:
  tests/helpers_nodes.py), the artifact directory, independent validators and
  ``casesignd audit verify``.
"""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import itertools
import json
import random
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from casesignd.job_kinds.sign_case import signature_key
from tests.daemon import Daemon, multipart  # noqa: F401 - multipart re-exported for the tests
from tests.helpers_http_source import ScriptedServer, Step, Trickle
from tests.helpers_nodes import Node, Nodes
from tests.helpers_pki import nss_db, pdfsig, pyhanko_statuses, reportlab_pdf

PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00"
       b"\x90wS\xde\x00\x00\x00\x0cIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00"
       b"\x00IEND\xaeB`\x82")
SIGNERS = [{"id": "seller-881", "name": "Acme Ltd", "role": "seller"},
           {"id": "buyer-19", "name": "J. Doe", "role": "buyer"}]
TERMINAL = ("succeeded", "failed", "canceled")
CLIENT_ERRORS = (OSError, http.client.HTTPException)
# Answers after which a client simply tries again later with the same key.
RETRY_CODES = {"shutting_down", "store_unavailable", "queue_full", "busy", "in_progress"}


# --- the HTTP source on its own thread ---------------------------------------------------


class _CountingServer(ScriptedServer):
    def __init__(self) -> None:
        super().__init__()
        self.inflight = 0

    async def _handle(self, request: Any) -> Any:
        self.inflight += 1
        try:
            return await super()._handle(request)
        finally:
            self.inflight -= 1


class ThreadedSource:
    """A :class:`ScriptedServer` on a background thread; ``with ThreadedSource() as s``."""

    def __init__(self) -> None:
        self.server = _CountingServer()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> ThreadedSource:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def inflight(self) -> int:
        return self.server.inflight

    def script(self, path: str, steps: list[Step]) -> None:
        self._loop.call_soon_threadsafe(self.server.script, path, list(steps))

    def hits(self, path: str) -> int:
        return self.server.hits.get(path, 0)


# --- the workload ---------------------------------------------------------------------------


@dataclass
class Planned:
    """One client request of the workload: ``kind`` is sign_case, render_invoice or kiosk."""

    kind: str
    key: str
    body: dict[str, Any]
    uploads: list[tuple[str, bytes]] = field(default_factory=list)  # (case_id, bytes)
    document: bytes = b""  # the kiosk PDF
    signed: bool = True  # whether the artifact carries a signature


def _obj(data: bytes, ref: str | None = None) -> dict[str, Any]:
    sha = hashlib.sha256(data).hexdigest()
    return {"sha256": sha, "size": len(data), "object_ref": ref or f"sha256:{sha}"}


def make_workload(directory: Path, n_jobs: int, *, seed: int = 7, source: ThreadedSource | None = None,
                  source_name: str = "remote", trickle_s: float = 0.6) -> list[Planned]:
    """``n_jobs`` requests, in a shuffled but reproducible order (``seed``).

    Roughly: 45% sign_case (1, 4 or 12 pages; none, one or two evidence items; every
    tenth a new key for an earlier packet, which must reuse the first signature; with
    a ``source``, every sixth contract read from it slowly), 35% render_invoice (half
    signed), 20% kiosk signatures.
    """
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    docs = {p: reportlab_pdf(directory / f"c{p}.pdf", pages=p, text=f"chaos {p}").read_bytes()
            for p in (1, 4, 12)}
    note = b"delivered on time\n"
    remote = None
    if source is not None:
        remote = reportlab_pdf(directory / "remote.pdf", pages=6, text="remote contract").read_bytes()
        chunk = max(1024, len(remote) // 30)
        source.script("/contracts/remote.pdf",
                      [Trickle(remote, chunk_bytes=chunk, delay_s=trickle_s / 30)])
    kiosk_docs = [reportlab_pdf(directory / f"k{i}.pdf", text=f"kiosk {i}").read_bytes() for i in range(4)]
    plan: list[Planned] = []
    packets: list[Planned] = []
    for i in range(n_jobs):
        roll = rng.random()
        if roll < 0.45:
            if packets and rng.random() < 0.1:
                first = rng.choice(packets)
                plan.append(Planned("sign_case", f"dup-{i}", first.body, first.uploads))
                continue
            case = f"CHAOS-{i:05d}"
            use_remote = remote is not None and rng.random() < 1 / 6
            contract = remote if use_remote else docs[rng.choice((1, 1, 4, 12))]
            ref = f"{source_name}:contracts/remote.pdf" if use_remote else None
            items = [{"role": "contract", "name": "contract.pdf", "media_type": "application/pdf",
                      **_obj(contract, ref)}]
            uploads = [] if use_remote else [(case, contract)]
            for name, media, data in (("photo.png", "image/png", PNG),
                                      ("note.txt", "text/plain", note)):
                if rng.random() < 0.5:
                    items.append({"role": "evidence", "name": name, "media_type": media, **_obj(data)})
                    uploads.append((case, data))
            p = Planned("sign_case", f"case-{i}",
                        {"kind": "sign_case", "case_id": case, "items": items, "signers": SIGNERS},
                        uploads)
            packets.append(p)
            plan.append(p)
        elif roll < 0.8:
            sign = rng.random() < 0.5
            lines = rng.choice((1, 3, 40))
            order = {"order_id": f"INV-{i:05d}", "student_name": "Avery Chen", "currency": "USD",
                     "items": [{"description": f"Course {k}", "quantity": 1 + k % 3,
                                "unit_price": f"{10 + k}.50"} for k in range(lines)]}
            plan.append(Planned("render_invoice", f"inv-{i}",
                                {"kind": "render_invoice", "template_version": "invoice-v3",
                                 "sign": sign, "order": order}, signed=sign))
        else:
            doc = rng.choice(kiosk_docs)
            manifest = {"case_id": f"KIOSK-{i:05d}", "signers": SIGNERS[:1]}
            plan.append(Planned("kiosk", f"kiosk-{i}", manifest, document=doc))
    return plan


# --- the driver ------------------------------------------------------------------------------


@dataclass
class Tally:
    """What the clients saw."""

    acked: dict[str, str] = field(default_factory=dict)  # idempotency key -> job id
    kiosk_sha256: dict[str, str] = field(default_factory=dict)  # job id -> bytes answered
    unexpected: list[str] = field(default_factory=list)
    client_retries: int = 0
    kills: dict[str, int] = field(default_factory=dict)  # by aim
    node_kills: dict[str, int] = field(default_factory=dict)  # by node, for several daemons


class Driver:
    """Client threads that push a workload through a daemon, or several daemons of one
    store, that keep dying."""

    def __init__(self, d: Daemon | list[Daemon] | Nodes, plan: list[Planned], *, kiosk_threads: int = 2,
                 give_up_s: float = 300.0) -> None:
        self.group = d if isinstance(d, Nodes) else None
        self.nodes: list[Daemon] = list(d.nodes) if isinstance(d, Nodes) else \
            (d if isinstance(d, list) else [d])
        self.d = self.nodes[0]
        self._turns = itertools.count()
        self.plan = plan
        self.tally = Tally()
        self.kiosk_threads = kiosk_threads
        self.give_up_at = time.monotonic() + give_up_s
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    # --- clients ---------------------------------------------------------------------

    def _call(self, fn: Any) -> Any:
        """``fn(daemon)`` until a daemon answers something other than 'come back later';
        each try goes to the next daemon."""
        while time.monotonic() < self.give_up_at:
            node = self.nodes[next(self._turns) % len(self.nodes)]
            try:
                r = fn(node)
            except CLIENT_ERRORS:
                r = None
            if r is not None and not (r.status in (409, 429, 503)
                                      and _code(r) in RETRY_CODES):
                return r
            with self._lock:
                self.tally.client_retries += 1
            time.sleep(0.1)
        raise TimeoutError("the daemon did not come back")

    def _batch_client(self, items: list[Planned]) -> None:
        for p in items:
            for case, data in p.uploads:
                sha = hashlib.sha256(data).hexdigest()
                r = self._call(lambda node, case=case, data=data, sha=sha: node.request(
                    "PUT", f"/v1/cases/{case}/objects/{sha}", raw=data, timeout_s=20,
                    headers={"Content-Type": "application/octet-stream"}))
                if r.status not in (200, 201):
                    self._unexpected(f"upload {p.key}: {r.status} {r.body[:200]!r}")
            r = self._call(lambda node, p=p: node.submit(p.body, key=p.key))
            if r.status in (200, 202):
                with self._lock:
                    self.tally.acked[p.key] = r.json()["job_id"]
            else:
                self._unexpected(f"submit {p.key}: {r.status} {r.body[:200]!r}")

    def _kiosk_client(self, items: list[Planned]) -> None:
        for p in items:
            body, ctype = multipart(p.body, p.document)
            while True:
                r = self._call(lambda node, body=body, ctype=ctype, p=p: node.request(
                    "POST", "/v1/sign", raw=body, timeout_s=60,
                    headers={"Content-Type": ctype, "Idempotency-Key": p.key}))
                job_id = r.headers.get("X-Job-Id")
                if job_id:
                    with self._lock:
                        self.tally.acked[p.key] = job_id
                if r.status == 200:
                    with self._lock:
                        self.tally.kiosk_sha256[job_id] = hashlib.sha256(r.body).hexdigest()
                    break
                if r.status in (503, 504) and not (job_id and self._failed(job_id)):
                    # Still signing, or retried in the background (tsa_unavailable,
                    # temp_quota): a replay with the same key finds it.
                    time.sleep(0.2)
                    continue
                self._unexpected(f"kiosk {p.key}: {r.status} {r.body[:200]!r}")
                break

    def _failed(self, job_id: str) -> bool:
        for node in self.nodes:
            try:
                r = node.request("GET", f"/v1/jobs/{job_id}", timeout_s=10)
            except CLIENT_ERRORS:
                continue
            return r.status == 200 and r.json()["state"] in ("failed", "canceled")
        return False

    def _unexpected(self, what: str) -> None:
        with self._lock:
            self.tally.unexpected.append(what)

    def start_clients(self) -> None:
        batch = [p for p in self.plan if p.kind != "kiosk"]
        kiosk = [p for p in self.plan if p.kind == "kiosk"]
        self._threads = [threading.Thread(target=self._batch_client, args=(batch,), daemon=True)]
        for i in range(self.kiosk_threads):
            self._threads.append(threading.Thread(
                target=self._kiosk_client, args=(kiosk[i::self.kiosk_threads],), daemon=True))
        for t in self._threads:
            t.start()

    def clients_done(self) -> bool:
        return all(not t.is_alive() for t in self._threads)

    def join_clients(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(max(0.1, deadline - time.monotonic()))
        if not self.clients_done():
            raise TimeoutError("client threads did not finish")

    # --- kills -----------------------------------------------------------------------

    def run_with_kills(self, kills: int, *, source: ThreadedSource | None = None,
                       seed: int = 11, sign_delay_s: float = 0.0,
                       down_s: tuple[float, float] = (0.0, 0.3)) -> None:
        """Start the clients and kill -9 a daemon ``kills`` times (each in turn),
        restarting it after ``down_s`` (a random span). Kills rotate over aims:
        mid-download (a request to ``source`` in flight), mid-signature (the daemon
        holding a running job, then part of the signing delay), and at random."""
        rng = random.Random(seed)
        aims = ["download", "sign", "random"] if source is not None else ["sign", "random"]
        self.start_clients()
        for i in range(kills):
            if self.clients_done() and not self._busy():
                break
            victim = self.nodes[i % len(self.nodes)]
            aim = aims[i % len(aims)]
            if aim == "download":
                hit = _wait_for(lambda: source.inflight > 0, 8.0)  # type: ignore[union-attr]
                time.sleep(rng.uniform(0.0, 0.2))
                aim = aim if hit else "random"
            elif aim == "sign":
                hit = _wait_for(lambda victim=victim: self._busy(victim), 8.0)
                time.sleep(rng.uniform(0.05, max(0.1, sign_delay_s)))
                aim = aim if hit else "random"
            else:
                time.sleep(rng.uniform(0.1, 1.5))
            victim.kill9()
            self.tally.kills[aim] = self.tally.kills.get(aim, 0) + 1
            time.sleep(rng.uniform(*down_s))
            victim.start()
            time.sleep(rng.uniform(0.3, 1.0))

    def _busy(self, node: Daemon | None = None) -> bool:
        """Whether a job runs (under a lease of ``node``, when given)."""
        owners = store_rows(self.d, "SELECT lease_owner FROM jobs WHERE state = 'running'")
        return any(node is None or r["lease_owner"].startswith(f"{node.node}:") for r in owners)

    def run_with_node_kills(self, kills: int, *, seed: int = 11, sign_delay_s: float = 0.0,
                            down_s: float = 0.0) -> None:
        """Start the clients (spread over the nodes) and kill -9 one node ``kills`` times,
        restarting it each time while the others serve. Every other kill aims at a node
        holding a job, part of the signing delay into it; the rest at a random node at a
        random moment. Every fourth victim stays down ``down_s`` (past its leases, so
        that the others take its jobs back); the rest restart at once and take back
        their own."""
        nodes = self.group
        assert nodes is not None, "several daemons: tests/helpers_nodes.py"
        rng = random.Random(seed)
        self.start_clients()
        for i in range(kills):
            if self.clients_done() and not self._busy():
                break
            victim = None
            if i % 2 == 0 and _wait_for(lambda: bool(self._holding(nodes)), 8.0):
                time.sleep(rng.uniform(0.05, max(0.1, sign_delay_s)))
                holding = [n for n in self._holding(nodes) if n.up()]
                victim = rng.choice(holding) if holding else None
            aim = "sign" if victim is not None else "random"
            if victim is None:
                time.sleep(rng.uniform(0.1, 1.5))
                victim = rng.choice([n for n in nodes.nodes if n.up()])
            victim.kill9()
            self.tally.kills[aim] = self.tally.kills.get(aim, 0) + 1
            self.tally.node_kills[victim.node] = self.tally.node_kills.get(victim.node, 0) + 1
            time.sleep(down_s if i % 4 == 3 else rng.uniform(0.0, 0.3))
            victim.start()
            time.sleep(rng.uniform(0.3, 1.0))

    def _holding(self, nodes: Nodes) -> list[Node]:
        """The nodes that hold a running job's lease (a lease owner is NODE:...)."""
        owners = {r["node"] for r in db_rows(nodes.db, "SELECT DISTINCT split_part("
                                                       "lease_owner, ':', 1) AS node FROM jobs "
                                                       "WHERE state = 'running'")}
        return [n for n in nodes.nodes if n.node in owners]


def _code(r: Any) -> str:
    try:
        return r.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return ""


def _wait_for(cond: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return False


def db_scalar(db: Path | str, sql: str, *params: Any) -> Any:
    """One value from the store, read-only (safe while the daemon runs: WAL). ``db``:
    the SQLite file, or a PostgreSQL dsn (a str) for daemons on PostgreSQL, whose
    tables read the same."""
    if isinstance(db, str):
        row = _pg_rows(db, sql, params)[0]
        return next(iter(row.values()))
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute(sql, params).fetchone()[0]
    finally:
        conn.close()


def db_rows(db: Path | str, sql: str, *params: Any) -> list[Any]:
    """Rows of the store, by column name (``db`` as for :func:`db_scalar`)."""
    if isinstance(db, str):
        return _pg_rows(db, sql, params)
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def store_rows(d: Daemon | Nodes, sql: str) -> list[Any]:
    """Rows of ``d``'s store, by column name, read while it runs: its SQLite file, or
    its PostgreSQL database (``[store] kind = "postgres"``, or several nodes')."""
    if isinstance(d, Nodes):
        return db_rows(d.db, sql)
    store = d.config["store"]
    if store.get("kind") != "postgres":
        return db_rows(d.db, sql)
    return _pg_rows(store["dsn"], sql, ())


def _pg_rows(dsn: str, sql: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(dsn, row_factory=dict_row) as conn:  # placeholders: %s
        return conn.execute(sql.encode(), params or None).fetchall()


def wait_all_terminal(d: Daemon | Nodes, timeout_s: float) -> int:
    """Wait until no job is queued, running or waiting to retry; the number left."""
    deadline = time.monotonic() + timeout_s
    left = -1
    while time.monotonic() < deadline:
        left = store_rows(d, "SELECT count(*) AS n FROM jobs WHERE state NOT IN "
                             "('succeeded', 'failed', 'canceled')")[0]["n"]
        if left == 0:
            return 0
        time.sleep(0.2)
    return left


# --- invariants ----------------------------------------------------------------------------


@dataclass
class Report:
    """The invariant figures; every loss figure must be zero and ``problems`` empty."""

    jobs_acked: int = 0
    jobs_in_store: int = 0
    jobs_lost: int = 0
    jobs_not_terminal: int = 0
    jobs_failed: int = 0
    artifacts_duplicated: int = 0
    artifacts_unexplained: int = 0
    signatures_doubled: int = 0
    signatures_invalid: int = 0
    signatures_checked: int = 0
    audit_chain: str = "unchecked"
    temp_files_left: int = 0
    problems: list[str] = field(default_factory=list)

    def ok(self) -> bool:
        return not self.problems

    def figures(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "problems"}


def _artifact_files(d: Daemon | Nodes, work: Path) -> dict[str, Path]:
    """Every artifact's plain bytes as a file: the artifact store's own, and those the
    store keeps in its database (written out under ``work`` to be checked the same way;
    the store's copy is the one served when both exist). Sealed ones
    (``[storage] encrypt``) are opened with their data keys, as the daemon reads them."""
    from casesignd.config import load
    from casesignd.core.keyring import artifact_owner
    from casesignd.core.sealed import SealKey, is_sealed
    from casesignd.files.envelope import open_plain, read_head
    from casesignd.store.data_keys import unseal_inline

    keyring = load(d.config_path).storage_keyring()
    root = d.dir / "artifacts"
    files = {f.name: f for f in root.rglob("*") if f.is_file()} if root.is_dir() else {}
    plain, inline = work / "unsealed-artifacts", work / "inline-artifacts"
    plain.mkdir(parents=True, exist_ok=True)
    inline.mkdir(parents=True, exist_ok=True)
    if keyring.ids:
        wraps = {r["owner"]: r for r in store_rows(d, "SELECT * FROM data_keys")}
        for art_id, f in list(files.items()):
            wrap = wraps.get(artifact_owner(art_id))
            if wrap is None or not is_sealed(read_head(f)):
                continue
            key = SealKey.from_bytes(keyring.unwrap(wrap["key_id"], bytes(wrap["wrapped"]),
                                                    wrap["owner"]))
            with open_plain(f, key, art_id) as src:
                (plain / art_id).write_bytes(src.read())
            files[art_id] = plain / art_id
    for row in store_rows(d, "SELECT * FROM artifact_data"):
        path = inline / row["artifact_id"]
        path.write_bytes(unseal_inline(keyring, row["artifact_id"], row))
        files[row["artifact_id"]] = path
    return files


def check_invariants(d: Daemon | Nodes, tally: Tally, work: Path, *, pdfsig_sample: int = 3,
                     cli_sample: int = 2, validate_all: bool = True,
                     expect_all_succeeded: bool = True, trust_extra: list[Any] | None = None,
                     nodes: list[Daemon] | None = None) -> Report:
    """Check every invariant of issue 7 on ``d`` (running, all jobs terminal).
    ``trust_extra``: more trust anchors (x509 certificates), e.g. a TSA's CA;
    ``nodes``: every daemon of ``d``'s store, whose temp areas must be empty too."""
    rep = Report(jobs_acked=len(tally.acked))
    problems = rep.problems
    jobs = {r["job_id"]: r for r in store_rows(d, "SELECT * FROM jobs")}
    rep.jobs_in_store = len(jobs)
    # Acknowledged means durable, and every job ends.
    for key, job_id in tally.acked.items():
        if job_id not in jobs:
            rep.jobs_lost += 1
            problems.append(f"acknowledged job {job_id} ({key}) is not in the store")
    for job_id, row in jobs.items():
        if row["state"] not in TERMINAL:
            rep.jobs_not_terminal += 1
            problems.append(f"job {job_id} is still {row['state']}")
        elif row["state"] == "failed":
            rep.jobs_failed += 1
            if expect_all_succeeded:
                problems.append(f"job {job_id} failed: {row['error_category']}/{row['error_code']}")
        api = d.request("GET", f"/v1/jobs/{job_id}")
        if api.status != 200:
            problems.append(f"GET job {job_id}: {api.status}")
    # One outcome per job, one artifact per job, one signature per signature key.
    events: dict[str, list[Any]] = {}
    for ev in store_rows(d, "SELECT * FROM events ORDER BY seq"):
        events.setdefault(ev["job_id"], []).append(ev)
    signed_per_key: dict[tuple[str, str], int] = {}
    named: dict[str, str] = {}  # artifact id -> sha256 named by succeeded jobs
    signed_artifacts: set[str] = set()
    for job_id, row in jobs.items():
        types = [e["type"] for e in events.get(job_id, [])]
        if types.count("succeeded") > (1 if row["state"] == "succeeded" else 0):
            problems.append(f"job {job_id} has {types.count('succeeded')} succeeded events")
        if types.count("signed") > 1:
            problems.append(f"job {job_id} has {types.count('signed')} signed events")
        if row["kind"] == "sign_case":
            sk = (row["tenant"], signature_key(json.loads(row["input"])))
            signed_per_key[sk] = signed_per_key.get(sk, 0) + types.count("signed")
        if row["state"] != "succeeded":
            continue
        art = (json.loads(row["result"]) or {}).get("artifact")
        if not art:
            problems.append(f"succeeded job {job_id} names no artifact")
            continue
        if art["artifact_id"] in named and named[art["artifact_id"]] != art["sha256"]:
            rep.artifacts_duplicated += 1
            problems.append(f"artifact {art['artifact_id']} named with two digests")
        named[art["artifact_id"]] = art["sha256"]
        signed_input = json.loads(row["input"]).get("sign", True)
        if row["kind"] == "sign_case" or signed_input:
            signed_artifacts.add(art["artifact_id"])
        if job_id in tally.kiosk_sha256 and tally.kiosk_sha256[job_id] != art["sha256"]:
            problems.append(f"kiosk job {job_id} answered other bytes than its artifact")
    sig_rows = {(r["tenant"], r["sig_key"]): r for r in store_rows(d, "SELECT * FROM signatures")}
    for sk, n in signed_per_key.items():
        if n > 1:
            rep.signatures_doubled += n - 1
            problems.append(f"signature key {sk[1][:12]}… has {n} signed events")
        if any(jobs[j]["state"] == "succeeded" for j in jobs
               if jobs[j]["kind"] == "sign_case" and jobs[j]["tenant"] == sk[0]
               and signature_key(json.loads(jobs[j]["input"])) == sk[1]):
            if sk not in sig_rows:
                problems.append(f"signature key {sk[1][:12]}… has no row in signatures")
            if n == 0:
                problems.append(f"signature key {sk[1][:12]}… has no signed event")
    for sk, r in sig_rows.items():
        if named.get(r["artifact_id"]) not in (None, r["sha256"]):
            rep.artifacts_duplicated += 1
            problems.append(f"signature row {sk[1][:12]}… differs from its jobs' artifact")
    files = _artifact_files(d, work)
    table = {r["artifact_id"]: r for r in store_rows(d, "SELECT * FROM artifacts")}
    for art_id in set(files) - set(named):
        rep.artifacts_unexplained += 1
        problems.append(f"artifact file {art_id} is named by no job")
    for art_id, sha in named.items():
        f = files.get(art_id)
        if f is None:
            problems.append(f"artifact {art_id} has no file")
        elif hashlib.sha256(f.read_bytes()).hexdigest() != sha:
            rep.artifacts_duplicated += 1
            problems.append(f"artifact {art_id} file differs from what its job names")
        if art_id not in table:
            problems.append(f"artifact {art_id} has no row in artifacts")
    # Every signed artifact validates independently.
    _validate(d, files, sorted(signed_artifacts), work, rep, pdfsig_sample, cli_sample, validate_all,
              trust_extra or [])
    audit = d.cli("audit", "verify", "--config", str(d.config_path), timeout_s=120)
    rep.audit_chain = "intact" if audit.returncode == 0 else "broken"
    if audit.returncode != 0:
        problems.append(f"audit verify: {audit.stdout.strip()} {audit.stderr.strip()}")
    rep.temp_files_left = sum(temp_leftovers(n) for n in (nodes or [d]))
    if rep.temp_files_left:
        problems.append(f"{rep.temp_files_left} entries left in the temp directory")
    return rep


def ready_once(d: Daemon | Nodes, tally: Tally) -> tuple[int, list[str]]:
    """How many acknowledged jobs ended ready exactly once (state succeeded, one
    ``succeeded`` event), and what is wrong with the others."""
    rows = db_rows(d.db, "SELECT j.job_id, j.state, (SELECT count(*) FROM events e WHERE "
                         "e.job_id = j.job_id AND e.type = 'succeeded') AS n FROM jobs j")
    seen = {r["job_id"]: (r["state"], r["n"]) for r in rows}
    problems = []
    for key, job_id in tally.acked.items():
        state, n = seen.get(job_id, ("missing", 0))
        if (state, n) != ("succeeded", 1):
            problems.append(f"job {job_id} ({key}) is {state} with {n} succeeded events")
    return len(tally.acked) - len(problems), problems


def temp_leftovers(d: Daemon | Nodes) -> int:
    """Entries left in the daemon's own working files (every node's, for several)."""
    areas = d.temp_areas if isinstance(d, Nodes) else [d.temp_area]
    return sum(sum(1 for _ in tmp.rglob("*")) for tmp in areas if tmp.is_dir())


def files_in_flight(d: Daemon) -> list[str]:
    """Uploads and publications in flight in ``d``'s state directory (which several
    daemons may share), and the working files in its own temp area."""
    state = d.dir
    found = [*(state / "objects" / "tmp").glob("*.part"), *(state / "artifacts").rglob(".*.tmp")]
    if d.temp_area.is_dir():
        found += list(d.temp_area.iterdir())
    return sorted(str(p.relative_to(state)) for p in found)


def _validate(d: Daemon | Nodes, files: dict[str, Path], signed: list[str], work: Path, rep: Report,
              pdfsig_sample: int, cli_sample: int, validate_all: bool,
              trust_extra: list[Any]) -> None:
    from cryptography import x509

    ca_pem = d.dir / "ca.pem"
    ca = x509.load_pem_x509_certificate(ca_pem.read_bytes())
    present = [a for a in signed if a in files]
    rng = random.Random(len(present))
    chosen = present if validate_all else rng.sample(present, min(len(present), 20))
    for art_id in chosen:
        rep.signatures_checked += 1
        try:
            statuses = pyhanko_statuses(files[art_id], [ca, *trust_extra])
            good = bool(statuses) and all(s.intact and s.valid and s.trusted for s in statuses)
            ts = [s.timestamp_validity for s in statuses if s.timestamp_validity is not None]
            good = good and all(t.intact and t.valid and t.trusted for t in ts)
        except Exception as e:  # noqa: BLE001 - any validator failure is an invalid signature
            good = False
            rep.problems.append(f"pyHanko on {art_id}: {type(e).__name__}: {e}")
        if not good:
            rep.signatures_invalid += 1
            rep.problems.append(f"artifact {art_id} does not validate with pyHanko")
    work.mkdir(parents=True, exist_ok=True)
    nss = nss_db(work, ca)
    for art_id in rng.sample(present, min(len(present), pdfsig_sample)):
        report = pdfsig(files[art_id], nss)
        if "Signature is Valid" not in report:
            rep.signatures_invalid += 1
            rep.problems.append(f"pdfsig on {art_id}: {report[-300:]}")
    # The CLI trusts what pyHanko was told to (a TSA's own CA too).
    trust = ["--trust", str(ca_pem)]
    if trust_extra:
        from cryptography.hazmat.primitives.serialization import Encoding

        extra_pem = work / "trust-extra.pem"
        extra_pem.write_bytes(b"".join(c.public_bytes(Encoding.PEM) for c in trust_extra))
        trust += ["--trust", str(extra_pem)]
    for art_id in rng.sample(present, min(len(present), cli_sample)):
        proc = d.cli("verify", str(files[art_id]), *trust)
        if proc.returncode != 0:
            rep.signatures_invalid += 1
            rep.problems.append(f"casesignd verify {art_id}: {proc.stdout[-300:]}")


def leftover_processes(d: Daemon | Nodes, timeout_s: float = 10.0) -> list[int]:
    """Processes still running for ``d``'s state directory (the daemon, its forkserver
    and CPU workers name it on their command line); waits up to ``timeout_s`` for
    them to go."""
    mark = str(d.dir).encode()
    deadline = time.monotonic() + timeout_s
    while True:
        pids = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cmdline = (proc / "cmdline").read_bytes()
                state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if mark in cmdline and state != "Z":
                pids.append(int(proc.name))
        if not pids or time.monotonic() > deadline:
            return pids
        time.sleep(0.2)
