"""The rules casesignd adds on top of pyHanko's difference analysis, for
:mod:`casesignd.verify.validate`: what the revisions after a signature may change, judged as the
signer allowed it (ETSI EN 319 142-1 §5.4; PDF 32000-1 §12.8.2 DocMDP and FieldMDP).

pyHanko's ``DEFAULT_DIFF_POLICY`` answers first. Two rules then change its answer:

- ``explain_revisions``: when pyHanko calls a later revision ``other`` (or refuses it),
  the revision is read again object by object, and accepted when every object it
  writes is one of: a form field or widget whose value or appearance changed
  (``form_filling``; a field the signature's FieldMDP lock names, or any under DocMDP
  P=1, is not), the form's field list or a page's annotation list grown by new
  signature fields only, the catalog's /AcroForm, /DSS, /Metadata, /Extensions or
  /Version entries, the keys of a document security store or of its VRI dictionaries,
  the document information dictionary or the XMP metadata (``lta_updates``), a
  cross-reference or object stream, a new object. This
  accepts what pyHanko refuses only for the way the objects are reached (a widget's
  /P back to its page, as every Acrobat form has), never a change to a page's content,
  resources or boxes, an existing stream, or a freed object.
- ``overlays``: a widget a later revision adds or gives a new appearance, visible, that
  paints more than text (a filled area, an image, a shading, a form XObject) covers
  what the signer saw (the shadow attacks' "replace" and an overlay on an empty
  signature field; Mainka, Mladenov, Rohlmann, NDSS 2021): ``other``, whatever
  pyHanko said. A background the form declared at signing time (/MK /BG) and the
  widget of a signature that was then signed are not overlays.

Each rule is a pure function of the reader and the signed revision, and each has a
test of its own (tests/unit/test_verify_rules.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from pyhanko.pdf_utils import generic
from pyhanko.pdf_utils.reader import HistoricalResolver, PdfFileReader
from pyhanko.sign.diff_analysis import ModificationLevel
from pyhanko.sign.fields import FieldMDPSpec, MDPPerm

_FILL_KEYS = frozenset({"/V", "/AP", "/AS"})
_FORM_KEYS = frozenset({"/Fields", "/SigFlags", "/NeedAppearances", "/DR", "/DA"})
_DSS_KEYS = frozenset({"/Type", "/Certs", "/OCSPs", "/CRLs", "/VRI",
                       "/Cert", "/OCSP", "/CRL", "/TU", "/TS"})
_CATALOG_KEYS = {"/AcroForm": ModificationLevel.NONE, "/DSS": ModificationLevel.LTA_UPDATES,
                 "/Metadata": ModificationLevel.LTA_UPDATES,
                 "/Extensions": ModificationLevel.LTA_UPDATES,
                 "/Version": ModificationLevel.LTA_UPDATES}
# Content stream operators that paint more than glyphs (PDF 32000-1 §8.5.3 fills,
# §8.8 and §8.10 XObjects, §8.7.4.2 shadings, §8.9.7 inline images).
_PAINT = frozenset({b"f", b"F", b"f*", b"B", b"B*", b"b", b"b*", b"Do", b"sh", b"BI"})
_STRINGS = re.compile(rb"\((?:\\.|[^\\()])*\)|<[0-9A-Fa-f\s]*>", re.S)
_HIDDEN = 2 | 32  # annotation flags Hidden and NoView (PDF 32000-1 §12.5.3)


def explain_revisions(reader: PdfFileReader, signed_revision: int,
                      lock: FieldMDPSpec | None, docmdp: MDPPerm | None) -> ModificationLevel | None:
    """The level of what the revisions after ``signed_revision`` change, when every
    object they write is of a kind the module's docstring lists; else None."""
    worst = ModificationLevel.NONE
    for rev in range(signed_revision + 1, reader.xrefs.total_revisions):
        level = _explain_revision(reader, rev, lock, docmdp)
        if level is None:
            return None
        worst = max(worst, level)
    return worst


def _explain_revision(reader: PdfFileReader, rev: int, lock: FieldMDPSpec | None,
                      docmdp: MDPPerm | None) -> ModificationLevel | None:
    old, new = reader.get_historical_resolver(rev - 1), reader.get_historical_resolver(rev)
    if list(new.refs_freed_in_revision()):
        return None
    root_ref = new.root_ref
    form_ref = _raw_ref(new.root, "/AcroForm")
    dss_ref = _raw_ref(new.root, "/DSS")
    info_ref = _raw_ref(new.trailer_view, "/Info")
    pages = _page_refs(old)
    worst = ModificationLevel.NONE
    for ref in new.explicit_refs_in_revision():
        before, after = _get(old, ref), _get(new, ref)
        if before is None:
            continue  # a new object: judged where an older object comes to use it
        if isinstance(after, generic.StreamObject) or isinstance(before, generic.StreamObject):
            if isinstance(after, generic.StreamObject) and _val(after, "/Type") in ("/XRef", "/ObjStm"):
                continue
            if ref == _raw_ref(new.root, "/Metadata"):
                worst = max(worst, ModificationLevel.LTA_UPDATES)
                continue
            return None  # an existing stream rewritten: a page's content, an appearance
        if not (isinstance(before, generic.DictionaryObject)
                and isinstance(after, generic.DictionaryObject)):
            return None  # an array or a value rewritten in place: pyHanko's to judge
        changed = _changed_keys(before, after)
        level: ModificationLevel | None
        if ref == root_ref:
            level = _catalog(changed)
        elif ref == info_ref:
            level = ModificationLevel.LTA_UPDATES
        elif ref == dss_ref or _in_dss(new, ref):
            # Only the keys of a DSS or a VRI entry (ETSI EN 319 142-1 §5.4.2): an object
            # that is also a page or a field would change more than those.
            level = ModificationLevel.LTA_UPDATES if changed <= _DSS_KEYS else None
        elif ref == form_ref:
            level = (ModificationLevel.FORM_FILLING if changed <= _FORM_KEYS
                     and _kept(before, after, "/Fields")
                     and _only_signature_fields_added(before, after, "/Fields") else None)
        elif _val(after, "/Type") == "/Page":
            level = _page(before, after, changed)
        elif _is_field(after) and ref not in pages:
            level = _fill(after, changed, lock, docmdp)
        else:
            level = None
        if level is None:
            return None
        worst = max(worst, level)
    if worst >= ModificationLevel.FORM_FILLING and docmdp == MDPPerm.NO_CHANGES:
        return None
    return worst


def _page_refs(handler: HistoricalResolver) -> set[generic.Reference]:
    """The page tree's nodes in ``handler``'s revision: a field's keys on a page
    dictionary are not a field."""
    out: set[generic.Reference] = set()
    todo = [handler.root.raw_get("/Pages")]
    while todo and len(out) < 100_000:
        item = todo.pop()
        if not isinstance(item, generic.IndirectObject) or item.reference in out:
            continue
        out.add(item.reference)
        node = item.get_object()
        if isinstance(node, generic.DictionaryObject):
            todo += _raw_list(node, "/Kids")
    return out


def _catalog(changed: set[str]) -> ModificationLevel | None:
    if not changed <= set(_CATALOG_KEYS):
        return None
    return max((_CATALOG_KEYS[k] for k in changed), default=ModificationLevel.NONE)


def _page(before: generic.DictionaryObject, after: generic.DictionaryObject,
          changed: set[str]) -> ModificationLevel | None:
    """A page whose only change is new form widgets in its /Annots."""
    if changed != {"/Annots"} or not _kept(before, after, "/Annots"):
        return None
    if not _only_signature_fields_added(before, after, "/Annots"):
        return None  # an annotation that is no signature field's widget
    return ModificationLevel.FORM_FILLING


def _only_signature_fields_added(before: generic.DictionaryObject,
                                 after: generic.DictionaryObject, key: str) -> bool:
    """Whether every entry ``after[key]`` has and ``before[key]`` had not is a signature
    field's widget (as pyHanko's SigFieldCreationRule: a later signer adds its own field;
    a new text field is new content)."""
    old = {_ref_of(a) for a in _raw_list(before, key)}
    for item in _raw_list(after, key):
        if _ref_of(item) in old:
            continue
        obj = item.get_object() if isinstance(item, generic.IndirectObject) else item
        if not (isinstance(obj, generic.DictionaryObject) and _field_type(obj) == "/Sig"):
            return False
    return True


def _field_type(obj: generic.DictionaryObject) -> object:
    node: Any = obj
    for _ in range(32):
        if not isinstance(node, generic.DictionaryObject):
            return None
        if "/FT" in node:
            return _val(node, "/FT")
        node = _val(node, "/Parent")
    return None


def _fill(after: generic.DictionaryObject, changed: set[str], lock: FieldMDPSpec | None,
          docmdp: MDPPerm | None) -> ModificationLevel | None:
    """A field's value or appearance, outside the signature's FieldMDP lock."""
    if not changed <= _FILL_KEYS:
        return None
    if "/V" in changed and lock is not None and lock.is_locked(field_name(after)):
        return None
    return ModificationLevel.FORM_FILLING


def overlays(reader: PdfFileReader, signed_revision: int) -> list[str]:
    """Widgets that later revisions made paint over the page (see the module's
    docstring), in words."""
    found: list[str] = []
    for rev in range(signed_revision + 1, reader.xrefs.total_revisions):
        old, new = reader.get_historical_resolver(rev - 1), reader.get_historical_resolver(rev)
        for ref in new.explicit_refs_in_revision():
            after = _get(new, ref)
            if not (isinstance(after, generic.DictionaryObject) and _val(after, "/Subtype") == "/Widget"):
                continue
            before = _get(old, ref)
            # Only a new appearance counts: a checkbox or radio button switched to
            # another of the appearances it had when signed (/AS) shows what the
            # signer's document already held.
            if isinstance(before, generic.DictionaryObject) and "/AP" not in _changed_keys(before, after):
                continue
            if _hidden(after) or _signed_signature(after):
                continue
            declared_bg = isinstance(before, generic.DictionaryObject) and _has_bg(before)
            if any(paints(s) for s in _appearances(after)) and not declared_bg:
                found.append(f"revision {rev + 1} gives the field {field_name(after) or '(unnamed)'} "
                             "an appearance that paints over the page (an overlay)")
    return found


def paints(stream: generic.StreamObject) -> bool:
    """Whether a content stream paints more than glyphs (an operator of _PAINT)."""
    try:
        data = stream.data
    except Exception:  # noqa: BLE001 - a stream that does not decode: assume the worst
        return True
    tokens = re.split(rb"[\s\[\]<>/(){}%]+", _STRINGS.sub(b" ", data))
    return any(t in _PAINT for t in tokens)


# --- reading objects ----------------------------------------------------------------------


def field_name(obj: generic.DictionaryObject) -> str:
    """A field's fully qualified name (PDF 32000-1 §12.7.3.2): the /T of it and its
    ancestors, joined with dots."""
    parts: list[str] = []
    seen = 0
    node: Any = obj
    while isinstance(node, generic.DictionaryObject) and seen < 32:
        if "/T" in node:
            parts.append(str(node["/T"]))
        node = _val(node, "/Parent")
        seen += 1
    return ".".join(reversed(parts))


def _val(obj: object, key: str) -> Any:
    """``obj[key]`` resolved, or None (pyHanko's ``get`` leaves references as they are)."""
    try:
        return obj[key] if isinstance(obj, generic.DictionaryObject) else None  # type: ignore[index]
    except Exception:  # noqa: BLE001 - absent, or a reference that does not resolve
        return None


def _is_field(obj: generic.DictionaryObject) -> bool:
    return "/FT" in obj or "/T" in obj or "/Parent" in obj


def _signed_signature(obj: generic.DictionaryObject) -> bool:
    node: Any = obj
    for _ in range(32):
        if not isinstance(node, generic.DictionaryObject):
            return False
        if _val(node, "/FT") == "/Sig":
            return isinstance(_val(node, "/V"), generic.DictionaryObject)
        node = _val(node, "/Parent")
    return False


def _hidden(obj: generic.DictionaryObject) -> bool:
    try:
        flags = int(_val(obj, "/F") or 0)
        x1, y1, x2, y2 = (float(v) for v in obj["/Rect"])
    except Exception:  # noqa: BLE001 - no usable /Rect: nothing a viewer places
        return True
    return bool(flags & _HIDDEN) or abs(x2 - x1) * abs(y2 - y1) == 0


def _has_bg(obj: generic.DictionaryObject) -> bool:
    mk = _val(obj, "/MK")
    return isinstance(mk, generic.DictionaryObject) and "/BG" in mk


def _appearances(obj: generic.DictionaryObject) -> Iterator[generic.StreamObject]:
    ap = _val(obj, "/AP")
    for key in ("/N", "/D", "/R"):
        entry = _val(ap, key)
        if isinstance(entry, generic.StreamObject):
            yield entry
        elif isinstance(entry, generic.DictionaryObject):
            yield from (s for s in (_val(entry, k) for k in entry)
                        if isinstance(s, generic.StreamObject))


def _get(handler: HistoricalResolver, ref: generic.Reference) -> generic.PdfObject | None:
    try:
        obj = handler(ref)
    except Exception:  # noqa: BLE001 - not in that revision
        return None
    return None if isinstance(obj, generic.NullObject) else obj


def _raw_ref(obj: object, key: str) -> generic.Reference | None:
    try:
        raw = obj.raw_get(key)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - no such entry
        return None
    return raw.reference if isinstance(raw, generic.IndirectObject) else None


def _in_dss(handler: HistoricalResolver, ref: generic.Reference) -> bool:
    try:
        dss = handler.root["/DSS"]
        vri = dss.raw_get("/VRI")
    except Exception:  # noqa: BLE001 - no DSS, or no VRI in it
        return False
    if isinstance(vri, generic.IndirectObject) and vri.reference == ref:
        return True
    vri = vri.get_object() if isinstance(vri, generic.IndirectObject) else vri
    return isinstance(vri, generic.DictionaryObject) and any(
        isinstance(v, generic.IndirectObject) and v.reference == ref
        for v in (vri.raw_get(k) for k in vri))


def _changed_keys(before: generic.DictionaryObject, after: generic.DictionaryObject) -> set[str]:
    keys = set(before) | set(after)
    return {str(k) for k in keys if _raw(before, k) != _raw(after, k)}


def _raw(obj: generic.DictionaryObject, key: str) -> object:
    try:
        raw = obj.raw_get(key)
    except KeyError:
        return None
    return raw.reference if isinstance(raw, generic.IndirectObject) else raw


def _raw_list(obj: generic.DictionaryObject, key: str) -> list[Any]:
    try:
        raw = obj.raw_get(key)
    except KeyError:
        return []
    value = raw.get_object() if isinstance(raw, generic.IndirectObject) else raw
    return [value.raw_get(i) for i in range(len(value))] if isinstance(value, generic.ArrayObject) else []


def _ref_of(item: object) -> object:
    return item.reference if isinstance(item, generic.IndirectObject) else id(item)


def _kept(before: generic.DictionaryObject, after: generic.DictionaryObject, key: str) -> bool:
    """Every entry of ``before[key]`` is still in ``after[key]``, in the same order."""
    old = [_ref_of(x) for x in _raw_list(before, key)]
    new = [_ref_of(x) for x in _raw_list(after, key)]
    return new[:len(old)] == old
