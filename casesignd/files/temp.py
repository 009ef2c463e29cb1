"""Per-attempt scratch space: private directories under a byte quota.

Every job attempt works in its own directory below the temp root (a size-capped
tmpfs under systemd). :meth:`TempManager.attempt` reserves the bytes the attempt
declared before it creates anything, and removes the directory and releases the
reservation however the attempt ends: success, exception or cancellation. A crashed
run leaves directories behind; :meth:`TempManager.sweep` removes them at start-up.

Every file in an area is sealed (:mod:`casesignd.core.sealed`): AES-256-GCM chunks
under a key the area holds in memory only (``Area.key``, made for the attempt, gone
with it; a worker process receives it with its arguments over its pipe), each file
under that key's own for its name, so that no file of the area reads back in
another's place. What a
crash leaves behind is ciphertext under a key that died with the process, swept at
the next start. Readers get the plain bytes through ``SealedPath.open()``; the few
tools that insist on a path get a memory-only file (``plain_memfd``), never one here.

File names inside an area are chosen by the server (``contract.pdf``, ``item-3``),
never taken from user data, and must match :data:`NAME_PATTERN`.

Blocking calls: :meth:`TempManager.sweep` and :meth:`TempManager.usage` touch the
file system and should run via ``asyncio.to_thread`` from the event loop;
:meth:`Area.create` and :meth:`Area.path_for` are cheap and may run on the loop.
Streaming writes (:meth:`Area.download`, :func:`stream_into`) offload their writes
and hashing to a thread themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import secrets
import shutil
import stat
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast

from casesignd.core.errors import DigestMismatch, LimitExceeded, SizeMismatch, TempQuota
from casesignd.core.sealed import SealedPath, SealedWriter, SealKey, seal_writer, sealed_size

# Server-chosen file names only: no leading dot (no ".", "..", or hidden files),
# no slash, short enough for any file system.
NAME_PATTERN = re.compile(r"^[a-z0-9_-][a-z0-9_.-]{0,63}$")

# Writes are batched to at least this many bytes before one thread hop: fewer
# hops, and hashlib releases the GIL only for buffers above 2 KiB anyway.
WRITE_BATCH_BYTES = 256 * 1024

_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TempUsage:
    """A snapshot of the temp volume, for metrics and readiness."""

    used_bytes: int  # bytes written into live areas (as far as they were reported)
    reserved_bytes: int  # sum of live reservations
    quota_bytes: int
    free_bytes: int  # quota minus what live areas are charged (never negative)
    fs_free_bytes: int  # what the file system itself still has (statvfs f_bavail)


def check_name(name: str) -> str:
    """Return ``name`` if it is an allowed server-chosen file name, else raise ValueError.

    A ValueError (not a CasesignError) because a bad name is a programming error,
    never a user's.
    """
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ValueError(f"temp file name {name!r} does not match {NAME_PATTERN.pattern}")
    return name


def charge_after(reserved: int, used: int) -> int:
    """What an area costs against the quota: its reservation, or more if it wrote more."""
    return max(reserved, used)


def _write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


SYNC_EVERY_BYTES = 8 * 1024 * 1024


class HashingWriter:
    """Writes to an fd from a worker thread while hashing, and owns closing the fd.

    A cancelled caller stops waiting at once, but the thread may still be writing:
    :meth:`close` therefore defers the ``close(fd)`` until that write has finished,
    so a reused fd number can never receive stray bytes.
    """

    def __init__(self, fd: int, key: SealKey | None = None) -> None:
        self.fd = fd
        # With a key, what is written is sealed (the file's plain bytes are hashed);
        # the last chunk is written by :meth:`seal` once the stream ended whole.
        self._sealer: SealedWriter | None = None
        if key is not None:
            self._sealer = seal_writer(cast(BinaryIO, _FdSink(fd)), key)
        self.size = 0
        self._hasher = hashlib.sha256()
        self._pending: asyncio.Future[None] | None = None  # the write or fsync in flight
        self._closed = False
        self._unsynced = 0

    def _work(self, data: bytes | bytearray) -> None:
        # Runs in a worker thread: both calls release the GIL for large buffers.
        self._hasher.update(data)
        if self._sealer is not None:
            self._sealer.write(data)
        else:
            _write_all(self.fd, data)
        # A large upload writes its data out in steps: every other fsync on the file
        # system (a kiosk request's commits) waits for the dirty data queued before it.
        self._unsynced += len(data)
        if self._unsynced >= SYNC_EVERY_BYTES:
            self._unsynced = 0
            os.fdatasync(self.fd)

    async def write(self, data: bytes | bytearray) -> None:
        self._pending = asyncio.ensure_future(asyncio.to_thread(self._work, data))
        await asyncio.shield(self._pending)
        self.size += len(data)

    async def fsync(self) -> None:
        """fsync the file in a thread (the close waits for it like for a write)."""
        self._pending = asyncio.ensure_future(asyncio.to_thread(os.fsync, self.fd))
        await asyncio.shield(self._pending)

    async def seal(self) -> None:
        """Complete a sealed file (its last chunk), in a thread."""
        if self._sealer is not None:
            self._pending = asyncio.ensure_future(asyncio.to_thread(self._sealer.close))
            await asyncio.shield(self._pending)

    def hexdigest(self) -> str:
        return self._hasher.hexdigest()

    def close(self) -> None:
        """Close the fd now, or as soon as an in-flight write returns."""
        if self._closed:
            return
        self._closed = True
        close_after(self._pending, self.fd)


class _FdSink:
    """A file descriptor as the sealed writer's output (the writer never closes it)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def write(self, data: bytes | bytearray | memoryview) -> int:
        _write_all(self.fd, data)
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def close_after(pending: asyncio.Future | None, fd: int) -> None:
    """Close ``fd`` now, or once ``pending`` (a thread still using it) is done."""
    if pending is None or pending.done():
        os.close(fd)
        return

    def done(fut: asyncio.Future) -> None:
        # Nobody awaits this future any more: consume its outcome so asyncio does not
        # log "exception was never retrieved" for a write the caller gave up on.
        if not fut.cancelled():
            fut.exception()
        os.close(fd)

    pending.add_done_callback(done)


async def stream_into(
    writer: HashingWriter,
    chunks: AsyncIterator[bytes],
    *,
    check: Callable[[int], None],
    before_write: Callable[[int], None] | None = None,
    batch_bytes: int = WRITE_BATCH_BYTES,
) -> tuple[str, int]:
    """Copy ``chunks`` into ``writer``; return (sha256 hex, size).

    ``check(total)`` runs on the loop after every chunk arrives and before anything
    of it is written; it raises to stop (size limits). ``before_write(n)`` runs
    before each batch of ``n`` bytes goes to disk (quota accounting). Never holds
    more than about ``batch_bytes`` plus one chunk in memory. The caller closes
    the writer.
    """
    total = 0
    buf = bytearray()
    async for chunk in chunks:
        if not chunk:
            continue
        total += len(chunk)
        check(total)
        buf += chunk
        if len(buf) >= batch_bytes:
            data, buf = buf, bytearray()
            if before_write is not None:
                before_write(len(data))
            await writer.write(data)
    if buf:
        if before_write is not None:
            before_write(len(buf))
        await writer.write(buf)
    return writer.hexdigest(), total


class Area:
    """One attempt's private directory. Created by :meth:`TempManager.attempt`."""

    def __init__(self, manager: TempManager, path: Path, job_id: str, attempt: int, reserved: int):
        self.path = path
        self.job_id = job_id
        self.attempt = attempt
        self.reserved_bytes = reserved
        self.used_bytes = 0
        self._manager = manager
        # The attempt's key: in memory only, never written, logged or put on a command
        # line (its repr hides it).
        self.key = SealKey.generate()

    def path_for(self, name: str) -> Path:
        """The path of ``name`` inside the area. What is there is ciphertext: read and
        write it through :meth:`sealed`."""
        return self.path / check_name(name)

    def sealed(self, name: str) -> SealedPath:
        """``name`` inside the area as a sealed file under the area's key for that name
        (:meth:`SealKey.for_name`): what readers open, and what a worker process is
        handed. Another file of the area copied over it does not read back."""
        return SealedPath(self.path_for(name), self.key.for_name(name))

    def create(self, name: str) -> BinaryIO:
        """Create ``name`` exclusively (0600, no symlink following); return it open for writing.

        Bytes written through the returned file are not counted towards usage unless
        reported with :meth:`add_written`.
        """
        fd = os.open(self.path_for(name), _CREATE_FLAGS, 0o600)
        return os.fdopen(fd, "wb")

    def add_written(self, nbytes: int) -> None:
        """Count ``nbytes`` more written into this area; raise TempQuota if that does not fit."""
        self._manager._grow(self, nbytes)

    async def download(
        self,
        name: str,
        chunks: AsyncIterator[bytes],
        expect_sha256: str | None,
        expect_size: int | None,
        max_bytes: int,
    ) -> SealedPath:
        """Stream ``chunks`` into a new sealed file ``name``, checking size and digest
        (of the plain bytes).

        Stops as soon as the stream passes ``expect_size`` (SizeMismatch, code
        ``size_mismatch``) or ``max_bytes`` (LimitExceeded); a short stream is a
        SizeMismatch too; a wrong SHA-256 at the end is a DigestMismatch. Writing past
        the area's reservation takes more of the quota or raises TempQuota. On any
        failure the partial file is removed and its bytes are uncounted.
        """
        if expect_size is not None and expect_size > max_bytes:
            raise LimitExceeded(
                f"declared size {expect_size} exceeds the limit of {max_bytes} bytes"
            )
        path = self.path_for(name)
        want = expect_sha256.lower() if expect_sha256 else None

        def check(total: int) -> None:
            if expect_size is not None and total > expect_size:
                raise SizeMismatch(f"{name}: more than the declared {expect_size} bytes")
            if total > max_bytes:
                raise LimitExceeded(f"{name}: more than the limit of {max_bytes} bytes")

        written = plain = 0

        def before_write(n: int) -> None:
            # The quota counts what the disk holds: the file's header and a tag per
            # 64 KiB chunk beside the plain bytes (charged as they become due).
            nonlocal written, plain
            grown = sealed_size(plain + n) - written
            self.add_written(grown)
            written += grown
            plain += n

        sealed = self.sealed(name)
        writer = HashingWriter(os.open(path, _CREATE_FLAGS, 0o600), sealed.key)
        try:
            try:
                digest, size = await stream_into(
                    writer, chunks, check=check, before_write=before_write
                )
                await writer.seal()
            finally:
                writer.close()
            if expect_size is not None and size != expect_size:
                raise SizeMismatch(f"{name}: {size} bytes, declared {expect_size}")
            if want is not None and digest != want:
                raise DigestMismatch(
                    f"{name}: SHA-256 does not match the declared digest",
                    detail={"expected": want, "actual": digest},
                )
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(path)
            self._manager._shrink(self, written)
            raise
        return sealed


class TempManager:
    """Owns the temp root: the sweep at start-up, the quota, and per-attempt areas."""

    def __init__(self, root: Path, quota_bytes: int, *, retry_delay_s: float = 5.0) -> None:
        self.root = Path(root)
        self.quota_bytes = quota_bytes
        self.retry_delay_s = retry_delay_s
        # A threading lock, not an asyncio one: it is held only for arithmetic, never
        # across an await, so the release in a cancelled attempt's cleanup cannot be
        # interrupted, and the cleanup thread may release too.
        self._lock = threading.Lock()
        self._areas: set[Area] = set()

    # --- start-up and metrics (blocking; call via asyncio.to_thread) -----------------

    def sweep(self) -> int:
        """Create the root (0700) if missing and remove everything under it.

        Call once at start-up, before any attempt runs. Returns the number of
        entries removed (what a crashed run left behind).
        """
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        removed = 0
        with os.scandir(self.root) as entries:
            for entry in list(entries):
                _remove_entry(Path(entry.path))
                removed += 1
        return removed

    def usage(self) -> TempUsage:
        """The current accounting plus the file system's free space."""
        with self._lock:
            used = sum(a.used_bytes for a in self._areas)
            reserved = sum(a.reserved_bytes for a in self._areas)
            charged = self._charged_locked()
        try:
            st = os.statvfs(self.root)
            fs_free = st.f_bavail * st.f_frsize
        except OSError:
            fs_free = 0
        return TempUsage(
            used_bytes=used,
            reserved_bytes=reserved,
            quota_bytes=self.quota_bytes,
            free_bytes=max(0, self.quota_bytes - charged),
            fs_free_bytes=fs_free,
        )

    # --- attempts ---------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def attempt(self, job_id: str, attempt: int, reserve_bytes: int) -> AsyncIterator[Area]:
        """Reserve ``reserve_bytes`` and yield a fresh private :class:`Area`.

        Raises LimitExceeded (permanent) when the reservation is larger than the whole
        quota, TempQuota (retryable, with ``delay_s``) when it does not fit right now.
        The directory is removed and the reservation released on every exit.
        """
        if reserve_bytes < 0:
            raise ValueError("reserve_bytes must not be negative")
        if reserve_bytes > self.quota_bytes:
            raise LimitExceeded(
                f"the attempt needs {reserve_bytes} temp bytes, the quota is {self.quota_bytes}"
            )
        path = self.root / secrets.token_hex(16)
        area = Area(self, path, job_id, attempt, reserve_bytes)
        with self._lock:
            if self._charged_locked() + reserve_bytes > self.quota_bytes:
                raise TempQuota("temp space is taken by other attempts", delay_s=self.retry_delay_s)
            self._areas.add(area)
        try:
            try:
                os.mkdir(path, 0o700)
            except FileNotFoundError:
                # The root went missing (no sweep yet, or removed underneath us).
                self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
                os.mkdir(path, 0o700)
        except BaseException:
            self._release(area)
            raise
        try:
            yield area
        finally:
            # The removal runs in a thread that releases the reservation itself, and
            # is shielded: a second cancellation cannot leave the quota charged.
            cleanup = asyncio.ensure_future(asyncio.to_thread(self._dispose, area))
            await asyncio.shield(cleanup)

    def _dispose(self, area: Area) -> None:
        try:
            _remove_entry(area.path)
        except OSError as e:
            # The attempt's outcome stands; the next start-up's sweep removes the rest.
            log.warning("could not remove temp area %s: %s", area.path.name, e)
        finally:
            self._release(area)

    # --- accounting (under the lock, no awaits) ----------------------------------------

    def _charged_locked(self) -> int:
        return sum(charge_after(a.reserved_bytes, a.used_bytes) for a in self._areas)

    def _release(self, area: Area) -> None:
        with self._lock:
            self._areas.discard(area)

    def _grow(self, area: Area, nbytes: int) -> None:
        with self._lock:
            before = charge_after(area.reserved_bytes, area.used_bytes)
            after = charge_after(area.reserved_bytes, area.used_bytes + nbytes)
            if after > before and self._charged_locked() + (after - before) > self.quota_bytes:
                raise TempQuota("temp space ran out while writing", delay_s=self.retry_delay_s)
            area.used_bytes += nbytes

    def _shrink(self, area: Area, nbytes: int) -> None:
        with self._lock:
            area.used_bytes = max(0, area.used_bytes - nbytes)


def _remove_entry(path: Path) -> None:
    """Remove a file, symlink or directory tree without following symlinks."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return

    def retry_writable(func: Callable[[str], object], p: str, exc_info: tuple) -> None:
        # A read-only directory left by a tool would stop rmtree: open it up once.
        err = exc_info[1]
        if isinstance(err, FileNotFoundError):
            return
        if not isinstance(err, PermissionError):
            raise err
        os.chmod(os.path.dirname(p), 0o700)
        func(p)

    shutil.rmtree(path, onerror=retry_writable)
