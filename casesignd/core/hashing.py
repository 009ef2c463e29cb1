"""SHA-256, one way for the whole service: of bytes, of a file read in chunks, and
as the ``sha256:<hex>`` reference that names an uploaded object (pure functions, the
file's reading blocking: call it off the event loop for a large file).

Digests are lower-case hex everywhere: object names, artifact and audit digests,
token digests, the ``X-Artifact-SHA256`` header.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import re
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

# How much of a file is read at once while hashing it.
CHUNK_BYTES = 1 << 20
# ``sha256:<64 hex>``: an object of the tenant's case (the contract's object_ref).
OBJECT_REF_PREFIX = "sha256:"
HEX_PATTERN = re.compile(r"[0-9a-f]{64}")


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of ``data``, lower-case hex."""
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: Path | str, chunk_bytes: int = CHUNK_BYTES) -> tuple[str, int]:
    """The SHA-256 (lower-case hex) and size of the file at ``path``, read in chunks
    (blocking)."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


class OverlappedSha256:
    """SHA-256 of parts fed in order, each large one hashed on a helper thread while the
    caller reads and writes the next (hashlib releases the GIL on large buffers): a
    copy that hashes runs near the speed of the slower of the two, not of their sum.

    Only ``bytes`` parts are handed to the thread (they cannot change under it); at
    most one part is in flight. Small inputs never start the thread."""

    THREAD_MIN_BYTES = 256 * 1024

    def __init__(self) -> None:
        self._h = hashlib.sha256()
        self._pool: ThreadPoolExecutor | None = None
        self._pending: Future[None] | None = None

    def update(self, part: bytes | bytearray | memoryview) -> None:
        self._wait()
        if not isinstance(part, bytes) or len(part) < self.THREAD_MIN_BYTES:
            self._h.update(part)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sha256")
        self._pending = self._pool.submit(self._h.update, part)

    def _wait(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()

    def hexdigest(self) -> str:
        """The digest of every part fed (waits for the one in flight)."""
        self._wait()
        return self._h.hexdigest()

    def close(self) -> None:
        """Wait for the part in flight and stop the thread."""
        try:
            self._wait()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None

    def __enter__(self) -> OverlappedSha256:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# Chunks read ahead of the slowest of feed_chunks' consumers.
FEED_DEPTH = 4


def feed_chunks(src: BinaryIO, consumers: Sequence[Callable[[bytearray], object]],
                here: Callable[[bytearray], object] | None = None,
                chunk_bytes: int = CHUNK_BYTES) -> int:
    """Read ``src`` to its end and hand every chunk, in order, to each of
    ``consumers`` on a thread of its own (a hash's update, a file's write: neither
    holds the GIL on a large buffer), and to ``here`` on this thread as it is read;
    the bytes read. A copy that hashes twice runs near the speed of its slowest part,
    not of their sum. The chunks are :data:`FEED_DEPTH` reused buffers in turn: one
    is read into again only once every consumer is done with the chunk it held, so
    a consumer must not keep a chunk past its call. The first error (a consumer's,
    ``here``'s, the read's) is raised once every consumer has returned."""
    ring = [bytearray(chunk_bytes) for _ in range(FEED_DEPTH)]
    held: deque[list[Future[object]]] = deque()
    read = 0
    with contextlib.ExitStack() as stack:
        pools = [stack.enter_context(ThreadPoolExecutor(1, thread_name_prefix="feed"))
                 for _ in consumers]
        for i in itertools.count():
            if len(held) == FEED_DEPTH:
                for done in held.popleft():
                    done.result()
            buf = ring[i % FEED_DEPTH]
            n = src.readinto(buf)  # type: ignore[attr-defined]
            if not n:
                break
            chunk = buf if n == chunk_bytes else buf[:n]
            held.append([pool.submit(use, chunk) for pool, use in zip(pools, consumers, strict=True)])
            if here is not None:
                here(chunk)
            read += n
        for futures in held:
            for done in futures:
                done.result()
    return read


def object_ref(sha256: str) -> str:
    """The reference ``sha256:<hex>`` of the object of digest ``sha256``."""
    return OBJECT_REF_PREFIX + sha256


def object_ref_digest(ref: str) -> str | None:
    """The digest an object reference ``sha256:<hex>`` names (lower-cased), or None when
    ``ref`` is not one."""
    if not ref.startswith(OBJECT_REF_PREFIX):
        return None
    sha = ref.removeprefix(OBJECT_REF_PREFIX).lower()
    return sha if HEX_PATTERN.fullmatch(sha) else None
