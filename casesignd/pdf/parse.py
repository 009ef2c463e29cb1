"""A faster reader of PDF objects for pypdf, with pypdf's own results.

pypdf reads an object a byte at a time through its stream (``read(1)``, ``seek(-1)``
for every token). :func:`read_object` reads a window of bytes once and tokenizes it
with one regular expression, for the common case only: names of up to 127 ASCII
bytes without ``#`` escapes, numbers, references, literal strings without nested
parentheses or octal escapes, hexadecimal strings, booleans, null, comments inside
arrays and dictionaries, and streams with a direct ``/Length`` followed by
``endstream``. Anything else (a leading comment, a duplicate key, an odd keyword, a
limit reached, a damaged stream) puts the stream back where it was and hands the
whole object to pypdf, whose recovery and warnings are then exactly its own. Each
object it does read is the one pypdf would build: the same classes, values and
stream position afterwards (the tests compare the two over whole documents and
mutated objects).

Object headers ("12 0 obj") are read the same way by :func:`read_object_header`:
one match for the common form, pypdf's own byte-by-byte reading for any other.

:func:`reader` builds a pypdf reader that uses both.
"""

from __future__ import annotations

import mmap
import re
from typing import Any

from pypdf import PdfReader, _reader, _utils
from pypdf._codecs import _pdfdoc_encoding
from pypdf._configuration import get_configuration
from pypdf.generic import (
    ArrayObject,
    BooleanObject,
    DictionaryObject,
    FloatObject,
    IndirectObject,
    NameObject,
    NullObject,
    NumberObject,
    StreamObject,
    TextStringObject,
    _data_structures,
    create_string_object,
)
from pypdf.generic._base import encode_pdfdocencoding

from casesignd.core.sealed import SealedReader
from casesignd.core.sealed_view import SealedView

_pypdf_read_object = _data_structures.read_object

# pypdf's whitespace between tokens (dictionaries and the stream keyword use this set;
# arrays also skip \x0b, which here sends the object to pypdf).
_WS = rb"[\x00\t\n\x0c\r ]*"
# pypdf reads a number or a reference from the 20 bytes at its first digit: a
# reference is IndirectPattern ("\s", a letter may not follow the R), a number the
# run of [+,-.0-9] (its NumberPattern's range). Both are checked against that peek.
_TOKEN = re.compile(
    _WS + rb"""(?:
      (?P<name>/[^\s()<>\[\]{}/%\#]*)(?=[\s()<>\[\]{}/%])
    | (?P<ref>([0-9]+)\s+([0-9]+)\s+R)(?=[^a-zA-Z])
    | (?P<int>[+-]?[0-9]+)(?=[^+,\-.0-9])
    | (?P<real>[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+))(?=[^+,\-.0-9])
    | (?P<dict><<)
    | (?P<dend>>>)
    | (?P<array>\[)
    | (?P<aend>\])
    | (?P<str>\((?P<text>(?:[^()\\]++|\\[nrtbf()/\\ %<>\[\]\#_&$])*+)\))
    | (?P<hex><(?P<digits>[0-9A-Fa-f\x00\t\n\x0c\r ]*)>)
    | (?P<true>true)
    | (?P<false>false)
    | (?P<null>null)
    | (?P<comment>%[^\r\n]*[\r\n])
    )""",
    re.VERBOSE,
)
_SPACE = re.compile(_WS)
_EOL = re.compile(rb" *(?:\r\n|\n|\r)")
_ENDSTREAM = re.compile(rb"[\x00\t\n\x0c\r ]*endstream")
_HEX_WS = re.compile(rb"[\x00\t\n\x0c\r ]")
# The escapes pypdf maps to one byte (an octal or a line break sends the string to
# pypdf).
_ESCAPES = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"b": b"\b", b"f": b"\f",
            **{bytes([c]): bytes([c]) for c in b"()/\\ %<>[]#_&$"}}
_ESCAPE = re.compile(rb"\\(.)", re.DOTALL)

# What pypdf's read_object dispatches on (it reads no whitespace first).
_STARTS = frozenset(bytes([c]) for c in b"/<[(tfn+-.0123456789")
_WINDOW = 4096
_MAX_WINDOW = 1 << 22
_MAX_DEPTH = 64
# Longer names go to pypdf, whose limit on them (about 4 KiB) depends on how it reads
# in chunks; PDF's own implementation limit is 127 bytes.
_NAME_LIMIT = 127
_PEEK = 20
_MAX_COMMENTS = 1000  # pypdf's limit on comments in a row where a value belongs


def _unescape(m: re.Match[bytes]) -> bytes:
    return _ESCAPES[m.group(1)]


class _Fallback(Exception):
    """Not the common case: pypdf reads the object."""


class _NeedMore(_Fallback):
    """The object runs past the window."""


def read_object(stream: Any, pdf: Any, forced_encoding: Any = None, *,
                parsing_budget: Any = None) -> Any:
    """pypdf's ``read_object``, faster for the common case (see the module's doc)."""
    if parsing_budget is None:
        start = stream.tell()
        size = _WINDOW
        while True:
            window = stream.read(size)
            if window[:1] not in _STARTS:
                break  # pypdf skips a comment here, or raises
            try:
                obj, end = _parse(window, pdf, forced_encoding, len(window) < size)
                if type(obj) is DictionaryObject:
                    return _stream_after(obj, end, window, len(window) < size, stream, start)
                stream.seek(start + end)
                return obj
            except _NeedMore:
                if len(window) < size or size >= _MAX_WINDOW:
                    break
                size *= 16
                stream.seek(start)
            except _Fallback:
                break
        stream.seek(start)
    return _pypdf_read_object(stream, pdf, forced_encoding, parsing_budget=parsing_budget)


def _parse(buf: bytes, pdf: Any, encoding: Any, at_eof: bool) -> tuple[Any, int]:
    """One object from the start of ``buf``, and where it ends. One loop with a stack
    of open arrays and dictionaries: a token costs one match and a few operations."""
    config = get_configuration()
    max_array = config.array_maximum_element_count
    max_dict = config.dictionary_maximum_element_count
    match = _TOKEN.match
    size = len(buf)
    stack: list[tuple[Any, Any]] = []
    container: Any = None  # the open array (list) or dictionary (dict), if any
    key: Any = None  # in a dictionary: the key waiting for its value
    pos = 0
    comments = 0
    while True:
        m = match(buf, pos)
        if m is None:
            # Close to the window's edge a token may be cut by it (a long string);
            # further in, this is not the common case.
            raise _NeedMore if not at_eof and size - pos < 1024 else _Fallback
        pos = m.end()
        if pos + 1 >= size and not at_eof:
            raise _NeedMore  # the token, or what follows it, may be cut
        kind = m.lastgroup
        if kind == "comment":
            comments += 1
            if comments > _MAX_COMMENTS:
                raise _Fallback
            continue
        comments = 0
        if kind == "name":
            raw = m.group(kind)
            if len(raw) - 1 > _NAME_LIMIT or not raw.isascii():
                raise _Fallback
            value: Any = NameObject(raw.decode("ascii"))
        elif kind == "ref":
            if pos - m.start(kind) >= _PEEK:
                raise _Fallback  # past pypdf's peek: a number there
            value = IndirectObject(int(m.group(3)), int(m.group(4)), pdf)
        elif kind == "int" or kind == "real":
            if pos - m.start(kind) >= _PEEK:
                raise _Fallback
            # What NumberObject(num) and FloatObject(num) build, without their
            # Python-level constructors (the digits always convert).
            num = m.group(kind)
            value = int.__new__(NumberObject, int(num)) if kind == "int" else \
                float.__new__(FloatObject, float(num))
        elif kind == "dict" or kind == "array":
            if key is None and type(container) is dict:
                raise _Fallback  # a dictionary's key must be a name
            if len(stack) >= _MAX_DEPTH:
                raise _Fallback
            stack.append((container, key))
            container, key = ({} if kind == "dict" else ArrayObject()), None
            continue
        elif kind == "dend":
            if type(container) is not dict or key is not None:
                raise _Fallback  # pypdf ends a dictionary at any ">" and reads on
            value = DictionaryObject()
            value.update(container)
            container, key = stack.pop()
        elif kind == "aend":
            if type(container) is dict or container is None:
                raise _Fallback
            value = container
            container, key = stack.pop()
        elif kind == "str":
            text = m.group("text")
            if b"\\" in text:
                text = _ESCAPE.sub(_unescape, text)
            value = _string(text, encoding)
        elif kind == "hex":
            digits = _HEX_WS.sub(b"", m.group("digits"))
            if len(digits) % 2:
                digits += b"0"
            value = _string(bytes.fromhex(digits.decode("ascii")), encoding)
        elif kind == "true" or kind == "false":
            value = BooleanObject(kind == "true")
        else:
            value = NullObject()
        if container is None:
            return value, pos
        if type(container) is dict:
            if key is None:
                if kind != "name" or value in container or len(container) >= max_dict:
                    raise _Fallback  # pypdf warns on a duplicate key and keeps the first
                key = value
            else:
                container[key] = value
                key = None
        else:
            if len(container) >= max_array:
                raise _Fallback
            container.append(value)


# Bytes that PDFDocEncoding maps to the character of the same code (and back): a
# string of only these is text whatever create_string_object tries first.
_PDFDOC_SAME = bytes(b for b in range(1, 256) if _pdfdoc_encoding[b] == chr(b)
                     and encode_pdfdocencoding(chr(b)) == bytes([b]))
_BOMS = (b"\xfe\xff", b"\xff\xfe")


def _string(raw: bytes, encoding: Any) -> Any:
    """``create_string_object(raw, encoding)``, which decodes PDFDocEncoding a byte at a
    time, built directly for the common string: no forced encoding, no byte order
    mark, every byte its own character (then so are NULs and UTF-16 guesses ruled
    out). The same object, with the same attributes, in the same order."""
    if encoding is not None or raw.translate(None, _PDFDOC_SAME) or raw.startswith(_BOMS):
        return create_string_object(raw, encoding)
    text = str.__new__(TextStringObject, raw.decode("latin-1"))
    text._original_bytes = raw
    text.autodetect_utf16 = False
    text.autodetect_pdfdocencoding = True
    text.utf16_bom = b""
    return text


def _stream_after(obj: DictionaryObject, end: int, buf: bytes, at_eof: bool, stream: Any,
                  start: int) -> Any:
    """A dictionary, or the stream it begins: its data read as pypdf reads it."""
    space = _SPACE.match(buf, end)
    at = space.end() if space else end
    if len(buf) - at < 64 and not at_eof:
        raise _NeedMore  # the keyword and its end of line may be cut by the window
    if not buf.startswith(b"stream", at):
        stream.seek(start + end)
        return obj
    m = _EOL.match(buf, at + 6)
    if m is None:
        raise _Fallback  # pypdf refuses "stream" without an end of line
    length = dict.get(obj, "/Length")  # as written: a reference goes to pypdf
    limit = get_configuration().maximum_declared_stream_length
    if type(length) is not NumberObject or not 0 <= length <= limit:
        raise _Fallback
    stream.seek(start + m.end())
    view = _file_view(stream) if length > LAZY_STREAM_BYTES else None
    if view is not None:
        # A large stream of a file is a view of its pages, read only where it is read:
        # a 200 MB image is never in memory whole (its checks need its dictionary).
        data = view[start + m.end():start + m.end() + length]
        stream.seek(start + m.end() + length)
    else:
        data = stream.read(length)
    tail = stream.read(32)
    e = _ENDSTREAM.match(tail)
    if len(data) < length or e is None:
        # pypdf then reads up to "endstream" without a word: a reader that trusts
        # /Length reads other bytes. Said the way pypdf says its repairs, so the
        # checks see it (casesignd.pdf.inspect).
        _utils.logger_warning("a stream's /Length (%(length)d) does not end at its endstream",
                              source=__name__, length=int(length))
        raise _Fallback
    stream.seek(start + m.end() + length + e.end())
    fields = dict(dict.items(obj))
    fields["__streamdata__"] = data
    return StreamObject.initialize_from_dictionary(fields)


# Streams larger than this, in a file, are read lazily (see _stream_after).
LAZY_STREAM_BYTES = 4 * 1024 * 1024


def _file_view(stream: Any) -> memoryview | SealedView | None:
    """A read-only view of the whole file behind ``stream`` (kept on it), or None for
    a stream that is no file."""
    view = getattr(stream, "_casesignd_view", None)
    if view is None and isinstance(getattr(stream, "raw", None), SealedReader):
        # A sealed file (a job's temp area): read where it is read, like a map.
        return stream.raw.view()
    if view is None:
        try:
            fd = stream.fileno()
        except (AttributeError, OSError, ValueError):
            return None
        try:
            view = memoryview(mmap.mmap(fd, 0, access=mmap.ACCESS_READ))
        except (OSError, ValueError):
            return None
        stream._casesignd_view = view
    return view


def install() -> None:
    """Make pypdf's reader read objects with :func:`read_object` (idempotent)."""
    _reader.read_object = read_object


# An object's header as pypdf reads it in the common case: digits, whitespace,
# digits, whitespace, "obj", then whitespace up to a byte that is none. Each number
# at most IndirectObject's 64 bytes, each ended by one of pypdf's whitespace bytes
# (not \x0b, which its token reader also stops at).
_HEADER_WS = rb"[\x00\t\n\x0c\r ]"
_HEADER = re.compile(rb"([0-9]{1,64})" + _HEADER_WS + rb"+([0-9]{1,64})" + _HEADER_WS
                     + rb"+obj" + _HEADER_WS + rb"*(?=[^\x00\t\n\x0c\r ])")
_HEADER_WINDOW = 256


class _Reader(PdfReader):
    """pypdf's reader, with object headers read in one match (pypdf reads them a
    byte at a time, 14 reads and 5 seeks for "12 0 obj")."""

    def read_object_header(self, stream: Any) -> tuple[int, int]:
        return read_object_header(stream) or super().read_object_header(stream)


def read_object_header(stream: Any) -> tuple[int, int] | None:
    """``PdfReader.read_object_header`` of a non-strict reader for a header of the
    common form (see :data:`_HEADER`): the numbers, with the stream at the first byte
    after the header's trailing whitespace, as pypdf leaves it. None, with the
    stream where it was, for any other: pypdf's own reading then decides, with its
    warnings and errors."""
    start = stream.tell()
    m = _HEADER.match(stream.read(_HEADER_WINDOW))
    if m is None:
        stream.seek(start)
        return None
    stream.seek(start + m.end())
    return int(m.group(1)), int(m.group(2))


def reader(f: Any) -> PdfReader:
    """A non-strict pypdf reader of ``f`` that reads objects with :func:`read_object`
    and their headers with :func:`read_object_header`."""
    install()
    return _Reader(f, strict=False)
