"""One full, clean rewrite of a PDF by one reader: qpdf (through pikepdf).

A document whose readers may disagree (see :mod:`casesignd.pdf.frame`) is read once by
qpdf, which repairs what it can the way rebuilding readers do, and written again as a
single revision: a header at offset 0, every reachable object once under its own
number, one classic cross-reference table, ``%%EOF`` at the end and nothing around it.
Unreachable objects are dropped. Stream data is copied as it is (not decoded, not
recompressed), page attributes stay where they were inherited from, and the file ID
is derived from the content, so the same document always gives the same rewrite.
A form that leaves its look to viewers (/NeedAppearances, or a widget's state not
chosen) is drawn once before the save (:mod:`casesignd.pdf.draw`): the only objects the
rewrite adds or changes.

qpdf is the reader here because it is the most careful repairer in wide use and what
poppler and pdf.js agree with on rebuilt files; the rewrite is then checked again by
:mod:`casesignd.pdf.inspect` like any document (:mod:`casesignd.signing.pipeline`).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pypdf import PdfReader
from pypdf import generic as g

from casesignd.core.errors import AmbiguousPdf, EncryptedPdf, LimitExceeded, MalformedPdf
from casesignd.core.sealed import SealedPath
from casesignd.core.sealed_view import SealedView

if TYPE_CHECKING:
    from casesignd.pdf.draw import Drawn


def rewrite(src: Path | SealedPath | bytes, dst: Path | SealedPath | None = None, *,
            draw_forms: bool = True) -> tuple[Path | SealedPath | bytes, tuple[str, ...], Drawn]:
    """Rewrite ``src`` (a path or the document) into ``dst`` (or into bytes when ``dst``
    is None); return the rewrite, qpdf's repair warnings, and what of its form was
    drawn. With ``draw_forms`` the form's appearances that viewers would draw
    themselves are drawn once (:func:`casesignd.pdf.draw.complete`), before the save, so
    that the rewrite checked is the one signed; without, the rewrite is qpdf's reading
    alone.

    Raises :class:`EncryptedPdf` for any security handler (qpdf opens an
    owner-password-only file: it is refused all the same), :class:`MalformedPdf`
    when qpdf cannot make a document of it.
    """
    import pikepdf  # the normalisation path only: most documents never need it

    # A sealed file is read by qpdf through its decrypting stream (pikepdf reads a
    # seekable stream as it would the file), and a sealed rewrite is written through
    # one: qpdf never sees a path of plain bytes.
    with contextlib.ExitStack() as held:
        source: io.BytesIO | io.BufferedReader | Path = (
            io.BytesIO(src) if isinstance(src, bytes)
            else held.enter_context(src.open()) if isinstance(src, SealedPath) else src)
        return _rewrite(pikepdf, source, src, dst, draw_forms)


def _rewrite(pikepdf: Any, source: Any, src: Path | SealedPath | bytes,
             dst: Path | SealedPath | None, draw_forms: bool
             ) -> tuple[Path | SealedPath | bytes, tuple[str, ...], Drawn]:
    from casesignd.pdf import draw as pdfdraw

    try:
        pdf = pikepdf.open(source, suppress_warnings=True, attempt_recovery=True,
                           inherit_page_attributes=False)
    except pikepdf.PasswordError:
        raise EncryptedPdf("the PDF is encrypted") from None
    except pikepdf.PdfError as e:
        # qpdf's message starts with the file's name, which says nothing of the error.
        if "encrypt" in str(e).replace(str(src) if isinstance(src, Path) else "", "").lower():
            raise EncryptedPdf("the PDF is encrypted with an unsupported security handler",
                               detail={"library": str(e)[:300]}) from None
        raise MalformedPdf("the PDF is damaged beyond repair",
                           detail={"library": str(e)[:500]}) from None
    except (RuntimeError, ValueError, OSError) as e:
        raise MalformedPdf("the PDF is damaged beyond repair",
                           detail={"library": f"{type(e).__name__}: {e}"[:500]}) from None
    with pdf:
        if pdf.is_encrypted:
            raise EncryptedPdf("the PDF is encrypted")
        if "/Size" not in pdf.trailer:
            # A trailer qpdf rebuilt from nothing (a truncated file) has none, and
            # readers need one (PDF 32000-1 §7.5.5); qpdf writes the right value.
            pdf.trailer.Size = 0
        drawn = pdfdraw.Drawn()
        if draw_forms:
            try:
                drawn = pdfdraw.complete(pdf)
            except Exception as e:  # noqa: BLE001 - qpdf and pikepdf raise many types on a hostile form
                # Half drawn, the form would be neither the received one nor a whole
                # drawing: it stays for viewers to draw, which is refused.
                raise AmbiguousPdf("the PDF's form leaves its appearances to viewers and "
                                   "cannot be drawn", reason="viewer_drawn_form",
                                   detail={"library": f"{type(e).__name__}: {e}"[:500]}) from None
        out: io.BytesIO | Path | SealedPath = io.BytesIO() if dst is None else dst
        try:
            if isinstance(out, SealedPath):
                with out.create() as sealing:
                    _save(pikepdf, pdf, sealing)
            else:
                _save(pikepdf, pdf, out)
        except (pikepdf.PdfError, RuntimeError, ValueError) as e:
            if dst is not None:
                dst.unlink(missing_ok=True)
            raise MalformedPdf("the PDF cannot be rewritten",
                               detail={"library": f"{type(e).__name__}: {e}"[:500]}) from None
        warnings = tuple(str(w)[:200] for w in pdf.get_warnings()[:20])
    return (out.getvalue() if isinstance(out, io.BytesIO) else out), warnings, drawn


def _save(pikepdf: Any, pdf: Any, out: Any) -> None:
    pdf.save(out, fix_metadata_version=False, compress_streams=False,
             stream_decode_level=pikepdf.StreamDecodeLevel.none,
             object_stream_mode=pikepdf.ObjectStreamMode.disable,
             deterministic_id=True, preserve_pdfa=False)


# --- do two readings show the same pages? -------------------------------------------

# Keys that point back up the tree or hold numbering that a rewrite renumbers or drops;
# everything else of a page (content, resources, annotations, boxes) is compared.
_BACKLINKS = frozenset({"/Parent", "/P", "/StructParents", "/StructParent", "/Length",
                        "/PieceInfo", "/LastModified"})
# What the rewrite sets of a widget whose form it drew (casesignd.pdf.draw): left out
# of that widget's digest alone, in both readings. /V too: qpdf names a check box's
# value by the widget's own on-state (/Yes becomes /yes where that is the state).
_DRAWN_KEYS = frozenset({"/AP", "/AS", "/V"})


def page_digests(reader: PdfReader, max_nodes: int = 1_000_000,
                 drawn: frozenset[tuple[int, int]] = frozenset()) -> list[bytes]:
    """A digest per page of everything the page shows: its object graph (content
    streams by their bytes, resources, annotations, boxes), object numbers left out,
    so that a rewrite that renumbers objects gives the same digests. Pages reached
    from a page (a link's destination) count by their index. The widgets ``drawn``
    names, as (page index, index in its /Annots), are digested without their
    appearance and state (the rewrite drew them). Raises
    :class:`~casesignd.core.errors.LimitExceeded` past ``max_nodes`` objects."""
    pages = list(reader.pages)
    index = {(p.indirect_reference.idnum, p.indirect_reference.generation): i
             for i, p in enumerate(pages) if p.indirect_reference is not None}
    masked = _annotations(pages, drawn)
    memo: dict[tuple[int, int], bytes] = {}
    count = [0]

    def digest(obj: Any, path: tuple[tuple[int, int], ...], drawn_here: bool = False) -> bytes:
        count[0] += 1
        if count[0] > max_nodes:
            raise LimitExceeded("the PDF has too many objects to compare its readings",
                                reason="too_many_objects")
        if isinstance(obj, g.IndirectObject):
            ref = (obj.idnum, obj.generation)
            if ref in index and path:
                return b"page:%d" % index[ref]
            if ref in path:
                return b"cycle:%d" % path.index(ref)
            if ref in memo:
                return memo[ref]
            value = digest(obj.get_object(), (*path, ref), ref in masked)
            memo[ref] = value
            return value
        h = hashlib.sha256()
        if isinstance(obj, g.StreamObject):
            h.update(b"stream")
            data = obj._data
            if isinstance(data, SealedView):  # a large stream of a sealed file
                inner = hashlib.sha256()
                for chunk in data.chunks():
                    inner.update(chunk)
                h.update(inner.digest())
            else:
                h.update(hashlib.sha256(data).digest())
        if isinstance(obj, g.DictionaryObject):
            h.update(b"dict")
            skip = _BACKLINKS | _DRAWN_KEYS if drawn_here or id(obj) in masked else _BACKLINKS
            for key in sorted(k for k in obj if k not in skip):
                h.update(key.encode("utf-8", "replace") + b"=" +
                         digest(dict.__getitem__(obj, key), path))
        elif isinstance(obj, g.ArrayObject):
            h.update(b"array")
            for item in list.__iter__(obj):
                h.update(digest(item, path))
        elif isinstance(obj, g.NullObject) or obj is None:
            h.update(b"null")
        else:
            h.update(type(obj).__name__.encode() + b":" + repr(obj).encode("utf-8", "replace"))
        return h.digest()

    out = []
    for page in pages:
        ref = page.indirect_reference
        out.append(digest(ref if ref is not None else page, ()))
    return out


def _annotations(pages: list[Any], at: frozenset[tuple[int, int]]) -> set[Any]:
    """The annotations at (page index, index in its /Annots): by (number, generation),
    and by identity those that are direct objects."""
    found: set[Any] = set()
    for p, i in at:
        if not 0 <= p < len(pages):
            continue
        annots = dict.get(pages[p], "/Annots")
        if isinstance(annots, g.IndirectObject):
            annots = annots.get_object()
        if not isinstance(annots, g.ArrayObject) or not 0 <= i < len(annots):
            continue
        item = list.__getitem__(annots, i)
        found.add((item.idnum, item.generation) if isinstance(item, g.IndirectObject)
                  else id(item))
    return found
