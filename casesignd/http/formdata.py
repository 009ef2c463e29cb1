"""``multipart/form-data`` (RFC 7578 over RFC 2046 §5.1) for the kiosk's two parts.

The body is small (a manifest and one document of at most a few MiB) and is read
whole, within a limit; parsing is a few ``bytes.find`` calls. aiohttp's reader parses
every part's headers with the ``email`` package, which costs more than signing a
one-page document.

Accepted: a ``boundary`` parameter, quoted or not (1–70 characters); a preamble and
an epilogue, which are ignored; CRLF line breaks; each part's ``Content-Disposition:
form-data`` with a ``name`` (quoted or a token). Refused with ``invalid_multipart``:
anything else (no closing delimiter, a part without a name, a bare LF framing).
"""

from __future__ import annotations

import re

from casesignd.core.errors import BadRequest

_BOUNDARY = re.compile(r'''boundary\s*=\s*(?:"((?:[^"\\]|\\.){1,70})"|([^\s;"]{1,70}))''', re.I)
_NAME = re.compile(rb'''(?:^|;)\s*name\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))''', re.I)
_MAX_HEADER_BYTES = 8192


def _malformed(why: str) -> BadRequest:
    return BadRequest(f"the multipart body is malformed: {why}", code="invalid_multipart")


def media_type(content_type: str | None) -> str:
    """The media type of a Content-Type value, lower case, without parameters (pure)."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def boundary(content_type: str) -> bytes:
    """The boundary parameter of a ``multipart/form-data`` Content-Type (pure)."""
    m = _BOUNDARY.search(content_type.split(";", 1)[1] if ";" in content_type else "")
    if m is None:
        raise _malformed("no boundary in the Content-Type")
    quoted = m.group(1)
    value = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else m.group(2)
    if not value or value.endswith(" "):
        raise _malformed("the boundary is not valid")
    return value.encode("latin-1", "replace")


def _part_name(headers: bytes | bytearray) -> str:
    for line in headers.split(b"\r\n"):
        key, sep, value = line.partition(b":")
        if not sep:
            raise _malformed("a part header has no colon")
        if key.strip().lower() != b"content-disposition":
            continue
        kind, _, params = value.strip().partition(b";")
        if kind.strip().lower() != b"form-data":
            raise _malformed("a part is not form-data")
        m = _NAME.search(b";" + params)
        if m is None:
            break
        raw = m.group(1) if m.group(1) is not None else m.group(2)
        return re.sub(rb"\\(.)", rb"\1", raw).decode("utf-8", "replace")
    raise _malformed("a part has no Content-Disposition name")


def parse(body: bytes | bytearray, delimiter: bytes) -> list[tuple[str, memoryview]]:
    """The (name, content) of each part, in order (pure). ``delimiter`` is the boundary."""
    dash = b"--" + delimiter
    if body.startswith(dash):
        at = 0
    else:
        at = body.find(b"\r\n" + dash)
        if at < 0:
            raise _malformed("no delimiter")
        at += 2
    view = memoryview(body)
    parts: list[tuple[str, memoryview]] = []
    while True:
        at += len(dash)
        if body.startswith(b"--", at):
            return parts  # the close delimiter; what follows is the epilogue
        eol = body.find(b"\r\n", at)
        if eol < 0 or body[at:eol].strip(b" \t"):
            raise _malformed("a delimiter line has trailing characters")
        start = eol + 2
        headers: bytes | bytearray
        if body.startswith(b"\r\n", start):
            headers, content_at = b"", start + 2
        else:
            end = body.find(b"\r\n\r\n", start, start + _MAX_HEADER_BYTES)
            if end < 0:
                raise _malformed("a part's headers do not end")
            headers, content_at = body[start:end], end + 4
        nxt = _next_delimiter(body, dash, content_at)
        parts.append((_part_name(headers), view[content_at:nxt]))
        at = nxt + 2


def _next_delimiter(body: bytes | bytearray, dash: bytes, start: int) -> int:
    """Where the CRLF before the next delimiter is: ``--boundary`` then ``--``, or
    then blanks and a line end. The same bytes followed by anything else are content
    (RFC 2046 §5.1.1)."""
    needle = b"\r\n" + dash
    at = start
    while (at := body.find(needle, at)) >= 0:
        after = at + len(needle)
        if body.startswith(b"--", after):
            return at
        eol = body.find(b"\r\n", after, after + 256)
        if eol >= 0 and not body[after:eol].strip(b" \t"):
            return at
        at += 1
    raise _malformed("no closing delimiter")
