"""Sealed files: bytes written as authenticated AES-256-GCM chunks under a key held in
memory, and read back through a seekable file object that decrypts only the chunks read.

The format (version 1)::

    header   b"CSSEAL1\\0" | file id (16 random bytes) | plain chunk size (u32, big-endian)
    chunks   AES-256-GCM(subkey, nonce_i, plain_i, aad=header) = ciphertext_i | tag (16 bytes)

The subkey is HKDF-SHA256 of the key with the file id as salt, so a chunk copied in
from another file under the same key fails authentication. The nonce of chunk ``i`` is
``i`` (11 bytes, big-endian) followed by a flag byte that is 1 only on the last chunk,
so reordered chunks and a tail cut at a chunk boundary fail too. Every chunk holds
exactly ``chunk size`` plain bytes except the last, which holds 1 to ``chunk size``
(0 only when the whole file is empty): the plain size follows from the file's size.
Any such failure is ``SealBroken``, never wrong bytes.

The key (``SealKey``) never shows in ``repr``/``str``; it pickles (binary) so that it
can reach a worker process over its pipe, and ``raw()`` hands its bytes to a wrapping
key. Nothing here writes it anywhere.
"""

from __future__ import annotations

import contextlib
import io
import os
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

from casesignd.core.positioned import PositionedReader
from casesignd.core.sealed_view import SealedView

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_BYTES = 32
CHUNK_PLAIN_BYTES = 64 * 1024
MAGIC = b"CSSEAL1\0"
FILE_ID_BYTES = 16
TAG_BYTES = 16
_CHUNK_SIZE = struct.Struct(">I")
HEADER_BYTES = len(MAGIC) + FILE_ID_BYTES + _CHUNK_SIZE.size
# A header may not ask a reader to hold more than this per chunk (a forged header
# must not make a reader allocate gigabytes).
MAX_CHUNK_PLAIN_BYTES = 16 * 1024 * 1024
_RUN_BYTES = 1024 * 1024  # whole chunks read and decrypted in one go, at most (or one)
_HKDF_INFO = b"casesignd sealed file v1"
_NAME_INFO = b"casesignd sealed file name v1\0"
T = TypeVar("T")


class SealBroken(OSError):
    """A sealed file failed authentication: a chunk was altered, reordered, swapped in
    from another file, the tail is cut, the header is not ours, or the key is wrong.
    Callers map it to the retryable ``io_error`` job code (or a store-check problem)."""


# The breaks this thread's readers met, so that a library that swallows a failed read
# (a lenient parser trying another way) cannot turn it into a verdict on the document.
_SEEN = threading.local()


def _noted(broken: SealBroken) -> SealBroken:
    _SEEN.last = broken
    _SEEN.count = getattr(_SEEN, "count", 0) + 1
    return broken


class SealKey:
    """A 32-byte key for sealed files. ``repr``/``str`` never show the bytes."""

    __slots__ = ("_raw",)

    def __init__(self, raw: bytes) -> None:
        if not isinstance(raw, bytes | bytearray) or len(raw) != KEY_BYTES:
            raise ValueError(f"a seal key is {KEY_BYTES} bytes")
        self._raw = bytes(raw)

    @classmethod
    def generate(cls) -> SealKey:
        """A fresh random key (``os.urandom``)."""
        return cls(os.urandom(KEY_BYTES))

    @classmethod
    def from_bytes(cls, raw: bytes) -> SealKey:
        """The key whose bytes are ``raw`` (32 bytes)."""
        return cls(raw)

    def raw(self) -> bytes:
        """The key's bytes: only for wrapping it under another key, or for handing it
        to a worker process over its pipe."""
        return self._raw

    def for_name(self, name: str) -> SealKey:
        """The key of the file ``name`` among those sealed under this one (HKDF-SHA256):
        every file is whole under its own key, so one copied over another of another
        name fails to authenticate rather than reading as its bytes."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF

        return SealKey(HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None,
                            info=_NAME_INFO + name.encode()).derive(self._raw))

    def __repr__(self) -> str:
        return "SealKey(<hidden>)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SealKey) and other._raw == self._raw

    def __hash__(self) -> int:
        return hash((SealKey, self._raw))

    def __reduce__(self) -> tuple[object, tuple[bytes]]:
        # The class itself, not its classmethod: half the pickle, a job's key sent and
        # loaded in under half the time (about 4.5 us less a job).
        return (SealKey, (self._raw,))


def _subkey_aead(key: SealKey, file_id: bytes) -> AESGCM:
    # Imported on first use: a command line that never touches a sealed file (--help)
    # does not pay for cryptography.
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    subkey = HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=file_id,
                  info=_HKDF_INFO).derive(key.raw())
    return AESGCM(subkey)


def _nonce(index: int, last: bool) -> bytes:
    return index.to_bytes(11, "big") + (b"\x01" if last else b"\x00")


def sealed_size(plain_bytes: int, chunk: int = CHUNK_PLAIN_BYTES) -> int:
    """The size on disk of a sealed file of ``plain_bytes``: its header, the bytes,
    and a tag per chunk (one for an empty file)."""
    return HEADER_BYTES + plain_bytes + max(1, -(-plain_bytes // chunk)) * TAG_BYTES


def is_sealed(head: bytes) -> bool:
    """Whether ``head`` (a file's first bytes, at least 8) starts a sealed file."""
    return head[:len(MAGIC)] == MAGIC


def _layout(header: bytes, body_bytes: int) -> tuple[int, int, int]:
    """(plain chunk size, chunks, plain size) of a sealed file of ``header`` and
    ``body_bytes`` after it; SealBroken when the header is not ours or the body is not
    whole chunks and a last one."""
    if len(header) != HEADER_BYTES or not is_sealed(header):
        raise SealBroken("not a sealed file (bad or short header)")
    (chunk,) = _CHUNK_SIZE.unpack(header[-_CHUNK_SIZE.size:])
    if not 0 < chunk <= MAX_CHUNK_PLAIN_BYTES:
        raise SealBroken("sealed file header names an impossible chunk size")
    stride = chunk + TAG_BYTES
    chunks = max(1, -(-body_bytes // stride))
    last_len = body_bytes - (chunks - 1) * stride
    if last_len < TAG_BYTES or (last_len == TAG_BYTES and chunks > 1):
        raise SealBroken("sealed file is truncated")
    return chunk, chunks, (chunks - 1) * chunk + last_len - TAG_BYTES


class SealedWriter(io.RawIOBase):
    """Writes plain bytes to ``fileobj`` as sealed chunks, holding at most one chunk.

    ``close()`` writes the last chunk; until then the file is incomplete and a reader
    refuses it. Leaving a ``with`` block by an exception does not write the last chunk
    (``abort()``), so a half-written file never reads as whole."""

    def __init__(self, fileobj: BinaryIO, key: SealKey, *,
                 chunk_plain_bytes: int = CHUNK_PLAIN_BYTES, close_inner: bool = False) -> None:
        super().__init__()
        if not 0 < chunk_plain_bytes <= MAX_CHUNK_PLAIN_BYTES:
            raise ValueError("chunk_plain_bytes out of range")
        self._inner = fileobj
        self._close_inner = close_inner
        self._chunk = chunk_plain_bytes
        file_id = os.urandom(FILE_ID_BYTES)
        self._header = MAGIC + file_id + _CHUNK_SIZE.pack(chunk_plain_bytes)
        self._aead = _subkey_aead(key, file_id)
        self._buf = bytearray()
        self._out = bytearray()  # made with the first whole chunk
        self._index = 0
        self._written = 0
        self.plain_size: int | None = None
        fileobj.write(self._header)

    def writable(self) -> bool:
        return True

    def write(self, b: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        if self.closed:
            raise ValueError("write to a closed sealed file")
        view = memoryview(b).cast("B")
        n = len(view)
        pos = 0
        while pos < n:
            if len(self._buf) == self._chunk:
                # More bytes follow, so the full chunk in hand is not the last one.
                self._emit(last=False)
            if not self._buf and n - pos > self._chunk:
                # A whole chunk with more after it: sealed straight from the caller's
                # buffer (not the last chunk), never copied into the one in hand.
                self._seal(view[pos:pos + self._chunk], last=False)
                pos += self._chunk
                continue
            take = min(self._chunk - len(self._buf), n - pos)
            self._buf += view[pos:pos + take]
            pos += take
        self._written += n
        return n

    def _emit(self, last: bool) -> None:
        self._seal(self._buf, last)
        self._buf.clear()

    def _seal(self, plain: bytes | bytearray | memoryview, last: bool) -> None:
        # Into one reused buffer: a chunk's ciphertext is written out before the next.
        if len(plain) != self._chunk:  # the last chunk, short: no buffer kept for it
            self._inner.write(self._aead.encrypt(_nonce(self._index, last), bytes(plain),
                                                 self._header))
        else:
            if not self._out:
                self._out = bytearray(self._chunk + TAG_BYTES)
            self._aead.encrypt_into(_nonce(self._index, last), plain, self._header, self._out)
            self._inner.write(self._out)
        self._index += 1

    def tell(self) -> int:
        return self._written

    def flush(self) -> None:
        if not self.closed:
            self._inner.flush()

    def close(self) -> None:
        """Write the last chunk and flush (closing ``fileobj`` too if the writer owns
        it)."""
        if self.closed:
            return
        try:
            self._emit(last=True)
            self._inner.flush()
            self.plain_size = self._written
        finally:
            self._release()

    def abort(self) -> None:
        """Stop without writing the last chunk: the file stays unreadable."""
        if not self.closed:
            self._release()

    def _release(self) -> None:
        self._buf = self._out = bytearray()
        try:
            super().close()  # flushes ``fileobj`` through :meth:`flush`
        finally:
            if self._close_inner:
                self._inner.close()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __del__(self) -> None:
        # Garbage collection of an unclosed writer is an abandoned write: never seal it
        # as complete (io.IOBase.__del__ would call close()).
        with contextlib.suppress(Exception):
            self.abort()


class SealedReader(PositionedReader):
    """The plain bytes of a sealed file, seekable over plain offsets.

    Opening reads the header and authenticates the last chunk (so ``plain_size`` is
    trusted); each read decrypts only the chunks it touches, keeping the last one so
    small sequential reads do not decrypt it again. Wrap it in ``io.BufferedReader``
    for libraries that read a few bytes at a time."""

    def __init__(self, fileobj: BinaryIO, key: SealKey, *, close_inner: bool = False) -> None:
        super().__init__()
        self._inner = fileobj
        self._close_inner = close_inner
        fileobj.seek(0)
        header = fileobj.read(HEADER_BYTES)
        body = fileobj.seek(0, os.SEEK_END) - HEADER_BYTES
        self._chunk, self._chunks, self.plain_size = _layout(header, body)
        self._header = header
        self._aead = _subkey_aead(key, header[len(MAGIC):len(MAGIC) + FILE_ID_BYTES])
        self._pos = 0
        self._cached_index = -1
        self._cached = b""
        self._sealed_buf = bytearray()
        self.chunks_decrypted = 0
        self._load(self._chunks - 1)

    def _size(self) -> int:
        return self.plain_size

    def _load(self, index: int) -> bytes:
        if index == self._cached_index:
            return self._cached
        plain = bytearray(self._plain_len(index))
        self._decrypt_into(index, memoryview(plain))
        self._cached_index, self._cached = index, bytes(plain)
        return self._cached

    def _plain_len(self, index: int) -> int:
        return self.plain_size - index * self._chunk if index == self._chunks - 1 else self._chunk

    def _decrypt_into(self, index: int, out: memoryview) -> None:
        """The plain bytes of chunk ``index`` and those after it that ``out`` holds
        (exactly their length) into ``out``, their ciphertext read in one go into one
        reused buffer. On a failure ``out`` is zeroed from the chunk that failed:
        bytes that did not authenticate are never left where a caller could take them."""
        count = -(-len(out) // self._chunk)
        want = len(out) + count * TAG_BYTES
        if len(self._sealed_buf) < want:
            self._sealed_buf = bytearray(want)
        view = memoryview(self._sealed_buf)[:want]
        self._inner.seek(HEADER_BYTES + index * (self._chunk + TAG_BYTES))
        got = 0
        while got < want and (n := self._inner.readinto(view[got:])):  # type: ignore[attr-defined]
            got += n
        if got != want:
            raise _noted(SealBroken("sealed file is truncated"))
        from cryptography.exceptions import InvalidTag

        for k in range(index, index + count):
            at, size = (k - index) * self._chunk, self._plain_len(k)
            try:
                self._aead.decrypt_into(_nonce(k, k == self._chunks - 1),
                                        view[at + (k - index) * TAG_BYTES:][:size + TAG_BYTES],
                                        self._header, out[at:at + size])
            except InvalidTag:
                out[at:] = bytes(len(out) - at)
                raise _noted(SealBroken(f"sealed file chunk {k} failed authentication")) from None
            self.chunks_decrypted += 1

    def pread(self, size: int, offset: int) -> bytes:
        """``size`` plain bytes from ``offset`` (fewer at the end), the position left
        where it is (for :class:`SealedView`)."""
        out = bytearray()
        end = min(self.plain_size, offset + size)
        while offset < end:
            index, within = divmod(offset, self._chunk)
            plain = self._load(index)
            take = min(len(plain) - within, end - offset)
            out += plain[within:within + take]
            offset += take
        return bytes(out)

    def view(self) -> SealedView:
        """The whole file as a lazy :class:`SealedView`."""
        return SealedView(self, 0, self.plain_size)

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        if self.closed:
            raise ValueError("read from a closed sealed file")
        out = memoryview(b).cast("B")
        filled = 0
        while filled < len(out) and self._pos < self.plain_size:
            index, within = divmod(self._pos, self._chunk)
            whole = self._plain_len(index)
            if not within and len(out) - filled >= whole and index != self._cached_index:
                # Whole chunks asked for (up to the one in hand): decrypted straight
                # into the caller's buffer.
                rest = self.plain_size - self._pos
                run = min(len(out) - filled, rest, max(whole, _RUN_BYTES), (
                    self._cached_index - index) * self._chunk if index < self._cached_index else rest)
                run -= run % self._chunk if run < rest else 0
                self._decrypt_into(index, out[filled:filled + run])
                filled, self._pos = filled + run, self._pos + run
                continue
            plain = self._load(index)
            take = min(len(plain) - within, len(out) - filled)
            out[filled:filled + take] = plain[within:within + take]
            filled += take
            self._pos += take
        return filled

    def readall(self) -> bytes:
        buf = bytearray(max(0, self.plain_size - self._pos))
        return bytes(buf[:self.readinto(buf)])

    def close(self) -> None:
        if self.closed:
            return
        self._cached = b""
        self._sealed_buf = bytearray()
        try:
            if self._close_inner:
                self._inner.close()
        finally:
            super().close()


def seal_writer(fileobj: BinaryIO, key: SealKey, *, close_inner: bool = False) -> SealedWriter:
    """A writer that seals what is written to it into ``fileobj`` (positioned at the
    file's start). ``close_inner``: closing the writer closes ``fileobj``."""
    return SealedWriter(fileobj, key, close_inner=close_inner)


def open_sealed(fileobj: BinaryIO, key: SealKey, *, close_inner: bool = False) -> SealedReader:
    """A seekable reader of the plain bytes sealed in ``fileobj``. Raises ``SealBroken``
    if the header is not ours or the last chunk does not authenticate."""
    return SealedReader(fileobj, key, close_inner=close_inner)


def seal_bytes(data: bytes, key: SealKey) -> bytes:
    """``data`` sealed (the file format, in memory), for small inline values."""
    out = io.BytesIO()
    with seal_writer(out, key) as w:
        w.write(data)
    return out.getvalue()


def unseal_bytes(blob: bytes, key: SealKey) -> bytes:
    """The plain bytes of ``blob`` (the format in memory: ``seal_bytes``, or a small
    sealed file read whole), every chunk authenticated; ``SealBroken`` if one does not
    authenticate under ``key``. Decrypted chunk after chunk: a whole value needs none
    of a reader's seeking (a third of the cost of a one-page contract's)."""
    from cryptography.exceptions import InvalidTag

    header = bytes(blob[:HEADER_BYTES])
    chunk, chunks, _ = _layout(header, len(blob) - HEADER_BYTES)
    aead = _subkey_aead(key, header[len(MAGIC):len(MAGIC) + FILE_ID_BYTES])
    parts = []
    for k in range(chunks):
        at = HEADER_BYTES + k * (chunk + TAG_BYTES)
        try:
            parts.append(aead.decrypt(_nonce(k, k == chunks - 1),
                                      blob[at:at + chunk + TAG_BYTES], header))
        except InvalidTag:
            raise _noted(SealBroken(f"sealed file chunk {k} failed authentication")) from None
    return b"".join(parts)


# --- sealed files by path ------------------------------------------------------------

_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
READ_BUFFER_BYTES = 1024 * 1024


@dataclass(frozen=True)
class SealedPath:
    """A sealed file by its path and key: what crosses from the event loop to a worker
    process (it pickles, the key with it, over the process's pipe) and to each
    reader. It has no ``__fspath__`` on purpose: a library that opens it as a plain
    path fails loudly rather than reading ciphertext."""

    path: Path
    key: SealKey

    @property
    def name(self) -> str:
        return self.path.name

    def with_name(self, name: str) -> SealedPath:
        """Another sealed file in the same directory, under the same key."""
        return SealedPath(self.path.with_name(name), self.key)

    def open(self, buffer_bytes: int = READ_BUFFER_BYTES) -> io.BufferedReader:
        """The plain bytes, buffered and seekable (the file closes with the reader).
        Raises ``SealBroken`` when the file is not whole under this key."""
        f = open(self.path, "rb", buffering=0)  # noqa: SIM115 - owned by the reader
        try:
            raw = open_sealed(f, self.key, close_inner=True)  # type: ignore[arg-type]
        except BaseException:
            f.close()
            raise
        # No larger than the file: a small one does not pay for a large buffer.
        return io.BufferedReader(raw, buffer_size=max(8192, min(buffer_bytes, raw.plain_size)))

    def create(self) -> SealedWriter:
        """A new file (exclusive, 0600, no symlink followed) to seal into; ``close()``
        completes it."""
        fd = os.open(self.path, _CREATE_FLAGS, 0o600)
        return seal_writer(os.fdopen(fd, "wb"), self.key, close_inner=True)

    def plain_size(self) -> int:
        with self.open() as f:
            return f.seek(0, os.SEEK_END)

    def unlink(self, missing_ok: bool = True) -> None:
        self.path.unlink(missing_ok=missing_ok)

    def __str__(self) -> str:
        return f"sealed:{self.path.name}"


def copy_into(src: BinaryIO, dst: BinaryIO | SealedWriter, buffer_bytes: int = 1 << 20) -> int:
    """Copy ``src`` to ``dst`` in chunks; the bytes copied."""
    buf = bytearray(buffer_bytes)
    total = 0
    while n := src.readinto(buf):  # type: ignore[attr-defined]
        dst.write(memoryview(buf)[:n])
        total += n
    return total


@contextlib.contextmanager
def plain_memfd(src: SealedPath | bytes, name: str = "document") -> Iterator[int]:
    """The plain bytes of ``src`` in a memory-only file (``memfd_create``, close-on-exec),
    for a tool that insists on a path: yields its fd (``/proc/self/fd/N`` in this
    process; a child gets it with ``pass_fds``). The plain bytes exist only while the
    block runs, in memory that no file system shows, and are gone when it ends."""
    fd = os.memfd_create(f"casesignd-{name}", os.MFD_CLOEXEC)
    try:
        with os.fdopen(os.dup(fd), "wb") as out:
            if isinstance(src, bytes | bytearray | memoryview):
                out.write(src)
            else:
                with src.open() as f:
                    copy_into(f, out)
        os.lseek(fd, 0, os.SEEK_SET)
        yield fd
    finally:
        os.close(fd)


def broken_seal(error: BaseException | None) -> SealBroken | None:
    """The ``SealBroken`` behind ``error`` (itself, or in its chain of causes and
    contexts: a library that turned a failed read into its own error), or None."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, SealBroken):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


@contextlib.contextmanager
def reading_sealed() -> Iterator[None]:
    """Around a library's reading of sealed files in this thread: any chunk that
    failed in the block, reported or swallowed by the library, ends the block as
    ``TempBroken`` (the retryable ``io_error``), and so does a ``SealBroken`` in the
    chain of what it raised. What the library decided is not trusted then."""
    from casesignd.core.errors import TempBroken

    before = getattr(_SEEN, "count", 0)
    try:
        yield
    except BaseException as e:
        broken = broken_seal(e) or (_SEEN.last if getattr(_SEEN, "count", 0) != before else None)
        if broken is not None and not isinstance(e, TempBroken):
            raise TempBroken(f"a temporary file did not read back whole: {broken}") from None
        raise
    if getattr(_SEEN, "count", 0) != before:
        raise TempBroken(f"a temporary file did not read back whole: {_SEEN.last}")


def guarded(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` under :func:`reading_sealed`: for a thread or a worker process
    that hands sealed files to a library."""
    with reading_sealed():
        return fn(*args)


def open_plain(src: Path | SealedPath) -> io.BufferedReader:
    """The plain bytes of ``src``, a sealed file or a plain one, open for reading."""
    if isinstance(src, SealedPath):
        return src.open()
    return open(src, "rb")  # noqa: SIM115 - the caller's to close


def plain_size(src: Path | SealedPath) -> int:
    """The size of the plain bytes of ``src``."""
    return src.plain_size() if isinstance(src, SealedPath) else os.stat(src).st_size
