"""casesignd.pdf.frame finds object definitions from each ``obj`` keyword: the same
definitions, at the same offsets, as the pattern tried at every byte."""

from __future__ import annotations

import random
import re

import pytest

from casesignd.pdf import frame as pdfframe
from casesignd.pdf.frame import Source, object_definitions

# The scan as it was: _OBJ_HEADER.finditer over each window.
_REFERENCE = re.compile(
    rb"(?<![0-9])([0-9]{1,10})[\x00\t\n\x0c\r ]+([0-9]{1,5})[\x00\t\n\x0c\r ]+obj(?![A-Za-z0-9])")


def _spans(matches) -> list[tuple[int, ...]]:
    return [(*m.span(), *m.span(1), *m.span(2)) for m in matches]


@pytest.mark.parametrize("buf", [
    b"", b"obj", b" obj", b"1 0 obj", b"1 0 obj ", b"1 0 objx", b"1 0 obj1", b"1 0 obj/",
    b"x1 0 obj", b"01 00 obj", b"12345678901 0 obj", b"1234567890 0 obj", b"1 123456 obj",
    b"1 12345 obj", b"1 0 endobj 2 0 obj", b"1 0 obj1 0 obj", b"1 2 3 obj", b"1\x000\x00obj",
    b"1\x0b0 obj", b"1 0" + b" " * 5000 + b"obj", b"1" + b" " * 70 + b"0" + b"\n" * 300 + b"obj",
    b"9 0 obj<<>>endobj\n10 0 obj\n(obj)\nendobj", b"objobj 1 0 objobj", b"1 0 obj\xe9",
])
def test_found_as_the_pattern_finds_them(buf: bytes) -> None:
    assert _spans(pdfframe._headers(buf)) == _spans(_REFERENCE.finditer(buf))


def test_random_buffers_give_the_same_definitions() -> None:
    rnd = random.Random(1232)
    alphabet = b"0123456789     \n\t\r\x00\x0cobjobjxO%<>/"
    for _ in range(20_000):
        buf = bytes(rnd.choice(alphabet) for _ in range(rnd.randrange(0, 60)))
        assert _spans(pdfframe._headers(buf)) == _spans(_REFERENCE.finditer(buf)), buf


def _reference_definitions(data: bytes) -> dict[int, list[tuple[int, int]]]:
    out: dict[int, list[tuple[int, int]]] = {}
    for m in _REFERENCE.finditer(data):
        out.setdefault(int(m.group(1)), []).append((m.start(1), int(m.group(2))))
    return out


def _assert_read_alike(tmp_path, data: bytes) -> dict[int, list[tuple[int, int]]]:
    """The definitions of ``data`` read from a file in windows, held whole, and by the
    pattern tried at every byte are the same; the file's."""
    path = tmp_path / "doc.pdf"
    path.write_bytes(data)
    with open(path, "rb") as f:
        from_file = object_definitions(Source(fd=f.fileno(), size=len(data)))
    assert from_file == object_definitions(Source(data)) == _reference_definitions(data)
    return from_file


def test_a_file_read_in_windows_gives_the_definitions_of_its_bytes(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Small windows, so that headers straddle them; and the bytes held whole.
    monkeypatch.setattr(pdfframe, "SCAN_WINDOW_BYTES", 97)
    rnd = random.Random(7)
    parts = []
    for n in range(1, 400):
        parts.append(b"%d %d obj\n<< /Length %d >>\nendobj\n" % (n, rnd.randrange(3), n))
        parts.append(bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 40))))
    _assert_read_alike(tmp_path, b"%PDF-1.7\n" + b"".join(parts))


@pytest.mark.parametrize("overlap", [4, 16, 256])
def test_headers_whose_white_space_runs_past_a_window_are_found_in_a_file(
        tmp_path, monkeypatch: pytest.MonkeyPatch, overlap: int) -> None:
    # White space inside a header may run on for any length: a header that begins in
    # one window and ends past what that window reads ahead is found all the same,
    # once, at its own offset (as a rebuilding reader finds it).
    monkeypatch.setattr(pdfframe, "SCAN_WINDOW_BYTES", 97)
    monkeypatch.setattr(pdfframe, "_HEADER_OVERLAP", overlap)
    rnd = random.Random(overlap)
    white = b"\x00\t\n\x0c\r "

    def run(most: int) -> bytes:
        return bytes(rnd.choice(white) for _ in range(rnd.randrange(1, most)))

    parts = []
    for n in range(1, 300):
        wide = rnd.random() < 0.5
        gen = b"%d" % rnd.randrange(100000) if rnd.random() < 0.2 else b"0"
        parts.append(b"%d" % n + run(400 if wide else 3) + gen + run(400 if wide else 3)
                     + b"obj" + rnd.choice([b"\n", b"x", b"1", b"/", b""]))
        parts.append(rnd.choice([b"", b"7", b"12345678901", b" 5 ", b"endobj\n", b"%", b"obj"]))
        parts.append(bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 30))))
    from_file = _assert_read_alike(tmp_path, b"%PDF-1.7\n" + b"".join(parts))
    assert sum(len(v) for v in from_file.values()) > 100
