"""Several daemons on one PostgreSQL database: one state directory and one config file
(``casesignd init`` once, ``[store] kind = "postgres"``), and a process per node
(``serve --node n1 --listen 127.0.0.1:PORT``), each on a port of its own, as the
contract's "Several daemons on one PostgreSQL" describes. For the benchmarks
(scripts/bench_sign.py and scripts/bench_chaos.py with ``--store postgres``) and
for tests.

:class:`Nodes` answers what the chaos helpers ask of a daemon (``request``,
``submit``, ``db``, ``dir``, ``config_path``, ``cli``), spreading requests over the
nodes that are up, one after another, so a client sees one service.
"""

from __future__ import annotations

import itertools
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.daemon import Daemon, Response, free_port, merge


class Node(Daemon):
    """One daemon of several: the state directory, config and token of ``base``, its
    own node name, port and log."""

    def __init__(self, base: Daemon, name: str) -> None:
        # No `casesignd init` of its own: every node runs on the one setup of base.
        self.__dict__.update(base.__dict__)
        self.node = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = base.dir / f"daemon-{name}.log"
        self.proc = None

    def serve_args(self) -> list[str]:
        return [*super().serve_args(), "--listen", f"127.0.0.1:{self.port}"]

    def up(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Nodes:
    """``count`` daemons named n1, n2, ... on one state directory and the database at
    ``dsn``. ``daemon``: the :class:`Daemon`'s own keywords (``sign_delay_ms``...)."""

    def __init__(self, state: Path, dsn: str, count: int,
                 overrides: dict[str, Any] | None = None, env: dict[str, str] | None = None,
                 **daemon: Any) -> None:
        self.base = Daemon(state, merge(overrides or {}, {"store": {"kind": "postgres",
                                                                    "dsn": dsn}}), env, **daemon)
        self.nodes = [Node(self.base, f"n{i + 1}") for i in range(count)]
        self.dsn = dsn
        self.exit_codes: dict[str, int] = {}  # by node, from the last stop()
        self._turn = itertools.count()

    # --- what a single daemon offers, for the whole service ----------------------------

    @property
    def db(self) -> str:
        """The store, for tests/helpers_chaos.py's reads: a PostgreSQL dsn."""
        return self.dsn

    @property
    def dir(self) -> Path:
        return self.base.dir

    @property
    def config_path(self) -> Path:
        return self.base.config_path

    @property
    def token(self) -> str:
        return self.base.token

    @property
    def temp_areas(self) -> list[Path]:
        """Every node's own working files."""
        return [n.temp_area for n in self.nodes]

    def cli(self, *args: str, timeout_s: float = 120.0) -> Any:
        return self.nodes[0].cli(*args, timeout_s=timeout_s)

    def next_up(self) -> Node:
        """The next node that is up, in turn (the first node when none is)."""
        for _ in range(len(self.nodes)):
            node = self.nodes[next(self._turn) % len(self.nodes)]
            if node.up():
                return node
        return self.nodes[0]

    def request(self, method: str, path: str, body: Any = None, **kw: Any) -> Response:
        return self.next_up().request(method, path, body, **kw)

    def submit(self, body: dict[str, Any], key: str | None = None) -> Response:
        return self.next_up().submit(body, key=key)

    # --- processes -------------------------------------------------------------------

    def start(self, timeout_s: float = 60.0) -> Nodes:
        """Start every node (at once: they migrate the one database under its lock) and
        wait until each is ready."""
        for n in self.nodes:
            n.start(wait=False)
        for n in self.nodes:
            n.wait_ready(timeout_s)
        return self

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM to every node that is up, at once, and once only (a second one may
        land after a daemon's loop is gone, and kill it): 0 when each stopped
        cleanly, else the first other exit status."""
        for n in self.nodes:
            if n.up():
                n.signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        self.exit_codes = {}
        for n in self.nodes:
            if n.proc is None:
                continue
            try:
                self.exit_codes[n.node] = n.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                n.kill9()
                raise
        return next((c for c in self.exit_codes.values() if c != 0), 0)

    def kill_all(self) -> None:
        for n in self.nodes:
            if n.up():
                n.kill9()

    def wait_up(self, timeout_s: float = 60.0) -> None:
        """Until every node that runs is ready."""
        deadline = time.monotonic() + timeout_s
        for n in self.nodes:
            if n.up():
                n.wait_ready(max(1.0, deadline - time.monotonic()))
