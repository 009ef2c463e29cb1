"""The file's frame and its object definitions: where readers of one PDF can part ways.

Readers agree on a PDF only when its frame is whole — the header at the start, one
``startxref`` that names a cross-reference section, ``%%EOF`` at the end and nothing
after it — and when every object the cross-reference names is the one defined last
under that number. Otherwise each reader repairs in its own way: pypdf takes the first
``N 0 obj`` it finds, qpdf and poppler rebuild from the last one; a ZIP or HTML file
around the PDF is a polyglot that other programs open as something else.

:func:`read_frame` and :func:`definition_findings` are pure: they read a buffer (bytes
or an ``mmap``, never copied whole) and return :class:`Finding` values. A finding is
``damage`` (something a reader must repair) or ``ambiguity`` (readers may show
different things); :mod:`casesignd.signing.pipeline` decides what to do with them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import BinaryIO

from casesignd.core.errors import MalformedPdf

DAMAGE = "damage"
AMBIGUITY = "ambiguity"

# Readers accept the header within the first 1024 bytes (PDF 32000-1 Annex H).
HEADER_WINDOW_BYTES = 1024
# An xref table entry is exactly 20 bytes (PDF 32000-1 §7.5.4).
XREF_ENTRY_BYTES = 20
# After the last %%EOF, only white space (and NUL padding some producers write).
_TRAILING_OK = b"\x00\t\n\x0c\r "
_TRAILING_SAMPLE_BYTES = 1024

_HEADER = re.compile(rb"%PDF-(\d\.\d)")
_STARTXREF = re.compile(rb"startxref[\x00\t\n\x0c\r ]+(\d+)")
_XREF_TABLE = re.compile(rb"[\x00\t\n\x0c\r ]*xref[\x00\t\n\x0c\r ]+(\d+)[\x00\t\n\x0c\r ]+(\d+)")
_XREF_STREAM = re.compile(rb"[\x00\t\n\x0c\r ]*\d+[\x00\t\n\x0c\r ]+\d+[\x00\t\n\x0c\r ]+obj\b")
# An object definition "N G obj" (§7.3.10), as rebuilding readers look for them.
_OBJ_HEADER = re.compile(
    rb"(?<![0-9])([0-9]{1,10})[\x00\t\n\x0c\r ]+([0-9]{1,5})[\x00\t\n\x0c\r ]+obj(?![A-Za-z0-9])")
# Its keyword alone: re's search for a literal skips from one "o" to the next
# (memchr) and runs at twice the speed of bytes.find over stream data.
_OBJ_KEYWORD = re.compile(rb"obj")


@dataclass(frozen=True)
class Finding:
    """One reason readers may need to repair the document (``damage``) or may read it
    differently (``ambiguity``)."""

    kind: str
    reason: str
    # Its word in casesignd.core.codes.REASONS ("" for the kind's own: damaged, or
    # readers_disagree), and where it is, as (key, value) pairs: ("object", 12).
    code: str = ""
    where: tuple[tuple[str, int | str], ...] = ()

    @property
    def word(self) -> str:
        """The refusal reason this finding gives."""
        return self.code or ("damaged" if self.kind == DAMAGE else "readers_disagree")


@dataclass(frozen=True)
class Frame:
    """The header's version and offset, the last ``startxref`` (None when there is
    none to follow), whether it names an xref stream, and what is wrong."""

    version: str
    header_offset: int
    startxref: int | None
    xref_stream: bool
    findings: tuple[Finding, ...]


def read_frame(src: Source | bytes) -> Frame:
    """Check the header (§7.5.2) and the trailer frame (§7.5.5) of the whole document.
    Raises :class:`MalformedPdf` only when there is no PDF header at all; anything else
    becomes a finding."""
    src = src if isinstance(src, Source) else Source(src)
    size = src.size
    m = _HEADER.search(src.read(0, HEADER_WINDOW_BYTES))
    if not m:
        raise MalformedPdf("not a PDF: no %PDF- header in the first 1024 bytes",
                           reason="not_a_pdf")
    found: list[Finding] = []
    if m.start():
        found.append(Finding(AMBIGUITY, f"{m.start()} bytes before the %PDF- header "
                                        "(another file format around the PDF?)",
                             "data_around_pdf"))
    eof = src.rfind(b"%%EOF")
    end = size
    if eof < 0:
        found.append(Finding(DAMAGE, "no %%EOF marker: the file is truncated", "truncated"))
    else:
        end = eof
        after = size - (eof + 5)
        if after > _TRAILING_SAMPLE_BYTES or src.read(eof + 5, size).strip(_TRAILING_OK):
            found.append(Finding(AMBIGUITY, f"{after} bytes after the last %%EOF "
                                            "(an appended file or a polyglot?)",
                                 "data_around_pdf"))
    near = max(0, end - 4096)
    tail = src.read(near, end)
    sx = tail.rfind(b"startxref")
    startxref: int | None = None
    xref_stream = False
    if sx < 0:
        found.append(Finding(DAMAGE, "no startxref before the end of the file", "truncated"))
    else:
        sm = _STARTXREF.match(tail, sx)
        offset = int(sm.group(1)) if sm else -1
        if not 0 <= offset < size:
            found.append(Finding(DAMAGE, "startxref points outside the file"))
        else:
            kind = classify_xref(src.read(offset, offset + 64), size - offset)
            if kind is None:
                found.append(Finding(DAMAGE, "startxref does not point at a "
                                             "cross-reference section"))
            elif kind == "claims_too_many":
                found.append(Finding(DAMAGE, "the cross-reference table claims more "
                                             "entries than the file holds"))
            else:
                startxref, xref_stream = offset, kind == "stream"
                if b"/Root" not in _newest_trailer(src, offset, kind):
                    # Readers then take /Root from an older trailer, or give up.
                    found.append(Finding(DAMAGE, "the newest trailer names no /Root"))
    return Frame(m.group(1).decode(), m.start(), startxref, xref_stream, tuple(found))


def _newest_trailer(src: Source, offset: int, kind: str) -> bytes:
    """The bytes of the trailer dictionary of the section at ``offset`` (§7.5.5, or
    the xref stream's dictionary, §7.5.8.2), from its first 64 KiB."""
    window = src.read(offset, offset + 65536)
    if kind == "stream":
        end = window.find(b"stream")
        return window[:end if end >= 0 else len(window)]
    start = window.find(b"trailer")
    if start < 0:
        return b""
    end = window.find(b"startxref", start)
    return window[start:end if end >= 0 else len(window)]


def classify_xref(at: bytes, remaining: int) -> str | None:
    """``"table"`` or ``"stream"`` for the section at a ``startxref`` offset (``at``:
    its first bytes, ``remaining``: the bytes from there on), ``"claims_too_many"``
    for a table larger than the file, None for anything else."""
    m = _XREF_TABLE.match(at)
    if m:
        return "claims_too_many" if int(m.group(2)) * XREF_ENTRY_BYTES > remaining else "table"
    return "stream" if _XREF_STREAM.match(at) else None


# A scan of a file reads this much at a time into one buffer: memory stays bounded
# however large the file (an mmap would leave the pages it read in the process's
# resident set).
SCAN_WINDOW_BYTES = 1024 * 1024
# A definition header is short; a window reads this far past its end.
_HEADER_OVERLAP = 256


class Source:
    """The document's bytes for the scans: the bytes themselves, or a file read by
    offset (``os.pread``), never whole."""

    def __init__(self, data: bytes | None = None, fd: int | None = None,
                 size: int | None = None, stream: BinaryIO | None = None) -> None:
        self.data = data
        self.fd = fd
        # A seekable stream of its own (a sealed file's plain bytes), read by offset.
        self.stream = stream
        self.size = len(data) if data is not None else int(size or 0)

    def read(self, start: int, end: int) -> bytes:
        start, end = max(0, start), min(self.size, end)
        if end <= start:
            return b""
        if self.data is not None:
            return self.data[start:end]
        if self.stream is not None:
            self.stream.seek(start)
            return self.stream.read(end - start)
        assert self.fd is not None
        return os.pread(self.fd, end - start, start)

    def windows(self, overlap: int = 0, lead: int = 0) -> Iterator[tuple[int, int, bytes]]:
        """(offset, skip, bytes) over the whole document: each window's bytes from
        ``offset``, its own part ``overlap`` bytes longer and with up to ``lead`` bytes
        before it (``skip``, none in the first), in one read: a window is never copied
        again to be joined to its neighbour's bytes."""
        if self.data is not None:
            yield 0, 0, self.data
            return
        for start in range(0, self.size, SCAN_WINDOW_BYTES):
            skip = min(lead, start)
            yield start - skip, skip, self.read(start - skip, start + SCAN_WINDOW_BYTES + overlap)

    def rfind(self, needle: bytes) -> int:
        """The last offset of ``needle``, read backwards in windows."""
        if self.data is not None:
            return self.data.rfind(needle)
        end = self.size
        while end > 0:
            start = max(0, end - SCAN_WINDOW_BYTES)
            at = self.read(start, end).rfind(needle)
            if at >= 0:
                return start + at
            if start == 0:
                return -1
            end = start + len(needle) - 1
        return -1


def object_definitions(src: Source) -> dict[int, list[tuple[int, int]]]:
    """Every ``N G obj`` in the file, as a rebuilding reader finds them: object number
    -> [(offset of N, generation)] in file order."""
    out: dict[int, list[tuple[int, int]]] = {}
    counted: set[int] = set()  # offsets of the headers counted

    def count(at: int, num: int, gen: int) -> None:
        if at not in counted:
            counted.add(at)
            out.setdefault(num, []).append((at, gen))

    # One byte before each window, for the look-behind of its first match.
    for offset, skip, window in src.windows(_HEADER_OVERLAP, lead=1):
        if offset:
            # White space may run on for any length inside a header: one that began
            # before this window and ends past what the window before read ahead is
            # read back from the file here (rebuilding readers find it too).
            run = len(window) - len(window.lstrip(_WHITE + _DIGITS))
            if window.startswith(b"obj", run):
                found = _header_before(src, offset + run)
                if found is not None:
                    count(*found)
        for m in _headers(window):
            if m.start() < skip:
                continue  # it began in the window before, which counted it
            if src.data is None and m.start() - skip >= SCAN_WINDOW_BYTES:
                break  # it begins in the next window's own part
            if m.end() == len(window) and offset + len(window) < src.size:
                # The byte after its keyword, which decides, is the next window's:
                # that window reads this header back.
                continue
            count(offset + m.start(1), int(m.group(1)), int(m.group(2)))
    return out


def _header_before(src: Source, at: int) -> tuple[int, int, int] | None:
    """(offset, number, generation) of the header whose ``obj`` keyword begins at
    ``at``, read back from ``src`` a window at a time, as :data:`_OBJ_HEADER` decides
    (a number of at most 10 digits after no digit, white space, a generation of at
    most 5, white space); None when the keyword ends none."""
    if src.read(at + 3, at + 4).isalnum():
        return None
    gen_end = _back_over(src, at, _WHITE)
    gen_start = _back_over(src, gen_end, _DIGITS, 6)
    num_end = _back_over(src, gen_start, _WHITE)
    num_start = _back_over(src, num_end, _DIGITS, 11)
    if (gen_end == at or not 1 <= gen_end - gen_start <= 5 or num_end == gen_start
            or not 1 <= num_end - num_start <= 10):
        return None
    return num_start, int(src.read(num_start, num_end)), int(src.read(gen_start, gen_end))


def _back_over(src: Source, end: int, chars: bytes, most: int | None = None) -> int:
    """Where the run of ``chars`` that ends at ``end`` begins, read back a window at a
    time (or looking back ``most`` bytes at the most)."""
    while end > 0:
        start = max(0, end - (most or SCAN_WINDOW_BYTES))
        kept = len(src.read(start, end).rstrip(chars))
        if kept or most is not None:
            return start + kept
        end = start
    return 0


_WHITE = b"\x00\t\n\x0c\r "
_DIGITS = b"0123456789"


def _headers(buf: bytes) -> Iterator[re.Match[bytes]]:
    """``_OBJ_HEADER.finditer(buf)``, found from each ``obj`` keyword instead of tried
    at every byte (a file is mostly stream data). A header is the one match ending at
    its keyword, and matches never overlap: from the keyword back over white space,
    the generation's digits, white space and the number's digits is the only place it
    can begin, where the pattern itself then decides."""
    for keyword in _OBJ_KEYWORD.finditer(buf):
        at = keyword.start()
        if at and buf[at - 1] in _WHITE and not buf[at + 3:at + 4].isalnum():
            begin = _run_before(buf, _run_before(buf, _run_before(buf, _run_before(
                buf, at, _WHITE), _DIGITS, 6), _WHITE), _DIGITS, 11)
            m = _OBJ_HEADER.match(buf, begin)
            if m is not None and m.end() == at + 3:
                yield m


def _run_before(buf: bytes, end: int, chars: bytes, most: int | None = None) -> int:
    """Where the run of ``chars`` that ends at ``end`` begins, looking back at most
    ``most`` bytes (a longer run of digits is no header's: the pattern refuses it)."""
    step = most or 16
    while True:
        lo = max(0, end - step)
        kept = len(buf[lo:end].rstrip(chars))
        if kept or lo == 0 or most is not None:
            return lo + kept
        step *= 4  # white space all the way: look further back


_HEADER_AT = re.compile(
    rb"[\x00\t\n\x0c\r ]{0,16}([0-9]{1,10})[\x00\t\n\x0c\r ]+([0-9]{1,5})[\x00\t\n\x0c\r ]+obj(?![A-Za-z0-9])")


def definition_findings(
    src: Source,
    defs: Mapping[int, list[tuple[int, int]]],
    xref: Mapping[int, Mapping[int, int]],
    in_streams: Mapping[int, tuple[int, int]],
    used: Iterable[tuple[int, int]],
) -> list[Finding]:
    """Compare what the cross-reference names with what a rebuild would find, for the
    objects ``used`` (number, generation) that the document reaches.

    ``src``: the document; ``defs``: :func:`object_definitions` of it; ``xref``:
    generation -> number -> offset (pypdf's ``reader.xref``); ``in_streams``: number
    -> (object stream, index) (``reader.xref_objStm``).
    """
    found: list[Finding] = []
    for num, gen in sorted(used):
        mine = defs.get(num, ())
        if num in in_streams:
            # Also defined plainly: a reader that ignores xref streams (or rebuilds)
            # takes the plain one; pypdf takes the object stream's.
            if mine:
                found.append(Finding(AMBIGUITY, f"object {num} is defined both plainly and "
                                                "in an object stream", "xref_conflict",
                                     (("object", num),)))
        else:
            offset = xref.get(gen, {}).get(num)
            if offset is None:
                continue
            at = src.read(offset - 1, offset + 64) if offset else b" " + src.read(0, 64)
            # An offset inside a number ("12 0 obj" read from its "2") names nothing.
            m = None if at[:1].isdigit() else _HEADER_AT.match(at, 1)
            if m is None:
                found.append(Finding(DAMAGE, f"the cross-reference entry of object {num} "
                                             "points at no object", where=(("object", num),)))
            elif (int(m.group(1)), int(m.group(2))) != (num, gen):
                found.append(Finding(AMBIGUITY, f"the cross-reference entry of object {num} "
                                                f"points at object {int(m.group(1))}",
                                     "xref_conflict", (("object", num),)))
            elif any(off > offset - 1 + m.start(1) for off, g in mine if g == gen):
                found.append(Finding(AMBIGUITY, f"object {num} is defined again after the "
                                                "definition the cross-reference names",
                                     "xref_conflict", (("object", num),)))
        if len(found) >= 20:
            break
    return found
