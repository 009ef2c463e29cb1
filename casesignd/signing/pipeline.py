"""The one signing pipeline: read → decide → normalise → prepare → sign → finish.

Every signature the service makes — a batch ``sign_case``, a kiosk request, a signed
invoice, a replay, and :func:`sign_file` for a caller with a file — takes a document
through the same steps, so what the key signs is decided in one place:

1. **read** (:func:`casesignd.pdf.inspect.inspect_document`): deep checks that refuse
   active content, bombs and encryption, and findings where readers may disagree;
2. **decide** (:func:`decide`, pure): sign as is, rewrite, or refuse. A document with
   findings, or any unsigned one when the policy's ``normalize`` is ``always``, is
   rewritten unless it already carries a signature (a rewrite would break it) or the
   policy says ``never``; then it is refused ``ambiguous_pdf`` (``malformed_pdf`` when
   the findings are damage);
3. **normalise** (:func:`casesignd.pdf.normalize.rewrite`): one clean rewrite by qpdf,
   with a form that leaves its look to viewers drawn once (:mod:`casesignd.pdf.draw`),
   checked again in full; it must have no findings, and it must show what was
   received. Four readers are asked: pypdf compares the pages' object graphs
   (:func:`casesignd.pdf.normalize.page_digests`), and poppler and MuPDF each draw every
   page of the received document and of the rewrite (:mod:`casesignd.pdf.render`,
   each engine compared with itself). When both engines draw the same pages the
   rewrite is signed, even if pypdf alone reads the original otherwise (the reasons
   say so). Otherwise it is refused ``ambiguous_pdf``: reason ``readers_disagree``
   when no reader agrees with qpdf's rewrite, ``pages_render_differently`` when an
   engine draws a page of it differently (``where``: the page); a document whose
   findings are damage only is refused ``malformed_pdf`` (reason ``damaged``)
   instead. An engine that cannot draw the received document does not agree. A
   document pypdf cannot read at all is refused ``malformed_pdf``: a repair is
   trusted only where independent readers agree on it;
4. **prepare** (:mod:`casesignd.signing.pades`), reusing the parse of step 1 or 3, with the
   one DocMDP rule (:func:`casesignd.signing.pades.check_docmdp`); evidence is embedded, or
   bound by digest when the document carries a signature already;
5. **sign** (:func:`sign_with`) under a key slot; the levels after it are the ladder's.

Steps 1–4 run in one call to a worker process (:func:`prepare_file` for a file,
:func:`prepare_document` for a document in memory; with step 5 when that process
also holds the key: :mod:`casesignd.signing.worker`). :class:`Checked` says what happened, for the audit
trail: the digest received, the digest of what was signed, and why it was rewritten.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pypdf import PdfReader

from casesignd.core.errors import (
    AmbiguousPdf,
    CasesignError,
    MalformedPdf,
    SigningError,
)
from casesignd.core.hashing import file_sha256, sha256_hex
from casesignd.core.sealed import SealedPath, open_plain, plain_size
from casesignd.pdf import normalize, render
from casesignd.pdf.frame import DAMAGE, Finding, Source, object_definitions
from casesignd.pdf.inspect import PdfLimits, PdfReport, inspect_document
from casesignd.signing import cms, pades, sealed_output
from casesignd.signing.keys import KeySigner, ProcessKey
from casesignd.signing.sealed_output import SealedPrepared

SIGN_AS_IS = "as_is"
REWRITE = "rewrite"
REFUSE = "refuse"


@dataclass(frozen=True)
class Checked:
    """What the checks decided about one document."""

    received_sha256: str
    # The document the signature update is appended to: the received one, or its rewrite.
    source_sha256: str
    normalized: bool
    reasons: tuple[str, ...]
    pages: int
    # How evidence is bound: "embedded", or "digest" (the document carried a
    # signature: digests in the signature dictionary, the files not in the document;
    # casesignd.signing.attachments); "" without evidence.
    evidence: str = ""
    # Links and form buttons the signed document has that leave it (their count only).
    external_links: int = 0

    def audit_detail(self) -> dict[str, Any]:
        """For the ``signed`` audit event: digests and structural reasons, no content."""
        detail: dict[str, Any] = {"received_sha256": self.received_sha256,
                                  "normalized": self.normalized}
        if self.normalized:
            detail.update(source_sha256=self.source_sha256, normalize_reasons=list(self.reasons))
        if self.evidence:
            detail.update(evidence=self.evidence)
        if self.external_links:
            detail.update(external_links=self.external_links)
        return detail


def decide(report: PdfReport, normalize_mode: str) -> str:
    """:data:`SIGN_AS_IS`, :data:`REWRITE` or :data:`REFUSE` for a document the checks
    read (``report``). Pure."""
    if report.has_signatures:
        return REFUSE if report.findings else SIGN_AS_IS
    if normalize_mode == "never":
        return REFUSE if report.findings else SIGN_AS_IS
    if report.findings or normalize_mode == "always":
        return REWRITE
    return SIGN_AS_IS


def _sha256(src: Path | SealedPath | bytes) -> str:
    if isinstance(src, SealedPath):
        with src.open() as f:
            return hashlib.file_digest(f, "sha256").hexdigest()  # type: ignore[arg-type]
    return sha256_hex(src) if isinstance(src, bytes) else file_sha256(src)[0]


def check(src: Path | SealedPath | bytes, limits: PdfLimits,
          rewrite_to: Path | SealedPath | None = None, *, digest_source: bool = True
          ) -> tuple[Checked, Path | SealedPath | bytes, PdfReader]:
    """Steps 1–3: the document to sign (``src`` or its rewrite, written to
    ``rewrite_to`` for a path, kept in memory for bytes), what was decided, and the
    reader that read it. Raises the refusal.

    With ``digest_source`` False the caller hashes the document to sign as it copies
    it (:func:`prepare_file`), so that a large file is not read once more only to be
    hashed: ``source_sha256`` is left empty, and so is ``received_sha256`` when that
    document is ``src``. Digests are never taken from a caller's word: a kept
    verdict is keyed by the one computed here."""
    received = _sha256(src) if digest_source else None
    src_for_rewrite: Path | SealedPath | bytes
    try:
        report, reader = inspect_document(src, limits)
    except MalformedPdf as unreadable:
        # A repair is trusted only where two independent readers (pypdf and qpdf)
        # reconstruct the document and show the same pages: pypdf reads it again with
        # the end of its frame restored, or it is refused.
        if limits.normalize == "never":
            raise
        src_for_rewrite, report, reader = _read_assisted(src, limits, unreadable)
    else:
        src_for_rewrite = src
    verdict = decide(report, limits.normalize)
    if verdict == SIGN_AS_IS:
        return Checked(received or "", received or "", False, (), report.pages,
                       external_links=report.external_links), src, reader
    if verdict == REFUSE:
        _close(reader)
        raise report.refusal()
    # One reason once: a form finds the same for each of its fields.
    reasons = tuple(dict.fromkeys(f.reason for f in report.findings))
    try:
        target = None if isinstance(src, bytes) else (rewrite_to or Path(f"{src}.normalized"))
        assert not isinstance(src, SealedPath) or isinstance(target, SealedPath), \
            "a sealed document's rewrite is sealed too"
        rewritten, _warnings, drawn = normalize.rewrite(src_for_rewrite, target)
        try:
            report2, reader2 = inspect_document(rewritten, limits)
            if report2.findings:
                # What qpdf's rewrite still shows two ways is in the document itself.
                _close(reader2)
                raise report2.refusal()
            pypdf_page = _first_differing_page(reader, reader2, limits, drawn.widgets)
            # Every page of the rewrite, drawn by poppler and by MuPDF, against the
            # same engine's drawing of what was received (casesignd.pdf.render). Where
            # pypdf agrees, one engine that differs refuses it; where it does not,
            # both are asked whether any reader agrees with the rewrite.
            engines = render.compare(src, rewritten, pages=report2.pages,
                                        workdir=_directory(target),
                                        stop_at_difference=pypdf_page is None,
                                        # Fields viewers drew their own way are left
                                        # out where pypdf found the rest alike.
                                        masks=render.drawn_boxes(reader2, drawn.viewer_drawn)
                                        if pypdf_page is None else None)
            refusal = render.verdict(pypdf_page, engines)
            if refusal is not None:
                _close(reader2)
                raise _disagreement(report, refusal, engines, reasons)
        except BaseException:
            if not isinstance(rewritten, bytes):
                rewritten.unlink(missing_ok=True)
            raise
    finally:
        _close(reader)
    if not report.findings:
        reasons = ("the policy rewrites every document",)
    if drawn.widgets:
        reasons += (f"the form's appearances were generated: {len(drawn.widgets)} field "
                    "widget(s) drawn once, so that no viewer draws its own",)
    if pypdf_page is not None:
        reasons = (*reasons, PYPDF_ALONE)
    reasons += tuple(f"{e} could not draw the received document: the other readers agree "
                     "on the rewrite" for e, r in engines.items() if r.abstained)
    return (Checked(received or _sha256(src), _sha256(rewritten) if digest_source else "", True,
                    reasons, report2.pages, external_links=report2.external_links),
            rewritten, reader2)


def _directory(target: Path | SealedPath | None) -> Path | None:
    """Where the renderers' private directory goes: beside the rewrite."""
    if target is None:
        return None
    return target.path.parent if isinstance(target, SealedPath) else target.parent


# Documents larger than this are not read again with a restored frame.
ASSIST_MAX_BYTES = 64 * 1024 * 1024
_CATALOG = re.compile(rb"/Type[\x00\t\n\x0c\r ]*/Catalog(?![A-Za-z0-9])")


def _read_assisted(src: Path | SealedPath | bytes, limits: PdfLimits, unreadable: MalformedPdf
                   ) -> tuple[bytes, PdfReport, PdfReader]:
    """pypdf's reading of a document whose frame lost its end (no ``%%EOF``, or no
    trailer at all, as in a truncated file): the same bytes with an end appended —
    ``%%EOF``, or a trailer naming the one catalog the file defines — so that pypdf
    rebuilds the cross-reference by itself. Returns those bytes (qpdf rewrites the
    same, and rebuilds on its own), and pypdf's report, which carries the damage.
    Raises ``unreadable`` when neither helps (or the document carries a signature,
    which a rewrite would break)."""
    data = src if isinstance(src, bytes) else _read_small(src)
    if data is None or b"/ByteRange" in data or not data.lstrip()[:1024].count(b"%PDF-"):
        raise unreadable
    tails = [b"\n%%EOF\n"]
    catalogs = {num for num, defs in object_definitions(Source(data)).items()
                for off, _ in defs[-1:] if _CATALOG.search(data, off, _object_end(data, off))}
    if len(catalogs) == 1:
        root = catalogs.pop()
        tails.append(b"\ntrailer\n<< /Root %d 0 R >>\nstartxref\n0\n%%%%EOF\n" % root)
    for tail in tails:
        try:
            report, reader = inspect_document(data + tail, limits)
        except MalformedPdf:
            continue
        lost = Finding(DAMAGE, "its frame is broken: pypdf read it only with an end "
                               "restored (%%EOF, or a trailer naming its catalog)")
        return data + tail, dataclasses.replace(report, findings=(lost, *report.findings)), reader
    raise unreadable


def _read_small(src: Path | SealedPath) -> bytes | None:
    """The plain bytes of ``src`` up to :data:`ASSIST_MAX_BYTES`, else None."""
    if plain_size(src) > ASSIST_MAX_BYTES:
        return None
    with open_plain(src) as f:
        return f.read()


def _object_end(data: bytes, at: int) -> int:
    """Where the object defined at ``at`` ends (its ``endobj``), looked for in its
    first KiB: a catalog is a small dictionary."""
    end = data.find(b"endobj", at, at + 1024)
    return end if end >= 0 else at + 1024


# Recorded with a rewrite that pypdf alone reads otherwise than the received document.
PYPDF_ALONE = ("pypdf alone read its pages otherwise: qpdf, poppler and MuPDF show the "
               "received pages as rewritten")


def _damaged(report: PdfReport) -> bool:
    """Whether a document's findings are damage only (no two readers repairing it
    alike is then ``malformed_pdf``; anything else is ``ambiguous_pdf``)."""
    return bool(report.findings) and all(f.kind == DAMAGE for f in report.findings)


def _first_differing_page(a: PdfReader, b: PdfReader, limits: PdfLimits,
                          drawn: frozenset[tuple[int, int]] = frozenset()) -> int | None:
    """The first page (1-based) pypdf reads differently in ``a`` and ``b``, but for
    the appearances the rewrite ``drawn``, or None."""
    try:
        x = normalize.page_digests(a, limits.max_objects, drawn)
        y = normalize.page_digests(b, limits.max_objects, drawn)
    except CasesignError:
        raise
    except Exception:  # noqa: BLE001 - a reading pypdf cannot walk shows nothing reliable
        return 1
    for number, (p, q) in enumerate(zip(x, y, strict=False), start=1):
        if p != q:
            return number
    return None if len(x) == len(y) else min(len(x), len(y)) + 1


def _disagreement(report: PdfReport, refusal: tuple[str, int],
                  engines: dict[str, render.EngineResult], findings: tuple[str, ...]
                  ) -> CasesignError:
    """The refusal of a rewrite the readers do not all see as the received document."""
    reason, page = refusal
    detail = {"findings": list(findings),
              "renderers": {e: {"page": r.page, **({"failed": r.failed} if r.failed else {})}
                            for e, r in engines.items()}}
    where = {"page": page}
    if _damaged(report):
        unopened = any(r.failed.startswith("received") for r in engines.values())
        return MalformedPdf(("a viewer cannot draw this damaged PDF" if unopened else
                             "readers repair this damaged PDF differently")
                            + ": what it shows depends on the reader",
                            reason="damaged", where=where, detail=detail)
    if reason == render.READERS_DISAGREE:
        return AmbiguousPdf("readers reconstruct this PDF differently: what it shows depends "
                            "on the reader", reason=reason, where=where, detail=detail)
    return AmbiguousPdf(f"page {page} of the rewritten PDF looks different from the received "
                        "page", reason=reason, where=where, detail=detail)


def _close(reader: PdfReader | None) -> None:
    if reader is not None:
        reader.stream.close()


def check_file(src: Path, limits: PdfLimits, workdir: Path) -> Checked:
    """Steps 1–3 alone, for a file (the rewrite, if any, is removed again)."""
    checked, source, reader = check(src, limits, workdir / f"{src.name}.normalized")
    _close(reader)
    if isinstance(source, Path) and source != src:
        source.unlink(missing_ok=True)
    return checked


def prepare_file(src: Path | SealedPath, dst: Path | SealedPath, *, limits: PdfLimits,
                 attachments: list[pades.Attachment], meta: pades.SignatureMeta,
                 contents_bytes: int, into: sealed_output.Publication | None = None
                 ) -> tuple[Checked, pades.Prepared | SealedPrepared]:
    """Steps 1–4 for a file, in one call (a worker process): ``dst`` receives the
    document to sign with its signing update; nothing else is left behind. The
    document's digest is taken from the copy the update's hash reads, so the digest
    recorded is of the very bytes the signature covers. ``into`` (with a sealed
    ``dst``, which then names only the checks' rewrite): the body goes to that
    artifact's file in flight instead."""
    checked, source, reader = check(src, limits, dst.with_name(dst.name + ".normalized"),
                                    digest_source=False)
    prepared: pades.Prepared | SealedPrepared
    try:
        assert not isinstance(source, bytes)
        if isinstance(dst, SealedPath):
            # Sealed in a temp area: the body sealed, the signature's end held.
            prepared = sealed_output.prepare(source, dst, attachments=attachments, meta=meta,
                                             contents_bytes=contents_bytes, reader=reader,
                                             into=into)
        else:
            assert isinstance(source, Path) and into is None
            prepared = pades.prepare(source, dst, attachments=attachments, meta=meta,
                                     contents_bytes=contents_bytes, reader=reader)
    finally:
        _close(reader)
        if not isinstance(source, bytes) and source != src:
            source.unlink(missing_ok=True)
    copied = prepared.source_sha256
    assert copied, "a prepared file carries the digest of what it copied"
    return dataclasses.replace(checked, received_sha256=checked.received_sha256 or copied,
                               source_sha256=copied, evidence=prepared.evidence), prepared


class Verdicts:
    """The checks' verdicts on documents this process passed as they are, by their
    SHA-256 and the limits they passed under, the most recent ``size`` of them; and
    the structures of the most recent ``structures`` of those documents that are at
    most ``structure_bytes`` long.

    The checks are a function of a document's bytes and its limits, so a document a
    process has passed needs no second reading to pass again: a batch of jobs that
    each sign the same stored contract for another signer pays for its deep checks
    once per worker process, and, for a contract of ordinary size, for reading its
    structure once too (an update only reads it: :func:`casesignd.signing.pades.read_bytes`).
    Only verdicts to sign as is are kept; a refusal or a rewrite is decided afresh
    each time (a refusal may be a budget's, and a rewrite is a new document)."""

    def __init__(self, size: int = 1024, structures: int = 16,
                 structure_bytes: int = 1 << 20) -> None:
        self.size = size
        self.structures = structures
        self.structure_bytes = structure_bytes
        self._kept: dict[tuple[str, PdfLimits], Checked] = {}
        self._structures: dict[str, pades.Structure] = {}

    def get(self, sha256: str, limits: PdfLimits) -> Checked | None:
        checked = self._kept.pop((sha256, limits), None)
        if checked is not None:
            self._kept[(sha256, limits)] = checked  # the most recent again
        return checked

    def keep(self, limits: PdfLimits, checked: Checked) -> None:
        if checked.normalized:
            return
        self._kept[(checked.received_sha256, limits)] = checked
        _trim(self._kept, self.size)

    def structure(self, sha256: str, document: bytes) -> pades.Structure:
        """The structure of a passed ``document`` (whose digest is ``sha256``), read
        once while it stays among the most recent small ones."""
        s = self._structures.pop(sha256, None)
        if s is None:
            s = pades.read_bytes(document)
        if len(document) <= self.structure_bytes:
            self._structures[sha256] = s
            _trim(self._structures, self.structures)
        return s


def _trim(kept: dict[Any, Any], size: int) -> None:
    while len(kept) > size:
        del kept[next(iter(kept))]


# This process's verdicts (each worker process has its own).
VERDICTS = Verdicts()


def prepare_document(document: bytes, *, limits: PdfLimits, meta: pades.SignatureMeta,
                     contents_bytes: int, sha256: str | None = None
                     ) -> tuple[Checked, bytes, pades.PreparedUpdate]:
    """Steps 1–4 for a document in memory: what was decided, the document the update
    goes after (``document`` itself or its rewrite), and the update. A document this
    process already passed as it is (:data:`VERDICTS`) is not checked again, and its
    structure is read once while it is recent. ``sha256``: the document's, when the
    caller has just computed it."""
    sha256 = sha256 or sha256_hex(document)
    known = VERDICTS.get(sha256, limits)
    if known is not None:
        return known, document, pades.prepare_bytes(
            document, meta=meta, contents_bytes=contents_bytes,
            structure=VERDICTS.structure(sha256, document))
    checked, source, reader = check(document, limits)
    assert isinstance(source, bytes)
    try:
        prepared = pades.prepare_bytes(source, meta=meta, contents_bytes=contents_bytes,
                                       reader=reader)
    finally:
        _close(reader)
    VERDICTS.keep(limits, checked)  # only once it was also prepared: DocMDP passed
    return checked, source, prepared


def sign_with(signer: KeySigner | ProcessKey, signed_attrs: bytes) -> bytes:
    """The key operation, any failure of the key as SigningError. Blocking."""
    try:
        return signer.sign(signed_attrs)
    except SigningError:
        raise
    except Exception as e:
        raise SigningError(f"the signing key failed: {type(e).__name__}") from e


# --- the whole pipeline in one thread, for callers with a file ---------------------


def sign_file(
    src: Path,
    dst: Path,
    signer: Any,
    *,
    meta: pades.SignatureMeta,
    attachments: Iterable[pades.Attachment] = (),
    timestamp: Callable[[bytes], bytes] | None = None,
    contents_bytes: int = 16384,
    limits: PdfLimits | None = None,
) -> pades.SignOutcome:
    """Every step for ``src``, signed into ``dst`` by ``signer`` (a
    :class:`casesignd.signing.keys.KeySigner`); ``timestamp`` maps the signature value to an
    RFC 3161 TimeStampToken (PAdES B-T). Nothing is left at ``dst`` on a refusal."""
    src, dst = Path(src), Path(dst)
    checked, prepared = prepare_file(src, dst, limits=limits or PdfLimits(),
                                     attachments=list(attachments), meta=meta,
                                     contents_bytes=contents_bytes)
    try:
        template = cms.template_for(signer.cert, tuple(signer.chain))
        signed_attrs = cms.build_signed_attrs(prepared.digest, template)
        signature = sign_with(signer, signed_attrs)
        token = timestamp(signature) if timestamp is not None else None
        der = cms.assemble(template, signed_attrs, signature, token)
        assert isinstance(prepared, pades.Prepared)  # a plain destination
        pades.finalize(prepared, der)
    except BaseException:
        dst.unlink(missing_ok=True)
        raise
    return pades.SignOutcome(prepared.path, prepared.size, len(der), token is not None, checked)


__all__ = ["VERDICTS", "Checked", "Finding", "Verdicts", "check", "check_file", "decide",
           "prepare_document", "prepare_file", "sign_file", "sign_with"]
