"""``casesignd backup --to DIR`` and ``casesignd restore --from DIR --dir STATE``
(:mod:`casesignd.ops.backup`, :mod:`casesignd.ops.restore`), imported only when they run."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from casesignd.cli.client import config_path_from
from casesignd.cli.common import CONFIG_HELP, EXIT_FAILED, EXIT_OK, Command, err, out


def cmd_backup(args: argparse.Namespace) -> int:
    import sqlite3

    import psycopg

    from casesignd import config
    from casesignd.ops.backup import backup

    path = config_path_from(args.config, os.environ)
    cfg = config.load(path)
    try:
        report = backup(cfg, path, Path(args.to), say=lambda line: err(f"backup: {line}"))
    except (sqlite3.Error, psycopg.Error) as e:
        err(f"error: store_unreadable: {str(e).strip()}")
        return EXIT_FAILED
    for line in report.lines():
        out(line)
    return EXIT_OK


def cmd_restore(args: argparse.Namespace) -> int:
    from casesignd.ops.restore import BackupInvalid, restore

    try:
        report = restore(Path(args.source), Path(args.dir), dsn=args.dsn,
                         say=lambda line: err(f"restore: {line}"))
    except BackupInvalid as e:
        err(f"error: {e.code}: {e.message}")
        for problem in e.problems:
            err(f"  {problem}")
        return EXIT_FAILED
    for line in report.lines():
        out(line)
    return EXIT_OK if report.ok else EXIT_FAILED


def register(sub: Any, command: Command) -> None:
    """Adds ``backup`` and ``restore``."""
    c = command("backup", cmd_backup,
                "back up a running setup (store, files, config) with a manifest of digests",
                epilog="Runs beside the daemon. The store is copied first, as one snapshot "
                "(SQLite's online backup, or pg_dump of an exported snapshot); then the "
                "artifact files and objects (with their case links) that snapshot names, and "
                "the config with the files it names (signing key, link secret, trust roots) "
                "and client.env, each with its mode. manifest.json, written last, lists every "
                "file's path, size and SHA-256. The backup holds secrets: keep it where only "
                "operators can read it. Exit 0 written, 1 refused or failed (DIR not empty, a "
                "file unlike its record, files that kept going away), 2 a bad config.")
    c.add_argument("--to", required=True, metavar="DIR",
                   help="a new or empty directory to write the backup into")
    c.add_argument("--config", metavar="PATH", help=CONFIG_HELP)

    c = command("restore", cmd_restore, "restore a backup into a new setup directory",
                epilog="Every file of the backup is checked against its manifest first; "
                "any missing, extra or altered file is named and nothing is written. STATE "
                "must be new or empty (so must the database a PostgreSQL config names: the "
                "dump is restored into it). STATE gets the store, the objects and artifacts, "
                "the config's files and config.toml with its paths pointing into STATE; then "
                "it is checked as `store check` does. Serve it with `casesignd serve --config "
                "STATE/config.toml`. Exit 0 restored and checked, 1 refused or a check "
                "failed, 2 a bad config.")
    c.add_argument("--from", dest="source", required=True, metavar="DIR",
                   help="the backup (a directory written by casesignd backup)")
    c.add_argument("--dir", required=True, metavar="STATE",
                   help="a new or empty directory for the restored setup")
    c.add_argument("--dsn", metavar="DSN",
                   help="PostgreSQL: the empty database to restore into, instead of the "
                   "backed-up config's store.dsn (the restored config names it)")
