"""A throwaway PostgreSQL cluster, for the tests (tests/helpers_postgres.py) and the
benchmarks (scripts/bench_*.py) alike: ``initdb`` in a temp directory, the server on a
Unix socket only, as the ``postgres`` user when run as root. Nothing here imports
pytest.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

USER = "test"  # the cluster's superuser; trust authentication on its own socket only
OS_USER = "postgres"  # who runs the server when the tests run as root


DEBIAN_DIR = Path("/usr/lib/postgresql")


def find_binary(name: str, debian_dir: Path = DEBIAN_DIR) -> Path | None:
    """``name`` (initdb, pg_ctl) on PATH, else in Debian's /usr/lib/postgresql/*/bin,
    newest version first."""
    found = shutil.which(name)
    if found:
        return Path(found)

    def version(p: Path) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", p.parent.parent.name)) or (0,)

    candidates = sorted(debian_dir.glob(f"*/bin/{name}"), key=version, reverse=True)
    return candidates[0] if candidates else None


def missing() -> str | None:
    """Why no cluster can be started here, or None."""
    if find_binary("initdb") is None or find_binary("pg_ctl") is None:
        return "initdb and pg_ctl are not on PATH nor in /usr/lib/postgresql/*/bin"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(OS_USER)
        except KeyError:
            return f"no {OS_USER!r} user to run the server as (it refuses to run as root)"
    return None


class Cluster:
    """One PostgreSQL server in its own directory, reachable on a Unix socket only."""

    def __init__(self, root: Path, *, fsync: bool = False) -> None:
        self.root = root
        self.data = root / "data"
        self.socket_dir = root / "sock"
        self.fsync = fsync
        self._names = itertools.count(1)
        reason = missing()
        if reason is not None:
            raise FileNotFoundError(reason)
        self.initdb, self.pg_ctl = find_binary("initdb"), find_binary("pg_ctl")
        self._as: list[str] = []
        self.socket_dir.mkdir()
        if os.geteuid() == 0:
            # The server refuses to run as root; its directories must be its own.
            owner = pwd.getpwnam(OS_USER)
            self._as = ["runuser", "-u", OS_USER, "--"]
            for p in (root, self.socket_dir):
                os.chown(p, owner.pw_uid, owner.pw_gid)

    def _run(self, *args: str | Path) -> None:
        proc = subprocess.run([*self._as, *map(str, args)], capture_output=True, text=True,
                              timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"{Path(str(args[0])).name} failed: {proc.stderr[-2000:]}")

    def start(self) -> Cluster:
        self._run(self.initdb, "-D", self.data, "-A", "trust", "-U", USER, "--no-sync",
                  "-E", "UTF8", "--locale", "C")
        options = f"-k {self.socket_dir} -c listen_addresses='' -c max_connections=200"
        if not self.fsync:
            options += " -c fsync=off -c full_page_writes=off -c synchronous_commit=off"
        self._run(self.pg_ctl, "-D", self.data, "-w", "-t", "60", "-l", self.root / "server.log",
                  "-o", options, "start")
        return self

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self._run(self.pg_ctl, "-D", self.data, "-m", "immediate", "-w", "stop")

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host={self.socket_dir} user={USER} dbname={dbname}"

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(sql.encode())

    def create_database(self) -> str:
        """A fresh, empty database: its name."""
        name = f"t{os.getpid()}_{next(self._names)}"
        self._admin(f'CREATE DATABASE "{name}" TEMPLATE template0')
        return name

    def drop_database(self, name: str) -> None:
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    @contextlib.contextmanager
    def fresh_database(self) -> Iterator[str]:
        """The dsn of a fresh, empty database, dropped at the end."""
        name = self.create_database()
        try:
            yield self.dsn(name)
        finally:
            self.drop_database(name)

    def server_pid(self) -> int:
        """The postmaster's process id (its backends are its children): for CPU counts."""
        return int((self.data / "postmaster.pid").read_text().split()[0])


@contextlib.contextmanager
def running_cluster(*, fsync: bool = False, parent: str | None = None) -> Iterator[Cluster]:
    """A cluster in a new temp directory (under ``parent``), stopped and removed at the end."""
    root = Path(tempfile.mkdtemp(prefix="casesignd-pg-", dir=parent))
    try:
        cluster = Cluster(root, fsync=fsync).start()
        try:
            yield cluster
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
