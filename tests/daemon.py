"""A real casesignd daemon on loopback, for integration and acceptance tests.

The daemon runs as a separate process on a fresh setup made by ``casesignd init``,
with a real SQLite file, so tests can ``kill -9`` it and start it again on the same
state. It is ``casesignd serve`` with the test suite's parts plugged in
(``python -m tests.serve``: the ``test`` job kind, strict metric labels, a slowed key
on request), or, with ``test_parts=False``, the product as it ships. :func:`shared_nodes` makes several daemons
of one setup (one config file, one state directory) for a store they can share.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def to_toml(data: dict[str, Any]) -> str:
    """Enough of TOML for casesignd's config: scalars, tables, arrays of tables."""
    lines = []
    for k, v in data.items():
        if not isinstance(v, dict) and not (isinstance(v, list) and v and isinstance(v[0], dict)):
            lines.append(f"{k} = {_toml_value(v)}")
    for k, v in data.items():
        if isinstance(v, dict):
            lines.append(f"\n[{k}]")
            for kk, vv in v.items():
                lines.append(f"{kk} = {_toml_value(vv)}")
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            for item in v:
                lines.append(f"\n[[{k}]]")
                for kk, vv in item.items():
                    lines.append(f"{kk} = {_toml_value(vv)}")
    return "\n".join(lines) + "\n"


def multipart(manifest: dict[str, Any], document: bytes) -> tuple[bytes, str]:
    """A POST /v1/sign body: the manifest part and the document part, and its content type."""
    boundary = uuid.uuid4().hex
    parts = [
        (b'Content-Disposition: form-data; name="manifest"\r\nContent-Type: application/json\r\n\r\n',
         json.dumps(manifest).encode()),
        (b'Content-Disposition: form-data; name="document"; filename="doc.pdf"\r\n'
         b"Content-Type: application/pdf\r\n\r\n", document),
    ]
    body = b"".join(b"--" + boundary.encode() + b"\r\n" + h + d + b"\r\n" for h, d in parts)
    return body + b"--" + boundary.encode() + b"--\r\n", f"multipart/form-data; boundary={boundary}"


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class Response:
    def __init__(self, status: int, headers: Any, body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)


# With this set to 1 every daemon the tests make seals its stores at rest
# ([storage] encrypt, under a key generated for it): `CASESIGND_TEST_ENCRYPT_STORES=1
# scripts/test tests/integration/test_x.py` runs a file's tests that way.
ENCRYPT_STORES = os.environ.get("CASESIGND_TEST_ENCRYPT_STORES") == "1"


def encrypted_stores(state: Path, force: bool = False, key_id: str = "test-1") -> dict[str, Any]:
    """The ``[storage]`` settings that seal a daemon's stores under a fresh key, written
    beside its config (``storage.key``), when ``force`` or the environment asks."""
    if not (force or ENCRYPT_STORES):
        return {}
    key = state / "storage.key"
    if not key.exists():
        key.write_text(secrets.token_hex(32) + "\n")
        key.chmod(0o600)
    return {"storage": {"encrypt": True, "key_file": "storage.key", "key_id": key_id}}


class Daemon:
    """One daemon's state directory and, while running, its process.

    ``test_parts``: run it with the test suite's parts (tests/serve.py), with its key
    waiting ``sign_delay_ms`` before each signature and metric labels strict unless
    ``strict_labels`` is false; without, it is ``casesignd serve`` alone (a benchmark
    of the product, or of another checkout's: ``env={"PYTHONPATH": ...}``)."""

    def __init__(self, state: Path, overrides: dict[str, Any] | None = None,
                 env: dict[str, str] | None = None, init_args: list[str] | None = None, *,
                 test_parts: bool = True, sign_delay_ms: int = 0,
                 strict_labels: bool = True) -> None:
        self.dir = state
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.env.pop("NOTIFY_SOCKET", None)
        self.test_parts = test_parts
        self.sign_delay_ms = sign_delay_ms
        self.strict_labels = strict_labels
        if test_parts:
            # tests.serve, and what it plugs in, must import in the daemon and in its
            # worker processes: after whatever PYTHONPATH names, so that a casesignd it
            # names still comes first.
            self.env["PYTHONPATH"] = os.pathsep.join(
                p for p in (self.env.get("PYTHONPATH"), str(ROOT)) if p)
        # Run from beside the state, as serve runs from in it: ``python -m`` puts the
        # working directory first on sys.path, which would put this checkout's
        # casesignd before the one PYTHONPATH names (a baseline of the benches).
        subprocess.run([sys.executable, "-m", "casesignd", "init", "--dir", str(state),
                        *(init_args or [])],
                       check=True, capture_output=True, env=self.env, timeout=60,
                       cwd=state.parent)
        self.config_path = state / "config.toml"
        base = tomllib.loads(self.config_path.read_text())
        fast = {"workers": {"poll_interval_ms": 50.0, "reclaim_interval_s": 0.5,
                            "shutdown_grace_s": 5.0},
                "retry": {"base_delay_s": 0.2, "max_delay_s": 2.0},
                "server": {"listen": f"127.0.0.1:{self.port}"}}
        self.config = merge(merge(merge(base, fast), encrypted_stores(state)), overrides or {})
        self.config_path.write_text(to_toml(self.config))
        envfile = dict(line.split("=", 1) for line in (state / "client.env").read_text().splitlines()
                       if "=" in line and not line.startswith("#"))
        self.token = envfile["CASESIGND_TOKEN"]
        self.log_path = state / "daemon.log"
        self.db = state / self.config["store"]["path"]
        self.node = "test-node"
        self.listen: str | None = None  # serve --listen, when not the config's own

    def sibling(self, node: str) -> Daemon:
        """Another daemon of this setup: the same config file and state directory, its
        own node name, port (``serve --listen``) and log. Not started."""
        twin = copy.copy(self)
        twin.node = node
        twin.port = free_port()
        twin.url = f"http://127.0.0.1:{twin.port}"
        twin.listen = f"127.0.0.1:{twin.port}"
        twin.proc = None
        twin.log_path = self.dir / f"daemon-{node}.log"
        return twin

    @property
    def temp_area(self) -> Path:
        """This daemon's own working files: storage.temp_dir/NODE."""
        return self.dir / self.config["storage"].get("temp_dir", "tmp") / self.node

    # --- process -------------------------------------------------------------------

    def serve_args(self) -> list[str]:
        """What ``casesignd serve`` is given after its name."""
        return ["--config", str(self.config_path), "--node", self.node,
                *(["--listen", self.listen] if self.listen else [])]

    def command(self) -> list[str]:
        """The daemon's command line: ``casesignd serve``, or tests.serve with what the
        test parts are told."""
        if not self.test_parts:
            return [sys.executable, "-m", "casesignd", "serve", *self.serve_args()]
        return [sys.executable, "-m", "tests.serve", *self.serve_args(),
                *(["--sign-delay-ms", str(self.sign_delay_ms)] if self.sign_delay_ms else []),
                *([] if self.strict_labels else ["--lenient-labels"])]

    def start(self, wait: bool = True) -> Daemon:
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            self.command(),
            stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=self.dir)
        log.close()
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.proc.returncode}:\n{self.logs()[-3000:]}")
            try:
                if self.request("GET", "/readyz", auth=False).status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"daemon not ready:\n{self.logs()[-3000:]}")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self, timeout_s: float = 30.0) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    # --- HTTP ------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None, *, auth: bool | str = True,
                headers: dict[str, str] | None = None, raw: bytes | None = None,
                timeout_s: float = 30.0) -> Response:
        hdrs = dict(headers or {})
        if auth:
            hdrs.setdefault("Authorization", f"Bearer {auth if isinstance(auth, str) else self.token}")
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as r:
                return Response(r.status, r.headers, r.read())
        except urllib.error.HTTPError as e:
            return Response(e.code, e.headers, e.read())

    def submit(self, body: dict[str, Any], key: str | None = None) -> Response:
        return self.request("POST", "/v1/jobs", body,
                            headers={"Idempotency-Key": key} if key else None)

    def job(self, job_id: str) -> dict[str, Any]:
        r = self.request("GET", f"/v1/jobs/{job_id}")
        assert r.status == 200, r.body
        return r.json()

    def wait_job(self, job_id: str, states: tuple[str, ...] = ("ready", "failed", "canceled"),
                 timeout_s: float = 60.0, poll_s: float = 0.05) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.job(job_id)
            if job["state"] in states:
                return job
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {job['state']}")
            time.sleep(poll_s)

    def events(self, job_id: str) -> list[dict[str, Any]]:
        return self.request("GET", f"/v1/jobs/{job_id}/events").json()["events"]

    def cli(self, *args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
        env = {**self.env, "CASESIGND_URL": self.url, "CASESIGND_TOKEN": self.token}
        return subprocess.run([sys.executable, "-m", "casesignd", *args], capture_output=True,
                              text=True, env=env, timeout=timeout_s, cwd=self.dir)


def shared_nodes(state: Path, names: list[str], overrides: dict[str, Any] | None = None,
                 env: dict[str, str] | None = None, **daemon: Any) -> list[Daemon]:
    """Daemons named ``names`` on one setup made in ``state`` (one ``casesignd init``,
    one config file with ``overrides``): what several daemons on one PostgreSQL
    database and a shared state directory look like. Not started. ``daemon``: the
    :class:`Daemon`'s own keywords (``sign_delay_ms``...)."""
    first = Daemon(state, overrides, env, **daemon)
    first.node = names[0]
    first.log_path = state / f"daemon-{names[0]}.log"
    return [first, *(first.sibling(name) for name in names[1:])]


def start_all(nodes: list[Daemon], timeout_s: float = 90.0) -> None:
    """Start ``nodes`` side by side, then wait until each is ready."""
    for n in nodes:
        n.start(wait=False)
    for n in nodes:
        n.wait_ready(timeout_s=timeout_s)


def kill_all(nodes: list[Daemon]) -> None:
    """Kill whichever of ``nodes`` still runs (at a test's end)."""
    for n in nodes:
        if n.proc is not None and n.proc.poll() is None:
            n.proc.kill()
            n.proc.wait(timeout=10)


@contextlib.contextmanager
def postgres_nodes(cluster: Any, state: Path, names: list[str],
                   overrides: dict[str, Any] | None = None,
                   prepare: Callable[[list[Daemon]], None] | None = None,
                   **daemon: Any) -> Iterator[tuple[list[Daemon], str]]:
    """Daemons named ``names`` (:func:`shared_nodes`) on a fresh database of the test
    PostgreSQL ``cluster``, started: (the nodes, the database's DSN). ``prepare`` sees
    the nodes before they start (their config file, say). At the end whichever still
    runs is killed and the database dropped."""
    db = cluster.create_database()
    dsn = cluster.dsn(db)
    nodes = shared_nodes(state, names, {**(overrides or {}),
                                        "store": {"kind": "postgres", "dsn": dsn}}, **daemon)
    try:
        if prepare is not None:
            prepare(nodes)
        start_all(nodes)
        yield nodes, dsn
    finally:
        kill_all(nodes)
        cluster.drop_database(db)
