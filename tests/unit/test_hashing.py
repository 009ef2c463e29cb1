"""The one SHA-256 helper (casesignd.core.hashing): bytes, files in chunks, a copy's
chunks fed to consumers on their threads, and the ``sha256:<hex>`` object reference."""

from __future__ import annotations

import hashlib
import io
import os
import random
import time
from collections.abc import Callable

import pytest

from casesignd.core.hashing import (
    CHUNK_BYTES,
    OverlappedSha256,
    feed_chunks,
    file_sha256,
    object_ref,
    object_ref_digest,
    sha256_hex,
)


def test_bytes_and_a_file_read_in_chunks_agree(tmp_path):
    data = bytes(range(256)) * 5000
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    want = hashlib.sha256(data).hexdigest()
    assert sha256_hex(data) == want
    assert file_sha256(path) == (want, len(data))
    assert file_sha256(path, chunk_bytes=7) == (want, len(data))
    (tmp_path / "empty").write_bytes(b"")
    assert file_sha256(tmp_path / "empty") == (hashlib.sha256(b"").hexdigest(), 0)


@pytest.mark.parametrize("ref,digest", [
    ("sha256:" + "a" * 64, "a" * 64),
    ("sha256:" + "AB" * 32, "ab" * 32),  # names the same object, lower-cased
    ("sha256:" + "a" * 63, None),
    ("sha256:" + "a" * 64 + "\n", None),
    ("sha256:" + "g" * 64, None),
    ("a" * 64, None),
    ("docs:contract.pdf", None),
])
def test_an_object_reference_names_its_digest(ref, digest):
    assert object_ref_digest(ref) == digest
    if digest is not None:
        assert object_ref(digest) == "sha256:" + digest


def test_an_overlapped_hash_equals_hashlib_for_any_mix_of_parts() -> None:
    big = bytes(range(256)) * 4096  # 1 MiB: hashed on the helper thread
    parts = [b"head", big, bytearray(b"mutable"), big[:100], big, memoryview(b"tail")]
    with OverlappedSha256() as h:
        for part in parts:
            h.update(part)
    assert h.hexdigest() == hashlib.sha256(b"".join(bytes(p) for p in parts)).hexdigest()
    with OverlappedSha256() as empty:
        pass
    assert empty.hexdigest() == hashlib.sha256(b"").hexdigest()


@pytest.mark.parametrize("size", [0, 1, CHUNK_BYTES, 9 * CHUNK_BYTES + 17])
def test_feed_chunks_hands_every_consumer_every_chunk_in_order(size: int) -> None:
    # Slow consumers, each on its own thread, a few chunks behind the reading: each
    # still sees the file's bytes in order, never a buffer read into again too soon.
    data = os.urandom(size)
    seen: list[bytearray] = [bytearray(), bytearray()]

    def slow(i: int) -> Callable[[bytearray], None]:
        def take(chunk: bytearray) -> None:
            time.sleep(random.random() / 500)
            seen[i] += chunk
        return take

    here = hashlib.sha256()
    assert feed_chunks(io.BytesIO(data), [slow(0), slow(1)], here.update) == size
    assert seen[0] == data and seen[1] == data and here.digest() == hashlib.sha256(data).digest()


def test_feed_chunks_raises_the_first_error_once_every_consumer_is_done() -> None:
    data = os.urandom(6 * CHUNK_BYTES)
    written = bytearray()

    def refuse(chunk: bytearray) -> None:
        raise ValueError("not this one")

    def check(chunk: bytearray) -> None:
        if len(written) > 2 * CHUNK_BYTES:
            raise ValueError("seen enough")

    with pytest.raises(ValueError, match="not this one"):
        feed_chunks(io.BytesIO(data), [written.extend, refuse])
    written.clear()
    with pytest.raises(ValueError, match="seen enough"):
        feed_chunks(io.BytesIO(data), [written.extend], check)
    # Nothing was still writing when the error came out.
    settled = len(written)
    time.sleep(0.05)
    assert len(written) == settled
