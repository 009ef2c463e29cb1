"""Headers that make a download safe to open: the file name a browser or ``curl -OJ``
saves it under, and the ``Content-Disposition`` that carries it (pure functions).

A name is built by the daemon from what it knows about the artifact (a case id, an
artifact id), never taken from a client as is; it is sanitised all the same, since
case ids come from tenants: ASCII letters, digits and ``._-`` only (``:`` and every
other character become ``_``), no leading dot or dash, at most
:data:`MAX_FILENAME_CHARS` characters, never empty, and the extension its media type
calls for.
"""

from __future__ import annotations

import re
import unicodedata
from urllib.parse import quote

MAX_FILENAME_CHARS = 100

_EXTENSIONS = {
    "application/pdf": ".pdf",
    "application/json": ".json",
    "text/plain": ".txt",
    "image/png": ".png",
    "image/jpeg": ".jpg",
}
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9._-]")
# Device names Windows will not open as files, whatever their extension.
_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)),
             *(f"lpt{i}" for i in range(10))}
_FALLBACK = "download"


def _clean(stem: str) -> str:
    # Accents go, their letters stay ("é" is "e"); anything else outside the set is "_".
    folded = "".join(c for c in unicodedata.normalize("NFKD", stem)
                     if not unicodedata.combining(c))
    out = _NOT_ALLOWED.sub("_", folded)
    out = re.sub(r"_{2,}", "_", re.sub(r"\.{2,}", ".", out))
    return out.lstrip(".-")


def download_filename(stem: str | None, media_type: str = "application/pdf") -> str:
    """The name a download of ``media_type`` is saved under, from ``stem`` (pure).

    >>> download_filename("CASE:7", "application/pdf")
    'CASE_7.pdf'
    """
    media = (media_type or "").split(";", 1)[0].strip().lower()
    ext = _EXTENSIONS.get(media, "")
    base = _clean(stem or "")
    if ext and base.lower().endswith(ext):
        base = base[: -len(ext)]
    base = base.rstrip(".")
    if not base.strip("_"):
        base = _FALLBACK
    if base.split(".", 1)[0].lower() in _RESERVED:
        base = "_" + base
    base = base[: MAX_FILENAME_CHARS - len(ext)].rstrip(".")
    return base + ext


def content_disposition(filename: str) -> str:
    """``attachment`` with the name twice: quoted ASCII for every client, and RFC 8187
    ``filename*`` for those that prefer it. ``filename`` should come from
    :func:`download_filename`; anything else is sanitised here the same way, so no quote,
    backslash or line break ever reaches the header."""
    safe = download_filename(filename, "")
    return f"attachment; filename=\"{safe}\"; filename*=UTF-8''{quote(safe, safe='')}"
