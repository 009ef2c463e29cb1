"""Tools of the invoice fidelity tests: poppler's text, page count and fonts, and
golden pages (``pdftoppm -r 40 -gray``: at most 0.5 % of pixels may differ by more
than 32 grey levels; a failing page writes the rendering and a diff image to
tests/golden/invoice/_diff/ and names them; CASESIGND_UPDATE_GOLDEN=1 rewrites them)."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent / "golden" / "invoice"
UPDATE = os.environ.get("CASESIGND_UPDATE_GOLDEN") == "1"
DPI = 40
MAX_DIFF_FRACTION = 0.005  # of all pixels ...
DIFF_LEVELS = 32  # ... may differ by more than this many grey levels
POPPLER = all(shutil.which(t) for t in ("pdftotext", "pdfinfo", "pdffonts", "pdftoppm"))


def run(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=60).stdout


def page_count(pdf: Path) -> int:
    m = re.search(r"^Pages:\s+(\d+)$", run("pdfinfo", str(pdf)), re.M)
    assert m, "pdfinfo printed no page count"
    return int(m.group(1))


def fonts(pdf: Path) -> list[tuple[str, str]]:
    """(name, emb) for each font pdffonts lists."""
    rows = run("pdffonts", str(pdf)).splitlines()[2:]
    # Columns: name type encoding emb sub uni object ID; type may contain spaces.
    return [(r.split()[0], r.split()[-5]) for r in rows if r.strip()]


def squeeze(text: str) -> str:
    return "".join(text.split())


def read_png_gray(data: bytes) -> tuple[int, int, bytes]:
    """Decode an 8-bit greyscale, non-interlaced PNG (the goldens, written below)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, ctype = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if ctype == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert (depth, color, interlace) == (8, 0, 0), "expected 8-bit grey, no interlace"
        elif ctype == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    out, prev = bytearray(), bytearray(width)
    for y in range(height):
        f, line = raw[y * (width + 1)], bytearray(raw[y * (width + 1) + 1 : (y + 1) * (width + 1)])
        for x in range(width):  # PNG spec section 9: filter types 0-4, one byte per pixel
            a = line[x - 1] if x else 0
            b, c = prev[x], (prev[x - 1] if x else 0)
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[x] = (line[x] + pred) & 255
        out += line
        prev = line
    return width, height, bytes(out)


def write_png_gray(path: Path, width: int, height: int, pixels: bytes) -> None:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    rows = b"".join(b"\0" + pixels[y * width : (y + 1) * width] for y in range(height))
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(rows, 9))
        + chunk(b"IEND", b"")
    )


def read_pgm(data: bytes) -> tuple[int, int, bytes]:
    """Decode a binary PGM (P5, maxval 255), as ``pdftoppm -gray`` writes it."""
    fields: list[bytes] = []
    pos = 0
    while len(fields) < 4:  # magic, width, height, maxval; no comments from pdftoppm
        while data[pos : pos + 1].isspace():
            pos += 1
        end = pos
        while not data[end : end + 1].isspace():
            end += 1
        fields.append(data[pos:end])
        pos = end
    assert fields[0] == b"P5" and fields[3] == b"255", "expected an 8-bit binary PGM"
    width, height = int(fields[1]), int(fields[2])
    pixels = data[pos + 1 : pos + 1 + width * height]
    assert len(pixels) == width * height, "truncated PGM"
    return width, height, pixels


def render_page(pdf: Path, page: int, out_base: Path) -> tuple[int, int, bytes]:
    run("pdftoppm", "-r", str(DPI), "-gray", "-f", str(page), "-l", str(page),
        "-singlefile", str(pdf), str(out_base))  # fmt: skip
    return read_pgm(out_base.with_suffix(".pgm").read_bytes())


def check_golden(pdf: Path, page: int, name: str, tmp: Path) -> None:
    w, h, got = render_page(pdf, page, tmp / f"{name}-p{page}")
    golden = GOLDEN / f"{name}-p{page}.png"
    if UPDATE:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        write_png_gray(golden, w, h, got)
        return
    assert golden.exists(), f"no golden {golden}; run with CASESIGND_UPDATE_GOLDEN=1"
    gw, gh, want = read_png_gray(golden.read_bytes())
    diff_dir = GOLDEN / "_diff"
    actual_png = diff_dir / golden.name
    if (w, h) != (gw, gh):
        diff_dir.mkdir(exist_ok=True)
        write_png_gray(actual_png, w, h, got)
        pytest.fail(f"{golden.name}: size {w}x{h}, golden {gw}x{gh}; rendering {actual_png}")
    delta = bytes(abs(a - b) for a, b in zip(got, want, strict=True))
    bad = sum(1 for d in delta if d > DIFF_LEVELS)
    if bad > MAX_DIFF_FRACTION * w * h:
        diff_dir.mkdir(exist_ok=True)
        write_png_gray(actual_png, w, h, got)
        diff_png = diff_dir / f"{name}-p{page}.diff.png"
        # Differing pixels black; the golden page faint behind them.
        write_png_gray(diff_png, w, h, bytes(0 if d > DIFF_LEVELS else 224 + g // 8
                                             for d, g in zip(delta, want, strict=True)))  # fmt: skip
        pytest.fail(
            f"{golden.name}: {bad} of {w * h} pixels differ by more than {DIFF_LEVELS} levels "
            f"(limit {MAX_DIFF_FRACTION:.1%}); rendering {actual_png}, diff {diff_png}"
        )


