"""The one SHA-256 helper (casesignd.core.hashing): bytes, files in chunks, and the
``sha256:<hex>`` object reference."""

from __future__ import annotations

import hashlib

import pytest

from casesignd.core.hashing import (
    OverlappedSha256,
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
