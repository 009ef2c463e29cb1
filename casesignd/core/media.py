"""Media types by content: what a file is, whatever its name or declared type says.

:func:`sniff_media_type` reads magic bytes (and for ZIP the central directory, for
text the whole file as UTF-8 in bounded chunks); :func:`check_evidence` compares a
declared type with the sniffed one and the policy's allowed list. Both are plain
functions with picklable arguments, so a worker can run them in a process pool.
"""

from __future__ import annotations

import codecs
import zipfile
from pathlib import Path

from casesignd.core.errors import MediaTypeMismatch, MediaTypeNotAllowed
from casesignd.core.sealed import SealedPath, open_plain

OCTET_STREAM = "application/octet-stream"
PDF = "application/pdf"
ZIP = "application/zip"
TEXT = "text/plain"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"

# Bytes read for magic-number detection; every signature below fits in it.
HEAD_BYTES = 4096
# The PDF header may follow leading junk: PDF 32000-1 Annex H (§3.4.1) has readers
# look for "%PDF-" within the first 1024 bytes.
PDF_HEADER_WINDOW = 1024

# (offset, magic, media type), first match wins. Executables come first so that a
# shebang script is never taken for plain text.
MAGIC: tuple[tuple[int, bytes, str], ...] = (
    (0, b"MZ", "application/x-msdownload"),  # DOS/PE (Windows .exe, .dll, .scr)
    (0, b"\x7fELF", "application/x-executable"),  # ELF (Linux, BSD)
    (0, b"\xfe\xed\xfa\xce", "application/x-mach-binary"),  # Mach-O 32-bit BE
    (0, b"\xfe\xed\xfa\xcf", "application/x-mach-binary"),  # Mach-O 64-bit BE
    (0, b"\xce\xfa\xed\xfe", "application/x-mach-binary"),  # Mach-O 32-bit LE
    (0, b"\xcf\xfa\xed\xfe", "application/x-mach-binary"),  # Mach-O 64-bit LE
    (0, b"\xca\xfe\xba\xbe", "application/x-mach-binary"),  # Mach-O fat (also Java class)
    (0, b"#!", "text/x-shellscript"),  # any interpreter script
    (0, b"\xff\xd8\xff", "image/jpeg"),
    (0, b"\x89PNG\r\n\x1a\n", "image/png"),
    (0, b"GIF87a", "image/gif"),
    (0, b"GIF89a", "image/gif"),
    (0, b"II*\x00", "image/tiff"),
    (0, b"MM\x00*", "image/tiff"),
    (0, b"PK\x03\x04", ZIP),
    (0, b"PK\x05\x06", ZIP),  # an empty archive
)

# Types that run code when opened or executed; never acceptable evidence, and an
# embedded file of one of these types is active content in a PDF.
EXECUTABLE_TYPES = frozenset({
    "application/x-msdownload",
    "application/x-executable",
    "application/x-mach-binary",
    "text/x-shellscript",
})

# ISO BMFF brands (the "ftyp" box at offset 4, ISO/IEC 14496-12 §4.3) of HEIF images.
HEIF_BRANDS: dict[bytes, str] = {
    b"heic": "image/heic", b"heix": "image/heic", b"heim": "image/heic",
    b"heis": "image/heic", b"hevc": "image/heic-sequence", b"hevx": "image/heic-sequence",
    b"mif1": "image/heif", b"msf1": "image/heif-sequence", b"avif": "image/avif",
}

# Office Open XML (ECMA-376 Part 2): a ZIP whose [Content_Types].xml is present and
# whose main part names the document kind.
OOXML_MAIN_PARTS: tuple[tuple[str, str], ...] = (
    ("word/document.xml", DOCX),
    ("xl/workbook.xml", XLSX),
    ("ppt/presentation.xml", PPTX),
)

# Declared names that mean the same type as the sniffed one.
ALIASES: dict[str, str] = {
    "image/jpg": "image/jpeg",
    "image/pjpeg": "image/jpeg",
    "application/x-pdf": PDF,
    "application/x-zip-compressed": ZIP,
    "image/x-png": "image/png",
}

# Sniffed type -> declared types it satisfies (content cannot tell these apart).
COMPATIBLE: dict[str, frozenset[str]] = {
    TEXT: frozenset({TEXT, "text/csv", "text/markdown", "application/json",
                     "application/xml", "text/xml"}),
    DOCX: frozenset({DOCX, ZIP}),
    XLSX: frozenset({XLSX, ZIP}),
    PPTX: frozenset({PPTX, ZIP}),
}

_TEXT_CHUNK_BYTES = 1 << 16


def sniff_bytes(head: bytes) -> str:
    """The media type that ``head`` (the first bytes of a file) shows, by magic alone.

    ZIP containers and plain text need the whole file; :func:`sniff_media_type`
    refines those. Returns ``application/octet-stream`` when nothing matches.
    """
    for offset, magic, media_type in MAGIC:
        if head[offset:offset + len(magic)] == magic:
            return media_type
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head[4:8] == b"ftyp":
        brand = HEIF_BRANDS.get(head[8:12])
        if brand:
            return brand
    if b"%PDF-" in head[:PDF_HEADER_WINDOW]:
        return PDF
    return OCTET_STREAM


def _ooxml_kind(path: Path | SealedPath) -> str:
    try:
        with open_plain(path) as f, zipfile.ZipFile(f) as z:
            names = set(z.namelist())
    except (zipfile.BadZipFile, OSError, ValueError):
        return ZIP
    if "[Content_Types].xml" not in names:
        return ZIP
    for part, media_type in OOXML_MAIN_PARTS:
        if part in names:
            return media_type
    return ZIP


def _is_utf8_text(path: Path | SealedPath) -> bool:
    # Whole file, in chunks read into one buffer: a NUL or an invalid sequence
    # anywhere makes it binary. An ASCII chunk with no sequence left open before it
    # is valid as it is, and is not decoded into a string only to be dropped.
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    buf = bytearray(_TEXT_CHUNK_BYTES)
    with open_plain(path) as f:
        while n := f.readinto(buf):
            chunk = buf if n == len(buf) else buf[:n]
            if b"\x00" in chunk:
                return False
            if chunk.isascii() and not decoder.getstate()[0]:
                continue
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError:
                return False
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def sniff_media_type(path: Path | SealedPath) -> str:
    """The media type of the file at ``path`` judged by its content.

    PDF, JPEG, PNG, GIF, TIFF, WebP, HEIF/HEIC/AVIF, ZIP, DOCX/XLSX/PPTX, plain
    text (valid UTF-8 without NUL bytes) and executables (see
    :data:`EXECUTABLE_TYPES`); anything else, and an empty file, is
    ``application/octet-stream``. Memory use is bounded whatever the file's size.
    """
    with open_plain(path) as f:
        head = f.read(HEAD_BYTES)
    if not head:
        return OCTET_STREAM
    media_type = sniff_bytes(head)
    if media_type == ZIP:
        return _ooxml_kind(path)
    if media_type == OCTET_STREAM and _is_utf8_text(path):
        return TEXT
    return media_type


def normalize_media_type(value: str) -> str:
    """Lower-case, without parameters (``; charset=...``), aliases resolved."""
    base = value.split(";", 1)[0].strip().lower()
    return ALIASES.get(base, base)


def media_type_matches(declared: str, sniffed: str) -> bool:
    """Whether content of type ``sniffed`` may be declared as ``declared`` (pure)."""
    declared = normalize_media_type(declared)
    if declared == sniffed:
        return True
    return declared in COMPATIBLE.get(sniffed, frozenset())


def check_evidence(declared: str, path: Path | SealedPath, allowed: list[str], field: str) -> str:
    """Check an evidence file against its declared type and the policy; return the sniffed type.

    Raises :class:`~casesignd.core.errors.MediaTypeNotAllowed` (``media_type_not_allowed``)
    when the declared type is not in ``allowed``, and
    :class:`~casesignd.core.errors.MediaTypeMismatch` (``media_type_mismatch``) when the
    content is of another type, with ``field`` naming the item at fault
    (``items[2].media_type``). An executable is always a mismatch unless declared as
    one, and executables are never in a sensible ``allowed`` list.
    """
    wanted = normalize_media_type(declared)
    allowed_set = {normalize_media_type(a) for a in allowed}
    if wanted not in allowed_set:
        raise MediaTypeNotAllowed(
            f"media type {wanted!r} is not allowed by the policy",
            field=field, detail={"declared": declared, "allowed": sorted(allowed_set)},
        )
    sniffed = sniff_media_type(path)
    if not media_type_matches(wanted, sniffed):
        raise MediaTypeMismatch(
            f"declared as {wanted!r} but the content is {sniffed!r}",
            field=field, detail={"declared": declared, "sniffed": sniffed},
        )
    return sniffed
