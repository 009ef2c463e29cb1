"""Deep validation of a PDF before the service's signing key is ever used on it.

:func:`inspect_document` runs in a worker process: a top-level function whose
arguments and results (:class:`PdfLimits`, :class:`PdfReport`) pickle, and whose
memory stays bounded whatever the input. It refuses, with one of the stable codes:

* ``malformed_pdf`` (:class:`~casesignd.core.errors.MalformedPdf`): not a PDF, empty,
  page-tree cycles or ``/Parent`` loops, objects nested deeper than ``max_depth``,
  no pages, and anything else no repair makes sense of;
* ``encrypted_pdf`` (:class:`~casesignd.core.errors.EncryptedPdf`): any security handler;
* ``active_content`` (:class:`~casesignd.core.errors.ActiveContent`): the allow-list of
  :mod:`casesignd.pdf.rules`, applied to every reachable object, and to embedded PDFs
  in turn;
* ``limit_exceeded`` (:class:`~casesignd.core.errors.LimitExceeded`): file size, page
  count, object count, any stream (or image) whose decoded size would pass
  ``max_decoded_stream_bytes``, all streams together past ``max_decoded_bytes``,
  and checks that take more than ``max_check_cpu_s`` of CPU time.

What it does not refuse it reports: :attr:`PdfReport.findings` lists every reason
readers may repair the document (damage: a frame that is not whole, pypdf's repair
warnings) or read it differently (ambiguity: duplicate keys, an xref entry that names
another object, an object defined again, data around the PDF, a page tree whose
counts disagree). :func:`casesignd.signing.pipeline.check` decides: sign as is, rewrite, or
refuse (``ambiguous_pdf`` / ``malformed_pdf``). :func:`inspect_pdf` is the strict
form: any finding is a refusal.

Only objects reachable from the trailer are examined: unreachable objects are never
rendered or run (and a reader that reaches others is a finding). Streams under other
filters than Flate are decoded by pypdf with its output capped at the same budget;
image codecs are not decoded, their size comes from the image dictionary
(:func:`image_bytes`).

Memory: pypdf reads from the open file object; the frame and definition scans read
an mmap of it. Objects are walked iteratively; one raw stream is held at a time and
dropped from pypdf's cache once checked; Flate data is inflated in windows of
:data:`INFLATE_WINDOW_BYTES` and counted, never kept (embedded PDFs and archives,
which are looked into, are held decoded, within the decoded budget).
"""

from __future__ import annotations

import contextlib
import io
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from pypdf import PdfReader
from pypdf.errors import LimitReachedError
from pypdf.generic import ArrayObject, DictionaryObject, IndirectObject, StreamObject

from casesignd.core.errors import (
    ActiveContent,
    CasesignError,
    CertifiedPdf,
    EncryptedPdf,
    LimitExceeded,
    MalformedPdf,
)
from casesignd.core.sealed import SealedPath, open_plain, plain_size
from casesignd.pdf import form as pdfform
from casesignd.pdf import normalize
from casesignd.pdf import parse as pdfparse
from casesignd.pdf import rules as pdfrules
from casesignd.pdf.decode import COLOR_COMPONENTS, FLATE, IMAGE_CODECS, measure_decoded
from casesignd.pdf.frame import (
    AMBIGUITY,
    DAMAGE,
    Finding,
    Source,
    definition_findings,
    object_definitions,
    read_frame,
)
from casesignd.pdf.guard import MAX_WARNINGS, translated, warning_finding
from casesignd.pdf.limits import Budget, PdfLimits, PdfReport
from casesignd.pdf.xref import xref_findings

MiB = 1024 * 1024

__all__ = ["Budget", "PdfLimits", "PdfReport", "docmdp_permission", "image_bytes",
           "inspect_document", "inspect_pdf"]

# How deep embedded PDFs are looked into (a PDF in a PDF in a PDF ...).
MAX_EMBEDDED_DEPTH = 3
# An embedded file under other filters than Flate (predictors, hex, run length) is
# decoded whole by pypdf, whose decoders take many times the output in memory: only
# this much of such data is checked; a larger one is refused.
EMBEDDED_DECODE_MAX_BYTES = 4 * MiB
# The CPU clock is read once per this many objects walked.
CPU_CHECK_EVERY = 64
# Objects the checks leave parsed for whatever reads the document next (the signer's
# preparation, the metadata), so that a document of ordinary size is parsed once.
# Past these, each object is forgotten once visited: memory does not grow with the
# object count or with raw stream bytes.
KEEP_PARSED_OBJECTS = 4096
KEEP_PARSED_STREAM_BYTES = 16 * MiB  # raw stream data of the objects kept, in all

# --- pure helpers -------------------------------------------------------------------


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


# --- the walk ----------------------------------------------------------------------------


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


@dataclass
class _Findings:
    objects: int = 0
    has_signatures: bool = False
    external_links: int = 0
    used: set[tuple[int, int]] = field(default_factory=set)
    found: list[Finding] = field(default_factory=list)


def _count_pages(catalog: DictionaryObject, limits: PdfLimits, parsed: _Parsed,
                 out: _Findings) -> int:
    """Walk the page tree (§7.7.3) iteratively: no cycles, no /Parent loops, bounded
    depth; a /Count that disagrees with the leaves, or a node that is both a page and
    a tree node, is an ambiguity (readers count pages differently)."""
    if "/Pages" not in catalog:
        raise MalformedPdf("the document catalog has no page tree", reason="not_a_pdf")
    stack = [(catalog.raw_get("/Pages"), 0)]
    seen: set[Any] = set()
    parents_ok: set[Any] = set()
    pages = 0
    declared = _get(_resolve(catalog.raw_get("/Pages")) or {}, "/Count")
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
        kind = _get(node, "/Type")
        if kind == "/Pages" or ("/Kids" in node and kind != "/Page"):
            kids = _get(node, "/Kids")
            if not isinstance(kids, ArrayObject):
                raise MalformedPdf("a page tree node has no /Kids array")
            stack.extend((kid, depth + 1) for kid in reversed(kids))
        else:
            if "/Kids" in node or kind != "/Page":
                out.found.append(Finding(AMBIGUITY, "a page tree node is typed "
                                                    f"{str(kind)[:32]!r} but is used as a page",
                                         "page_tree_conflict", (("page", pages + 1),)))
            pages += 1
            out.found.extend(_page_findings(node, pages))
            if isinstance(ref, IndirectObject):
                # Leaves are many: past the budget, the walk reads them again.
                parsed.visited((ref.idnum, ref.generation), node)
            if pages > limits.max_pages:
                raise LimitExceeded(f"the PDF has more than {limits.max_pages} pages",
                                    detail={"max_pages": limits.max_pages},
                                    reason="too_many_pages")
    if pages == 0:
        raise MalformedPdf("the PDF has no pages", reason="not_a_pdf")
    if not isinstance(declared, int) or declared != pages:
        out.found.append(Finding(AMBIGUITY, f"the page tree says {str(declared)[:16]} pages "
                                            f"but holds {pages}", "page_tree_conflict"))
    return pages


# Inherited page attributes (PDF 32000-1 §7.7.3.4) and the type each must have.
_INHERITED = {"/Resources": DictionaryObject, "/MediaBox": ArrayObject,
              "/CropBox": ArrayObject}


def _page_findings(page: DictionaryObject, number: int) -> list[Finding]:
    """A page whose entries readers resolve differently: an inherited attribute of the
    wrong type (one reader keeps it, another inherits the parent's), or /Contents that
    holds anything but streams (one reader skips it, another drops the page)."""
    found = []
    for key, kind in _INHERITED.items():
        if key in page and not isinstance(_get(page, key), kind):
            found.append(Finding(AMBIGUITY, f"a page's {key} is not a "
                                            f"{'dictionary' if kind is DictionaryObject else 'array'}",
                                 "page_entry_conflict", (("page", number),)))
    contents = _get(page, "/Contents")
    parts = list(contents) if isinstance(contents, ArrayObject) else [contents]
    if "/Contents" in page and not all(isinstance(_resolve(c), StreamObject) for c in parts):
        found.append(Finding(AMBIGUITY, "a page's /Contents holds something other than streams",
                             "page_entry_conflict", (("page", number),)))
    return found


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


def _walk(reader: PdfReader, limits: PdfLimits, parsed: _Parsed, budget: Budget,
          depth_embedded: int, out: _Findings) -> None:
    """Visit every object reachable from the trailer, iteratively, each at most once
    per role (plain, in a clicked action's slot, in an automatic one, as file data)."""
    visited: set[tuple[int, int, str | None, bool]] = set()
    trailer = reader.trailer
    # (object, direct nesting depth, key it was found under, who triggers it when it
    # is an action, the number of the indirect object it is in)
    stack: list[tuple[Any, int, str, str | None, int]] = [
        (trailer.raw_get(k), 0, k, None, 0) for k in ("/Root", "/Info") if k in trailer
    ]
    steps = 0
    while stack:
        obj, depth, via, trigger, holder = stack.pop()
        ref = _key(obj)
        if ref is not None:
            role = (*ref, trigger, via == "/EF")
            if role in visited:
                continue
            visited.add(role)
            if ref not in out.used:
                out.used.add(ref)
                if len(out.used) > limits.max_objects:
                    raise LimitExceeded(f"the PDF has more than {limits.max_objects} objects",
                                        detail={"max_objects": limits.max_objects},
                                        reason="too_many_objects")
            obj = obj.get_object()
            depth = 0
            holder = ref[0]
        steps += 1
        if not steps % CPU_CHECK_EVERY:
            budget.tick()
        if depth > limits.max_depth:
            raise MalformedPdf("the PDF nests objects too deeply",
                               detail={"max_depth": limits.max_depth},
                               reason="damaged", where={"object": holder})
        if ref is not None:
            # Each object is visited once (twice at most).
            parsed.visited(ref, obj)
        if isinstance(obj, DictionaryObject):
            try:
                _check_dict(obj, via, trigger, holder, limits, budget, depth_embedded, out,
                            ref)
            except CasesignError as e:
                pdfform.name_field(reader, holder, e.where)
                raise
            for key, value in dict.items(obj):
                child_via = "/EF" if via == "/EF" else key
                stack.append((value, depth + 1, child_via, pdfrules.child_trigger(key, via, trigger),
                              holder))
        elif isinstance(obj, ArrayObject):
            # A /Next array lists actions; other arrays (a destination) do not.
            item_trigger = trigger if via == "/Next" else None
            stack.extend((item, depth + 1, via, item_trigger, holder)
                         for item in list.__iter__(obj))
    out.objects = len(out.used)


def _plain(d: DictionaryObject) -> dict[str, Any]:
    """The entries the rules read, resolved (names and strings as str)."""
    return {k: _get(d, k) for k in ("/S", "/N", "/Type", "/Subtype", "/URI",
                                    *pdfrules.FILE_NAME_KEYS) if k in d} | {
        k: True for k in pdfrules.ACTIVE_KEYS if k in d} | (
        {"/EF": True} if "/EF" in d else {})


def _where(d: DictionaryObject, holder: int) -> dict[str, Any]:
    """Where a refused dictionary is: its object, and the form field or embedded
    file it names (a field's partial name, a file's name: the document's own labels,
    never its text)."""
    where: dict[str, Any] = {"object": holder} if holder else {}
    name = pdfform.field_name(d)
    if name is not None:
        where["field"] = name
    if "/EF" in d:
        attachment = pdfrules.embedded_file_name(_plain(d))
        if attachment is not None:
            where["attachment"] = attachment
    return where


def _check_dict(d: DictionaryObject, via: str, trigger: str | None, holder: int,
                limits: PdfLimits, budget: Budget, depth_embedded: int,
                out: _Findings, ref: tuple[int, int] | None = None) -> None:
    if _get(d, "/Type") == "/Sig" or "/ByteRange" in d:
        out.has_signatures = True
    if limits.forbid_active_content:
        plain = _plain(d)
        rule = pdfrules.dict_rule(plain)
        action = rule is None and pdfrules.is_action(plain, trigger is not None)
        if action:
            if trigger is None:
                # Found outside any slot: run by no viewer; judged as a click's.
                trigger = pdfrules.CLICK
            rule = pdfrules.action_rule(plain, limits.allowed_actions, trigger,
                                        limits.link_schemes)
        if rule:
            word, message = rule
            raise ActiveContent(f"the PDF contains active content: {message}",
                                detail={"rule": message}, reason=word,
                                where=_where(d, holder))
        if action and pdfrules.is_external_link(plain):
            out.external_links += 1
    out.found.extend(pdfform.appearance_findings(d, ref))
    if not isinstance(d, StreamObject):
        return
    embedded = via == "/EF" or _get(d, "/Type") == "/EmbeddedFile"
    if _get(d, "/Subtype") == "/Image" and not embedded:
        size = image_bytes(d)
        if size is not None and size > limits.max_decoded_stream_bytes:
            raise LimitExceeded("an image decodes to more than the allowed size",
                                detail={"image_bytes": size,
                                        "limit": limits.max_decoded_stream_bytes},
                                reason="decompression_bomb", where={"object": holder})
    filters = _get(d, "/Filter")
    names = [str(_resolve(f)) for f in filters] if isinstance(filters, ArrayObject) else (
        [str(filters)] if filters is not None else [])
    if not embedded and (not names or names[0] in IMAGE_CODECS):
        # Nothing to inflate: the data is what a reader decodes (or goes to an image
        # codec as it is), so its size is its length and it is never read here (a
        # 200 MB scan stays unread). What its dictionary calls it changes nothing.
        budget.spend(len(d._data), inflated=False)
        return
    try:
        total, head = measure_decoded(d._data, names, budget.stream_limit(),
                                      pdfrules.HEAD_BYTES, tick=budget.tick)
    except zlib.error:
        if embedded and limits.forbid_active_content:
            raise ActiveContent("the PDF embeds a file whose data does not decode, so it "
                                "cannot be checked", detail={"rule": "undecodable embedded file"},
                                reason="unchecked_attachment", where={"object": holder}
                                ) from None
        return  # damaged Flate data: viewers show what decodes; it is not a bomb
    budget.spend(total)
    if embedded and limits.forbid_active_content:
        try:
            _check_embedded(d, names, head, limits, budget, depth_embedded)
        except CasesignError as e:
            if not e.where:
                e.where = {"object": holder}
            raise


def _check_embedded(d: StreamObject, names: list[str], head: bytes, limits: PdfLimits,
                    budget: Budget, depth_embedded: int) -> None:
    """An embedded file by its content, decoded the way a viewer extracts it:
    executables, disk images, macros; an embedded PDF is inspected in turn, by pypdf
    and as qpdf reads it, with what is left of the budget. Plain Flate data is judged
    by its first bytes (``head``) and held whole only for a container; anything else
    (predictors, other filters) is decoded by pypdf, every filter and predictor,
    within the size just measured. A file that does not decode cannot be checked,
    and is refused."""
    plain = all(n in FLATE for n in names) and "/DecodeParms" not in d and "/DP" not in d
    whole: bytes | None = None
    if not plain:
        if len(d._data) > EMBEDDED_DECODE_MAX_BYTES or \
                budget.limits.max_decoded_stream_bytes <= 0:
            raise ActiveContent("the PDF embeds a large file under filters that cannot be "
                                "checked in bounded memory",
                                detail={"rule": "embedded file too large to check"},
                                reason="unchecked_attachment")
        try:
            whole = d.get_data()
        except Exception:  # noqa: BLE001 - pypdf raises many types on odd filters
            raise ActiveContent("the PDF embeds a file that cannot be decoded, so it cannot "
                                "be checked", detail={"rule": "undecodable embedded file"},
                                reason="unchecked_attachment") from None
        if len(whole) > budget.stream_limit():
            raise LimitExceeded("an embedded file decodes to more than the allowed size",
                                reason="decompression_bomb")
        head = whole[:pdfrules.HEAD_BYTES]
    elif pdfrules.needs_whole(head):
        whole = measure_decoded(d._data, names, budget.stream_limit(), keep=True,
                                tick=budget.tick)[1]
    reason = pdfrules.risky_content(head, whole if pdfrules.needs_whole(head) else None)
    if reason:
        raise ActiveContent(f"the PDF contains active content: {reason}",
                            detail={"rule": reason}, reason="executable_attachment")
    if whole is None or b"%PDF-" not in whole[:1024]:
        return
    if depth_embedded >= MAX_EMBEDDED_DEPTH:
        raise ActiveContent("the PDF embeds PDFs too deeply to be checked",
                            detail={"rule": "embedded PDF depth"}, reason="unchecked_attachment")
    readings = [whole]
    with contextlib.suppress(MalformedPdf, EncryptedPdf):
        # qpdf's reading too: a viewer opens the embedded file with its own parser.
        rewritten = normalize.rewrite(whole, draw_forms=False)[0]  # bytes in, bytes out
        if isinstance(rewritten, bytes):
            readings.append(rewritten)
    for data in readings:
        try:
            _report, reader = _inspect(data, limits, budget, depth_embedded + 1)
            reader.stream.close()
        except ActiveContent as e:
            raise ActiveContent(f"an embedded PDF contains active content: {e.detail.get('rule')}",
                                detail=e.detail, reason=e.reason) from None
        except EncryptedPdf:
            raise ActiveContent("the PDF embeds an encrypted PDF, which cannot be checked",
                                detail={"rule": "encrypted embedded PDF"},
                                reason="unchecked_attachment") from None
        except MalformedPdf:
            continue  # this reader makes nothing of it; the other may


def docmdp_permission(catalog: DictionaryObject) -> int | None:
    """/P of a DocMDP certification signature (§12.8.2.2), if the catalog has one;
    2 when the transform gives none (Table 254's default)."""
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
    return 2


def encrypted_refusal(encrypt: Any) -> EncryptedPdf:
    """The refusal of a document under the security handler ``encrypt`` (its
    /Encrypt dictionary): a public-key handler (§7.6.5) or a password."""
    handler = _get(encrypt, "/Filter") if isinstance(encrypt, DictionaryObject) else None
    sub = str(_get(encrypt, "/SubFilter") or "") if isinstance(encrypt, DictionaryObject) \
        else ""
    if handler == "/Adobe.PubSec" or sub.startswith("/adbe.pkcs7"):
        return EncryptedPdf("the PDF is encrypted for its recipients' certificates",
                            reason="public_key_encryption")
    return EncryptedPdf("the PDF is encrypted", reason="password_encryption")


def _producer(reader: PdfReader) -> str | None:
    try:
        meta = reader.metadata
        return str(meta.producer) if meta and meta.producer else None
    except Exception:  # a damaged /Info is no reason to refuse the document
        return None


def inspect_pdf(src: Path | SealedPath | bytes, limits: PdfLimits) -> PdfReport:
    """Validate the PDF at ``src`` (a path, or the document itself) deeply and
    strictly: a document readers would repair or read differently is refused too
    (:meth:`PdfReport.refusal`). Returns what was learned or raises."""
    report, reader = inspect_document(src, limits)
    reader.stream.close()
    if report.findings:
        raise report.refusal()
    return report


def inspect_document(src: Path | SealedPath | bytes, limits: PdfLimits) -> tuple[PdfReport, PdfReader]:
    """Check ``src`` (a path, or the document itself) and return the report with its
    findings, and the reader that read it: every object it resolved stays parsed, for
    whatever reads the document next (the signer's preparation). The reader of a
    path holds its file open until it is dropped."""
    return _inspect(src, limits, Budget(limits), 0)


def _inspect(src: Path | SealedPath | bytes, limits: PdfLimits, budget: Budget,
             depth_embedded: int) -> tuple[PdfReport, PdfReader]:
    size = len(src) if isinstance(src, bytes) else plain_size(src)
    if size == 0:
        raise MalformedPdf("the file is empty", reason="not_a_pdf")
    if size > limits.max_bytes:
        raise LimitExceeded(f"the PDF is larger than {limits.max_bytes} bytes",
                            detail={"size": size, "max_bytes": limits.max_bytes},
                            reason="too_large")
    f = io.BytesIO(src) if isinstance(src, bytes) else open_plain(src)
    scans: BinaryIO | None = None
    try:
        if isinstance(src, bytes):
            buf = Source(src)
        elif isinstance(src, SealedPath):
            # The scans read by offset through a reader of their own: pypdf's keeps its
            # position.
            scans = src.open()
            buf = Source(stream=scans, size=size)
        else:
            buf = Source(fd=f.fileno(), size=size)
        frame = read_frame(buf)
        with translated(limits.max_bytes) as warnings:
            try:
                reader = pdfparse.reader(f)
            except LimitReachedError as e:
                if any(x.kind == DAMAGE for x in frame.findings):
                    # A damaged frame that makes the parser give up (an xref
                    # claiming millions of entries) is damage, not a large file.
                    raise MalformedPdf("the PDF is damaged and cannot be read",
                                       detail={"library": str(e)[:300]}) from None
                raise
            if "/Encrypt" in reader.trailer:
                raise encrypted_refusal(_get(reader.trailer, "/Encrypt"))
            catalog = _get(reader.trailer, "/Root")
            if not isinstance(catalog, DictionaryObject):
                raise MalformedPdf("the PDF has no document catalog", reason="not_a_pdf")
            certified = docmdp_permission(catalog)
            if certified == 1 and depth_embedded == 0 and limits.refuse_certified:
                # Nothing may be added to it, not even a signature: no content check
                # could change that, so it is the first thing said (§12.8.2.2).
                raise CertifiedPdf("the document is certified against any change; it "
                                   "cannot be signed", code="certified_no_changes",
                                   field="items[0]", reason="certified_no_changes")
            parsed = _Parsed(reader)
            found = _Findings()
            # The walk first: active content is refused even in a document whose
            # page tree is broken (an embedded PDF another viewer still opens).
            _walk(reader, limits, parsed, budget, depth_embedded, found)
            pages = _count_pages(catalog, limits, parsed, found)
            budget.tick()
            found.found.extend(definition_findings(
                buf, object_definitions(buf), reader.xref, reader.xref_objStm, found.used))
            # A cross-reference pypdf rebuilt guesses where objects sit in object
            # streams: their indices say nothing then (the damage is noted anyway).
            rebuilt = bool(warnings) or any(x.kind == DAMAGE for x in frame.findings)
            found.found.extend(xref_findings(reader, found.used, check_index=not rebuilt))
            version = str(_get(catalog, "/Version", "")).lstrip("/")
            report = PdfReport(
                pages=pages,
                producer=_producer(reader),
                pdf_version=max(frame.version, version) if version else frame.version,
                has_signatures=found.has_signatures,
                has_xref_stream=frame.xref_stream,
                encrypted=False,
                size=size,
                objects=found.objects,
                docmdp_permission=certified,
                warnings=tuple(warnings),
                findings=_dedup([*frame.findings, *found.found,
                                 *(warning_finding(w) for w in warnings)]),
                external_links=found.external_links,
            )
    except BaseException:
        f.close()
        raise
    finally:
        if scans is not None:
            scans.close()
    return report, reader


def _dedup(found: list[Finding]) -> tuple[Finding, ...]:
    return tuple(dict.fromkeys(found))[:MAX_WARNINGS]
