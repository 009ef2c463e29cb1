"""Stored files sealed at rest (``[storage] encrypt``): each object and artifact file
under a data key of its own, kept wrapped in the store (casesignd.core.keyring).

:class:`Envelope` finds or makes an owner's data key through the store's verbs (an
object's owner is ``object:<sha256>``, an artifact's ``artifact:<id>``: one key per
owner, the first one written standing, so every copy of one digest is sealed under
it), and opens a stored file for reading whether it is sealed or, written before
encryption was turned on, plain (:func:`casesignd.core.sealed.is_sealed` tells them
apart). A file that fails authentication, or whose key is gone, reads as the
retryable ``io_error`` (:func:`broken`), never as wrong bytes.

The data keys a process unwraps stay in its memory for a while
(:class:`OpenedKeys`), so that a batch of jobs on one stored contract asks the store
and the key-encryption key once rather than once a job: never written anywhere,
never shown in a ``repr`` or a log, dropped at once when the store removes their
owner (:meth:`Envelope.forget`, from the erasure and the retention sweep) and, for a
change made by another process (another node's erasure, then a new upload of the
digest under a new key), trusted for :data:`OPENED_KEY_TTL_S` only, and forgotten
as soon as a file does not authenticate under one.

Blocking calls: :func:`open_plain`, :func:`plain_size` and :func:`reseal` touch files
(run them in a thread). Uploads are sealed as they stream in by
:class:`~casesignd.files.temp.HashingWriter` with the data key.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from casesignd.core.errors import ConfigError, TransientJobError
from casesignd.core.keyring import NO_KEYS, Keyring, KeyUnavailable, WrappedKey
from casesignd.core.sealed import (
    CHUNK_PLAIN_BYTES,
    HEADER_BYTES,
    MAGIC,
    TAG_BYTES,
    SealBroken,
    SealedPath,
    SealKey,
    is_sealed,
    open_sealed,
    seal_writer,
)

READ_CHUNK_BYTES = 256 * 1024
# How many unwrapped data keys a process keeps (an entry is ~200 bytes), and how long
# one is used before the store is asked again: the bound on how long another
# process's change of an owner's key (an erasure, then a new upload of the digest)
# can go unseen here, beside the retry a failed authentication triggers.
OPENED_KEYS = 1024
OPENED_KEY_TTL_S = 30.0


class DataKeys(Protocol):
    """What the envelope uses of the store (casesignd.store.data_keys)."""

    async def put_data_key(self, key: WrappedKey) -> WrappedKey: ...
    async def data_key(self, owner: str) -> WrappedKey | None: ...


async def check_keys_held(store: KeyIds, keyring: Keyring) -> dict[str, int]:
    """The data keys the store holds, by the id of the key that wraps them; ConfigError
    when the configuration lacks one of those keys (a start with it would serve
    ``io_error`` for everything it wrapped)."""
    held = await store.data_key_ids()
    missing = sorted(set(held) - keyring.ids)
    if missing:
        n = sum(held[k] for k in missing)
        raise ConfigError(
            "storage.key_file",
            f"the store holds {n} data key(s) wrapped under key id(s) {', '.join(missing)}, "
            "which the configuration does not name: configure them as storage.key_id or "
            "[[storage.old_keys]] (and run `casesignd store rekey` before removing an old one)")
    return held


class KeyIds(Protocol):
    async def data_key_ids(self) -> dict[str, int]: ...


def broken(what: str, why: BaseException | str) -> TransientJobError:
    """The error of a sealed file that does not read back whole: ``io_error``."""
    return TransientJobError(f"{what} cannot be read back: {why}", code="io_error")


@dataclass(frozen=True)
class SealedFile(SealedPath):
    """A stored file sealed at rest, with the data key that opens it and its owner's
    name: what a reader gets where it would otherwise get the file's path. It is a
    :class:`~casesignd.core.sealed.SealedPath`, so whatever reads a sealed temp file
    in place (a worker process, a scanner) reads it in place too."""

    owner: str = ""

    def open(self, buffer_bytes: int = CHUNK_PLAIN_BYTES) -> BinaryIO:  # type: ignore[override]
        """The plain bytes, seekable (blocking; ``io_error`` when they do not
        authenticate)."""
        return open_plain(self.path, self.key, self.owner, buffer_bytes)


class OpenedKeys:
    """The data keys this process unwrapped, by owner: the most recent ``size`` of
    them, each for ``ttl_s`` seconds after it was read from the store. Memory only;
    its ``repr`` names how many it holds, never a key or an owner."""

    def __init__(self, size: int = OPENED_KEYS, ttl_s: float = OPENED_KEY_TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.size = size
        self.ttl_s = ttl_s
        self._clock = clock
        self._keys: OrderedDict[str, tuple[float, SealKey]] = OrderedDict()

    def __repr__(self) -> str:
        return f"OpenedKeys({len(self._keys)} of {self.size})"

    def __len__(self) -> int:
        return len(self._keys)

    def get(self, owner: str) -> SealKey | None:
        found = self._keys.get(owner)
        if found is None:
            return None
        if self._clock() - found[0] > self.ttl_s:
            del self._keys[owner]
            return None
        self._keys.move_to_end(owner)
        return found[1]

    def keep(self, owner: str, key: SealKey) -> None:
        if self.size <= 0:
            return
        self._keys[owner] = (self._clock(), key)
        self._keys.move_to_end(owner)
        while len(self._keys) > self.size:
            self._keys.popitem(last=False)

    def forget(self, owners: Iterable[str]) -> None:
        for owner in owners:
            self._keys.pop(owner, None)

    def clear(self) -> None:
        self._keys.clear()


class Envelope:
    """Data keys for stored files: made and wrapped when written, unwrapped when read
    (and kept unwrapped for a while: :class:`OpenedKeys`)."""

    def __init__(self, keyring: Keyring = NO_KEYS, keys: DataKeys | None = None,
                 opened: OpenedKeys | None = None) -> None:
        self.keyring = keyring
        self.keys = keys
        self.opened = opened if opened is not None else OpenedKeys()

    def forget(self, owners: Iterable[str]) -> None:
        """Drop the unwrapped data keys of ``owners`` from memory: the store removed
        them (an erasure, a retention sweep), or a file did not authenticate under
        one (another process may have replaced it)."""
        self.opened.forget(owners)

    @property
    def sealing(self) -> bool:
        """Whether new files are sealed."""
        return self.keyring.encrypt and self.keys is not None

    def new_key(self, owner: str) -> tuple[SealKey, WrappedKey]:
        """A fresh data key for ``owner`` and its wrap under the current storage key."""
        key = SealKey.generate()
        return key, self.keyring.wrap(key.raw(), owner)

    async def standing(self, key: SealKey, wrapped: WrappedKey) -> SealKey:
        """Keep ``wrapped`` as its owner's data key unless one stands already; the data
        key that stands (``key`` itself, or the earlier one)."""
        assert self.keys is not None
        stood = await self.keys.put_data_key(wrapped)
        if stood.key_id != wrapped.key_id or stood.wrapped != wrapped.wrapped:
            key = self._unwrap(stood)
        # What was just written is read next (a job signs the contract just uploaded).
        self.opened.keep(wrapped.owner, key)
        return key

    async def still_standing(self, key: SealKey, owner: str) -> SealKey:
        """After a row that names ``owner`` was written: the key that stands for it,
        ``key`` written again if the row went meanwhile (one read when it did not)."""
        assert self.keys is not None
        found = await self.keys.data_key(owner)
        if found is None:
            return await self.standing(key, self.keyring.wrap(key.raw(), owner))
        stood = self._unwrap_kept(found)
        return key if stood == key else stood

    async def key_for_writing(self, owner: str) -> SealKey | None:
        """The data key to seal ``owner``'s file with (None: files are not sealed)."""
        if not self.sealing:
            return None
        # One write: the fresh key is kept unless the owner has one, which is answered.
        return await self.standing(*self.new_key(owner))

    async def key_for_reading(self, owner: str) -> SealKey:
        """The data key of ``owner``'s sealed file, or ``io_error``."""
        kept = self.opened.get(owner)
        if kept is not None:
            return kept
        found = await self.keys.data_key(owner) if self.keys is not None else None
        if found is None:
            raise broken(owner, "its data key is not in the store")
        return self._unwrap_kept(found)

    def _unwrap_kept(self, wrapped: WrappedKey) -> SealKey:
        key = self._unwrap(wrapped)
        self.opened.keep(wrapped.owner, key)
        return key

    def _unwrap(self, wrapped: WrappedKey) -> SealKey:
        try:
            return SealKey.from_bytes(self.keyring.open(wrapped))
        except KeyUnavailable as e:
            raise broken(wrapped.owner, e) from None

    async def key_if_any(self, owner: str) -> SealKey | None:
        """``owner``'s data key when there can be one to open (a key is configured and
        the store holds one for it); None otherwise, without asking the store when no
        key is configured. ``io_error`` when it is held but cannot be unwrapped."""
        if self.keys is None or not self.keyring.ids:
            return None
        kept = self.opened.get(owner)
        if kept is not None:
            return kept
        found = await self.keys.data_key(owner)
        return self._unwrap_kept(found) if found is not None else None

    async def key_for(self, owner: str) -> SealKey | None:
        """For a writer that may find a file there already: the key to seal with (as
        :meth:`key_for_writing`), or, when files are not sealed now, the key of one
        sealed before (None: there is none)."""
        if self.sealing:
            return await self.key_for_writing(owner)
        found = await self.keys.data_key(owner) if self.keys is not None else None
        return self._unwrap(found) if found is not None else None

    async def sealed(self, path: Path, owner: str) -> Path | SealedFile:
        """``path`` as a reader takes it: itself when plain, with its key when sealed."""
        head = await asyncio.to_thread(read_head, path)
        if not is_sealed(head):
            return path
        return SealedFile(path, await self.key_for_reading(owner), owner)


def read_head(path: Path) -> bytes:
    """The first bytes of ``path``: enough for :func:`is_sealed` and the header."""
    with open(path, "rb") as f:
        return f.read(HEADER_BYTES)


def open_plain(path: Path, key: SealKey | None, owner: str = "",
               buffer_bytes: int = CHUNK_PLAIN_BYTES) -> BinaryIO:
    """``path`` opened for its plain bytes: through ``key`` when given (``io_error``
    when it does not authenticate), as it is otherwise. Blocking."""
    f = open(path, "rb", buffering=0)  # noqa: SIM115 - handed to the caller
    if key is None:
        return io.BufferedReader(f, READ_CHUNK_BYTES)
    try:
        reader = open_sealed(f, key, close_inner=True)
    except SealBroken as e:
        f.close()
        raise broken(owner or str(path.name), e) from None
    return io.BufferedReader(reader, buffer_bytes)


def iter_plain(f: BinaryIO, owner: str = "", chunk_bytes: int = READ_CHUNK_BYTES) -> Iterator[bytes]:
    """The plain bytes of ``f`` in chunks, a broken chunk raising ``io_error``. Blocking."""
    while True:
        try:
            chunk = f.read(chunk_bytes)
        except SealBroken as e:
            raise broken(owner or "a stored file", e) from None
        if not chunk:
            return
        yield chunk


def plain_sha256(path: Path, key: SealKey | None, owner: str = "") -> tuple[str, int]:
    """(SHA-256 hex, size) of ``path``'s plain bytes (sealed under ``key``, or plain
    when None); ``io_error`` when they do not authenticate. Blocking."""
    h = hashlib.sha256()
    size = 0
    with open_plain(path, key, owner) as f:
        for chunk in iter_plain(f, owner):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def plain_size(path: Path) -> int:
    """The plain size of a stored file from its size and header, without decrypting
    (a sealed file's last chunk is authenticated when it is read). Blocking."""
    size = os.stat(path).st_size
    with open(path, "rb") as f:
        head = f.read(HEADER_BYTES)
    if len(head) < HEADER_BYTES or not is_sealed(head):
        return size
    chunk = int.from_bytes(head[len(MAGIC) + 16:HEADER_BYTES], "big") or CHUNK_PLAIN_BYTES
    body = size - HEADER_BYTES
    chunks = max(1, -(-body // (chunk + TAG_BYTES)))
    return max(0, body - chunks * TAG_BYTES)


def opens_under(path: Path, key: SealKey) -> bool:
    """Whether ``path`` reads under ``key``: a plain file does (it needs no key), a
    sealed one when its header and first chunk authenticate under it; a file that is
    not there does not. Blocking."""
    try:
        if not is_sealed(read_head(path)):
            return True
        with open_plain(path, key) as f:
            f.read(1)
    except (FileNotFoundError, SealBroken, TransientJobError):
        return False
    return True


def reseal(path: Path, src_key: SealKey, dst_key: SealKey) -> None:
    """Rewrite the sealed file ``path`` under ``dst_key`` in place of ``src_key``
    (through a new file renamed over it; fsynced). Blocking."""
    tmp = path.with_name(path.name + ".reseal")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        with open_plain(path, src_key) as src, \
                os.fdopen(os.open(tmp, flags, 0o600), "wb") as out:
            with seal_writer(out, dst_key) as w:
                for chunk in iter_plain(src):
                    w.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            os.unlink(tmp)
