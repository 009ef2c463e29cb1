"""Storage encryption's data keys, as the store keeps them: each sealed object's and
artifact's data key, wrapped by a key-encryption key (casesignd.core.keyring), in the
``data_keys`` table (SQLite migration 0014, PostgreSQL 0009) — :class:`DataKeyVerbs`
for the SQL stores, :class:`MemoryDataKeys` in memory.

A row is named by its owner, ``object:<sha256>`` or ``artifact:<artifact_id>``
(:func:`object_owner`, :func:`artifact_owner`). The first writer of an owner's key
wins (:meth:`DataKeyVerbs.put_data_key` answers the row that stands), so two uploads
of one digest, or two publications of one artifact, seal under the same data key
whichever of their files is kept. The row goes in the transaction that removes the
last thing it seals (casesignd.store.lifecycle), and the store's files are then
scrubbed of it (``Store.scrub``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from casesignd.core.keyring import Keyring, WrappedKey, artifact_owner, object_owner
from casesignd.core.outcomes import Signature
from casesignd.core.sealed import SealKey, seal_bytes, unseal_bytes
from casesignd.store.records import Rewrap
from casesignd.store.tx import Row


def _row(r: Row) -> WrappedKey:
    return WrappedKey(r["owner"], r["key_id"], bytes(r["wrapped"]))


def put_data_key(tx: Any, key: WrappedKey) -> WrappedKey:
    """The owner's key as it stands after this write: ``key``, or the one written first."""
    tx.run("put_data_key", owner=key.owner, key_id=key.key_id, wrapped=key.wrapped, now=tx.now)
    row = tx.one("get_data_key", owner=key.owner)
    return _row(row) if row is not None else key


def keep_data_key(tx: Any, key: WrappedKey) -> None:
    """Write ``key`` unless its owner has one (no read: the writer needs no answer)."""
    tx.run("put_data_key", owner=key.owner, key_id=key.key_id, wrapped=key.wrapped, now=tx.now)


def drop_unrecorded_keys(tx: Any, before: float) -> int:
    """Drop the artifacts' data keys written before ``before`` that no artifact record
    names (a publication a crash cut short of its record); how many went."""
    return int(tx.run("drop_unrecorded_artifact_keys", before=before))


def rewrap(tx: Any, changes: Sequence[Rewrap]) -> int:
    """Each change applied where the row is still under its old key; how many were."""
    n = 0
    for c in changes:
        if c.inline:
            n += tx.run("rewrap_inline_key", artifact_id=c.owner.removeprefix("artifact:"),
                        key_id=c.key.key_id, wrapped=c.key.wrapped, old_key_id=c.old_key_id)
        else:
            n += tx.run("rewrap_data_key", owner=c.owner, key_id=c.key.key_id,
                        wrapped=c.key.wrapped, old_key_id=c.old_key_id)
    return n


def seal_inline(keyring: Keyring, sig: Signature) -> Signature:
    """``sig``'s bytes sealed under a fresh data key, wrapped by the current storage key
    (kept beside them in their row), when the keyring encrypts; else ``sig``."""
    if sig.inline is None or not keyring.encrypt or sig.inline_key is not None:
        return sig
    key = SealKey.generate()
    wrapped = keyring.wrap(key.raw(), artifact_owner(sig.artifact.artifact_id))
    return dataclasses.replace(sig, inline=seal_bytes(sig.inline, key), inline_key=wrapped)


def unseal_inline(keyring: Keyring, artifact_id: str, row: Row) -> bytes:
    """The plain bytes of an ``artifact_data`` row (sealed or not); KeyUnavailable or
    SealBroken when they cannot be read back."""
    data = bytes(row["data"])
    if row["key_id"] is None:
        return data
    raw = keyring.unwrap(row["key_id"], bytes(row["wrapped_key"]), artifact_owner(artifact_id))
    return unseal_bytes(data, SealKey.from_bytes(raw))


class DataKeyVerbs:
    """The data keys' verbs over a SQL store's writer and readers (see :mod:`.verbs`)."""

    async def _write(self, op: Any) -> Any:  # provided by SqlStore
        raise NotImplementedError

    async def _rows(self, name: str, **params: Any) -> Sequence[Row]:  # provided by SqlStore
        raise NotImplementedError

    async def put_data_key(self, key: WrappedKey) -> WrappedKey:
        """Keep ``key`` unless its owner has one: the owner's key as it stands."""
        return await self._write(lambda tx: put_data_key(tx, key))

    async def data_key(self, owner: str) -> WrappedKey | None:
        rows = await self._rows("get_data_key", owner=owner)
        return _row(rows[0]) if rows else None

    async def data_key_ids(self) -> dict[str, int]:
        """How many data keys each key id wraps."""
        return {r["key_id"]: int(r["n"]) for r in await self._rows("data_key_ids")}

    async def data_keys_to_rewrap(self, current: str, after: str, limit: int,
                                  inline: bool = False) -> list[WrappedKey]:
        """Up to ``limit`` data keys not under ``current``, by owner after ``after``:
        of files (``data_keys``), or with ``inline`` of the artifacts the store keeps
        itself (``artifact_data``; ``after`` is then an artifact id)."""
        name = "inline_keys_to_rewrap" if inline else "data_keys_to_rewrap"
        return [_row(r) for r in await self._rows(name, current=current, after=after,
                                                  limit=limit)]

    async def rewrap_data_keys(self, changes: Sequence[Rewrap]) -> int:
        """Apply ``changes`` in one transaction; how many rows changed."""
        return await self._write(lambda tx: rewrap(tx, changes))

    async def drop_unrecorded_keys(self, before: float) -> int:
        """Drop the data keys of artifacts never recorded, written before ``before``
        (:func:`drop_unrecorded_keys`); how many went."""
        return await self._write(lambda tx: drop_unrecorded_keys(tx, before))


class MemoryDataKeys:
    """The same verbs in memory (:class:`~.memory.MemoryStore`)."""

    _keys: dict[str, WrappedKey]
    _objects: dict[tuple[str, str, str], Any]
    _artifacts: dict[str, Any]
    _key_written: dict[str, float]
    clock: Callable[[], float]

    async def put_data_key(self, key: WrappedKey) -> WrappedKey:
        self._key_written.setdefault(key.owner, self.clock())
        return self._keys.setdefault(key.owner, key)

    async def data_key(self, owner: str) -> WrappedKey | None:
        return self._keys.get(owner)

    async def data_key_ids(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for k in self._keys.values():
            out[k.key_id] = out.get(k.key_id, 0) + 1
        return dict(sorted(out.items()))

    async def data_keys_to_rewrap(self, current: str, after: str, limit: int,
                                  inline: bool = False) -> list[WrappedKey]:
        if inline:  # the memory store keeps its inline bytes as they are given
            return []
        return sorted((k for k in self._keys.values() if k.owner > after and k.key_id != current),
                      key=lambda k: k.owner)[:limit]

    async def rewrap_data_keys(self, changes: Sequence[Rewrap]) -> int:
        n = 0
        for c in changes:
            k = self._keys.get(c.owner)
            if k is not None and k.key_id == c.old_key_id and not c.inline:
                self._keys[c.owner] = c.key
                n += 1
        return n

    async def drop_unrecorded_keys(self, before: float) -> int:
        gone = [o for o in self._keys if o.startswith("artifact:")
                and o.removeprefix("artifact:") not in self._artifacts
                and self._key_written.get(o, 0.0) < before]
        for o in gone:
            del self._keys[o]
        return len(gone)

    def _drop_object_key(self, sha256: str) -> bool:
        if any(k[2] == sha256 for k in self._objects):
            return False
        return self._keys.pop(object_owner(sha256), None) is not None

    def _drop_artifact_key(self, artifact_id: str) -> bool:
        return self._keys.pop(artifact_owner(artifact_id), None) is not None
