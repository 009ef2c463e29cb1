"""PostgreSQL's side of ``casesignd backup`` and ``casesignd restore``: ``pg_dump`` of
one exported snapshot, and ``pg_restore`` into an empty database. The tools are found
on PATH, else in Debian's ``/usr/lib/postgresql/*/bin`` (newest first: a pg_dump must
be at least as new as the server it dumps). Blocking throughout.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from casesignd.core.errors import CasesignError, Conflict, StoreUnavailable

DEBIAN_DIR = Path("/usr/lib/postgresql")
# A dump or a restore of a large store takes long; this only stops a tool that hangs.
TOOL_TIMEOUT_S = 6 * 3600.0

# Tables in the database's own schemas: a restore fills a database that has none.
_TABLES = """
SELECT count(*) AS n FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
 WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
   AND n.nspname NOT LIKE 'pg\\_toast%'
"""


def find_tool(name: str, debian_dir: Path = DEBIAN_DIR) -> Path:
    """``name`` (pg_dump, pg_restore) on PATH, else the newest in ``debian_dir``;
    CasesignError ``tool_missing`` when there is none."""
    newest = sorted(debian_dir.glob(f"*/bin/{name}"), reverse=True,
                    key=lambda p: tuple(int(x) for x in re.findall(r"\d+", p.parent.parent.name)))
    if newest:  # Debian's own binary over the PATH's wrapper, which may pick an older one
        return newest[0]
    found = shutil.which(name)
    if found:
        return Path(found)
    raise CasesignError(f"{name} is not on PATH nor in {debian_dir}/*/bin: install "
                        "postgresql-client", code="tool_missing")


def _env(password: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if password:
        env["PGPASSWORD"] = password  # never on the command line, where ps shows it
    return env


def _run(args: list[str], password: str | None, what: str) -> None:
    proc = subprocess.run(args, capture_output=True, text=True, env=_env(password),
                          timeout=TOOL_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        raise StoreUnavailable(f"{what} failed (exit {proc.returncode}): "
                               f"{proc.stderr.strip()[-2000:]}")


def dump(dsn: str, password: str | None, snapshot_id: str, out: Path) -> None:
    """``pg_dump`` the database at ``dsn`` as of the exported snapshot ``snapshot_id``
    (its transaction must stay open meanwhile) into ``out``, custom format."""
    _run([str(find_tool("pg_dump")), "--format=custom", "--no-password",
          f"--snapshot={snapshot_id}", f"--file={out}", f"--dbname={dsn}"], password,
         "pg_dump")


def check_empty(dsn: str, password: str | None) -> None:
    """Conflict ``target_not_empty`` unless the database at ``dsn`` holds no table."""
    import psycopg

    try:
        extra: dict[str, Any] = {"password": password} if password else {}
        with psycopg.connect(dsn, autocommit=True, application_name="casesignd-restore",
                             **extra) as conn:
            row = conn.execute(_TABLES).fetchone()
    except psycopg.Error as e:
        raise StoreUnavailable(f"postgres {dsn}: {str(e).strip()}") from e
    if row is not None and int(row[0]):
        raise Conflict(f"postgres {dsn} holds {row[0]} tables: restore fills an empty "
                       "database (createdb a new one)", code="target_not_empty")


def restore(dsn: str, password: str | None, dump_file: Path) -> None:
    """``pg_restore`` ``dump_file`` into the empty database at ``dsn``, in one
    transaction: refused or failed, it leaves the database empty."""
    _run([str(find_tool("pg_restore")), "--no-password", "--no-owner", "--no-privileges",
          "--single-transaction", "--exit-on-error", f"--dbname={dsn}", str(dump_file)],
         password, "pg_restore")
