"""Erased means no byte of it remains in the store's files (CONTRACT.md, "Data
lifecycle"): a document holding a marker, signed on the kiosk and in batch jobs, kept
in the store and as files, then its case erased: the marker is in no file under the
state directory (SQLite's database, WAL and shared memory among them), and the
erasure's audit event says what went and where, by digest. On PostgreSQL the
erased rows are vacuumed at once: in no live or dead tuple."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.daemon import ENCRYPT_STORES, Daemon
from tests.helpers_ops import case_manifest, kiosk_sign

MARKER = b"ERASE-ME-7f3a9c21-PERSONAL"
INLINE_MAX = 64 * 1024


def marked_pdf(path: Path, pages: int) -> bytes:
    """A PDF whose bytes hold the marker as they are (no compression)."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=A4, pageCompression=0)
    c.setTitle(MARKER.decode())
    for i in range(pages):
        for line in range(40):
            c.drawString(72, 800 - 18 * line, f"{MARKER.decode()} page {i + 1} line {line}")
        c.showPage()
    c.save()
    return path.read_bytes()


def files_holding(root: Path, needle: bytes) -> list[Path]:
    out = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink() and needle in p.read_bytes():
            out.append(p)
    return out


def sign_everywhere(d: Daemon, tmp_path: Path, case_id: str) -> list[dict]:
    """The marker signed four ways: kiosk and batch, each kept in the store and as a
    file. The jobs."""
    small, large = marked_pdf(tmp_path / "small.pdf", 1), marked_pdf(tmp_path / "large.pdf", 30)
    assert len(small) < INLINE_MAX // 2 < INLINE_MAX < len(large)
    jobs = []
    for n, pdf in enumerate((small, large)):
        r = kiosk_sign(d, case_id, pdf, key=f"{case_id}-kiosk-{n}")
        assert r.status == 200, r.body[:300]
        jobs.append(d.job(r.headers["X-Job-Id"]))
    batch_small = marked_pdf(tmp_path / "batch-small.pdf", 2)
    for manifest in (case_manifest(d, case_id, batch_small),
                     case_manifest(d, case_id, marked_pdf(tmp_path / "batch.pdf", 3),
                                   [("note.txt", "text/plain", MARKER + b" evidence\n")])):
        job = d.wait_job(d.submit(manifest).json()["job_id"])
        assert job["state"] == "ready", job
        jobs.append(job)
    return jobs


@pytest.fixture
def erasing(daemon_factory) -> Daemon:
    return daemon_factory({"kiosk": {"inline_artifact_max_bytes": INLINE_MAX}})


def test_an_erased_case_leaves_no_byte_of_its_documents_under_the_state_dir(erasing, tmp_path):
    d = erasing
    jobs = sign_everywhere(d, tmp_path, "ERASE-1")
    with sqlite3.connect(d.db) as conn:
        inline = conn.execute("SELECT count(*) FROM artifact_data").fetchone()[0]
    assert inline == 2, inline  # the small kiosk and batch results are kept in the store
    # Before: in objects, artifacts and the store (not when they are sealed at rest,
    # CASESIGND_TEST_ENCRYPT_STORES: then nothing of it is plain there to begin with).
    assert ENCRYPT_STORES or files_holding(d.dir, MARKER)

    r = d.request("DELETE", "/v1/cases/ERASE-1")
    assert r.status == 200 and r.json()["artifacts_removed"] == 4, r.body
    assert files_holding(d.dir, MARKER) == []

    # The erasure's event: what went and where, by digest.
    with sqlite3.connect(d.db) as conn:
        (detail,) = conn.execute("SELECT detail FROM events WHERE type = 'case_erased'").fetchone()
    removed = json.loads(detail)["removed"]
    artifacts = {e["artifact_id"]: e for e in removed if e["what"] == "artifact"}
    for job in jobs:
        got = artifacts[job["result"]["artifact_id"]]
        assert got["sha256"] == job["result"]["sha256"] and got["where"] in ("store", "artifacts")
    assert sorted(e["where"] for e in artifacts.values()) == ["artifacts", "artifacts",
                                                              "store", "store"]
    assert {e["where"] for e in removed if e["what"] == "object"} == {"objects"}
    assert MARKER not in detail.encode()
    out = d.cli("audit", "verify", "--config", str(d.config_path))
    assert out.returncode == 0, out.stdout + out.stderr
    check = d.cli("store", "check", "--config", str(d.config_path))
    assert check.returncode == 0, check.stdout + check.stderr


def test_an_erased_case_on_postgres_is_in_no_live_or_dead_tuple(daemon_factory, postgres_dsn,
                                                                 tmp_path):
    import psycopg

    d = daemon_factory({"store": {"kind": "postgres", "dsn": postgres_dsn},
                        "kiosk": {"inline_artifact_max_bytes": INLINE_MAX}})
    sign_everywhere(d, tmp_path, "ERASE-PG")
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
        toast = conn.execute("SELECT reltoastrelid::regclass::text FROM pg_class "
                             "WHERE relname = 'artifact_data'").fetchone()[0]

        def tuples() -> int:
            """Line pointers in use (live, dead or redirected) in artifact_data and its
            TOAST table, page by page."""
            n = 0
            for rel in ("artifact_data", toast):
                pages = conn.execute("SELECT pg_relation_size(%s::regclass) / "
                                     "current_setting('block_size')::int", (rel,)).fetchone()[0]
                for page in range(pages):
                    n += conn.execute("SELECT count(*) FROM heap_page_items(get_raw_page(%s, %s)) "
                                      "WHERE lp_flags <> 0", (rel, page)).fetchone()[0]
            return n

        assert tuples() >= 2
        r = d.request("DELETE", "/v1/cases/ERASE-PG")
        assert r.status == 200 and r.json()["artifacts_removed"] == 4, r.body
        assert tuples() == 0
    assert files_holding(d.dir, MARKER) == []
    out = d.cli("audit", "verify", "--config", str(d.config_path))
    assert out.returncode == 0, out.stdout + out.stderr
