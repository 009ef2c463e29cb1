"""Media types by content: what a file is, whatever its name or declared type says.

:func:`sniff_media_type` reads magic bytes (and for ZIP the central directory, for
text the whole file as UTF-8 in bounded chunks); :func:`check_evidence` compares a
declared type with the sniffed one and the policy's allowed list. Both are plain
functions with picklable arguments, so a worker can run them in a process pool.

:func:`check_evidence_head` is the same check for a file that something else reads
whole anyway (the signing worker embeds or hashes every evidence file): it reads
no more than the head, and what only the whole file can tell (whether it is plain
text) comes back as a :class:`PendingText` for that reader to finish, chunk by
chunk (:class:`TextScan`), with the same verdict and error.
"""

from __future__ import annotations

import codecs
import zipfile
from dataclasses import dataclass
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


class TextScan:
    """Whether the bytes fed to it, chunk after chunk, are plain text: valid UTF-8
    without a NUL byte anywhere. ``text`` turns False at the first chunk that shows
    otherwise, and stays so; :meth:`finish` is the verdict on the whole. An ASCII
    chunk with no sequence left open before it is valid as it is, and is not
    decoded into a string only to be dropped."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self.text = True

    def feed(self, chunk: bytes | bytearray) -> bool:
        """The next chunk; whether the bytes so far may still be text."""
        if not self.text:
            return False
        if b"\x00" in chunk:
            self.text = False
        elif not (chunk.isascii() and not self._decoder.getstate()[0]):
            try:
                self._decoder.decode(chunk)
            except UnicodeDecodeError:
                self.text = False
        return self.text

    def finish(self) -> bool:
        """Whether every byte fed was text (no sequence left open at the end)."""
        if self.text:
            try:
                self._decoder.decode(b"", final=True)
            except UnicodeDecodeError:
                self.text = False
        return self.text


def _is_utf8_text(path: Path | SealedPath) -> bool:
    # Whole file, in chunks read into one buffer: a NUL or an invalid sequence
    # anywhere makes it binary.
    scan = TextScan()
    buf = bytearray(_TEXT_CHUNK_BYTES)
    with open_plain(path) as f:
        while n := f.readinto(buf):
            if not scan.feed(buf if n == len(buf) else buf[:n]):
                return False
    return scan.finish()


def sniff_media_type(path: Path | SealedPath) -> str:
    """The media type of the file at ``path`` judged by its content.

    PDF, JPEG, PNG, GIF, TIFF, WebP, HEIF/HEIC/AVIF, ZIP, DOCX/XLSX/PPTX, plain
    text (valid UTF-8 without NUL bytes) and executables (see
    :data:`EXECUTABLE_TYPES`); anything else, and an empty file, is
    ``application/octet-stream``. Memory use is bounded whatever the file's size.
    """
    media_type = _sniff_head(path)
    if media_type is None:
        return OCTET_STREAM
    if media_type == OCTET_STREAM and _is_utf8_text(path):
        return TEXT
    return media_type


def _sniff_head(path: Path | SealedPath) -> str | None:
    """What the head shows (a ZIP's directory read too); ``application/octet-stream``
    where only the whole file can tell plain text from binary; None for an empty
    file, which is neither."""
    with open_plain(path) as f:
        head = f.read(HEAD_BYTES)
    if not head:
        return None
    media_type = sniff_bytes(head)
    return _ooxml_kind(path) if media_type == ZIP else media_type


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
    head = _head_verdict(declared, path, allowed, field)
    if isinstance(head, PendingText):
        return head.judge(_is_utf8_text(path))
    return head


@dataclass(frozen=True)
class PendingText:
    """The rest of an evidence check that only the whole file can finish: whether it
    is plain text. Picklable, for the process that reads the file whole."""

    declared: str
    field: str

    def judge(self, is_text: bool) -> str:
        """The sniffed type (plain text or not), or :class:`MediaTypeMismatch` as
        :func:`check_evidence` raises it."""
        return _matched(self.declared, TEXT if is_text else OCTET_STREAM, self.field)


def check_evidence_head(declared: str, path: Path | SealedPath, allowed: list[str],
                        field: str) -> PendingText | None:
    """:func:`check_evidence` from the file's head (and a ZIP's directory) alone: it
    raises what they show, and returns None when they settle it; a
    :class:`PendingText` when the verdict needs the whole file read as text
    (:class:`TextScan`), by whatever reads it whole anyway."""
    head = _head_verdict(declared, path, allowed, field)
    return head if isinstance(head, PendingText) else None


def _head_verdict(declared: str, path: Path | SealedPath, allowed: list[str],
                  field: str) -> str | PendingText:
    wanted = normalize_media_type(declared)
    allowed_set = {normalize_media_type(a) for a in allowed}
    if wanted not in allowed_set:
        raise MediaTypeNotAllowed(
            f"media type {wanted!r} is not allowed by the policy",
            field=field, detail={"declared": declared, "allowed": sorted(allowed_set)},
        )
    sniffed = _sniff_head(path)
    if sniffed == OCTET_STREAM:
        return PendingText(declared, field)
    return _matched(declared, OCTET_STREAM if sniffed is None else sniffed, field)


def _matched(declared: str, sniffed: str, field: str) -> str:
    if not media_type_matches(normalize_media_type(declared), sniffed):
        raise MediaTypeMismatch(
            f"declared as {normalize_media_type(declared)!r} but the content is {sniffed!r}",
            field=field, detail={"declared": declared, "sniffed": sniffed},
        )
    return sniffed
