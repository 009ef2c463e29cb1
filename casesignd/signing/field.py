"""Signing into a signature field the document already has (PDF 32000-1 §12.7.4.5).

Contracts from Word, LibreOffice and Acrobat often arrive with empty signature fields
placed by their author ("Seller", "Buyer"). A request that names one is signed in it:
the field's /V is set to the new signature dictionary (§12.8.1) and nothing else of
the field moves, so its widget keeps its own rectangle, page and appearance, and a
later signature into another field finds the form as the author made it.

The field is looked up by its fully qualified name (§12.7.3.2) before the key is used:
a name that is not a signature field is ``signature_field_not_found``, a field that
holds a signature already is ``signature_field_already_signed``. Both are refusals of
the document, with ``where`` naming the field.

A field's own /Lock (Table 233) is the author's word on what the signature locks: it
is kept, and the signature records it as its FieldMDP transform (§12.8.2.4), instead
of the service's own lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pypdf import generic as g

from casesignd.core.errors import PermanentJobError
from casesignd.pdf.form import MAX_DEPTH, MAX_FIELD_NAME_CHARS, MAX_FIELDS
from casesignd.pdf.syntax import pdf_text, raw, resolved


@dataclass(frozen=True)
class ExistingField:
    """An empty signature field: its reference and dictionary, and the widget that
    shows it (the field itself when merged, §12.7.4.5, else its only kid)."""

    ref: g.IndirectObject
    field: g.DictionaryObject
    widget: g.DictionaryObject
    widget_ref: g.IndirectObject

    @property
    def rect(self) -> tuple[float, float, float, float]:
        """The widget's rectangle (§12.5.2, Table 168), normalized so x1<=x2, y1<=y2."""
        r = resolved(self.widget, "/Rect")
        if not isinstance(r, g.ArrayObject) or len(r) != 4:
            return (0.0, 0.0, 0.0, 0.0)
        x1, y1, x2, y2 = (float(v.get_object()) for v in r)
        return (min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2))


def _refused(message: str, code: str, name: str) -> PermanentJobError:
    return PermanentJobError(message, code=code, reason=code,
                             where={"field": name[:MAX_FIELD_NAME_CHARS]}, field="signature.field")


def find_empty_field(catalog: g.DictionaryObject, name: str) -> ExistingField:
    """The empty signature field whose fully qualified name is ``name``; refuse one
    that is missing, not a signature field, or signed already."""
    acro = resolved(catalog, "/AcroForm")
    fields = resolved(acro, "/Fields") if isinstance(acro, g.DictionaryObject) else None
    found = _walk(fields if isinstance(fields, g.ArrayObject) else [], name)
    if found is None:
        raise _refused("the document has no signature field of that name",
                       "signature_field_not_found", name)
    ref, node, ft = found
    if ft != "/Sig":
        raise _refused("the field of that name is not a signature field",
                       "signature_field_not_found", name)
    if "/V" in node:
        raise _refused("the signature field holds a signature already",
                       "signature_field_already_signed", name)
    kids = resolved(node, "/Kids")
    widget, widget_ref = node, ref
    if isinstance(kids, g.ArrayObject) and kids and isinstance(kids[0], g.IndirectObject):
        # A field with separate widgets (§12.7.3.1): the first one shows the signature.
        kid = kids[0].get_object()
        if isinstance(kid, g.DictionaryObject):
            widget, widget_ref = kid, kids[0]
    return ExistingField(ref, node, widget, widget_ref)


def _walk(fields: Any, name: str) -> tuple[g.IndirectObject, g.DictionaryObject, Any] | None:
    """The field named ``name`` in the tree under ``fields``, with its (inherited) /FT;
    bounded as :func:`casesignd.pdf.form.read_form` is."""
    todo: list[tuple[Any, str, Any, int]] = [(ref, "", None, 0) for ref in reversed(list(fields))]
    seen: set[tuple[int, int]] = set()
    while todo:
        ref, parent, inherited_ft, depth = todo.pop()
        if depth > MAX_DEPTH or len(seen) >= MAX_FIELDS or not isinstance(ref, g.IndirectObject):
            continue
        if (ref.idnum, ref.generation) in seen:
            continue
        seen.add((ref.idnum, ref.generation))
        node = ref.get_object()
        if not isinstance(node, g.DictionaryObject) or raw(node, "/T") is None:
            continue  # a widget of its parent, not a field
        qualified = f"{parent}.{resolved(node, '/T')}" if parent else str(resolved(node, "/T"))
        ft = resolved(node, "/FT") or inherited_ft
        if qualified == name:
            return ref, node, ft
        if name.startswith(qualified + "."):
            kids = resolved(node, "/Kids")
            todo.extend((k, qualified, ft, depth + 1)
                        for k in reversed(list(kids if isinstance(kids, g.ArrayObject) else [])))
    return None


def fill_field(s: Any, existing: ExistingField, sig_num: int,
               catalog: g.DictionaryObject, extra: list[tuple[int, int, g.PdfObject]]
               ) -> g.DictionaryObject:
    """The document's empty signature field with its /V set (§12.7.4.5): it stays in
    /Fields and its widget in its page's /Annots, where its author put them."""
    field = g.DictionaryObject(existing.field)
    field[g.NameObject("/V")] = g.IndirectObject(sig_num, 0, None)  # type: ignore[arg-type]
    if not s.signed:  # as casesignd.signing.pades does for a new field: SignaturesExist | AppendOnly (§12.7.2)
        acro_raw = raw(s.catalog, "/AcroForm")
        acro = g.DictionaryObject(acro_raw.get_object())  # find_empty_field found one
        acro[g.NameObject("/SigFlags")] = g.NumberObject(3)
        if isinstance(acro_raw, g.IndirectObject):
            extra.append((acro_raw.idnum, acro_raw.generation, acro))
        else:
            catalog[g.NameObject("/AcroForm")] = acro
    return field


def own_lock_reference(field: g.DictionaryObject, root_ref: g.IndirectObject) -> bytes | None:
    """The /Reference entry recording the field's own /Lock as a FieldMDP transform
    (Tables 253 and 256), or None when the field has no lock."""
    lock = resolved(field, "/Lock")
    if not isinstance(lock, g.DictionaryObject):
        return None
    action = resolved(lock, "/Action")
    params = b"/Action " + (str(action).encode() if action in ("/All", "/Include", "/Exclude")
                            else b"/All")
    listed = resolved(lock, "/Fields")
    if action in ("/Include", "/Exclude") and isinstance(listed, g.ArrayObject):
        params += b" /Fields [" + b" ".join(pdf_text(str(n.get_object())) for n in listed) + b"]"
    return (b"/Reference [<</Type /SigRef /TransformMethod /FieldMDP /Data %d %d R"
            b" /TransformParams <</Type /TransformParams " % (root_ref.idnum, root_ref.generation)
            + params + b" /V /1.2>>>>]")


# --- a new field's place, and the stamp's geometry ------------------------------------


Box = tuple[float, float, float, float]


def _refused_box(message: str, page: int) -> PermanentJobError:
    return PermanentJobError(message, code="signature_box_off_page", reason="signature_box_off_page",
                             where={"page": page}, field="signature.box")


def page_at(reader: Any, page: int) -> tuple[int, g.IndirectObject, g.DictionaryObject]:
    """The page numbered ``page`` (1 the first, -1 the last): (its number from 1, its
    reference, its dictionary)."""
    count = len(reader.pages)
    index = page - 1 if page > 0 else count + page
    if not 0 <= index < count:
        raise _refused_box(f"the document has no page {page}", page)
    p = reader.pages[index]
    return index + 1, p.indirect_reference, p


def check_box(page: Any, number: int, box: Box) -> Box:
    """``box`` if it lies on the page: inside its crop box (§14.11.2, inherited from
    the page tree and defaulting to the media box, as pypdf reads it), which need not
    start at 0,0."""
    crop = page.cropbox
    x1, y1, x2, y2 = min(box[0], box[2]), min(box[1], box[3]), max(box[0], box[2]), max(box[1], box[3])
    left, bottom = min(float(crop.left), float(crop.right)), min(float(crop.bottom), float(crop.top))
    right, top = max(float(crop.left), float(crop.right)), max(float(crop.bottom), float(crop.top))
    if x2 - x1 < 1 or y2 - y1 < 1 or x1 < left or y1 < bottom or x2 > right or y2 > top:
        raise _refused_box(f"the signature box is not inside page {number}'s crop box", number)
    return (x1, y1, x2, y2)


def rotation(page: Any) -> int:
    """The page's /Rotate (inherited from the page tree, §7.7.3.4), as 0, 90, 180 or
    270; 0 for what is not a page."""
    node = page
    for _ in range(MAX_DEPTH):
        if not isinstance(node, g.DictionaryObject):
            return 0
        value = resolved(node, "/Rotate")
        if isinstance(value, int):
            return value % 360 // 90 * 90
        node = resolved(node, "/Parent")
    return 0


# The appearance's /Matrix for a page shown turned clockwise by /Rotate (§12.5.5): the
# stamp is turned back, so it reads upright on screen.
_MATRIX = {0: (1, 0, 0, 1), 90: (0, 1, -1, 0), 180: (-1, 0, 0, -1), 270: (0, -1, 1, 0)}


def upright(rect: Box, rotate: int) -> tuple[float, float, tuple[int, int, int, int]]:
    """The stamp's width and height as the reader sees them on a page turned by
    ``rotate``, and the matrix that turns it so (pure)."""
    w, h = rect[2] - rect[0], rect[3] - rect[1]
    if rotate in (90, 270):
        w, h = h, w
    return w, h, _MATRIX.get(rotate, _MATRIX[0])


def appearance(rect: Box, rotate: int, lines: tuple[str, ...], new_num: Any, logo: bytes = b""
               ) -> tuple[g.DictionaryObject, list[tuple[int, bytes]]]:
    """The widget's /AP for the stamp over ``rect`` (with ``logo``, a PNG or JPEG, when
    given), and the objects it needs."""
    from casesignd.signing import stamp

    w, h, matrix = upright(rect, rotate)
    form_num, bodies = stamp.form(lines, w, h, new_num, matrix, logo)
    ap = g.DictionaryObject({g.NameObject("/N"): g.IndirectObject(form_num, 0, None)})  # type: ignore[arg-type]
    return ap, bodies


# --- certification (DocMDP, §12.8.2.2) --------------------------------------------------
# A policy's certify names its permission: casesignd.core.appearance.CERTIFY_P.


def certify(s: Any, p: int, sig_num: int, catalog: g.DictionaryObject, reference: bytes) -> bytes:
    """Make the signature ``sig_num`` the document's certification with permission
    ``p``: the catalog's /Perms /DocMDP names it (§12.8.2.2, Table 258), and its
    /Reference gains the DocMDP transform (Table 253) before ``reference``'s FieldMDP.
    Only a document's first signature may certify (§12.8.1): one that carries a
    signature already is refused ``certification_not_first``."""
    if s.signed:
        raise PermanentJobError("the policy certifies, and the document carries a signature "
                                "already: only the first signature may certify",
                                code="certification_not_first", reason="certification_not_first")
    perms = resolved(catalog, "/Perms")
    perms = g.DictionaryObject(perms) if isinstance(perms, g.DictionaryObject) else g.DictionaryObject()
    perms[g.NameObject("/DocMDP")] = g.IndirectObject(sig_num, 0, None)  # type: ignore[arg-type]
    catalog[g.NameObject("/Perms")] = perms
    docmdp = (b"<</Type /SigRef /TransformMethod /DocMDP"
              b" /TransformParams <</Type /TransformParams /P %d /V /1.2>>>>" % p)
    if not reference:
        return b"/Reference [" + docmdp + b"]"
    return reference.replace(b"/Reference [", b"/Reference [" + docmdp + b" ", 1)
