"""The data keys a process unwraps (casesignd.files.envelope.OpenedKeys): read from the
store once, not once a job; dropped at once when their owner is removed, after a
while in any case, and after a file that did not authenticate under one."""

from __future__ import annotations

import asyncio
import os

from casesignd.core.keyring import Keyring, object_owner
from casesignd.core.sealed import SealKey
from casesignd.engine.retention import owners_of
from casesignd.files.envelope import Envelope, OpenedKeys
from casesignd.store.memory import MemoryStore
from casesignd.store.records import Removed

SHA = "ab" * 32


class CountingStore(MemoryStore):
    """A memory store that counts the data-key reads it answers."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    async def data_key(self, owner):
        self.reads += 1
        return await super().data_key(owner)


def _envelope(store, clock=None) -> Envelope:
    keyring = Keyring(encrypt=True, current="k1", keys={"k1": os.urandom(32)})
    opened = OpenedKeys(size=2, ttl_s=30.0, clock=clock) if clock else OpenedKeys(size=2)
    return Envelope(keyring, store, opened)


def _stored_key(envelope: Envelope, owner: str) -> SealKey:
    key, wrapped = envelope.new_key(owner)
    return asyncio.run(envelope.standing(key, wrapped))


def test_a_data_key_is_read_from_the_store_once_then_from_memory():
    store = CountingStore()
    envelope = _envelope(store)
    key = _stored_key(envelope, object_owner(SHA))
    assert asyncio.run(envelope.key_if_any(object_owner(SHA))) == key
    assert store.reads == 0  # a key just written is read next: it is kept
    envelope.opened.clear()

    async def reads() -> list[SealKey | None]:
        return [await envelope.key_if_any(object_owner(SHA)) for _ in range(5)] + \
            [await envelope.key_for_reading(object_owner(SHA))]

    assert asyncio.run(reads()) == [key] * 6
    assert store.reads == 1


def test_forgotten_expired_and_least_recent_keys_are_read_again():
    now = [0.0]
    store = CountingStore()
    envelope = _envelope(store, clock=lambda: now[0])
    owners = [object_owner(c * 64) for c in "abc"]
    for o in owners:
        _stored_key(envelope, o)
    envelope.opened.clear()

    def read(owner: str) -> None:
        asyncio.run(envelope.key_if_any(owner))

    read(owners[0])
    read(owners[0])
    assert store.reads == 1
    envelope.forget([owners[0]])
    read(owners[0])
    assert store.reads == 2
    now[0] = 31.0  # past the time a key is trusted without the store
    read(owners[0])
    assert store.reads == 3
    read(owners[1])
    read(owners[2])  # holds two: the least recent (owners[0]) goes
    assert len(envelope.opened) == 2
    read(owners[0])
    assert store.reads == 6


def test_a_key_whose_owner_was_erased_and_uploaded_again_is_the_new_one():
    store = CountingStore()
    envelope = _envelope(store)
    owner = object_owner(SHA)
    old = _stored_key(envelope, owner)
    envelope.opened.clear()
    assert asyncio.run(envelope.key_if_any(owner)) == old
    # The erasure drops the row, and the files' removal drops the key from memory.
    store._keys.pop(owner)
    envelope.forget(owners_of([Removed("object", "t", "C-1", SHA, 10, keyed=True)]))
    new = _stored_key(envelope, owner)
    assert new != old
    assert asyncio.run(envelope.key_if_any(owner)) == new


def test_the_kept_keys_never_show():
    envelope = _envelope(CountingStore())
    key = _stored_key(envelope, object_owner(SHA))
    asyncio.run(envelope.key_if_any(object_owner(SHA)))
    shown = repr(envelope.opened) + str(envelope.opened) + repr(envelope.keyring)
    assert key.raw().hex() not in shown and SHA not in shown
    assert repr(envelope.opened) == "OpenedKeys(1 of 2)"


def test_owners_of_what_a_removal_took():
    removed = [Removed("object", "t", "C-1", SHA), Removed("artifact", "t", "C-1", "art1"),
               Removed("job", "t", "C-1", "job1")]
    assert owners_of(removed) == [object_owner(SHA), "artifact:art1"]


# --- an erasure racing an upload of the same digest ----------------------------------

DATA = b"%PDF-1.7 the same bytes in two cases " * 4000  # three sealed chunks


async def _chunks(data: bytes):
    for i in range(0, len(data), 50_000):
        yield data[i:i + 50_000]


def _sealed_objects(tmp_path):
    from casesignd.files.objects import ObjectStore

    store = CountingStore()
    objects = ObjectStore(tmp_path / "objects")
    objects.sweep()
    objects.envelope = _envelope(store)
    return objects, store


def _read_back(objects, case_id: str) -> bytes:
    import hashlib

    from casesignd.files.envelope import SealedFile

    sha = hashlib.sha256(DATA).hexdigest()
    objects.envelope.forget([object_owner(sha)])
    got = asyncio.run(objects.envelope.sealed(objects.path("t", case_id, sha), object_owner(sha)))
    assert isinstance(got, SealedFile)
    with got.open() as f:
        return f.read()


def _put(objects, case_id: str) -> None:
    import hashlib

    asyncio.run(objects.put("t", case_id, hashlib.sha256(DATA).hexdigest(), _chunks(DATA),
                            1 << 24, len(DATA)))


def test_an_erasure_between_the_uploads_key_and_its_row_leaves_the_key_standing(tmp_path):
    """The erasure of the last other case of the digest drops the key that upload
    found standing, before the upload's object row is written: the upload writes the
    key again, so that its row never names an object without a key."""
    import hashlib

    objects, store = _sealed_objects(tmp_path)
    owner = object_owner(hashlib.sha256(DATA).hexdigest())
    _put(objects, "C-1")

    async def erased_meanwhile(tenant, case_id, sha256, size):
        store._keys.pop(owner)  # the erasure's transaction: C-1's row and the key go

    objects.record = erased_meanwhile
    _put(objects, "C-2")
    assert owner in store._keys
    assert _read_back(objects, "C-2") == DATA


def test_an_upload_never_links_a_blob_sealed_under_a_destroyed_key(tmp_path):
    """The erasure committed (the key is gone) but had not removed the blob yet when
    another case uploaded the digest under a new key: the new case gets the new
    upload's file, never the old blob it could not read."""
    import hashlib

    objects, store = _sealed_objects(tmp_path)
    sha = hashlib.sha256(DATA).hexdigest()
    _put(objects, "C-1")
    store._keys.pop(object_owner(sha))  # committed; C-1's files not removed yet
    _put(objects, "C-2")
    assert _read_back(objects, "C-2") == DATA
    assert objects.remove("t", "C-1", sha) == 0  # the blob is C-2's now: it stays
    assert _read_back(objects, "C-2") == DATA


def test_a_publication_replaces_a_crashs_leftover_whose_key_was_swept(tmp_path):
    """A crash after an artifact's file and key, before its record: the start-up sweep
    drops the key; the next publication of the id (a retry, a new request for the same
    signature) finds the file sealed under a key that is gone and replaces it, and its
    artifact carries its key for the record's transaction."""
    from casesignd.files.artifacts import ArtifactStore

    store = CountingStore()
    artifacts = ArtifactStore(tmp_path / "artifacts", b"s" * 32, "n1")
    artifacts.sweep()
    artifacts.envelope = _envelope(store)
    art_id = artifacts.artifact_id("t", "sig:k")

    def publish(data: bytes):
        key = asyncio.run(artifacts.key_for(art_id))
        return artifacts.publish_bytes([data], art_id, "application/pdf", key)

    publish(b"%PDF first attempt")
    assert asyncio.run(store.drop_unrecorded_keys(float("inf"))) == 1
    artifact, ours = publish(b"%PDF second attempt")
    assert ours and artifact.data_key is not None
    assert artifact.data_key.owner == f"artifact:{art_id}"
    source = asyncio.run(artifacts.source(art_id))
    with source.open() as f:
        assert f.read() == b"%PDF second attempt"
    again, ours_again = publish(b"%PDF third attempt")  # its own file now: kept
    assert not ours_again and again.sha256 == artifact.sha256
