"""Evidence read once by the signing worker: the text check finished on the chunks it
embeds (or hashes), through the ring of reused buffers, from a plain or a sealed file,
gives exactly the verdict of the whole-file check (:func:`casesignd.core.media.check_evidence`)
on the same bytes, and what is embedded is what was checked and hashed."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import random
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from casesignd.core import media
from casesignd.core.errors import DigestMismatch, PermanentJobError
from casesignd.core.sealed import (
    CHUNK_PLAIN_BYTES,
    HEADER_BYTES,
    TAG_BYTES,
    SealBroken,
    SealedPath,
    SealKey,
)
from casesignd.files.temp import TempManager
from casesignd.signing.attachments import Attachment, bound_by_digest, write_embedded_file

WHEN = dt.datetime(2026, 12, 5, tzinfo=dt.UTC)
MIB = 1 << 20
C = CHUNK_PLAIN_BYTES
ALLOWED = ["text/plain", "application/json", "text/csv", "application/octet-stream",
           "application/pdf", "image/jpeg"]
FIELD = "items[1].media_type"


def _at(size: int, at: int, bad: bytes, fill: bytes = b"a") -> bytes:
    """``size`` bytes of ASCII text with ``bad`` starting at ``at``."""
    return fill * at + bad + fill * max(0, size - at - len(bad))


E2, E3, E4 = "é".encode(), "北".encode(), "😀".encode()
CASES: dict[str, bytes] = {
    "empty": b"",
    "nul_only": b"\x00",
    "nul_first": b"\x00" + b"a" * 5000,
    "nul_last": b"a" * (2 * MIB) + b"\x00",
    "nul_at_head_end": _at(8192, 4096, b"\x00"),
    "nul_before_mib": _at(2 * MIB, MIB - 1, b"\x00"),
    "nul_at_mib": _at(2 * MIB, MIB, b"\x00"),
    "nul_at_4mib": _at(4 * MIB + 5, 4 * MIB, b"\x00"),
    "nul_at_sealed_chunk": _at(MIB, C, b"\x00"),
    "text_exactly_mib": b"a" * MIB,
    "text_exactly_4mib": b"a" * (4 * MIB),
    "text_5mib_multibyte": ("Grüße, 北京 😀\n" * (5 * MIB // 22)).encode(),
    "invalid_first": b"\xff" + b"a" * 100,
    "invalid_last": b"a" * MIB + b"\xff",
    "continuation_at_mib": _at(2 * MIB, MIB, b"\x80"),
    "overlong_across_mib": _at(2 * MIB, MIB - 1, b"\xc0\xaf"),
    "surrogate_across_mib": _at(2 * MIB, MIB - 1, b"\xed\xa0\x80"),
    "surrogate_across_mib_2": _at(2 * MIB, MIB - 2, b"\xed\xa0\x80"),
    "above_max_across_mib": _at(2 * MIB, MIB - 2, b"\xf4\x90\x80\x80"),
    "truncated_seq_then_ascii_at_mib": _at(2 * MIB, MIB - 1, b"\xe5" + b"a"),
    "open_at_end": b"a" * MIB + E3[:2],
    "open_at_end_of_4mib": b"a" * (4 * MIB - 1) + E2[:1],
    "open_at_end_short": E4[:3],
    "bad_in_last_short_chunk": b"a" * (3 * MIB) + b"a" * 17 + b"\xc3(",
}
for _k, _seq in (("2", E2), ("3", E3), ("4", E4)):
    for _cut in range(1, len(_seq)):
        CASES[f"split{_k}_{_cut}_at_mib"] = _at(2 * MIB, MIB - _cut, _seq)
        CASES[f"split{_k}_{_cut}_at_4mib"] = _at(4 * MIB + 9, 4 * MIB - _cut, _seq)
        CASES[f"split{_k}_{_cut}_at_sealed_chunk"] = _at(MIB // 2, C - _cut, _seq)
        CASES[f"split{_k}_{_cut}_at_mib_then_nul"] = _at(2 * MIB, MIB - _cut, _seq + b"\x00")
        CASES[f"split{_k}_{_cut}_bad_tail_at_mib"] = _at(2 * MIB, MIB - _cut,
                                                         _seq[:_cut] + b"a")
# Every verdict asked of each file; not every pair (that is test_media's table).
DECLARED = ["text/plain", "application/octet-stream", "application/json; charset=utf-8",
            "text/csv"]


class Collecting:
    """An object writer that keeps what it is given (the embedding's own output)."""

    def __init__(self, slow: bool = False) -> None:
        self.hasher = hashlib.sha256()
        self.out = bytearray()
        self._slow = slow

    def write(self, data: bytes | memoryview) -> None:
        self.hasher.update(data)
        self.out += data

    def write_unhashed(self, data: bytes | bytearray | memoryview) -> None:
        if self._slow:
            time.sleep(random.random() / 200)
        self.out += data

    def begin(self, num: int, gen: int = 0) -> None:
        pass


def _verdict(fn, *args) -> object:
    try:
        return fn(*args)
    except PermanentJobError as e:
        return (e.code, e.message, e.field, e.detail)


def _file(tmp_path: Path, data: bytes, sealed: bool) -> Path | SealedPath:
    if not sealed:
        path = tmp_path / "evidence"
        path.write_bytes(data)
        return path
    sp = SealedPath(tmp_path / "evidence.sealed", SealKey.generate())
    with sp.create() as w:
        w.write(data)
    return sp


def _attachment(path: Path | SealedPath, data: bytes, declared: str) -> Attachment | object:
    """The attachment sign_case hands the worker, or the error its validate raised."""
    try:
        text = media.check_evidence_head(declared, path, ALLOWED, FIELD)
    except PermanentJobError as e:
        return (e.code, e.message, e.field, e.detail)
    digest = hashlib.sha256(data).digest()
    sealed = isinstance(path, SealedPath)
    return Attachment(path, "e", declared, sha256=digest, verified=sealed, text=text)


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "sealed"])
@pytest.mark.parametrize("name", list(CASES))
def test_the_worker_judges_every_byte_as_the_whole_check(tmp_path: Path, name: str,
                                                         sealed: bool) -> None:
    data = CASES[name]
    path = _file(tmp_path, data, sealed)
    for declared in DECLARED:
        want = _verdict(media.check_evidence, declared, path, ALLOWED, FIELD)
        att = _attachment(path, data, declared)
        if not isinstance(att, Attachment):  # the head alone refused, as the whole check
            assert att == want, (declared, att, want)
            continue
        w = Collecting()
        embedded = _verdict(write_embedded_file, w, 7, att, "e", WHEN)
        by_digest = _verdict(bound_by_digest, att)
        if isinstance(want, tuple):
            assert embedded == want, (declared, embedded, want)
            assert by_digest == want, (declared, by_digest, want)
            continue
        assert not isinstance(embedded, tuple) and not isinstance(by_digest, tuple), (
            declared, embedded, by_digest, want)
        assert embedded.sha256 == by_digest.sha256 == hashlib.sha256(data).digest()
        assert embedded.size == by_digest.size == len(data)
        start = w.out.index(b"\nstream\n") + len(b"\nstream\n")
        assert w.out[start:start + len(data)] == data
        assert w.out[start + len(data):] == b"\nendstream\nendobj\n"
        assert w.hasher.digest() == hashlib.sha256(w.out).digest()


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "sealed"])
def test_a_slow_writer_still_embeds_the_bytes_checked_and_hashed(tmp_path: Path,
                                                                 sealed: bool) -> None:
    # The write lags the reading by the whole ring: every buffer it is handed still
    # holds its chunk, and the text check (on the reading thread) sees them all.
    rnd = random.Random(5)
    data = bytes(rnd.choice(b"abcdefghij \n") for _ in range(64)) * (11 * MIB // 64) + E3
    path = _file(tmp_path, data, sealed)
    att = _attachment(path, data, "text/plain")
    assert isinstance(att, Attachment) and att.text is not None
    w = Collecting(slow=True)
    bound = write_embedded_file(w, 7, att, "e", WHEN)
    assert bound.sha256 == hashlib.sha256(data).digest()
    start = w.out.index(b"\nstream\n") + len(b"\nstream\n")
    assert bytes(w.out[start:start + len(data)]) == data
    assert w.hasher.digest() == hashlib.sha256(w.out).digest()


def test_a_plain_file_rewritten_while_it_is_embedded_is_refused(tmp_path: Path) -> None:
    # Stores plain: the blob is read in place. Changed under the reading (the writer
    # slowed so that the change lands mid-way), its bytes are not its digest's, and
    # nothing is bound: digest_mismatch, or the size's own refusal if it grew.
    data = b"a note of the case\n" * (12 * MIB // 19)
    path = tmp_path / "blob"
    path.write_bytes(data)
    att = _attachment(path, data, "text/plain")
    assert isinstance(att, Attachment)
    started = threading.Event()

    class Stalling(Collecting):
        def write_unhashed(self, chunk: bytes | bytearray | memoryview) -> None:
            started.set()
            time.sleep(0.01)
            super().write_unhashed(chunk)

    def rewrite() -> None:
        started.wait(5)
        with open(path, "r+b") as f:
            f.seek(len(data) - 2)
            f.write(b"!\n")

    t = threading.Thread(target=rewrite)
    t.start()
    try:
        with pytest.raises(DigestMismatch):
            write_embedded_file(Stalling(), 7, att, "e", WHEN)
    finally:
        t.join()


def _sealed_blob(tmp_path: Path, data: bytes, key: SealKey, name: str) -> SealedPath:
    sp = SealedPath(tmp_path / name, key)
    with sp.create() as w:
        w.write(data)
    return sp


STRIDE = C + TAG_BYTES


def _tampered(tmp_path: Path, data: bytes, how: str) -> SealedPath:
    key = SealKey.generate()
    sp = _sealed_blob(tmp_path, data, key, "e.sealed")
    raw = bytearray(sp.path.read_bytes())
    chunks = -(-len(data) // C)
    if how == "flip_mid":
        raw[HEADER_BYTES + 17 * STRIDE + 5] ^= 0x20
    elif how == "flip_last_short":
        raw[-TAG_BYTES - 1] ^= 1
    elif how == "flip_tag_at_run_end":
        raw[HEADER_BYTES + 16 * STRIDE - 1] ^= 1
    elif how == "swap_same_index_other_file":
        other = _sealed_blob(tmp_path, bytes(len(data)), key, "o.sealed").path.read_bytes()
        at = HEADER_BYTES + 20 * STRIDE
        raw[at:at + STRIDE] = other[at:at + STRIDE]
    elif how == "same_file_other_index":
        a, b = HEADER_BYTES + 3 * STRIDE, HEADER_BYTES + 30 * STRIDE
        raw[a:a + STRIDE] = raw[b:b + STRIDE]
    elif how == "two_chunks_swapped":
        a, b = HEADER_BYTES + 15 * STRIDE, HEADER_BYTES + 16 * STRIDE
        raw[a:a + STRIDE], raw[b:b + STRIDE] = raw[b:b + STRIDE], raw[a:a + STRIDE]
    elif how == "cut_at_chunk_boundary":
        del raw[HEADER_BYTES + (chunks - 1) * STRIDE:]
    elif how == "cut_mid_chunk":
        del raw[HEADER_BYTES + 40 * STRIDE + 100:]
    else:
        raise AssertionError(how)
    sp.path.write_bytes(bytes(raw))
    return sp


TAMPER = ["flip_mid", "flip_last_short", "flip_tag_at_run_end", "swap_same_index_other_file",
          "same_file_other_index", "two_chunks_swapped", "cut_at_chunk_boundary", "cut_mid_chunk"]


@pytest.mark.parametrize("how", TAMPER)
def test_a_tampered_sealed_file_yields_no_byte_it_did_not_authenticate(tmp_path: Path,
                                                                       how: str) -> None:
    # Reads of every shape (mid-chunk starts, across the chunk in hand, exactly one
    # chunk, the last short one, long runs): each returns the file's own bytes or
    # raises SealBroken, and a failed read leaves no byte of the bad chunk in the
    # caller's buffer. The embedding and the binding by digest both refuse it.
    data = random.Random(how).randbytes(50 * C + 333)
    sp = _tampered(tmp_path, data, how)
    rnd = random.Random(len(how))
    for _ in range(60):
        try:
            f = sp.open(buffer_bytes=rnd.choice([8192, C, MIB]))
        except SealBroken:
            continue
        with f:
            raw = f.raw
            pos = rnd.choice([0, rnd.randrange(len(data)), rnd.randrange(50) * C,
                              len(data) - 333, len(data) - 1])
            raw.seek(pos)
            for _ in range(4):
                size = rnd.choice([1, C, C - 1, C + 1, 333, 3 * C, MIB, MIB + 7, 2 * MIB])
                buf = bytearray(b"\xa5" * size)
                try:
                    n = raw.readinto(buf)
                except SealBroken:
                    # Nothing from the failing chunk on: zeros or what was there.
                    cuts = [0, *range(-pos % C or C, size, C), size]
                    for a, b in zip(cuts, cuts[1:], strict=False):
                        piece = buf[a:b]
                        assert (piece == data[pos + a:pos + b] or not any(piece)
                                or set(piece) == {0xa5}), (how, pos, size, a)
                    break
                assert buf[:n] == data[pos:pos + n], (how, pos, size)
                pos += n
    digest = hashlib.sha256(data).digest()
    att = Attachment(sp, "e", "text/plain", sha256=digest, verified=True)
    with pytest.raises(SealBroken):
        write_embedded_file(Collecting(), 7, att, "e", WHEN)
    with pytest.raises(SealBroken):
        bound_by_digest(att)


def test_a_sealed_file_swapped_for_another_under_the_same_key_is_refused(tmp_path: Path) -> None:
    # Every file of an attempt's area is sealed from the attempt's one key. Evidence
    # bound by the digest its download was checked under (not hashed again) must not
    # read as another download of the area copied over it: refused, never embedded
    # or bound.
    note1, note2 = b"the first note\n" * 9000, b"the second note\n" * 9000

    async def chunks(data: bytes) -> AsyncIterator[bytes]:
        yield data

    async def fetch() -> None:
        manager = TempManager(tmp_path / "tmp", quota_bytes=10 * MIB)
        async with manager.attempt("job", 1, 0) as area:
            got = [await area.download(f"item-{i}", chunks(data),
                                       hashlib.sha256(data).hexdigest(), len(data), MIB)
                   for i, data in ((1, note1), (2, note2))]
            got[1].path.write_bytes(got[0].path.read_bytes())
            att = Attachment(got[1], "note2.txt", "text/plain",
                             sha256=hashlib.sha256(note2).digest(), verified=True,
                             text=media.PendingText("text/plain", FIELD))
            w = Collecting()
            with pytest.raises(SealBroken):
                write_embedded_file(w, 7, att, "note2.txt", WHEN)
            assert note1 not in w.out
            with pytest.raises(SealBroken):
                bound_by_digest(att)

    asyncio.run(fetch())
