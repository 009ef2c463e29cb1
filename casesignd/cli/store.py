"""The operator's commands on the store itself: ``audit verify`` and ``store migrate``,
``store check``, ``store copy`` and ``store rekey``. They read the config's store directly, with no
daemon, and import the store modules only when they run."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from casesignd.cli.client import config_path_from
from casesignd.cli.common import CONFIG_HELP, EXIT_FAILED, EXIT_OK, Command, dump, err, out

if TYPE_CHECKING:
    from casesignd.config import Config


def _store_name(cfg: Any) -> str:
    """Where the configured store is, for a person (a dsn never holds a password)."""
    if cfg.store.kind == "postgres":
        return f"postgres {cfg.store.dsn}"
    return str(cfg.path(cfg.store.path))


def _missing_store(cfg: Config) -> bool:
    """A SQLite store whose file is not there (a reading command must not make one)."""
    db = cfg.path(cfg.store.path)
    if cfg.store.kind == "sqlite" and not db.is_file():
        err(f"error: no_store: no job store at {db}")
        return True
    return False


def cmd_audit_verify(args: argparse.Namespace) -> int:
    import sqlite3

    from casesignd import config
    from casesignd.core import audit

    cfg = config.load(config_path_from(args.config, os.environ))
    if cfg.store.kind == "postgres":
        import psycopg

        try:
            report = audit.verify_postgres(cfg.store.dsn, password=cfg.store_password())
        except psycopg.Error as e:
            err(f"error: store_unreadable: {_store_name(cfg)}: {str(e).strip()}")
            return EXIT_FAILED
    else:
        if _missing_store(cfg):
            return EXIT_FAILED
        db = cfg.path(cfg.store.path)
        try:
            report = audit.verify_file(db)
        except sqlite3.Error as e:
            err(f"error: store_unreadable: {db}: {e}")
            return EXIT_FAILED
    if report.ok:
        out(f"audit chain intact: {report.checked} events")
        return EXIT_OK
    bad = report.first_bad or {}
    job = f", job_id={bad['job_id']}" if bad.get("job_id") else ""
    out(f"audit chain broken at event seq={bad.get('seq')} "
         f"(event_id={bad.get('event_id')}{job}): {bad.get('reason')}")
    return EXIT_FAILED


def cmd_store_migrate(args: argparse.Namespace) -> int:
    import asyncio

    from casesignd import config
    from casesignd.store import make_store

    cfg = config.load(config_path_from(args.config, os.environ))
    version = asyncio.run(make_store(cfg).migrate())
    out(f"job store {_store_name(cfg)}: schema version {version}")
    return EXIT_OK


def cmd_store_copy(args: argparse.Namespace) -> int:
    from casesignd import config
    from casesignd.ops.store_copy import copy_store

    src, dst = config.load(args.source), config.load(args.target)
    report = copy_store(src, dst, say=lambda line: err(f"store copy: {line}"))
    for note in report.notes:
        err(f"note: {note}")
    for line in report.lines():
        out(line)
    return EXIT_OK


def cmd_store_rekey(args: argparse.Namespace) -> int:
    import asyncio

    from casesignd import config
    from casesignd.ops.rekey import rekey_configured

    cfg = config.load(config_path_from(args.config, os.environ))
    if _missing_store(cfg):
        return EXIT_FAILED
    report = asyncio.run(rekey_configured(cfg, say=lambda line: err(f"store rekey: {line}")))
    for line in report.lines():
        out(line)
    return EXIT_OK


def cmd_store_check(args: argparse.Namespace) -> int:
    import sqlite3

    import psycopg

    from casesignd import config
    from casesignd.ops.store_check import check_store
    from casesignd.store.snapshot import open_snapshot

    cfg = config.load(config_path_from(args.config, os.environ))
    if _missing_store(cfg):
        return EXIT_FAILED
    try:
        snap = open_snapshot(cfg)
        try:
            report = check_store(snap, cfg.path(cfg.storage.state_dir), cfg.storage_keyring())
        finally:
            snap.close()
    except (sqlite3.Error, psycopg.Error) as e:
        err(f"error: store_unreadable: {_store_name(cfg)}: {str(e).strip()}")
        return EXIT_FAILED
    if args.json:
        dump(report.to_json())
    else:
        for line in report.lines():
            out(line)
    return EXIT_OK if report.ok else EXIT_FAILED


def register(sub: Any, command: Command) -> None:
    """Adds ``audit verify`` and ``store migrate / check / copy``."""
    audit = sub.add_parser("audit", help="the audit chain", description="the audit chain")
    audit_sub = audit.add_subparsers(dest="audit_command", metavar="ACTION", required=True)
    c = command("verify", cmd_audit_verify, "check the whole audit chain", audit_sub)
    c.add_argument("--config", metavar="PATH",
                   help=CONFIG_HELP)

    store = sub.add_parser("store", help="the job store", description="the job store")
    store_sub = store.add_subparsers(dest="store_command", metavar="ACTION", required=True)
    c = command("migrate", cmd_store_migrate,
                "apply the configured store's migrations and say its schema version", store_sub)
    c.add_argument("--config", metavar="PATH",
                   help=CONFIG_HELP)
    c = command("check", cmd_store_check,
                "check the store, its files and its audit chain against each other", store_sub,
                epilog="The audit chain verifies (PostgreSQL's head is its last event), the "
                "jobs per state kept match the jobs, every artifact the store names has its "
                "bytes with the recorded size and SHA-256, every file under artifacts/ is named, "
                "and what jobs that may still run name is there. Exit 0 all well, 1 a list.")
    c.add_argument("--config", metavar="PATH",
                   help=CONFIG_HELP)
    c.add_argument("--json", action="store_true",
                   help='print the report as JSON: {"ok": ..., "counted": {...}, '
                   '"problems": [{"kind": ..., "message": ...}, ...], ...}')
    c = command("rekey", cmd_store_rekey,
                "rewrap every data key under the current storage key", store_sub,
                epilog="Storage encryption: after storage.key_id names a new key (the old one "
                "kept as [[storage.old_keys]]), rewraps the data keys of every object and "
                "artifact still under an old key, in batches, without rewriting the data. "
                "Idempotent and resumable; it may run beside the daemons. Once it says nothing "
                "is left under an old key, that key may leave the configuration. Exit 0 done, "
                "1 failed, 2 a bad config (a key it needs is not configured).")
    c.add_argument("--config", metavar="PATH", help=CONFIG_HELP)
    c = command("copy", cmd_store_copy,
                "copy a whole SQLite store, its files and its audit chain into an empty "
                "PostgreSQL store", store_sub,
                epilog="Stop the daemon on the source first (a running one is refused). Jobs, "
                "events, signatures, idempotency keys, artifact records and the artifacts kept "
                "in the store are copied in one transaction, the audit chain verified before it "
                "commits; objects and artifact files too, when the two configs name different "
                "storage.state_dir. A target that holds jobs or events is refused, unless it "
                "holds this very copy. Interrupted, it leaves no rows behind: run it again. "
                "Exit 0 copied, 1 refused or failed, 2 a bad config.")
    c.add_argument("--from", dest="source", required=True, metavar="SRC.toml",
                   help="config of the store to copy (store.kind = \"sqlite\")")
    c.add_argument("--to", dest="target", required=True, metavar="DST.toml",
                   help="config of the store to fill (store.kind = \"postgres\")")
