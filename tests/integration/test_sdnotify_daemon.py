"""sd_notify from the real daemon (``python -m casesignd serve``), read from an AF_UNIX
datagram socket standing in for systemd: READY=1 once it serves, STATUS with the
queue depth, WATCHDOG=1 pings at half of WATCHDOG_USEC, RELOADING=1/READY=1 around
SIGHUP, and STOPPING=1 then exit 0 on SIGTERM (sd_notify(3), sd_watchdog_enabled(3)).
"""

from __future__ import annotations

import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

WATCHDOG_USEC = 2_000_000


class NotifySocket:
    """The service manager's end: one datagram per notification, ``KEY=VALUE`` lines."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.messages: list[dict[str, str]] = []

    def wait_for(self, pred, timeout_s: float = 30.0) -> dict[str, str]:
        """Read datagrams until one satisfies ``pred``; every one read is kept."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no such notification; got {self.messages[-20:]}")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            msg = dict(line.split("=", 1) for line in data.decode().split("\n") if "=" in line)
            self.messages.append(msg)
            if pred(msg):
                return msg

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def notify_socket(tmp_path) -> Iterator[NotifySocket]:
    # sun_path holds 108 bytes: a deep tmp_path may not fit, a short directory does.
    short = None
    path = tmp_path / "notify.sock"
    if len(str(path)) > 100:
        short = Path(tempfile.mkdtemp(prefix="csd-notify-"))
        path = short / "notify.sock"
    ns = NotifySocket(path)
    try:
        yield ns
    finally:
        ns.close()
        if short is not None:
            shutil.rmtree(short, ignore_errors=True)


def _daemon(daemon_factory, notify: NotifySocket, **env: str):
    d = daemon_factory({"workers": {"concurrency": 1}}, start=False)
    # Daemon drops NOTIFY_SOCKET from the environment it inherits; this one is ours.
    d.env["NOTIFY_SOCKET"] = str(notify.path)
    d.env.pop("WATCHDOG_PID", None)
    d.env.pop("WATCHDOG_USEC", None)
    d.env.update(env)
    return d.start()


def test_ready_status_watchdog_reload_and_stopping(daemon_factory, notify_socket):
    ns = notify_socket
    d = _daemon(daemon_factory, ns, WATCHDOG_USEC=str(WATCHDOG_USEC))
    ready = ns.wait_for(lambda m: m.get("READY") == "1")
    assert ready.get("STATUS") == "accepting jobs"
    # READY=1 comes only after the site listens: /readyz already answered.
    ns.wait_for(lambda m: m.get("STATUS", "").startswith("queued=0 "))

    # One job runs, one waits: the status line shows the queue depth.
    hang = d.submit({"kind": "test", "behavior": "hang", "hang_s": 5}).json()["job_id"]
    d.wait_job(hang, states=("processing",))
    d.submit({"kind": "test", "tag": "waits"})
    busy = ns.wait_for(lambda m: m.get("STATUS") == "queued=1 running=1")
    assert "READY" not in busy

    # Pings keep coming while the store answers and the pool progresses (a running
    # attempt that renews its lease is progress); each is a datagram of its own.
    for _ in range(3):
        assert ns.wait_for(lambda m: "WATCHDOG" in m) == {"WATCHDOG": "1"}

    # SIGHUP: RELOADING=1 with the monotonic time of the request, then READY=1.
    d.signal(signal.SIGHUP)
    reloading = ns.wait_for(lambda m: m.get("RELOADING") == "1")
    assert int(reloading["MONOTONIC_USEC"]) > 0
    ns.wait_for(lambda m: m.get("READY") == "1")
    assert d.request("GET", "/readyz", auth=False).status == 200

    # The status is sent when it changes, not at every refresh.
    statuses = [m["STATUS"] for m in ns.messages if "STATUS" in m]
    assert all(a != b for a, b in zip(statuses, statuses[1:], strict=False)), statuses

    d.signal(signal.SIGTERM)
    stopping = ns.wait_for(lambda m: m.get("STOPPING") == "1")
    assert stopping.get("STATUS") == "draining"
    assert d.proc.wait(timeout=30) == 0
    assert '"msg":"server.stopped"' in d.logs()


def test_watchdog_pid_of_another_process_means_no_pings(daemon_factory, notify_socket):
    # sd_watchdog_enabled(3): WATCHDOG_PID names the process that must ping; when it is
    # another one (a wrapper's), this process leaves the watchdog alone.
    ns = notify_socket
    d = _daemon(daemon_factory, ns, WATCHDOG_USEC=str(WATCHDOG_USEC), WATCHDOG_PID="1")
    ns.wait_for(lambda m: m.get("READY") == "1")
    with pytest.raises(TimeoutError):
        ns.wait_for(lambda m: "WATCHDOG" in m, timeout_s=2 * WATCHDOG_USEC / 1e6)
    assert d.stop() == 0
    # Datagrams wait in the socket's queue: STOPPING=1 is there after the exit.
    ns.wait_for(lambda m: m.get("STOPPING") == "1", timeout_s=5)


# The probe's stall window is max(60 s, 2 * workers.lease_s); an attempt that runs
# longer than that alone is healthy as long as its heartbeat renews its lease.
STALL_WINDOW_S = 60


@pytest.mark.slow
def test_one_long_attempt_keeps_the_watchdog_fed(daemon_factory, notify_socket):
    ns = notify_socket
    d = _daemon(daemon_factory, ns, WATCHDOG_USEC=str(WATCHDOG_USEC))
    ns.wait_for(lambda m: m.get("READY") == "1")
    job = d.submit({"kind": "test", "behavior": "hang", "hang_s": STALL_WINDOW_S + 30}).json()
    d.wait_job(job["job_id"], states=("processing",))
    # Past the stall window the attempt still runs, and pings must keep coming.
    end = time.monotonic() + STALL_WINDOW_S + 10
    try:
        while time.monotonic() < end:
            ns.wait_for(lambda m: "WATCHDOG" in m, timeout_s=WATCHDOG_USEC / 1e6)
        assert d.job(job["job_id"])["state"] == "processing"
        assert "watchdog.withheld" not in d.logs()
    finally:
        d.stop()
