"""Sealed files (casesignd.core.sealed): round trips, seeking, and every kind of
tampering ending in SealBroken rather than wrong bytes."""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import random
from pathlib import Path

import pytest

from casesignd.core.sealed import (
    CHUNK_PLAIN_BYTES,
    HEADER_BYTES,
    KEY_BYTES,
    TAG_BYTES,
    SealBroken,
    SealedPath,
    SealKey,
    broken_seal,
    is_sealed,
    open_sealed,
    plain_memfd,
    reading_sealed,
    seal_bytes,
    seal_writer,
    unseal_bytes,
)

C = CHUNK_PLAIN_BYTES
STRIDE = C + TAG_BYTES
SIZES = [0, 1, C - 1, C, C + 1, 3 * C + 17, 4 * C]


def _plain(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


def _seal(data: bytes, key: SealKey, piece: int = 7919) -> bytes:
    out = io.BytesIO()
    with seal_writer(out, key) as w:
        for i in range(0, len(data), piece):
            assert w.write(data[i:i + piece]) == len(data[i:i + piece])
    assert w.plain_size == len(data)
    return out.getvalue()


@pytest.mark.parametrize("size", SIZES)
def test_round_trip_at_chunk_boundaries(size: int) -> None:
    key = SealKey.generate()
    data = _plain(size)
    blob = _seal(data, key)
    assert is_sealed(blob)
    assert len(blob) == HEADER_BYTES + max(1, -(-size // C)) * TAG_BYTES + size
    with open_sealed(io.BytesIO(blob), key) as r:
        assert r.plain_size == size
        assert r.read() == data
    assert unseal_bytes(seal_bytes(data, key), key) == data


@pytest.mark.parametrize("size", [C, 4 * C, 5 * C + 3])
def test_one_big_write_equals_many_small_ones(size: int) -> None:
    key = SealKey.generate()
    data = _plain(size)
    out = io.BytesIO()
    with seal_writer(out, key) as w:
        w.write(memoryview(data))  # whole chunks sealed straight from the caller's buffer
    with open_sealed(io.BytesIO(out.getvalue()), key) as r:
        assert r.read() == data
    with open_sealed(io.BytesIO(_seal(data, key)), key) as r:
        assert r.read() == data


def test_a_chunk_that_fails_leaves_no_plain_byte_in_the_callers_buffer() -> None:
    key = SealKey.generate()
    data = _plain(4 * C, seed=9)
    blob = bytearray(_seal(data, key))
    blob[HEADER_BYTES + STRIDE + 500] ^= 0x01  # chunk 1, decrypted into the buffer
    buf = bytearray(4 * C)
    with open_sealed(io.BytesIO(bytes(blob)), key) as r, pytest.raises(SealBroken):
        r.readinto(buf)
    assert buf[:C] == data[:C]  # chunk 0 authenticated
    assert buf[C:2 * C] == bytes(C)  # chunk 1's unauthenticated bytes wiped


def test_seek_and_read_at_arbitrary_offsets_equal_the_plain_bytes() -> None:
    key = SealKey.generate()
    data = _plain(5 * C + 1234, seed=3)
    blob = _seal(data, key)
    raw = open_sealed(io.BytesIO(blob), key)
    buffered = io.BufferedReader(open_sealed(io.BytesIO(blob), key), buffer_size=16 * 1024)
    rng = random.Random(7)
    for _ in range(300):
        start = rng.randrange(0, len(data) + 10)
        length = rng.choice([0, 1, 5, 100, C - 1, C + 1, 2 * C + 9])
        for f in (raw, buffered):
            f.seek(start)
            assert f.read(length) == data[start:start + length]
            assert f.tell() == (start if start > len(data) else min(start + length, len(data)))
    for f in (raw, buffered):
        assert f.seek(-10, os.SEEK_END) == len(data) - 10
        assert f.read() == data[-10:]
        f.seek(C - 2)
        f.seek(4, os.SEEK_CUR)
        assert f.read(3) == data[C + 2:C + 5]


def _tamper_cases(key: SealKey) -> dict[str, bytes]:
    data = _plain(4 * C + 100, seed=1)
    blob = bytearray(_seal(data, key))
    other = _seal(_plain(4 * C + 100, seed=2), key)
    flipped = bytearray(blob)
    flipped[HEADER_BYTES + STRIDE + 500] ^= 0x01
    header_flipped = bytearray(blob)
    header_flipped[HEADER_BYTES - 1] ^= 0x01  # the chunk size, bound in as aad
    swapped = bytearray(blob)
    at = HEADER_BYTES + STRIDE
    swapped[at:at + STRIDE] = other[at:at + STRIDE]
    reordered = bytearray(blob)
    one, two = slice(HEADER_BYTES, HEADER_BYTES + STRIDE), slice(at, at + STRIDE)
    reordered[one], reordered[two] = blob[two], blob[one]
    return {
        "flipped byte": bytes(flipped),
        "flipped header": bytes(header_flipped),
        "chunk from another file": bytes(swapped),
        "two chunks reordered": bytes(reordered),
        "tail cut at a chunk boundary": bytes(blob[:HEADER_BYTES + 3 * STRIDE]),
        "tail cut inside a chunk": bytes(blob[:-1]),
        "tail cut to the header": bytes(blob[:HEADER_BYTES]),
        "header only half": bytes(blob[:10]),
        "not sealed at all": data[:5000],
    }


@pytest.mark.parametrize("case", list(_tamper_cases(SealKey.generate())))
def test_tampering_is_seal_broken_never_wrong_bytes(case: str) -> None:
    key = SealKey.generate()
    blob = _tamper_cases(key)[case]
    with pytest.raises(SealBroken), open_sealed(io.BytesIO(blob), key) as r:
        r.read()
    with pytest.raises(SealBroken):  # read whole in memory: the same refusals
        unseal_bytes(blob, key)


def test_a_wrong_key_is_seal_broken() -> None:
    blob = _seal(_plain(C + 5), SealKey.generate())
    with pytest.raises(SealBroken):
        open_sealed(io.BytesIO(blob), SealKey.generate())
    with pytest.raises(SealBroken):
        unseal_bytes(seal_bytes(b"x", SealKey.generate()), SealKey.generate())


def test_seal_broken_is_an_os_error() -> None:
    assert issubclass(SealBroken, OSError)


def test_an_aborted_write_never_reads_as_whole() -> None:
    key = SealKey.generate()
    out = io.BytesIO()
    with pytest.raises(RuntimeError), seal_writer(out, key) as w:
        w.write(_plain(2 * C + 5))
        raise RuntimeError("the source went away")
    with pytest.raises(SealBroken):
        open_sealed(io.BytesIO(out.getvalue()), key).read()
    out2 = io.BytesIO()
    w2 = seal_writer(out2, key)
    w2.write(b"abc")
    del w2  # abandoned: garbage collection must not seal it as complete
    with pytest.raises(SealBroken):
        open_sealed(io.BytesIO(out2.getvalue()), key).read()


def test_the_key_never_shows() -> None:
    key = SealKey.generate()
    raw = key.raw()
    assert len(raw) == KEY_BYTES
    for text in (repr(key), str(key), f"{key}", repr([key]), repr({"k": key})):
        assert raw.hex() not in text and "hidden" in text
    assert pickle.loads(pickle.dumps(key)) == key
    assert SealKey.from_bytes(raw) == key
    with pytest.raises(ValueError):
        SealKey.from_bytes(b"short")


def test_the_ciphertext_holds_no_plain_run() -> None:
    key = SealKey.generate()
    data = b"MARKER-" * 20000
    blob = _seal(data, key)
    assert b"MARKER-" not in blob
    # Two files with the same key and plain bytes differ (random file id).
    assert _seal(data, key) != blob


def test_the_reader_decrypts_only_the_chunks_touched() -> None:
    key = SealKey.generate()
    data = _plain(10 * C, seed=5)
    r = open_sealed(io.BytesIO(_seal(data, key)), key)
    assert r.chunks_decrypted == 1  # the last chunk, authenticated on open
    r.seek(9 * C + 10)
    assert r.read(100) == data[9 * C + 10:9 * C + 110]
    assert r.chunks_decrypted == 1  # still the cached last chunk
    r.seek(3 * C + 5)
    for _ in range(200):  # small sequential reads inside one chunk: one decryption
        r.read(10)
    assert r.chunks_decrypted == 2
    r.seek(5 * C - 1)
    r.read(2)  # straddles chunks 4 and 5
    assert r.chunks_decrypted == 4
    r.seek(0)
    assert r.read() == data
    assert r.chunks_decrypted == 4 + 9  # chunk 5 was still the one in hand


def test_a_sealed_path_writes_and_reads_its_own_file(tmp_path) -> None:
    key = SealKey.generate()
    sealed = SealedPath(tmp_path / "item-0", key)
    data = _plain(3 * C + 11, seed=9)
    with sealed.create() as w:
        w.write(data)
    assert (tmp_path / "item-0").stat().st_mode & 0o777 == 0o600
    assert data[:64] not in (tmp_path / "item-0").read_bytes()
    assert sealed.plain_size() == len(data)
    with sealed.open() as f:
        f.seek(C + 5)
        assert f.read(10) == data[C + 5:C + 15]
    assert pickle.loads(pickle.dumps(sealed)) == sealed
    assert key.raw().hex() not in repr(sealed)
    with pytest.raises(FileExistsError):
        sealed.create()
    with pytest.raises(SealBroken):
        SealedPath(sealed.path, SealKey.generate()).open()


def test_a_memfd_holds_the_plain_bytes_only_while_the_block_runs(tmp_path) -> None:
    sealed = SealedPath(tmp_path / "doc", SealKey.generate())
    with sealed.create() as w:
        w.write(b"%PDF-1.7 plain")
    with plain_memfd(sealed, "doc") as fd:
        assert Path(f"/proc/self/fd/{fd}").read_bytes() == b"%PDF-1.7 plain"
        assert os.get_inheritable(fd) is False
    with pytest.raises(OSError):
        os.fstat(fd)


def test_a_swallowed_break_still_ends_the_block_as_io_error() -> None:
    from casesignd.core.errors import TempBroken

    key = SealKey.generate()
    blob = bytearray(_seal(_plain(3 * C), key))
    blob[HEADER_BYTES + 10] ^= 1
    with pytest.raises(TempBroken) as caught, reading_sealed():
        r = open_sealed(io.BytesIO(bytes(blob)), key)
        with contextlib.suppress(OSError):  # a lenient library that carries on
            r.read(10)
    assert caught.value.code == "io_error" and caught.value.retryable
    with pytest.raises(TempBroken), reading_sealed():
        raise ValueError("a parser's own error") from SealBroken("chunk 0")
    assert broken_seal(RuntimeError("x")) is None


def test_a_view_reads_only_what_is_asked_and_keeps_the_position() -> None:
    key = SealKey.generate()
    data = _plain(6 * C + 5, seed=11)
    r = open_sealed(io.BytesIO(_seal(data, key)), key)
    r.seek(123)
    view = r.view()[C + 7:5 * C]
    assert len(view) == 4 * C - 7 and r.chunks_decrypted == 1
    assert bytes(view[10:20]) == data[C + 17:C + 27]
    assert b"".join(view.chunks(1000)) == data[C + 7:5 * C]
    assert r.tell() == 123 and r.read(5) == data[123:128]


@pytest.mark.parametrize("plain", [0, 1, 65535, 65536, 65537, 3 * 65536, 300_000])
def test_sealed_size_is_the_size_on_disk(tmp_path, plain):
    from casesignd.core.sealed import sealed_size

    key = SealKey.generate()
    path = tmp_path / "f"
    with open(path, "wb") as out, seal_writer(out, key) as w:
        w.write(os.urandom(plain))
    assert sealed_size(plain) == path.stat().st_size


@pytest.mark.parametrize("size", [20 * C + 7, 16 * C, (1 << 20) + 1, C - 1])
@pytest.mark.parametrize("buffer", [1 << 20, 3 * C + 5, (1 << 20) + C, 2 * C])
def test_runs_of_whole_chunks_read_in_one_go_give_the_bytes(size: int, buffer: int) -> None:
    # A large read takes the ciphertext of many chunks at once and authenticates
    # each: the bytes are the file's whatever the read's size and the file's end.
    key = SealKey.generate()
    data = _plain(size, seed=size % 97)
    with open_sealed(io.BytesIO(_seal(data, key)), key) as r:
        got, buf = bytearray(), bytearray(buffer)
        while n := r.readinto(buf):
            got += buf[:n]
    assert got == data


def test_a_run_stops_at_the_chunk_that_fails() -> None:
    key = SealKey.generate()
    data = _plain(12 * C, seed=3)
    blob = bytearray(_seal(data, key))
    blob[HEADER_BYTES + 6 * (C + TAG_BYTES) + 100] ^= 1  # inside chunk 6
    buf = bytearray(b"\xaa" * (1 << 20))
    with open_sealed(io.BytesIO(bytes(blob)), key) as r, pytest.raises(SealBroken):
        r.readinto(buf)
    assert buf[:6 * C] == data[:6 * C]  # chunks 0-5 authenticated
    # Chunk 6 and the rest of the run zeroed; the run ended before the last chunk,
    # which opening authenticated and keeps in hand, so the rest is untouched.
    assert buf[6 * C:] == bytes(5 * C) + b"\xaa" * (len(buf) - 11 * C)
