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
from types import TracebackType
from typing import BinaryIO

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

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
_HKDF_INFO = b"casesignd sealed file v1"


class SealBroken(OSError):
    """A sealed file failed authentication: a chunk was altered, reordered, swapped in
    from another file, the tail is cut, the header is not ours, or the key is wrong.
    Callers map it to the retryable ``io_error`` job code (or a store-check problem)."""


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

    def __repr__(self) -> str:
        return "SealKey(<hidden>)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SealKey) and other._raw == self._raw

    def __hash__(self) -> int:
        return hash((SealKey, self._raw))

    def __reduce__(self) -> tuple[object, tuple[bytes]]:
        return (SealKey.from_bytes, (self._raw,))


def _subkey_aead(key: SealKey, file_id: bytes) -> AESGCM:
    subkey = HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=file_id,
                  info=_HKDF_INFO).derive(key.raw())
    return AESGCM(subkey)


def _nonce(index: int, last: bool) -> bytes:
    return index.to_bytes(11, "big") + (b"\x01" if last else b"\x00")


def is_sealed(head: bytes) -> bool:
    """Whether ``head`` (a file's first bytes, at least 8) starts a sealed file."""
    return head[:len(MAGIC)] == MAGIC


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
            take = min(self._chunk - len(self._buf), n - pos)
            self._buf += view[pos:pos + take]
            pos += take
        self._written += n
        return n

    def _emit(self, last: bool) -> None:
        sealed = self._aead.encrypt(_nonce(self._index, last), bytes(self._buf), self._header)
        self._inner.write(sealed)
        self._index += 1
        self._buf.clear()

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
        self._buf = bytearray()
        try:
            if self._close_inner:
                self._inner.close()
        finally:
            super().close()

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


class SealedReader(io.RawIOBase):
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
        if len(header) != HEADER_BYTES or not is_sealed(header):
            raise SealBroken("not a sealed file (bad or short header)")
        (chunk,) = _CHUNK_SIZE.unpack(header[-_CHUNK_SIZE.size:])
        if not 0 < chunk <= MAX_CHUNK_PLAIN_BYTES:
            raise SealBroken("sealed file header names an impossible chunk size")
        self._header = header
        self._chunk = chunk
        self._aead = _subkey_aead(key, header[len(MAGIC):len(MAGIC) + FILE_ID_BYTES])
        body = fileobj.seek(0, os.SEEK_END) - HEADER_BYTES
        stride = chunk + TAG_BYTES
        self._chunks = max(1, -(-body // stride))
        last_len = body - (self._chunks - 1) * stride
        if last_len < TAG_BYTES or (last_len == TAG_BYTES and self._chunks > 1):
            raise SealBroken("sealed file is truncated")
        self.plain_size = (self._chunks - 1) * chunk + last_len - TAG_BYTES
        self._pos = 0
        self._cached_index = -1
        self._cached = b""
        self.chunks_decrypted = 0
        self._load(self._chunks - 1)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_SET:
            pos = offset
        elif whence == os.SEEK_CUR:
            pos = self._pos + offset
        elif whence == os.SEEK_END:
            pos = self.plain_size + offset
        else:
            raise ValueError(f"invalid whence {whence}")
        if pos < 0:
            raise OSError(22, "negative seek position")
        self._pos = pos
        return pos

    def _load(self, index: int) -> bytes:
        if index == self._cached_index:
            return self._cached
        stride = self._chunk + TAG_BYTES
        last = index == self._chunks - 1
        want = (self.plain_size - index * self._chunk if last else self._chunk) + TAG_BYTES
        self._inner.seek(HEADER_BYTES + index * stride)
        sealed = self._inner.read(want)
        if len(sealed) != want:
            raise SealBroken("sealed file is truncated")
        try:
            plain = self._aead.decrypt(_nonce(index, last), sealed, self._header)
        except InvalidTag:
            raise SealBroken(f"sealed file chunk {index} failed authentication") from None
        self.chunks_decrypted += 1
        self._cached_index, self._cached = index, plain
        return plain

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        if self.closed:
            raise ValueError("read from a closed sealed file")
        out = memoryview(b).cast("B")
        filled = 0
        while filled < len(out) and self._pos < self.plain_size:
            index, within = divmod(self._pos, self._chunk)
            plain = self._load(index)
            take = min(len(plain) - within, len(out) - filled)
            out[filled:filled + take] = plain[within:within + take]
            filled += take
            self._pos += take
        return filled

    def readall(self) -> bytes:
        rest = max(0, self.plain_size - self._pos)
        buf = bytearray(rest)
        n = self.readinto(buf)
        return bytes(buf[:n])

    def close(self) -> None:
        if self.closed:
            return
        self._cached = b""
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
    """The plain bytes of ``blob`` (from ``seal_bytes``); ``SealBroken`` if it does not
    authenticate under ``key``."""
    with open_sealed(io.BytesIO(blob), key) as r:
        return r.readall()
