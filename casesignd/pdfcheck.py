"""Deep validation of a PDF before the service's signing key is ever used on it.

:func:`inspect_pdf` runs in a worker process: a top-level function whose argument
and result (:class:`PdfLimits`, :class:`PdfReport`) pickle, and whose memory stays
bounded whatever the input. It refuses, with one of the stable error codes:

* ``malformed_pdf`` (:class:`~casesignd.errors.MalformedPdf`): not a PDF, empty,
  truncated (no ``%%EOF``/``startxref``), a ``startxref`` that does not point at a
  cross-reference section, an xref table claiming more entries than the file holds,
  page-tree cycles or ``/Parent`` loops, objects nested deeper than ``max_depth``,
  no pages, and anything else the parser cannot make sense of;
* ``encrypted_pdf`` (:class:`~casesignd.errors.EncryptedPdf`): any ``/Encrypt``;
* ``active_content`` (:class:`~casesignd.errors.ActiveContent`): the rules in
  :data:`ACTIVE_KEYS`, :data:`ACTIVE_ACTIONS`, :data:`ACTIVE_SUBTYPES`,
  :data:`EXECUTABLE_EXTENSIONS` and embedded files whose content sniffs as an
  executable (:data:`casesignd.media.EXECUTABLE_TYPES`);
* ``limit_exceeded`` (:class:`~casesignd.errors.LimitExceeded`): file size, page
  count, object count, and any stream (or image) whose decoded size would pass
  ``max_decoded_stream_bytes``.

Tolerance: pypdf reads with ``strict=False``, so small damage it can repair (object
offsets slightly wrong, a missing end marker in a stream) is accepted and listed in
:attr:`PdfReport.warnings`; damage that would leave a signed result broken (no
``%%EOF``, a ``startxref`` that misses its section) is refused. Only objects reachable
from the trailer are examined: unreachable objects are never rendered or run.
Streams under other filters than Flate are decoded by pypdf with its output capped at
the same budget; image codecs are not decoded, their size comes from the image
dictionary (:func:`image_bytes`).

Memory: pypdf reads from the open file object (given a path it would read the whole
file into memory). Objects are walked iteratively; one raw stream is held at a time
and dropped from pypdf's cache once checked; Flate data is inflated in windows of
:data:`INFLATE_WINDOW_BYTES` and counted, never kept. Peak memory is therefore about
the largest single raw stream plus a constant, independent of decoded sizes.
"""

from __future__ import annotations

import io
import logging
import os
import re
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pypdf import PdfReader
from pypdf._configuration import apply_configuration
from pypdf.errors import FileNotDecryptedError, LimitReachedError
from pypdf.filters import ASCII85Decode, ASCIIHexDecode, LZWDecode, RunLengthDecode
from pypdf.generic import ArrayObject, DictionaryObject, IndirectObject, StreamObject

from . import pdfparse
from .config import Policy
from .errors import ActiveContent, CasesignError, EncryptedPdf, LimitExceeded, MalformedPdf
from .media import EXECUTABLE_TYPES, sniff_bytes

MiB = 1024 * 1024

# Zlib output is produced at most this much at a time (zlib max_length).
INFLATE_WINDOW_BYTES = 1 << 16
# Bytes at the end of the file searched for startxref and %%EOF (PDF 32000-1 §7.5.5).
TAIL_BYTES = 2048
# Readers accept the header within the first 1024 bytes (PDF 32000-1 Annex H).
HEADER_WINDOW_BYTES = 1024
# An xref table entry is exactly 20 bytes (PDF 32000-1 §7.5.4).
XREF_ENTRY_BYTES = 20
# Library warnings kept in a report.
MAX_WARNINGS = 20
# Objects the checks leave parsed for whatever reads the document next (the signer's
# preparation, the metadata), so that a document of ordinary size is parsed once.
# Past these, each object is forgotten once visited: memory does not grow with the
# object count or with raw stream bytes.
KEEP_PARSED_OBJECTS = 4096
KEEP_PARSED_STREAM_BYTES = 16 * MiB  # raw stream data of the objects kept, in all

# --- the active-content rules (table-driven; a hit raises ActiveContent) ------------

# A dictionary key whose mere presence means scripts or executable payloads.
ACTIVE_KEYS: dict[str, str] = {
    "/JS": "JavaScript (/JS, PDF 32000-1 §12.6.4.16)",
    "/JavaScript": "a document-level JavaScript name tree (§7.7.4)",
    "/XFA": "an XFA form, which carries its own scripts (§12.7.8)",
    "/RichMediaContent": "rich media content (Flash/3D, ISO 32000-2 §13.7)",
}

ANYWHERE = "anywhere"
AUTOMATIC = "automatic"  # only when triggered without the user: /OpenAction or /AA (§12.6.3)

# Action types (/S, PDF 32000-1 §12.6.4) and where they are refused.
ACTIVE_ACTIONS: dict[str, tuple[str, str]] = {
    "/JavaScript": (ANYWHERE, "a JavaScript action"),
    "/Launch": (ANYWHERE, "a Launch action (runs an application, §12.6.4.5)"),
    "/ImportData": (ANYWHERE, "an ImportData action (loads form data from a file)"),
    "/RichMediaExecute": (ANYWHERE, "a RichMediaExecute action"),
    "/SubmitForm": (AUTOMATIC, "a SubmitForm action run on open or on an event"),
    "/ResetForm": (AUTOMATIC, "a ResetForm action run on open or on an event"),
}

# Annotation subtypes that embed players of active media.
ACTIVE_SUBTYPES: dict[str, str] = {
    "/RichMedia": "a RichMedia annotation",
}

# Embedded file names that a viewer hands to the operating system to run.
EXECUTABLE_EXTENSIONS: frozenset[str] = frozenset({
    ".exe", ".dll", ".scr", ".com", ".pif", ".msi", ".bat", ".cmd", ".ps1", ".vbs",
    ".vbe", ".js", ".jse", ".wsf", ".hta", ".jar", ".sh", ".app", ".apk", ".lnk", ".cpl",
})

# --- stream filters (PDF 32000-1 §7.4) --------------------------------------------

FLATE = frozenset({"/FlateDecode", "/Fl"})
# Decoded in memory by pypdf with its output capped at the stream budget.
BOUNDED_DECODERS: dict[str, Any] = {
    "/ASCIIHexDecode": ASCIIHexDecode, "/AHx": ASCIIHexDecode,
    "/ASCII85Decode": ASCII85Decode, "/A85": ASCII85Decode,
    "/RunLengthDecode": RunLengthDecode, "/RL": RunLengthDecode,
    "/LZWDecode": LZWDecode, "/LZW": LZWDecode,
}
# Image codecs end the chain: their size is judged from /Width, /Height and friends.
IMAGE_CODECS = frozenset({"/DCTDecode", "/DCT", "/JPXDecode", "/CCITTFaxDecode", "/CCF",
                          "/JBIG2Decode"})
COLOR_COMPONENTS = {"/DeviceGray": 1, "/G": 1, "/DeviceRGB": 3, "/RGB": 3,
                    "/DeviceCMYK": 4, "/CMYK": 4, "/Indexed": 1, "/I": 1}


@dataclass(frozen=True)
class PdfLimits:
    """What a PDF may cost; built from a policy by :meth:`from_policy`."""

    max_pages: int = 5000
    max_bytes: int = 256 * MiB
    forbid_active_content: bool = True
    max_decoded_stream_bytes: int = 256 * MiB
    max_objects: int = 1_000_000
    # Nesting of direct objects (arrays in dictionaries in arrays ...), and of the page tree.
    max_depth: int = 64

    @classmethod
    def from_policy(cls, policy: Policy) -> PdfLimits:
        """The limits a signing policy sets."""
        return cls(
            max_pages=policy.max_pages,
            max_bytes=policy.max_document_bytes,
            forbid_active_content=policy.forbid_active_content,
            max_decoded_stream_bytes=policy.max_decoded_stream_bytes,
            max_objects=policy.max_pdf_objects,
            max_depth=policy.max_pdf_depth,
        )


@dataclass(frozen=True)
class PdfReport:
    """What inspection learned about an acceptable PDF."""

    pages: int
    producer: str | None
    pdf_version: str
    has_signatures: bool
    has_xref_stream: bool
    encrypted: bool = False
    size: int = 0
    objects: int = 0
    # /P of a certification signature (DocMDP, PDF 32000-1 §12.8.2.2): 1 forbids any
    # change, so a further signature would invalidate the certification.
    docmdp_permission: int | None = None
    # Repairs the parser made silently (pypdf warnings), for the operator's log.
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Frame:
    """The file's outer frame: header version and the last ``startxref`` offset."""

    version: str
    header_offset: int
    startxref: int


class _TooBig(Exception):
    def __init__(self, produced: int) -> None:
        self.produced = produced


# --- pure structural checks ----------------------------------------------------------

_HEADER = re.compile(rb"%PDF-(\d\.\d)")
_STARTXREF = re.compile(rb"startxref\s+(\d+)\s+%%EOF")
_XREF_TABLE = re.compile(rb"\s*xref\s+(\d+)\s+(\d+)")
_XREF_STREAM = re.compile(rb"\s*\d+\s+\d+\s+obj\b")


def parse_frame(head: bytes, tail: bytes, size: int) -> Frame:
    """Check the header (§7.5.2) and trailer frame (§7.5.5) from the file's ends."""
    m = _HEADER.search(head[:HEADER_WINDOW_BYTES])
    if not m:
        raise MalformedPdf("not a PDF: no %PDF- header in the first 1024 bytes")
    if b"%%EOF" not in tail:
        raise MalformedPdf("the file is truncated: no %%EOF marker at its end")
    found = list(_STARTXREF.finditer(tail))
    if not found:
        raise MalformedPdf("the file is truncated or damaged: no startxref before %%EOF")
    offset = int(found[-1].group(1))
    if offset >= size:
        raise MalformedPdf("startxref points past the end of the file",
                           detail={"startxref": offset, "size": size})
    return Frame(m.group(1).decode(), m.start(), offset)


def classify_xref(at: bytes, remaining: int) -> bool:
    """Whether the section at ``startxref`` is an xref stream (True) or table (False).

    ``at`` are the bytes at the offset, ``remaining`` the file bytes from there on.
    """
    m = _XREF_TABLE.match(at)
    if m:
        count = int(m.group(2))
        if count * XREF_ENTRY_BYTES > remaining:
            raise MalformedPdf(
                "the cross-reference table claims more entries than the file holds",
                detail={"claimed_entries": count, "bytes_left": remaining})
        return False
    if _XREF_STREAM.match(at):
        return True
    raise MalformedPdf("startxref does not point at a cross-reference section",
                       detail={"found": at[:24].decode("latin-1")})


def active_reason(d: dict[str, Any], auto: bool) -> str | None:
    """The rule a dictionary breaks, if any. ``auto``: reached via /OpenAction or /AA.

    ``d`` maps PDF names to already-resolved values (strings for names).
    """
    for key, reason in ACTIVE_KEYS.items():
        if key in d:
            return reason
    rule = ACTIVE_ACTIONS.get(str(_get(d, "/S", "")))
    if rule and (rule[0] == ANYWHERE or auto):
        return rule[1]
    subtype = ACTIVE_SUBTYPES.get(str(_get(d, "/Subtype", "")))
    if subtype:
        return subtype
    if "/EF" in d:
        for key in ("/UF", "/F"):
            name = str(_get(d, key) or "").lower()
            if os.path.splitext(name)[1] in EXECUTABLE_EXTENSIONS:
                return f"an embedded file named {name!r}"
    return None


def image_bytes(d: dict[str, Any]) -> int | None:
    """Decoded size of an image XObject from its dictionary (§8.9.5), if it says."""
    try:
        width, height = int(d["/Width"]), int(d["/Height"])
        bpc = int(_get(d, "/BitsPerComponent", 8))
    except (KeyError, TypeError, ValueError):
        return None
    cs = _get(d, "/ColorSpace")
    name = str(_resolve(cs[0]) if isinstance(cs, list) and cs else cs)
    comps = 1 if _get(d, "/ImageMask") else COLOR_COMPONENTS.get(name, 4)
    return max(width, 0) * max(height, 0) * comps * max(bpc, 1) // 8


# --- bounded decoding ------------------------------------------------------------------


def _inflate(chunks: Iterator[bytes], budget: int) -> Iterator[bytes]:
    """Inflate a chunk stream in windows; raise _TooBig past ``budget`` output bytes."""
    d = zlib.decompressobj()
    produced = 0
    for chunk in chunks:
        buf = chunk
        while True:
            out = d.decompress(buf, INFLATE_WINDOW_BYTES)
            buf = d.unconsumed_tail
            if out:
                produced += len(out)
                if produced > budget:
                    raise _TooBig(produced)
                yield out
            if d.eof:
                return
            if not out and not buf:
                break


def _chunks(data: bytes) -> Iterator[bytes]:
    view = memoryview(data)
    for i in range(0, len(view), INFLATE_WINDOW_BYTES):
        yield bytes(view[i:i + INFLATE_WINDOW_BYTES])


def measure_decoded(raw: bytes, filters: list[str], budget: int,
                    head_bytes: int = 4096) -> tuple[int, bytes]:
    """Decoded size and first bytes of a stream, never holding more than one window of
    Flate output; raises :class:`LimitExceeded` when the size passes ``budget``."""
    stream: Iterator[bytes] = _chunks(raw)
    try:
        for name in filters:
            if name in FLATE:
                stream = _inflate(stream, budget)
            elif name in BOUNDED_DECODERS:
                data = b"".join(stream)
                with apply_configuration(lzw_maximum_output_length=budget,
                                         run_length_maximum_output_length=budget):
                    out = BOUNDED_DECODERS[name].decode(data)
                if len(out) > budget:
                    raise _TooBig(len(out))
                stream = iter([out])
            else:  # image codecs, /Crypt, unknown: the chain ends here
                break
        total, head = 0, b""
        for chunk in stream:
            total += len(chunk)
            if total > budget:
                raise _TooBig(total)
            if len(head) < head_bytes:
                head += chunk[: head_bytes - len(head)]
        return total, head
    except _TooBig as e:
        raise LimitExceeded(
            "a stream decompresses to more than the allowed size (a decompression bomb?)",
            detail={"decoded_at_least": e.produced, "limit": budget, "filters": filters},
        ) from None
    except LimitReachedError as e:
        raise LimitExceeded("a stream decompresses to more than the allowed size",
                            detail={"library": str(e), "limit": budget}) from None


# --- the walk ----------------------------------------------------------------------------


# pypdf reports silent repairs through its logger ("pypdf.*"). While a thread inspects
# a file, copies of its records are kept for the report; the log still gets them.
_INSPECTING: dict[int, list[str]] = {}


class _Collect(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        kept = _INSPECTING.get(record.thread or 0)
        if kept is not None and len(kept) < MAX_WARNINGS:
            kept.append(record.getMessage()[:200])


logging.getLogger("pypdf").addHandler(_Collect(logging.WARNING))


@contextmanager
def _translated(limits: PdfLimits) -> Iterator[list[str]]:
    """Run pypdf with our limits and turn whatever it raises into our errors."""
    thread = threading.get_ident()
    warnings: list[str] = []
    _INSPECTING[thread] = warnings
    try:
        with apply_configuration(maximum_declared_stream_length=limits.max_bytes):
            yield warnings
    except CasesignError:
        raise
    except FileNotDecryptedError as e:
        raise EncryptedPdf("the PDF is encrypted", detail={"library": str(e)}) from None
    except LimitReachedError as e:
        raise LimitExceeded("the PDF exceeds a parser limit",
                            detail={"library": str(e)}) from None
    except RecursionError:
        raise MalformedPdf("the PDF nests objects too deeply to read") from None
    except MemoryError:
        raise LimitExceeded("the PDF needs more memory than allowed") from None
    except Exception as e:  # pypdf raises many types on damaged input
        raise MalformedPdf("the PDF is damaged and cannot be read",
                           detail={"library": f"{type(e).__name__}: {e}"[:500],
                                   "warnings": list(warnings)}) from None
    finally:
        del _INSPECTING[thread]


def _key(obj: Any) -> tuple[int, int] | None:
    return (obj.idnum, obj.generation) if isinstance(obj, IndirectObject) else None


def _resolve(obj: Any) -> Any:
    return obj.get_object() if isinstance(obj, IndirectObject) else obj


def _get(d: dict[str, Any], key: str, default: Any = None) -> Any:
    # pypdf's DictionaryObject.get is dict.get: it does not resolve indirect references.
    return _resolve(dict.get(d, key, default))


class _Parsed:
    """Which objects stay in pypdf's cache (see KEEP_PARSED_OBJECTS)."""

    def __init__(self, reader: PdfReader) -> None:
        self.reader = reader
        self.kept: set[tuple[int, int]] = set()
        self.stream_bytes = 0

    def visited(self, ref: tuple[int, int], obj: Any) -> None:
        """``obj`` (object number, generation ``ref``) was read and checked."""
        if ref in self.kept:
            return
        size = len(obj._data) if isinstance(obj, StreamObject) else 0
        if len(self.kept) < KEEP_PARSED_OBJECTS and self.stream_bytes + size <= KEEP_PARSED_STREAM_BYTES:
            self.kept.add(ref)
            self.stream_bytes += size
        else:
            self.reader.resolved_objects.pop((ref[1], ref[0]), None)


def _count_pages(reader: PdfReader, catalog: DictionaryObject, limits: PdfLimits,
                 parsed: _Parsed) -> int:
    """Walk the page tree (§7.7.3) iteratively: no cycles, no /Parent loops, bounded depth."""
    if "/Pages" not in catalog:
        raise MalformedPdf("the document catalog has no page tree")
    stack = [(catalog.raw_get("/Pages"), 0)]
    seen: set[Any] = set()
    parents_ok: set[Any] = set()
    pages = 0
    while stack:
        ref, depth = stack.pop()
        key = _key(ref) or id(ref)
        if key in seen:
            raise MalformedPdf("the page tree reaches a node twice (a /Kids cycle)")
        seen.add(key)
        if depth > limits.max_depth:
            raise MalformedPdf("the page tree is nested too deeply")
        node = _resolve(ref)
        if not isinstance(node, DictionaryObject):
            raise MalformedPdf("a page tree node is not a dictionary")
        _check_parent_chain(ref, parents_ok, limits)
        if _get(node, "/Type") == "/Pages" or ("/Kids" in node and _get(node, "/Type") != "/Page"):
            kids = _get(node, "/Kids")
            if not isinstance(kids, ArrayObject):
                raise MalformedPdf("a page tree node has no /Kids array")
            stack.extend((kid, depth + 1) for kid in reversed(kids))
        else:
            pages += 1
            if isinstance(ref, IndirectObject):
                # Leaves are many: past the budget, the walk reads them again.
                parsed.visited((ref.idnum, ref.generation), node)
            if pages > limits.max_pages:
                raise LimitExceeded(f"the PDF has more than {limits.max_pages} pages",
                                    detail={"max_pages": limits.max_pages})
    if pages == 0:
        raise MalformedPdf("the PDF has no pages")
    return pages


def _check_parent_chain(ref: Any, ok: set[Any], limits: PdfLimits) -> None:
    # Inherited attributes (§7.7.3.4) are looked up along /Parent: it must end.
    chain: list[Any] = []
    cur = ref
    while isinstance(cur, IndirectObject):
        key = _key(cur)
        if key in ok:
            break
        if key in chain:
            raise MalformedPdf("the page tree's /Parent entries form a loop")
        chain.append(key)
        if len(chain) > limits.max_depth + 1:
            raise MalformedPdf("the page tree's /Parent chain is too long")
        node = cur.get_object()
        cur = node.raw_get("/Parent") if isinstance(node, DictionaryObject) \
            and "/Parent" in node else None
    ok.update(chain)


@dataclass
class _Findings:
    objects: int = 0
    has_signatures: bool = False


def _walk(reader: PdfReader, limits: PdfLimits, parsed: _Parsed) -> _Findings:
    """Visit every object reachable from the trailer, iteratively, each at most twice
    (once plain, once in an automatic-action context)."""
    found = _Findings()
    counted: set[tuple[int, int]] = set()
    visited: set[tuple[int, int, bool]] = set()
    trailer = reader.trailer
    # (object, direct nesting depth, key it was found under, automatic context)
    stack: list[tuple[Any, int, str, bool]] = [
        (trailer.raw_get(k), 0, k, False) for k in ("/Root", "/Info") if k in trailer
    ]
    while stack:
        obj, depth, via, auto = stack.pop()
        ref = _key(obj)
        if ref is not None:
            if (*ref, auto) in visited:
                continue
            visited.add((*ref, auto))
            if ref not in counted:
                counted.add(ref)
                if len(counted) > limits.max_objects:
                    raise LimitExceeded(f"the PDF has more than {limits.max_objects} objects",
                                        detail={"max_objects": limits.max_objects})
            obj = obj.get_object()
            depth = 0
        if depth > limits.max_depth:
            raise MalformedPdf("the PDF nests objects too deeply",
                               detail={"max_depth": limits.max_depth})
        if ref is not None:
            # Each object is visited once (twice at most).
            parsed.visited(ref, obj)
        if isinstance(obj, DictionaryObject):
            _check_dict(obj, via, auto, limits, found)
            for key, value in dict.items(obj):
                child_auto = key in ("/OpenAction", "/AA") or via == "/AA" or (
                    auto and key == "/Next")
                child_via = "/EF" if via == "/EF" else key
                stack.append((value, depth + 1, child_via, child_auto))
        elif isinstance(obj, ArrayObject):
            stack.extend((item, depth + 1, via, auto) for item in list.__iter__(obj))
    found.objects = len(counted)
    return found


def _check_dict(d: DictionaryObject, via: str, auto: bool, limits: PdfLimits,
                found: _Findings) -> None:
    if _get(d, "/Type") == "/Sig" or "/ByteRange" in d:
        found.has_signatures = True
    if limits.forbid_active_content:
        reason = active_reason(d, auto)
        if reason:
            raise ActiveContent(f"the PDF contains active content: {reason}",
                                detail={"rule": reason})
    if not isinstance(d, StreamObject):
        return
    if _get(d, "/Subtype") == "/Image":
        size = image_bytes(d)
        if size is not None and size > limits.max_decoded_stream_bytes:
            raise LimitExceeded("an image decodes to more than the allowed size",
                                detail={"image_bytes": size,
                                        "limit": limits.max_decoded_stream_bytes})
    filters = _get(d, "/Filter")
    names = [str(_resolve(f)) for f in filters] if isinstance(filters, ArrayObject) else (
        [str(filters)] if filters is not None else [])
    embedded = via == "/EF" or _get(d, "/Type") == "/EmbeddedFile"
    try:
        _, head = measure_decoded(d._data, names, limits.max_decoded_stream_bytes)
    except zlib.error:
        return  # damaged Flate data: viewers show what decodes; it is not a bomb
    if embedded and limits.forbid_active_content:
        kind = sniff_bytes(head)
        if kind in EXECUTABLE_TYPES:
            raise ActiveContent(f"the PDF embeds an executable file ({kind})",
                                detail={"rule": "embedded executable", "sniffed": kind})


def _docmdp(catalog: DictionaryObject) -> int | None:
    """/P of a DocMDP certification signature (§12.8.2.2), if the catalog has one."""
    perms = _get(catalog, "/Perms")
    sig = _get(perms, "/DocMDP") if isinstance(perms, DictionaryObject) else None
    if not isinstance(sig, DictionaryObject):
        return None
    for ref in _get(sig, "/Reference") or []:
        ref = _resolve(ref)
        if isinstance(ref, DictionaryObject) and _get(ref, "/TransformMethod") == "/DocMDP":
            params = _get(ref, "/TransformParams")
            p = _get(params, "/P", 2) if isinstance(params, DictionaryObject) else 2
            return int(p)
    return None


def _producer(reader: PdfReader) -> str | None:
    try:
        meta = reader.metadata
        return str(meta.producer) if meta and meta.producer else None
    except Exception:  # a damaged /Info is no reason to refuse the document
        return None


def inspect_pdf(src: Path | bytes, limits: PdfLimits) -> PdfReport:
    """Validate the PDF at ``src`` (a path, or the document itself) deeply; return what
    was learned or raise.

    Raises MalformedPdf, EncryptedPdf, ActiveContent or LimitExceeded (see the module
    docstring); library details go to the exception's ``detail``.
    """
    report, reader = inspect_document(src, limits)
    reader.stream.close()
    return report


def inspect_document(src: Path | bytes, limits: PdfLimits) -> tuple[PdfReport, PdfReader]:
    """:func:`inspect_pdf`, and the reader that read ``src``: every object it resolved
    stays parsed, for whatever reads the document next (the signer's preparation).
    The reader of a path holds its file open until it is dropped."""
    size = len(src) if isinstance(src, bytes) else os.stat(src).st_size
    if size == 0:
        raise MalformedPdf("the file is empty")
    if size > limits.max_bytes:
        raise LimitExceeded(f"the PDF is larger than {limits.max_bytes} bytes",
                            detail={"size": size, "max_bytes": limits.max_bytes})
    f = io.BytesIO(src) if isinstance(src, bytes) else open(src, "rb")  # noqa: SIM115 - see above
    try:
        head = f.read(HEADER_WINDOW_BYTES)
        f.seek(max(0, size - TAIL_BYTES))
        frame = parse_frame(head, f.read(), size)
        f.seek(frame.startxref)
        xref_stream = classify_xref(f.read(64), size - frame.startxref)
        f.seek(0)
        with _translated(limits) as warnings:
            reader = pdfparse.reader(f)
            if "/Encrypt" in reader.trailer:
                raise EncryptedPdf("the PDF is encrypted")
            catalog = _get(reader.trailer, "/Root")
            if not isinstance(catalog, DictionaryObject):
                raise MalformedPdf("the PDF has no document catalog")
            parsed = _Parsed(reader)
            pages = _count_pages(reader, catalog, limits, parsed)
            found = _walk(reader, limits, parsed)
            version = str(_get(catalog, "/Version", "")).lstrip("/")
            report = PdfReport(
                pages=pages,
                producer=_producer(reader),
                pdf_version=max(frame.version, version) if version else frame.version,
                has_signatures=found.has_signatures,
                has_xref_stream=xref_stream,
                encrypted=False,
                size=size,
                objects=found.objects,
                docmdp_permission=_docmdp(catalog),
                warnings=tuple(warnings),
            )
    except BaseException:
        f.close()
        raise
    return report, reader
