"""A real clamd for tests: our own config, socket and a test-only signature database.

No freshclam and no network: the database holds one hex signature of the EICAR test
string (an .ndb body signature, so it matches anywhere in a stream), under the name
:data:`EICAR_SIGNATURE`. clamd runs in the foreground and is killed at the end.
Import the ``clamd_socket`` fixture into a test module to use it.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CLAMD = "/usr/sbin/clamd"
EICAR_SIGNATURE = "Casesignd.Test.EICAR"
# clamd refuses streams longer than this (StreamMaxLength); tests rely on the figure.
STREAM_MAX_BYTES = 4 * 1024 * 1024
START_TIMEOUT_S = 60.0

def needs_clamd(fn: Any) -> Any:
    """Mark a test as needing a real clamd; skip it where clamd is not installed."""
    fn = pytest.mark.skipif(not Path(CLAMD).exists(), reason=f"{CLAMD} is not installed")(fn)
    return pytest.mark.needs_clamd(fn)


def eicar_bytes() -> bytes:
    """The 68-byte EICAR anti-virus test string, assembled at run time so that no file
    in the repository carries it whole."""
    return b"X5O!P%@AP[4\\PZX54(P^)7CC)7}$" + b"EICAR-STANDARD-ANTIVIRUS-TEST-FILE!$H+H*"


@dataclass
class Clamd:
    """A running clamd; ``stop()`` ends it (idempotent)."""

    proc: subprocess.Popen[bytes]
    socket_path: str
    workdir: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def log(self) -> str:
        p = self.workdir / "clamd.log"
        return p.read_text(errors="replace") if p.exists() else ""


def _ping(path: str) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2.0)
            s.connect(path)
            s.sendall(b"zPING\0")
            return s.recv(16).rstrip(b"\0\n") == b"PONG"
    except OSError:
        return False


def start_clamd(workdir: Path) -> Clamd:
    """Write a config and database under ``workdir``, start clamd, wait for PONG."""
    db = workdir / "db"
    db.mkdir(parents=True, exist_ok=True)
    (db / "casesignd-test.ndb").write_text(f"{EICAR_SIGNATURE}:0:*:{eicar_bytes().hex()}\n")
    sock = str(workdir / "clamd.sock")
    conf = workdir / "clamd.conf"
    # Running as root needs no "User": clamd keeps the identity it was started with.
    conf.write_text(
        f"LocalSocket {sock}\n"
        f"DatabaseDirectory {db}\n"
        f"LogFile {workdir / 'clamd.log'}\n"
        "Foreground yes\n"
        f"StreamMaxLength {STREAM_MAX_BYTES // (1024 * 1024)}M\n"
        "MaxThreads 2\n"
    )
    proc = subprocess.Popen([CLAMD, "-c", str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    clamd = Clamd(proc, sock, workdir)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _ping(sock):
        if proc.poll() is not None or time.monotonic() > deadline:
            clamd.stop()
            raise RuntimeError(f"clamd did not start:\n{clamd.log()[-2000:]}")
        time.sleep(0.1)
    return clamd


def short_tempdir() -> Path:
    # A unix socket path must fit in sun_path (108 bytes): stay directly under /tmp.
    return Path(tempfile.mkdtemp(prefix="clamd-"))


@pytest.fixture(scope="session")
def clamd_socket() -> Iterator[str]:
    """Session fixture: the socket path of a running test clamd."""
    if not Path(CLAMD).exists():
        pytest.skip(f"{CLAMD} is not installed")
    workdir = short_tempdir()
    clamd = start_clamd(workdir)
    try:
        yield clamd.socket_path
    finally:
        clamd.stop()
        shutil.rmtree(workdir, ignore_errors=True)
