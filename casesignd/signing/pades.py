"""PAdES signing by one incremental update (PDF 32000-1 §7.5.6, ETSI EN 319 142-1).

Signing is split so that the heavy part runs in a worker process and the key
operation stays with the key:

1. :func:`prepare` (worker process, picklable in and out) copies the source to
   the destination in bounded memory while hashing it, then appends one
   incremental update holding the attachments, the signature field (locking the
   form's fields, :mod:`casesignd.pdf.form`) and the signature dictionary with a
   zeroed /Contents placeholder. It returns the SHA-256 over the ByteRange.
2. :func:`casesignd.signing.cms.build_signed_attrs`, the key's ``sign`` and
   :func:`casesignd.signing.cms.assemble` make the CMS (and a timestamp may be added).
3. :func:`finalize` writes the CMS into the placeholder in place.

pypdf only reads the structure (from an open file object, so nothing is read
whole); the update is serialized here.

Where the signature records the case (what a verifier sees):

- /Reason: a readable line with the policy version, the case and the signers;
- /Prop_Build /App /Name /casesignd (PDF Signature Build Dictionary Specification);
- /CasesignCase, a private dictionary (PDF 32000-1 §7.12.2 allows additional
  entries): /PolicyVersion, /CaseId, /Signers [<< /Id /Name /Role >> ...], and for
  evidence /EvidenceBinding and /Evidence [<< /Name /MediaType /Size /SHA256 >> ...].
Embedded files' SHA-256 digests are also in each file specification's /Desc.

What the update adds to a document that carries signatures keeps them valid: an
invisible signature field (its widget in page 1's /Annots) with its lock, or the
document's own empty signature field with its /V set (:mod:`casesignd.signing.field`), the
signature dictionary, and evidence bound by digest rather than embedded
(:mod:`casesignd.signing.attachments`); the document's /SigFlags, /Info and metadata are
left as they are.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pypdf import PdfReader
from pypdf import generic as g
from pypdf.errors import PyPdfError

from casesignd.core.errors import CertifiedPdf, MalformedPdf, PermanentJobError, SignatureTooLarge
from casesignd.core.hashing import feed_chunks
from casesignd.pdf.form import field_lock, fieldmdp_reference, locked_appearances
from casesignd.pdf.structure import Structure, field_names, read_structure
from casesignd.pdf.syntax import (
    indirect,
    name_object,
    pdf_date,
    pdf_text,
    put_object,
    raw,
    resolved,
    serialize,
    string_key,
    text_object,
    unique_name,
    xref_stream,
    xref_table,
)
from casesignd.signing.attachments import (
    CHUNK_BYTES,
    DIGEST,
    Attachment,
    Bound,
    bound_by_digest,
    catalog_updates,
    evidence_binding,
    evidence_entries,
    filespec,
    taken_names,
    write_embedded_file,
)
from casesignd.signing.field import (
    appearance,
    certify,
    check_box,
    fill_field,
    find_empty_field,
    own_lock_reference,
    page_at,
    rotation,
)

_BYTE_RANGE_WIDTH = 10  # digits reserved per ByteRange number (files < 10 GB)


@dataclass(frozen=True)
class Party:
    """One of the case's signers, recorded in the signature dictionary."""

    id: str
    name: str
    role: str


@dataclass(frozen=True)
class SignatureMeta:
    """What the signature dictionary claims. ``signing_time`` becomes /M."""

    signing_time: dt.datetime
    name: str = "casesignd"
    reason: str = ""
    location: str = ""
    policy_version: str = ""
    case_id: str = ""
    parties: tuple[Party, ...] = ()
    field_name: str = ""  # empty: the first free "SignatureN"
    # The document's own empty signature field to sign into (casesignd.signing.field);
    # empty: a new field.
    into_field: str = ""
    # The visible stamp's lines (casesignd.signing.stamp); empty: an invisible signature.
    stamp: tuple[str, ...] = ()
    # The tenant's logo in the stamp (PNG or JPEG bytes); empty: none.
    logo: bytes = b""
    # A new field's page (1 the first, -1 the last) and box in points; None: page 1,
    # no box (invisible).
    place: tuple[int, tuple[float, float, float, float]] | None = None
    # A certification's DocMDP permission P (1, 2 or 3); None: an approval signature.
    certify: int | None = None


@dataclass(frozen=True)
class Prepared:
    """A prepared file: ``contents_offset`` is the byte offset of the '<' of /Contents;
    ``evidence`` how the attachments are bound (:func:`casesignd.signing.attachments.evidence_binding`)."""

    path: Path
    digest: bytes
    contents_offset: int
    contents_bytes: int
    size: int
    evidence: str = ""
    # The SHA-256 (hex) of the document the update was appended to, as it was copied:
    # the bytes the signature covers, hashed once for both.
    source_sha256: str = ""


@dataclass(frozen=True)
class SignOutcome:
    path: Path
    size: int
    cms_bytes: int
    timestamped: bool
    # What the checks decided (a casesignd.signing.pipeline.Checked).
    checked: Any = None


# --- pure helpers ----------------------------------------------------------------


def reason_text(meta: SignatureMeta) -> str:
    """The /Reason line: the caller's reason, then policy, case and signers."""
    parts = [meta.reason] if meta.reason else []
    if meta.policy_version:
        parts.append(f"policy {meta.policy_version}")
    if meta.case_id:
        parts.append(f"case {meta.case_id}")
    if meta.parties:
        who = ", ".join(f"{p.name} ({p.role}, {p.id})" for p in meta.parties)
        parts.append(f"signers: {who}")
    return "; ".join(parts)


# --- what the update may do -----------------------------------------------------


def check_docmdp(level: int | None) -> None:
    """Refuse an update a certification signature (or a signed field's /Lock, PDF 2.0
    §12.7.5.5) forbids (§12.8.2.2, Table 254): P=1 allows no change; P=2 and P=3 allow
    a new signature, and evidence is then bound by digest, not embedded."""
    if level == 1:
        raise CertifiedPdf("the document is certified against any change; it cannot be signed",
                           code="certified_no_changes", field="items[0]")


# --- writing the update ----------------------------------------------------------


class _Writer:
    """Appends objects to ``out`` while hashing and remembering their offsets."""

    def __init__(self, out: IO[bytes], offset: int, hasher: Any) -> None:
        self.out = out
        self.offset = offset
        self.hasher = hasher
        self.xref: dict[int, tuple[int, int]] = {}  # number -> (offset, generation)
        self.body_hasher: Any = None  # the hash of what was written, before the tail

    def write(self, data: bytes | memoryview) -> None:
        self.write_unhashed(data)
        self.hasher.update(data)

    def write_unhashed(self, data: bytes | bytearray | memoryview) -> None:
        """``write`` for bytes the caller feeds ``hasher`` itself, in order."""
        self.out.write(data)
        self.offset += len(data)

    def begin(self, num: int, gen: int = 0) -> None:
        self.xref[num] = (self.offset, gen)
        self.write(b"%d %d obj\n" % (num, gen))


def _copy_hashing(src: io.BufferedIOBase, out: IO[bytes], hasher: Any,
                  size: int | None = None) -> int:
    """Copy ``src`` to ``out`` in chunks, hashing them: a large file's hash and write
    each run on a thread of their own while the next chunk is read
    (:func:`casesignd.core.hashing.feed_chunks`), so the copy runs near the speed of
    SHA-256 alone."""
    size = os.fstat(src.fileno()).st_size if size is None else size
    if size > 4 * CHUNK_BYTES:  # else a thread costs more than it saves
        return feed_chunks(src, [hasher.update, out.write])  # type: ignore[arg-type]
    copied = 0
    buf = bytearray(CHUNK_BYTES)
    while n := src.readinto(buf):
        view = memoryview(buf)[:n]
        hasher.update(view)
        out.write(view)
        copied += n
    return copied


def _signature_dict(meta: SignatureMeta, contents_bytes: int, *, reference: bytes = b"",
                    evidence: bytes = b"") -> bytes:
    """The signature dictionary (§12.8.1, Table 252); ``reference`` its /Reference
    entry (the field lock), ``evidence`` the /CasesignCase entries binding evidence."""
    entries = [
        b"/Type /Sig",
        b"/Filter /Adobe.PPKLite",
        b"/SubFilter /ETSI.CAdES.detached",
        b"/M " + pdf_text(pdf_date(meta.signing_time)),
        b"/Name " + pdf_text(meta.name),
    ]
    reason = reason_text(meta)
    if reason:
        entries.append(b"/Reason " + pdf_text(reason))
    if meta.location:
        entries.append(b"/Location " + pdf_text(meta.location))
    entries.append(b"/Prop_Build <</App <</Name /casesignd>>>>")
    if reference:
        entries.append(reference)
    signers = b" ".join(
        b"<</Id " + pdf_text(p.id) + b" /Name " + pdf_text(p.name) + b" /Role " + pdf_text(p.role) + b">>"
        for p in meta.parties)
    entries.append(b"/CasesignCase <</PolicyVersion " + pdf_text(meta.policy_version)
                   + b" /CaseId " + pdf_text(meta.case_id) + b" /Signers [" + signers + b"]"
                   + evidence + b">>")
    body = b"<<" + b"\n".join(entries) + b"\n>>"
    placeholder = b"/ByteRange [0 %s %s %s]" % ((b"0" * _BYTE_RANGE_WIDTH,) * 3)
    contents = b"/Contents <" + b"0" * (2 * contents_bytes) + b">"
    # ByteRange before Contents: the placeholder is patched once offsets are known.
    return body[:-2] + placeholder + b"\n" + contents + b"\n>>"


def prepare(src: Path, dst: Path, *, attachments: list[Attachment], meta: SignatureMeta,
            contents_bytes: int = 16384, reader: PdfReader | None = None) -> Prepared:
    """Copy ``src`` to ``dst`` and append the signing update; see the module docstring.
    ``reader``: one that already read ``src`` (the checks'), so nothing is parsed twice.

    Raises MalformedPdf / EncryptedPdf / PermanentJobError for inputs that cannot be
    signed. Memory stays bounded by the chunk size whatever the file sizes.
    """
    src, dst = Path(src), Path(dst)
    try:
        return _prepare(src, dst, attachments, meta, contents_bytes, reader)
    except BaseException:
        dst.unlink(missing_ok=True)  # never leave a half-written PDF behind
        raise


def _prepare(
    src: Path, dst: Path, attachments: list[Attachment], meta: SignatureMeta, contents_bytes: int,
    reader: PdfReader | None,
) -> Prepared:
    hasher = hashlib.sha256()
    with open(src, "rb") as f:
        s = _structure(f, reader)
        check_docmdp(s.docmdp)
        f.seek(0)
        with open(dst, "wb") as out:
            copied = _copy_hashing(f, out, hasher)
            source_sha256 = hasher.copy().hexdigest()
            start, total, tail = held_update(s, _Writer(out, copied, hasher), attachments,
                                             meta, contents_bytes)
            out.write(tail)
    return Prepared(dst, hasher.digest(), start, contents_bytes, total,
                    evidence_binding(s.signed, len(attachments)), source_sha256)


@dataclass(frozen=True)
class PreparedUpdate:
    """A document prepared in memory: the original bytes, then the update, which is
    ``head``, the /Contents placeholder's hex digits, ``tail``. The placeholder is not
    carried (zeros), which keeps the result small to pass between processes."""

    head: bytes
    tail: bytes
    digest: bytes
    contents_bytes: int

    def signed(self, cms_der: bytes) -> bytes:
        """The update with ``cms_der`` (hex) in its /Contents placeholder (pure)."""
        hexed = cms_der.hex().encode()
        if len(hexed) > 2 * self.contents_bytes:
            raise SignatureTooLarge(
                f"CMS of {len(cms_der)} bytes exceeds the {self.contents_bytes}-byte placeholder")
        return b"".join((self.head, hexed.ljust(2 * self.contents_bytes, b"0"), self.tail))


def read_bytes(data: bytes, reader: PdfReader | None = None) -> Structure:
    """What an update to ``data`` needs of its structure, once DocMDP allows one.
    ``reader``: one that already read ``data``. An update only reads the structure,
    so one structure serves any number of updates to the same bytes, one at a time."""
    s = _structure(io.BytesIO(data), reader)
    check_docmdp(s.docmdp)
    return s


def prepare_bytes(data: bytes, *, meta: SignatureMeta, contents_bytes: int = 16384,
                  reader: PdfReader | None = None, structure: Structure | None = None
                  ) -> PreparedUpdate:
    """:func:`prepare` for a document held in memory (the kiosk's, at most a few MiB):
    no file is written, and only the update is returned — the caller has the rest.
    ``reader``: one that already read ``data`` (the validation's), so nothing is
    parsed twice; ``structure``: :func:`read_bytes` of ``data``, read before."""
    hasher = hashlib.sha256()
    s = structure if structure is not None else read_bytes(data, reader)
    hasher.update(data)
    out = io.BytesIO()
    start, _total, tail = held_update(s, _Writer(out, len(data), hasher), [], meta, contents_bytes)
    out.write(tail)
    update = out.getbuffer()
    at = start + 1 - len(data)  # the first hex digit, within the update
    return PreparedUpdate(bytes(update[:at]), bytes(update[at + 2 * contents_bytes:]),
                          hasher.digest(), contents_bytes)


def _structure(f: IO[bytes], reader: PdfReader | None = None) -> Structure:
    try:
        return read_structure(f, reader)
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise MalformedPdf(f"cannot read the PDF structure: {type(e).__name__}: {e}") from e


def held_update(s: Structure, w: _Writer, attachments: list[Attachment], meta: SignatureMeta,
                contents_bytes: int) -> tuple[int, int, bytearray]:
    """Append the signing update through ``w`` (at the original's end) but for its tail
    (the signature's objects on, with the /Contents placeholder), hashed and returned
    for the caller to write or hold; and the /Contents offset and the new total size."""
    if not s.ends_with_eol:
        w.write(b"\n")
    try:
        tail_base, tail, sig_at = _write_update(s, w, attachments, meta, contents_bytes)
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise MalformedPdf(f"cannot update the PDF: {type(e).__name__}: {e}") from e
    at = tail.index(b"/Contents <", sig_at)
    br_at = tail.index(b"/ByteRange [0 ", sig_at)
    start = tail_base + at + len(b"/Contents ")
    end = start + 2 * contents_bytes + 2
    total = tail_base + len(tail)
    byte_range = b"/ByteRange [0 %d %d %d]" % (start, end, total - end)
    width = len(b"/ByteRange [0 ]") + 3 * _BYTE_RANGE_WIDTH + 2
    tail[br_at : br_at + width] = byte_range.ljust(width)
    rel_start, rel_end = start - tail_base, end - tail_base
    w.body_hasher = w.hasher.copy()  # a whole file's digest goes on from here
    w.hasher.update(memoryview(tail)[:rel_start])
    w.hasher.update(memoryview(tail)[rel_end:])
    return start, total, tail


def _write_update(
    s: Structure,
    w: _Writer,
    attachments: list[Attachment],
    meta: SignatureMeta,
    contents_bytes: int,
) -> tuple[int, bytearray, int]:
    """Write the attachment streams through ``w``; return the tail (not yet written).

    Returns (offset of the tail in the file, the tail, offset of the signature
    dictionary object within the tail).
    """
    next_num = [s.size]

    def new_num() -> int:
        next_num[0] += 1
        return next_num[0] - 1

    binding = evidence_binding(s.signed, len(attachments))
    bound: list[Bound] = []
    taken = taken_names(s)
    planned: list[tuple[Attachment, int, Bound]] = []
    for att in attachments:
        if binding == DIGEST:  # earlier signatures stay valid (see casesignd.signing.attachments)
            bound.append(bound_by_digest(att))
            continue
        num = new_num()
        b = write_embedded_file(w, num, att, unique_name(att.name, taken), meta.signing_time)
        taken.add(b.name)
        bound.append(b)
        planned.append((att, num, b))
    for num, gen, body in locked_appearances(s.form, s.reader):
        w.begin(num, gen)
        w.write(body + b"\nendobj\n")
    # Everything after the streams is small and built in memory, so the ByteRange
    # can be patched before it reaches the disk.
    tail = io.BytesIO()
    xref = dict(w.xref)
    base = w.offset
    filespecs: list[tuple[str, int]] = []
    for att, stream_num, b in planned:
        num = new_num()
        put_object(tail, xref, base, num, 0, serialize(filespec(att, b.name, stream_num, b.sha256)))
        filespecs.append((b.name, num))
    catalog, extra = catalog_updates(s, new_num, filespecs)
    sig_num = new_num()
    reference = fieldmdp_reference(s.form, s.root_ref)
    if meta.into_field:
        existing = find_empty_field(s.catalog, meta.into_field)
        field_num, field_gen = existing.ref.idnum, existing.ref.generation
        widget = fill_field(s, existing, sig_num, catalog, extra)
        own = own_lock_reference(existing.field, s.root_ref)
        reference = own if own is not None else reference
        rect, shown_on, shows = existing.rect, resolved(existing.widget, "/P"), existing.widget_ref
    else:
        rect, shown_on = (0.0, 0.0, 0.0, 0.0), s.page
        page_ref, page = s.page_ref, s.page
        if meta.place is not None:
            number, page_ref, shown_on = page_at(s.reader, meta.place[0])
            page, rect = shown_on, check_box(shown_on, number, meta.place[1])
        field_num, field_gen = new_num(), 0
        shows = g.IndirectObject(field_num, 0, None)  # type: ignore[arg-type]
        widget = _signature_field(s, meta, sig_num, field_num, catalog, extra, page_ref, page)
        if meta.place is not None:
            widget[name_object("Rect")] = g.ArrayObject([g.FloatObject(v) for v in rect])
    if meta.stamp and rect[2] - rect[0] >= 1 and rect[3] - rect[1] >= 1:
        ap, bodies = appearance(rect, rotation(shown_on), meta.stamp, new_num, meta.logo)
        for num, body in bodies:
            put_object(tail, xref, base, num, 0, body)
        if shows.idnum == field_num:
            widget[name_object("AP")] = ap
        else:  # the field's widget is its kid
            kid = g.DictionaryObject(existing.widget)
            kid[name_object("AP")] = ap
            extra.append((shows.idnum, shows.generation, kid))
    if meta.certify is not None:
        reference = certify(s, meta.certify, sig_num, catalog, reference)
    lock = field_lock(s.form) if "/Lock" not in widget else None
    if lock is not None:  # Table 233: /Lock is an indirect reference
        lock_num = new_num()
        widget[name_object("Lock")] = indirect(lock_num)
        put_object(tail, xref, base, lock_num, 0, lock)

    extra.append((s.root_ref.idnum, s.root_ref.generation, catalog))
    seen: set[int] = set()
    for num, gen, obj in extra:
        if num in seen:
            raise MalformedPdf(f"object {num} plays two roles in the document structure")
        seen.add(num)
        put_object(tail, xref, base, num, gen, serialize(obj))
    put_object(tail, xref, base, field_num, field_gen, serialize(widget))
    sig_at = tail.tell()
    put_object(tail, xref, base, sig_num, 0, _signature_dict(
        meta, contents_bytes, reference=reference,
        evidence=evidence_entries(bound, binding)))
    _write_xref(s, tail, xref, base, new_num)
    return base, bytearray(tail.getvalue()), sig_at


def _signature_field(
    s: Structure,
    meta: SignatureMeta,
    sig_num: int,
    field_num: int,
    catalog: g.DictionaryObject,
    extra: list[tuple[int, int, g.PdfObject]],
    page_ref: g.IndirectObject,
    page: g.DictionaryObject,
) -> g.DictionaryObject:
    """The signature field with its merged widget (§12.7.4.5, §12.5.6.19), invisible
    until the caller gives it a /Rect and an appearance.

    Merges into /AcroForm /Fields and the page's /Annots, rewriting whichever objects
    hold them (appended to ``extra``, or set on ``catalog`` when direct).
    """
    acro_raw = raw(s.catalog, "/AcroForm")
    acro = g.DictionaryObject(acro_raw.get_object()) if acro_raw is not None else g.DictionaryObject()
    fields = list(resolved(acro, "/Fields", g.ArrayObject()) or [])
    taken_fields = field_names(fields)
    field_name = meta.field_name or next(
        f"Signature{k}" for k in range(1, 100_000) if f"Signature{k}" not in taken_fields
    )
    if field_name in taken_fields:
        raise PermanentJobError(f"a field named {field_name!r} exists", code="field_exists")
    widget = g.DictionaryObject(
        {
            name_object("Type"): name_object("Annot"),
            name_object("Subtype"): name_object("Widget"),
            name_object("FT"): name_object("Sig"),
            name_object("T"): text_object(field_name),
            name_object("V"): indirect(sig_num),
            name_object("F"): g.NumberObject(132),  # Print | Locked
            name_object("Rect"): g.ArrayObject([g.NumberObject(0)] * 4),
            name_object("P"): page_ref,
        }
    )
    acro[name_object("Fields")] = g.ArrayObject([*fields, indirect(field_num)])
    if not s.signed:  # pyHanko counts changed /SigFlags as a change to the signed form
        acro[name_object("SigFlags")] = g.NumberObject(3)  # SignaturesExist | AppendOnly (§12.7.2)
    if isinstance(acro_raw, g.IndirectObject):
        extra.append((acro_raw.idnum, acro_raw.generation, acro))
    else:
        catalog[name_object("AcroForm")] = acro
    annots_raw = raw(page, "/Annots")
    annots = list(annots_raw.get_object()) if annots_raw is not None else []
    annots_new = g.ArrayObject([*annots, indirect(field_num)])
    if isinstance(annots_raw, g.IndirectObject):
        extra.append((annots_raw.idnum, annots_raw.generation, annots_new))
    else:
        page = g.DictionaryObject(page)
        page[name_object("Annots")] = annots_new
        extra.append((page_ref.idnum, page_ref.generation, page))
    return widget


def _write_xref(
    s: Structure,
    tail: io.BytesIO,
    xref: dict[int, tuple[int, int]],
    base: int,
    new_num: Callable[[], int],
) -> None:
    """The update's cross-reference section, of the same kind as the file's last one
    (§7.5.4 table or §7.5.8 stream), its trailer with /Prev (§7.5.6), and startxref."""
    trailer = g.DictionaryObject({name_object("Root"): s.root_ref, name_object("Prev"): g.NumberObject(s.startxref)})
    if "/Info" in s.trailer:
        trailer[name_object("Info")] = raw(s.trailer, "/Info")
    old_id = resolved(s.trailer, "/ID")
    new_id = g.ByteStringObject(os.urandom(16))
    # §14.4: the first identifier stays, the second changes with each revision.
    first = old_id[0] if old_id is not None and len(old_id) == 2 else new_id
    trailer[name_object("ID")] = g.ArrayObject([g.ByteStringObject(bytes(string_key(first))), new_id])
    xref_at = base + tail.tell()
    if s.xref_is_stream:
        xref_num = new_num()
        xref[xref_num] = (xref_at, 0)
        trailer[name_object("Size")] = g.NumberObject(xref_num + 1)
        tail.write(xref_stream(xref_num, xref, trailer))
    else:
        trailer[name_object("Size")] = g.NumberObject(max(s.size, max(xref) + 1))
        tail.write(xref_table(xref) + b"trailer\n" + serialize(trailer) + b"\n")
    tail.write(b"startxref\n%d\n%%%%EOF\n" % xref_at)


def finalize(prepared: Prepared, cms_der: bytes, *, sync: bool = True) -> None:
    """Write ``cms_der`` (hex) into the /Contents placeholder and fsync (unless
    ``sync`` is False: a working file that is published by a durable copy needs none).

    Raises SignatureTooLarge before touching the file if it does not fit.
    """
    hexed = cms_der.hex().encode()
    if len(hexed) > 2 * prepared.contents_bytes:
        raise SignatureTooLarge(
            f"CMS of {len(cms_der)} bytes exceeds the {prepared.contents_bytes}-byte placeholder"
        )
    fd = os.open(prepared.path, os.O_WRONLY)
    try:
        if os.fstat(fd).st_size != prepared.size:
            raise MalformedPdf("the prepared file changed size before finalizing")
        os.pwrite(fd, hexed, prepared.contents_offset + 1)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
