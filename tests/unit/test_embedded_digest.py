"""An evidence file's digest as the signature dictionary binds it: taken as the file
is embedded, or, for a sealed file, the digest it was sealed under, which reading it
back can only confirm (its bytes) or refuse (``SealBroken``)."""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path

import pytest

from casesignd.core.errors import DigestMismatch
from casesignd.core.sealed import CHUNK_PLAIN_BYTES, HEADER_BYTES, SealBroken, SealedPath, SealKey
from casesignd.signing.attachments import Attachment, bound_by_digest, write_embedded_file

WHEN = dt.datetime(2026, 12, 5, tzinfo=dt.UTC)
DATA = bytes(range(256)) * (3 * CHUNK_PLAIN_BYTES // 256 + 7)


class Collecting:
    """An object writer (:class:`casesignd.signing.attachments.ObjectWriter`) that keeps
    what it is given."""

    def __init__(self) -> None:
        self.hasher = hashlib.sha256()
        self.out = bytearray()

    def write(self, data: bytes | memoryview) -> None:
        self.hasher.update(data)
        self.out += data

    def write_unhashed(self, data: bytes | memoryview) -> None:
        self.out += data

    def begin(self, num: int, gen: int = 0) -> None:
        pass


def sealed(tmp_path: Path, data: bytes) -> SealedPath:
    path = SealedPath(tmp_path / "evidence", SealKey.generate())
    with path.create() as w:
        w.write(data)
    return path


def test_a_plain_file_is_hashed_as_it_is_embedded(tmp_path: Path) -> None:
    plain = tmp_path / "evidence.bin"
    plain.write_bytes(DATA)
    w = Collecting()
    bound = write_embedded_file(w, 7, Attachment(plain, "e.bin", "application/octet-stream"),
                                "e.bin", WHEN)
    assert bound.sha256 == hashlib.sha256(DATA).digest() and bound.size == len(DATA)
    assert DATA in w.out


def test_a_sealed_file_is_bound_by_the_digest_it_was_sealed_under(tmp_path: Path) -> None:
    path = sealed(tmp_path, DATA)
    w = Collecting()
    att = Attachment(path, "e.bin", "application/octet-stream",
                     sha256=hashlib.sha256(DATA).digest(), verified=True)
    bound = write_embedded_file(w, 7, att, "e.bin", WHEN)
    assert bound.sha256 == hashlib.sha256(DATA).digest() and bound.size == len(DATA)
    assert DATA in w.out
    # The signature's hash still covers every byte written, the file's among them.
    assert w.hasher.digest() == hashlib.sha256(w.out).digest()


def test_a_tampered_sealed_file_is_refused_not_embedded(tmp_path: Path) -> None:
    path = sealed(tmp_path, DATA)
    raw = bytearray(path.path.read_bytes())
    raw[HEADER_BYTES + CHUNK_PLAIN_BYTES + 100] ^= 0x01  # within the second chunk
    path.path.write_bytes(bytes(raw))
    att = Attachment(path, "e.bin", "application/octet-stream",
                     sha256=hashlib.sha256(DATA).digest(), verified=True)
    with pytest.raises(SealBroken):
        write_embedded_file(Collecting(), 7, att, "e.bin", WHEN)


def test_a_plain_file_that_is_not_its_items_digest_is_refused(tmp_path: Path) -> None:
    # A stored file read in place, changed on disk since its digest named it: neither
    # embedded nor bound by digest under its new digest.
    plain = tmp_path / "evidence.bin"
    plain.write_bytes(DATA[:-1] + b"!")
    att = Attachment(plain, "e.bin", "application/octet-stream",
                     sha256=hashlib.sha256(DATA).digest())
    with pytest.raises(DigestMismatch):
        write_embedded_file(Collecting(), 7, att, "e.bin", WHEN)
    with pytest.raises(DigestMismatch):
        bound_by_digest(att)
    plain.write_bytes(DATA)
    assert write_embedded_file(Collecting(), 7, att, "e.bin", WHEN).sha256 == att.sha256
    assert bound_by_digest(att).sha256 == att.sha256
