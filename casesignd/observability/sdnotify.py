"""systemd integration without a dependency: sd_notify, the watchdog, socket activation.

The notification protocol (sd_notify(3)): newline-separated ``KEY=VALUE`` lines in one
datagram to the AF_UNIX socket named by ``$NOTIFY_SOCKET`` (a path, or ``@name`` for
the abstract namespace). Sending never blocks and never raises into the caller: the
daemon must run the same with or without systemd.

Socket activation (sd_listen_fds(3)): when ``$LISTEN_PID`` is this process, the
listening sockets are file descriptors 3 .. 3+``$LISTEN_FDS``-1, named by
``$LISTEN_FDNAMES``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)

LISTEN_FDS_START = 3  # SD_LISTEN_FDS_START

Probe = Callable[[], bool | Awaitable[bool]]


def _address(value: str) -> str | None:
    if value.startswith("@"):
        return "\0" + value[1:]  # abstract namespace
    if value.startswith("/"):
        return value
    return None


class Notifier:
    """Sends state changes to the service manager; a no-op without ``$NOTIFY_SOCKET``."""

    def __init__(self, address: str | None) -> None:
        self.address = _address(address) if address else None
        self._sock: socket.socket | None = None
        self._last_status: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Notifier:
        env = os.environ if env is None else env
        return cls(env.get("NOTIFY_SOCKET") or None)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *lines: str) -> bool:
        """Send one datagram of ``KEY=VALUE`` lines; True when it was handed over."""
        if self.address is None:
            return False
        try:
            if self._sock is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                sock.setblocking(False)
                self._sock = sock
            self._sock.sendto("\n".join(lines).encode(), self.address)
        except OSError as e:
            # The manager may be gone or its queue full; the daemon carries on.
            log.debug("sdnotify.send_failed", extra={"fields": {"error": e}})
            return False
        for line in lines:
            if line.startswith("STATUS="):
                self._last_status = line
        return True

    def ready(self, status: str | None = None) -> bool:
        """Startup (or a reload) is complete: ``READY=1``."""
        return self.send("READY=1", *([_status(status)] if status else []))

    def status(self, text: str) -> bool:
        """``STATUS=text``; not sent again while it is the status systemd already shows
        (the daemon refreshes it several times a second, and each datagram wakes PID 1)."""
        line = _status(text)
        if line == self._last_status:
            return True
        return self.send(line)

    def reloading(self) -> bool:
        """A SIGHUP reload begins; send :meth:`ready` when it is done.

        ``MONOTONIC_USEC`` lets systemd (>= 253, ``Type=notify-reload``) match the
        reload to its request; systemd 252 ignores the field.
        """
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.send("RELOADING=1", f"MONOTONIC_USEC={usec}")

    def stopping(self, status: str | None = None) -> bool:
        return self.send("STOPPING=1", *([_status(status)] if status else []))

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _status(text: str) -> str:
    # One datagram line per field: a newline would start a new (bogus) assignment.
    return "STATUS=" + " ".join(text.split("\n"))


def watchdog_interval_s(env: Mapping[str, str] | None = None) -> float | None:
    """The watchdog timeout from ``$WATCHDOG_USEC`` (None when not for this process)."""
    env = os.environ if env is None else env
    usec, pid = env.get("WATCHDOG_USEC"), env.get("WATCHDOG_PID")
    if not usec or not usec.isdigit() or int(usec) == 0:
        return None
    if pid and (not pid.isdigit() or int(pid) != os.getpid()):
        return None
    return int(usec) / 1_000_000


def _listen_count(env: Mapping[str, str]) -> int:
    pid, fds = env.get("LISTEN_PID", ""), env.get("LISTEN_FDS", "")
    if not pid.isdigit() or int(pid) != os.getpid() or not fds.isdigit():
        return 0
    return int(fds)


def listen_fds_with_names(unset_environment: bool = True) -> list[tuple[str, socket.socket]]:
    """The sockets passed by socket activation, each with its ``FileDescriptorName``.

    ``unset_environment`` removes the variables so that child processes (the CPU pool,
    converters) do not take the descriptors for theirs.
    """
    n = _listen_count(os.environ)
    names = os.environ.get("LISTEN_FDNAMES", "").split(":")
    if unset_environment:
        for key in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
            os.environ.pop(key, None)
    out: list[tuple[str, socket.socket]] = []
    for i in range(n):
        fd = LISTEN_FDS_START + i
        os.set_inheritable(fd, False)
        name = names[i] if i < len(names) and names[i] else "unknown"
        out.append((name, socket.socket(fileno=fd)))  # family and type read from the fd
    return out


def listen_fds(unset_environment: bool = True) -> list[socket.socket]:
    """The sockets passed by socket activation; empty when none were passed."""
    return [s for _, s in listen_fds_with_names(unset_environment)]


@dataclass
class ProgressTracker:
    """Decides whether the worker pool is healthy enough to feed the watchdog.

    Healthy means idle (no busy worker) or progressing: the progress counter (attempts
    finished plus heartbeats renewed) moved within ``stall_s``. A loop that is alive
    while every worker is stuck is not healthy.
    """

    stall_s: float
    _last_count: int = -1
    _last_change_s: float = 0.0

    def healthy(self, busy: int, progress_count: int, now_s: float) -> bool:
        if progress_count != self._last_count:
            self._last_count = progress_count
            self._last_change_s = now_s
            return True
        if busy == 0:
            self._last_change_s = now_s
            return True
        return now_s - self._last_change_s < self.stall_s


class Watchdog:
    """Sends ``WATCHDOG=1`` every half interval, but only while ``probe`` says so.

    ``probe`` (sync or async) answers "the store answered and the pool made progress
    or is idle". When it fails, raises or takes longer than half the interval, the
    ping is withheld and systemd restarts the service at ``WatchdogSec``.
    """

    def __init__(self, notifier: Notifier, interval_s: float, probe: Probe) -> None:
        self.notifier = notifier
        self.interval_s = interval_s
        self.probe = probe
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def from_env(cls, notifier: Notifier, probe: Probe) -> Watchdog | None:
        """A watchdog when systemd asked for one (``WatchdogSec=``), else None."""
        interval_s = watchdog_interval_s()
        if interval_s is None or not notifier.enabled:
            return None
        return cls(notifier, interval_s, probe)

    async def check(self) -> bool:
        """Run the probe once under a timeout; any failure counts as unhealthy."""
        try:
            async with asyncio.timeout(self.interval_s / 2):
                result = self.probe()
                if inspect.isawaitable(result):
                    result = await result
                return bool(result)
        except Exception as e:
            log.warning("watchdog.probe_failed", extra={"fields": {"error": e}})
            return False

    async def run(self) -> None:
        while True:
            if await self.check():
                self.notifier.watchdog()
            else:
                log.warning("watchdog.withheld")
            await asyncio.sleep(self.interval_s / 2)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run(), name="watchdog")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
