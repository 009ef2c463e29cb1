"""One full, clean rewrite of a PDF by one reader: qpdf (through pikepdf).

A document whose readers may disagree (see :mod:`casesignd.pdfframe`) is read once by
qpdf, which repairs what it can the way rebuilding readers do, and written again as a
single revision: a header at offset 0, every reachable object once under its own
number, one classic cross-reference table, ``%%EOF`` at the end and nothing around it.
Unreachable objects are dropped. Stream data is copied as it is (not decoded, not
recompressed), page attributes stay where they were inherited from, and the file ID
is derived from the content, so the same document always gives the same rewrite.

qpdf is the reader here because it is the most careful repairer in wide use and what
poppler and pdf.js agree with on rebuilt files; the rewrite is then checked again by
:mod:`casesignd.pdfcheck` like any document (:mod:`casesignd.pipeline`).
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

from pypdf import PdfReader
from pypdf import generic as g

from .errors import EncryptedPdf, LimitExceeded, MalformedPdf


def rewrite(src: Path | bytes, dst: Path | None = None) -> tuple[Path | bytes, tuple[str, ...]]:
    """Rewrite ``src`` (a path or the document) into ``dst`` (or into bytes when ``dst``
    is None); return the rewrite and qpdf's repair warnings.

    Raises :class:`EncryptedPdf` for any security handler (qpdf opens an
    owner-password-only file: it is refused all the same), :class:`MalformedPdf`
    when qpdf cannot make a document of it.
    """
    import pikepdf  # the normalisation path only: most documents never need it

    source = io.BytesIO(src) if isinstance(src, bytes) else src
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
        out: io.BytesIO | Path = io.BytesIO() if dst is None else dst
        try:
            pdf.save(out, fix_metadata_version=False, compress_streams=False,
                     stream_decode_level=pikepdf.StreamDecodeLevel.none,
                     object_stream_mode=pikepdf.ObjectStreamMode.disable,
                     deterministic_id=True, preserve_pdfa=False)
        except (pikepdf.PdfError, RuntimeError, ValueError) as e:
            if dst is not None:
                dst.unlink(missing_ok=True)
            raise MalformedPdf("the PDF cannot be rewritten",
                               detail={"library": f"{type(e).__name__}: {e}"[:500]}) from None
        warnings = tuple(str(w)[:200] for w in pdf.get_warnings()[:20])
    return (out.getvalue() if isinstance(out, io.BytesIO) else out), warnings


# --- do two readings show the same pages? -------------------------------------------

# Keys that point back up the tree or hold numbering that a rewrite renumbers or drops;
# everything else of a page (content, resources, annotations, boxes) is compared.
_BACKLINKS = frozenset({"/Parent", "/P", "/StructParents", "/StructParent", "/Length",
                        "/PieceInfo", "/LastModified"})


def page_digests(reader: PdfReader, max_nodes: int = 1_000_000) -> list[bytes]:
    """A digest per page of everything the page shows: its object graph (content
    streams by their bytes, resources, annotations, boxes), object numbers left out,
    so that a rewrite that renumbers objects gives the same digests. Pages reached
    from a page (a link's destination) count by their index. Raises
    :class:`~casesignd.errors.LimitExceeded` past ``max_nodes`` objects."""
    pages = list(reader.pages)
    index = {(p.indirect_reference.idnum, p.indirect_reference.generation): i
             for i, p in enumerate(pages) if p.indirect_reference is not None}
    memo: dict[tuple[int, int], bytes] = {}
    count = [0]

    def digest(obj: Any, path: tuple[tuple[int, int], ...]) -> bytes:
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
            value = digest(obj.get_object(), (*path, ref))
            memo[ref] = value
            return value
        h = hashlib.sha256()
        if isinstance(obj, g.StreamObject):
            h.update(b"stream")
            h.update(hashlib.sha256(obj._data).digest())
        if isinstance(obj, g.DictionaryObject):
            h.update(b"dict")
            for key in sorted(k for k in obj if k not in _BACKLINKS):
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
