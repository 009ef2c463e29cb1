"""sd_notify against a real AF_UNIX datagram socket; watchdog gating; socket activation."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from casesignd.observability.sdnotify import (
    Notifier,
    ProgressTracker,
    Watchdog,
    watchdog_interval_s,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def notify_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    path = tmp_path / "notify"
    if len(str(path)) > 100:  # sun_path holds 108 bytes
        path = Path(tempfile.mkdtemp(prefix="sdn", dir="/tmp")) / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(5)
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    yield sock
    sock.close()
    path.unlink(missing_ok=True)


def recv(sock: socket.socket) -> list[str]:
    return sock.recv(4096).decode().split("\n")


def nothing_queued(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        sock.recv(4096)
    except BlockingIOError:
        return True
    finally:
        sock.settimeout(5)
    return False


def test_state_changes_arrive_as_datagrams(notify_socket: socket.socket) -> None:
    n = Notifier.from_env()
    assert n.enabled
    assert n.ready("listening on 127.0.0.1:8787")
    assert recv(notify_socket) == ["READY=1", "STATUS=listening on 127.0.0.1:8787"]
    n.status("3 jobs queued\nsecond line")
    assert recv(notify_socket) == ["STATUS=3 jobs queued second line"]
    n.watchdog()
    assert recv(notify_socket) == ["WATCHDOG=1"]
    n.reloading()
    reload_msg = recv(notify_socket)
    assert reload_msg[0] == "RELOADING=1"
    assert reload_msg[1].startswith("MONOTONIC_USEC=") and reload_msg[1].split("=")[1].isdigit()
    n.stopping("draining")
    assert recv(notify_socket) == ["STOPPING=1", "STATUS=draining"]
    n.close()


def test_abstract_socket_address() -> None:
    name = f"casesignd-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(5)
    try:
        n = Notifier.from_env({"NOTIFY_SOCKET": "@" + name})
        assert n.ready()
        assert recv(sock) == ["READY=1"]
        n.close()
    finally:
        sock.close()


@pytest.mark.parametrize("address", [None, "", "relative/path"])
def test_no_op_without_a_usable_socket(address: str | None) -> None:
    env = {} if address is None else {"NOTIFY_SOCKET": address}
    n = Notifier.from_env(env)
    assert not n.enabled
    assert n.ready() is False and n.watchdog() is False


def test_a_missing_manager_never_raises(tmp_path: Path) -> None:
    n = Notifier(str(tmp_path / "gone"))
    assert n.ready() is False
    assert n.stopping() is False


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),
        ({"WATCHDOG_USEC": "30000000"}, 30.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}, 30.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
    ],
)
def test_watchdog_interval(env: dict[str, str], expected: float | None) -> None:
    assert watchdog_interval_s(env) == expected


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        # (busy, progress_count, now_s) ... -> healthy at the last step
        ([(2, 5, 0.0)], True),
        ([(2, 5, 0.0), (2, 6, 50.0)], True),  # progressed
        ([(2, 5, 0.0), (2, 5, 10.0)], True),  # stalled, but not for stall_s yet
        ([(2, 5, 0.0), (2, 5, 61.0)], False),  # busy and stuck past stall_s
        ([(0, 5, 0.0), (0, 5, 500.0)], True),  # idle is healthy
        ([(0, 5, 0.0), (0, 5, 500.0), (1, 5, 530.0)], True),  # just got busy
        ([(0, 5, 0.0), (0, 5, 500.0), (1, 5, 561.0)], False),
    ],
)
def test_progress_tracker(steps: list[tuple[int, int, float]], expected: bool) -> None:
    tracker = ProgressTracker(stall_s=60.0)
    for busy, count, now in steps:
        result = tracker.healthy(busy, count, now)
    assert result is expected


async def test_watchdog_pings_only_while_the_probe_passes(notify_socket: socket.socket) -> None:
    healthy = True
    checks = 0
    checked = asyncio.Event()

    async def probe() -> bool:
        nonlocal checks
        checks += 1
        checked.set()
        return healthy

    wd = Watchdog(Notifier.from_env(), interval_s=0.1, probe=probe)
    wd.start()
    loop = asyncio.get_running_loop()
    try:
        for _ in range(2):
            assert await loop.run_in_executor(None, recv, notify_socket) == ["WATCHDOG=1"]
        healthy = False
        # Let the loop run the failing probe a few times, then look for pings.
        seen = checks
        while checks < seen + 3:
            checked.clear()
            await asyncio.wait_for(checked.wait(), 5)
        # Pings sent before the flip were read or are in the queue; drain them once.
        while not nothing_queued(notify_socket):
            pass
        seen = checks
        while checks < seen + 3:
            checked.clear()
            await asyncio.wait_for(checked.wait(), 5)
        assert nothing_queued(notify_socket)
    finally:
        await wd.stop()


@pytest.mark.parametrize("mode", ["raises", "hangs"])
async def test_a_broken_probe_withholds_the_ping(notify_socket: socket.socket, mode: str) -> None:
    async def probe() -> bool:
        if mode == "raises":
            raise RuntimeError("store gone")
        await asyncio.sleep(3600)
        return True

    wd = Watchdog(Notifier.from_env(), interval_s=0.1, probe=probe)
    assert await wd.check() is False
    assert nothing_queued(notify_socket)


def test_watchdog_from_env(notify_socket: socket.socket, monkeypatch: pytest.MonkeyPatch) -> None:
    n = Notifier.from_env()
    assert Watchdog.from_env(n, lambda: True) is None
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    wd = Watchdog.from_env(n, lambda: True)
    assert wd is not None and wd.interval_s == 30.0


CHILD = """
import os, sys
os.dup2(int(sys.argv[1]), 3)
os.environ["LISTEN_PID"] = str(os.getpid())
os.environ["LISTEN_FDS"] = "1"
os.environ["LISTEN_FDNAMES"] = "http"
from casesignd.observability.sdnotify import listen_fds_with_names
((name, sock),) = listen_fds_with_names()
print(name, sock.family.name, sock.type.name, sock.getsockname()[1], "LISTEN_FDS" in os.environ)
"""


def test_listen_fds_takes_the_activated_socket() -> None:
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    try:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(srv.fileno())],
            pass_fds=[srv.fileno()],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.split()
    finally:
        srv.close()
    assert out == ["http", "AF_INET", "SOCK_STREAM", str(port), "False"]


def test_listen_fds_ignores_another_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from casesignd.observability.sdnotify import listen_fds

    monkeypatch.setenv("LISTEN_PID", "1")
    monkeypatch.setenv("LISTEN_FDS", "1")
    assert listen_fds() == []
