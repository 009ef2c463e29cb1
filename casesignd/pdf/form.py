"""The document's interactive form as the service's signature sees it (PDF 32000-1
§12.7.3): which fields the signature locks, and which signatures are there already.

The service's signature locks the form (FieldMDP, §12.8.2.4): the signature field
carries a /Lock (§12.7.4.5, Table 233) and the signature dictionary the same policy
as a FieldMDP transform in /Reference (§12.8.1, Table 253), so a field value changed
by a later update fails validation. The lock names the fields (/Action /Include)
rather than saying /All: pyHanko's difference analysis counts a later signature as a
change to its own new field, so under /All every later approval signature would
break the lock, while the point is only that what the form said when the service
signed stays said. Fields added later are not covered by
the lock; pyHanko refuses any non-signature field added after a signature. A form
without such fields gets no lock: there is nothing to lock.

The update also restates, unchanged, the appearance streams of the locked fields
(:func:`locked_appearances`). pyHanko 0.38's difference analysis, for every revision
after a signature, reports each field appearance stream last written in another
revision than the signed one as an in-place appearance update of that field
(``_allow_in_place_appearance_update`` in pyhanko/sign/diff_analysis/rules/
form_field_rules.py compares the stream's last change with the signed revision for
equality), and under a lock that is a violation: a document timestamp, a DSS or a
later signature would break the service's signature. A stream restated in the signed
revision is its own; identical objects are no change for the earlier signatures.

The same rule makes one field's appearance ownable by one signature only. A field an
earlier signature locks already (its FieldMDP /Reference, which pyHanko enforces, or
its field's /Lock) keeps its appearance streams where they are: restated, they would
be an in-place appearance update of a locked field for that signature, which pyHanko
classes as a violation of its lock (``ModificationLevel.OTHER``) though not a byte
changed. The service's lock leaves such a field out, since a lock on a stream it does
not restate would break at the next revision; the earlier lock keeps the field as it
is. This is what a second signature by the service over a form meets.

A document whose form holds a signature already is updated so that the earlier
signatures stay valid (see :mod:`casesignd.signing.attachments`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, cast

from pypdf import generic as g

from casesignd.core.errors import LimitExceeded
from casesignd.pdf.frame import AMBIGUITY, Finding
from casesignd.pdf.syntax import name_object, pdf_text, raw, resolved, serialize

MAX_FIELDS = 100_000  # field dictionaries walked, in all
MAX_DEPTH = 32  # the field hierarchy (§12.7.3.1) is shallow; deeper is hostile


@dataclass(frozen=True)
class Form:
    """What the signing update needs of the form: the fully qualified names
    (§12.7.3.2) of its terminal fields other than signature fields that the service's
    lock covers (all but those whose appearance streams an earlier lock holds, see the
    module docstring), the signature fields that hold a signature, and the strictest
    DocMDP permission a signed field's /Lock sets (PDF 2.0 §12.7.5.5, /P), if any."""

    lockable: tuple[str, ...] = ()
    signed: tuple[str, ...] = ()
    lock_p: int | None = None
    # (number, generation) of the appearance streams of the lockable fields
    appearances: tuple[tuple[int, int], ...] = ()


def read_form(catalog: g.DictionaryObject) -> Form:
    """The :class:`Form` of the document whose catalog is ``catalog``. A field tree
    that is not a tree (a field listed twice, a cycle) is read once per field."""
    acro = resolved(catalog, "/AcroForm")
    fields = resolved(acro, "/Fields") if isinstance(acro, g.DictionaryObject) else None
    if not isinstance(fields, g.ArrayObject):
        return Form()
    terminal: list[tuple[str, list[tuple[int, int]]]] = []  # (name, appearance streams)
    signed: list[str] = []
    lock_ps: list[int] = []
    locks: list[tuple[str, tuple[str, ...]]] = []  # the earlier signatures' FieldMDP
    seen: set[tuple[int, int]] = set()
    # (reference, parent's fully qualified name, inherited /FT, depth), in document order
    todo: list[tuple[Any, str, Any, int]] = [(ref, "", None, 0) for ref in reversed(fields)]
    while todo:
        ref, parent, inherited_ft, depth = todo.pop()
        if depth > MAX_DEPTH or len(seen) >= MAX_FIELDS:
            raise LimitExceeded("the form's field hierarchy is too deep or too large",
                                reason="nested_too_deeply")
        if not isinstance(ref, g.IndirectObject):
            continue  # fields are indirect objects (§12.7.3.1); pyHanko skips others too
        if (ref.idnum, ref.generation) in seen:
            continue
        seen.add((ref.idnum, ref.generation))
        node = ref.get_object()
        if not isinstance(node, g.DictionaryObject):
            continue
        name = raw(node, "/T")
        if name is None:
            continue  # a widget annotation of its parent, not a field
        qualified = f"{parent}.{name}" if parent else str(name)
        ft = resolved(node, "/FT") or inherited_ft
        kids = [k for k in resolved(node, "/Kids", None) or []
                if isinstance(k, g.IndirectObject) and _has_name(k)]
        if kids:
            todo.extend((k, qualified, ft, depth + 1) for k in reversed(kids))
        elif ft != "/Sig":
            terminal.append((qualified, _appearance_streams(node)))
        elif "/V" in node:
            signed.append(qualified)
            p = _lock_p(node)
            if p is not None:
                lock_ps.append(p)
            locks.extend(_fieldmdp_specs(node))
    held = {stream for name, streams in terminal if any(_locks(spec, name) for spec in locks)
            for stream in streams}
    mine = [(name, streams) for name, streams in terminal if held.isdisjoint(streams)]
    appearances = dict.fromkeys(stream for _name, streams in mine for stream in streams)
    return Form(tuple(name for name, _streams in mine), tuple(signed), min(lock_ps, default=None),
                tuple(appearances))


def _appearance_streams(node: g.DictionaryObject) -> list[tuple[int, int]]:
    """The appearance streams pyHanko's in-place rule looks at: those the field's own
    /AP names directly under /N, /R and /D, unless the field has states (/AS)."""
    ap = resolved(node, "/AP")
    if "/AS" in node or not isinstance(ap, g.DictionaryObject):
        return []
    refs = [raw(ap, key) for key in ("/N", "/R", "/D")]
    return [(r.idnum, r.generation) for r in refs
            if isinstance(r, g.IndirectObject) and isinstance(r.get_object(), g.StreamObject)]


def locked_appearances(form: Form, reader: Any) -> list[tuple[int, int, bytes]]:
    """The appearance streams of the locked fields, each restated as it is (see the
    module docstring): (number, generation, the object's body)."""
    out = []
    for num, gen in form.appearances:
        # A stream: _appearance_streams kept only those.
        stream = cast(g.StreamObject, g.IndirectObject(num, gen, reader).get_object())
        head = g.DictionaryObject(stream)
        head[name_object("Length")] = g.NumberObject(len(stream._data))
        out.append((num, gen, serialize(head) + b"\nstream\n" + stream._data + b"\nendstream"))
    return out


def _has_name(ref: g.IndirectObject) -> bool:
    node = ref.get_object()
    return isinstance(node, g.DictionaryObject) and "/T" in node


def _fieldmdp_specs(sig_field: g.DictionaryObject) -> list[tuple[str, tuple[str, ...]]]:
    """The fields a signed signature field locks, as (action, field names): the
    signature's FieldMDP transform (§12.8.2.4, what pyHanko enforces) and the field's
    /Lock (Table 233). An action that cannot be read counts as /All."""
    dicts = [resolved(sig_field, "/Lock")]
    value = resolved(sig_field, "/V")
    refs = resolved(value, "/Reference") if isinstance(value, g.DictionaryObject) else None
    for ref in refs if isinstance(refs, g.ArrayObject) else []:
        ref = ref.get_object()
        if isinstance(ref, g.DictionaryObject) and resolved(ref, "/TransformMethod") == "/FieldMDP":
            dicts.append(resolved(ref, "/TransformParams"))
    out = []
    for d in dicts:
        if not isinstance(d, g.DictionaryObject):
            continue
        action = resolved(d, "/Action")
        listed = resolved(d, "/Fields")
        names = tuple(str(n.get_object()) for n in listed) if isinstance(listed, g.ArrayObject) else ()
        out.append((str(action) if action in ("/Include", "/Exclude") else "/All", names))
    return out


def _locks(spec: tuple[str, tuple[str, ...]], name: str) -> bool:
    """Whether a FieldMDP ``spec`` locks the field ``name`` (a name in /Fields covers
    the fields beneath it, as pyHanko reads it)."""
    action, names = spec
    if action == "/All":
        return True
    listed = any(name == n or name.startswith(n + ".") for n in names)
    return listed if action == "/Include" else not listed


def _lock_p(sig_field: g.DictionaryObject) -> int | None:
    lock = resolved(sig_field, "/Lock")
    p = resolved(lock, "/P") if isinstance(lock, g.DictionaryObject) else None
    return int(p) if isinstance(p, int) else None


def _fieldmdp(form: Form) -> bytes:
    return b"/Action /Include /Fields [" + b" ".join(pdf_text(n) for n in form.lockable) + b"]"


def field_lock(form: Form) -> bytes | None:
    """The signature field's /Lock dictionary (Table 233), locking the form's
    fields; None when there are none."""
    return b"<</Type /SigFieldLock " + _fieldmdp(form) + b">>" if form.lockable else None


def fieldmdp_reference(form: Form, root_ref: g.IndirectObject) -> bytes:
    """The signature dictionary's /Reference entry for :func:`field_lock`'s lock
    (Tables 253 and 256, /V the FieldMDP version), empty when there is no lock.
    /Data, which FieldMDP requires, is the catalog, as pyHanko writes it."""
    if not form.lockable:
        return b""
    return (b"/Reference [<</Type /SigRef /TransformMethod /FieldMDP /Data %d %d R"
            b" /TransformParams <</Type /TransformParams " % (root_ref.idnum, root_ref.generation)
            + _fieldmdp(form) + b" /V /1.2>>>>]")


# --- forms whose look viewers choose, and naming a field in a refusal --------------


def appearance_findings(d: g.DictionaryObject, ref: tuple[int, int] | None) -> list[Finding]:
    """A form whose viewers draw their own appearances (/NeedAppearances, §12.7.2),
    or an annotation with appearance states and no /AS to choose one (§12.5.5): what
    a reader shows is then its own choice, not what was signed. A form field's are
    ``viewer_drawn_form``, which the rewrite draws (:mod:`casesignd.pdf.draw`); another
    annotation's states are left as readers disagreeing. A signature widget whose
    states are none at all (an invisible signature some signers write so) shows
    nothing in any viewer."""
    out: list[Finding] = []
    if str(resolved(d, "/NeedAppearances")) in ("True", "true"):
        out.append(Finding(AMBIGUITY, "the form asks viewers to draw their own "
                                            "appearances (/NeedAppearances)",
                                 code="viewer_drawn_form", where=_object_where(ref)))
    if "/AP" in d and "/AS" not in d:
        ap = resolved(d, "/AP")
        normal = resolved(ap, "/N") if isinstance(ap, g.DictionaryObject) else None
        if isinstance(normal, g.DictionaryObject) and not isinstance(normal, g.StreamObject) \
                and (normal or _field_type(d) != "/Sig"):
            if resolved(d, "/Subtype") == "/Widget":
                out.append(Finding(AMBIGUITY, "a form field has appearance states but "
                                                    "no /AS choosing one",
                                         code="viewer_drawn_form", where=_field_where(d, ref)))
            else:
                out.append(Finding(AMBIGUITY, "an annotation has appearance states but "
                                                    "no /AS choosing one",
                                         where=_object_where(ref)))
    return out


def _field_type(widget: g.DictionaryObject) -> Any:
    """A widget's field type, /FT, its own or its parent's (§12.7.3.1)."""
    for node in (widget, resolved(widget, "/Parent")):
        if isinstance(node, g.DictionaryObject) and "/FT" in node:
            return resolved(node, "/FT")
    return None


# A field's partial name (§12.7.3.2) in a finding's where, cut to this length.
MAX_FIELD_NAME_CHARS = 64


def _object_where(ref: tuple[int, int] | None) -> tuple[tuple[str, int | str], ...]:
    return (("object", ref[0]),) if ref is not None else ()


def _field_where(widget: g.DictionaryObject, ref: tuple[int, int] | None
                 ) -> tuple[tuple[str, int | str], ...]:
    """Where a widget is: its field's partial name (/T, the widget's own or its
    parent's, §12.7.3.1), else its object number."""
    for node in (widget, resolved(widget, "/Parent")):
        name = resolved(node, "/T") if isinstance(node, g.DictionaryObject) else None
        if isinstance(name, str) and name:
            return (("field", name[:MAX_FIELD_NAME_CHARS]),)
    return _object_where(ref)




def field_name(d: Any) -> str | None:
    """A form field's (or its widget's) partial name, /T (§12.7.3.1)."""
    if not isinstance(d, g.DictionaryObject):
        return None
    name = resolved(d, "/T")
    if isinstance(name, str) and ("/FT" in d or resolved(d, "/Subtype") == "/Widget"):
        return name[:MAX_FIELD_NAME_CHARS]
    return None


def name_field(reader: Any, holder: int, where: dict[str, Any]) -> None:
    """Add to ``where`` the form field whose object (``holder``) holds a refused
    dictionary (a button's action is a dictionary inside its widget)."""
    if "field" in where or not holder:
        return
    with contextlib.suppress(Exception):
        name = field_name(reader.get_object(holder))
        if name is not None:
            where["field"] = name
