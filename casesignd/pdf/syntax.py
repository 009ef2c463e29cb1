"""Writing PDF syntax (PDF 32000-1 §7.3, §7.5): objects, dates and text strings, and
the cross-reference sections of an incremental update. Pure; used by
:mod:`casesignd.signing.pades` to serialize its update without pypdf's writer (which escapes
every name character by character, most of the time of a one-page preparation).
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import re
from collections.abc import Iterable
from typing import Any

from pypdf import generic as g

from casesignd.core.errors import LimitExceeded


def pdf_date(when: dt.datetime) -> str:
    """A PDF date string (PDF 32000-1 §7.9.4): D:YYYYMMDDHHmmSS+HH'mm'."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    offset = when.utcoffset() or dt.timedelta(0)
    minutes = int(offset.total_seconds() // 60)
    sign = "-" if minutes < 0 else "+"
    hh, mm = divmod(abs(minutes), 60)
    return f"D:{when:%Y%m%d%H%M%S}{sign}{hh:02d}'{mm:02d}'"


def xref_runs(numbers: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted object numbers grouped into (first, count) subsections (§7.5.4)."""
    runs: list[tuple[int, int]] = []
    for n in sorted(numbers):
        if runs and runs[-1][0] + runs[-1][1] == n:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((n, 1))
    return runs


def unique_name(wanted: str, taken: set[str]) -> str:
    if wanted not in taken:
        return wanted
    stem, dot, ext = wanted.rpartition(".")
    for k in range(2, 10_000):
        cand = f"{stem} ({k}).{ext}" if dot and stem else f"{wanted} ({k})"
        if cand not in taken:
            return cand
    raise LimitExceeded(f"too many attachments named {wanted!r}")


_PLAIN_NAME = re.compile(r"/[A-Za-z0-9._+-]*")


def serialize(obj: Any) -> bytes:
    """PDF syntax for a pypdf object. Dictionaries, arrays, plain names, integers and
    references are written here (pypdf escapes every name character by character,
    most of the time of a one-page preparation); anything else by pypdf."""
    out: list[bytes] = []
    emit(obj, out)
    return b"".join(out)


def emit(obj: Any, out: list[bytes]) -> None:
    kind = type(obj)
    if kind is g.DictionaryObject:
        out.append(b"<<")
        for key, value in obj.items():
            emit(key, out)
            out.append(b" ")
            emit(value, out)
            out.append(b"\n")
        out.append(b">>")
    elif kind is g.ArrayObject:
        out.append(b"[")
        for i, value in enumerate(obj):
            if i:
                out.append(b" ")
            emit(value, out)
        out.append(b"]")
    elif kind is g.NameObject and _PLAIN_NAME.fullmatch(obj):
        out.append(obj.encode("ascii"))
    elif kind is g.NumberObject:
        out.append(b"%d" % obj)
    elif kind is g.FloatObject:
        out.append(real_text(obj))
    elif kind is g.IndirectObject:
        out.append(b"%d %d R" % (obj.idnum, obj.generation))
    else:
        buf = io.BytesIO()
        obj.write_to_stream(buf)
        out.append(buf.getvalue())


def real_text(value: float) -> bytes:
    """A real number as PDF syntax (§7.3.3: no exponent) that reads back as the value
    it was read from: the shortest decimal that round-trips the float. pypdf writes
    eight significant digits, so an object rewritten by the update (a page whose
    /Annots is direct) would change its /MediaBox, and a validator comparing the
    revisions (pyHanko) would see the page modified."""
    text = format(decimal.Decimal(repr(float(value))), "f")
    return text.encode("ascii")


def text_object(s: str) -> g.TextStringObject | g.ByteStringObject:
    return g.create_string_object(s)


def name_object(s: str) -> g.NameObject:
    return g.NameObject("/" + s)


def resolved(d: Any, key: str, default: Any = None) -> Any:
    """``d[key]`` with an indirect reference resolved (pypdf's ``get`` keeps it raw)."""
    v = d.get(key, default)
    return v.get_object() if isinstance(v, g.IndirectObject) else v


def raw(d: g.DictionaryObject, key: str) -> Any:
    """The unresolved value (an IndirectObject stays a reference), or None."""
    return dict.get(d, g.NameObject(key))


def string_key(obj: Any) -> bytes:
    # Name trees sort keys by their bytes (PDF 32000-1 §7.9.6).
    if isinstance(obj, g.TextStringObject):
        return obj.original_bytes
    return bytes(obj) if isinstance(obj, bytes | g.ByteStringObject) else str(obj).encode()


def indirect(num: int, gen: int = 0) -> g.IndirectObject:
    return g.IndirectObject(num, gen, None)


def put_object(buf: io.BytesIO, xref: dict[int, tuple[int, int]], base: int, num: int, gen: int, body: bytes) -> None:
    xref[num] = (base + buf.tell(), gen)
    buf.write(b"%d %d obj\n" % (num, gen) + body + b"\nendobj\n")


def pdf_text(s: str) -> bytes:
    """A PDF text string (§7.9.2.2): a literal string when ``s`` is printable ASCII,
    else UTF-16BE with its byte order mark, in hex (pure)."""
    if s.isascii() and s.isprintable():
        return b"(" + s.encode("ascii").replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(
            b")", b"\\)") + b")"
    return b"<FEFF" + s.encode("utf-16-be").hex().upper().encode("ascii") + b">"


def xref_table(xref: dict[int, tuple[int, int]]) -> bytes:
    out = [b"xref\n"]
    for first, count in xref_runs(xref):
        out.append(b"%d %d\n" % (first, count))
        for n in range(first, first + count):
            off, gen = xref[n]
            out.append(b"%010d %05d n\r\n" % (off, gen))  # 20-byte entries (§7.5.4)
    return b"".join(out)


def xref_stream(num: int, xref: dict[int, tuple[int, int]], trailer: g.DictionaryObject) -> bytes:
    # §7.5.8: type-1 entries, fields [1 w 2]; uncompressed so it stays inspectable.
    width = max(4, (max(off for off, _ in xref.values()).bit_length() + 7) // 8)
    runs = xref_runs(xref)
    rows = bytearray()
    for first, count in runs:
        for n in range(first, first + count):
            off, gen = xref[n]
            rows += b"\x01" + off.to_bytes(width, "big") + gen.to_bytes(2, "big")
    d = g.DictionaryObject(trailer)
    d[name_object("Type")] = name_object("XRef")
    d[name_object("W")] = g.ArrayObject([g.NumberObject(1), g.NumberObject(width), g.NumberObject(2)])
    d[name_object("Index")] = g.ArrayObject(g.NumberObject(x) for run in runs for x in run)
    d[name_object("Length")] = g.NumberObject(len(rows))
    return b"%d 0 obj\n" % num + serialize(d) + b"\nstream\n" + bytes(rows) + b"\nendstream\nendobj\n"
