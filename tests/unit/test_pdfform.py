"""The form as the signing update reads it: which fields the lock covers, which
signatures are there, and the lock's PDF syntax."""

from __future__ import annotations

import io

import pytest
from pypdf import PdfWriter
from pypdf import generic as g
from pypdf.generic import read_object

from casesignd.core.errors import LimitExceeded
from casesignd.pdf.form import Form, field_lock, fieldmdp_reference, read_form


def _name(s: str) -> g.NameObject:
    return g.NameObject("/" + s)


def _catalog(w: PdfWriter, fields: list[g.IndirectObject]) -> g.DictionaryObject:
    return g.DictionaryObject({_name("AcroForm"): g.DictionaryObject(
        {_name("Fields"): g.ArrayObject(fields)})})


def _field(w: PdfWriter, **entries: object) -> g.IndirectObject:
    d = g.DictionaryObject()
    for key, value in entries.items():
        d[_name(key)] = value  # type: ignore[assignment]
    return w._add_object(d)


def test_the_lock_covers_terminal_fields_that_are_not_signatures() -> None:
    w = PdfWriter()
    ap = g.DecodedStreamObject()
    ap.set_data(b"/Tx BMC EMC")
    ap_ref = w._add_object(ap)
    buyer = _field(w, T=g.TextStringObject("buyer"), FT=_name("Tx"), V=g.TextStringObject("J. Doe"),
                   AP=g.DictionaryObject({_name("N"): ap_ref}))
    seller = _field(w, T=g.TextStringObject("seller"))  # /FT inherited from its parent
    widget = _field(w, Subtype=_name("Widget"))  # a widget of its field: no /T
    lock = g.DictionaryObject({_name("Type"): _name("SigFieldLock"), _name("Action"): _name("Include"),
                               _name("Fields"): g.ArrayObject([g.TextStringObject("agree")]),
                               _name("P"): g.NumberObject(1)})
    signed = _field(w, T=g.TextStringObject("approval"), FT=_name("Sig"),
                    V=w._add_object(g.DictionaryObject()), Lock=lock)
    empty_sig = _field(w, T=g.TextStringObject("unsigned"), FT=_name("Sig"))
    check = _field(w, T=g.TextStringObject("agree"), FT=_name("Btn"), AS=_name("Off"),
                   AP=g.DictionaryObject({_name("N"): ap_ref}))
    parties = _field(w, T=g.TextStringObject("parties"), FT=_name("Tx"),
                     Kids=g.ArrayObject([seller, widget]))
    parties.get_object()[_name("Kids")].append(parties)  # a cycle is read once
    form = read_form(_catalog(w, [buyer, parties, signed, empty_sig, check, buyer]))
    assert form.lockable == ("buyer", "parties.seller", "agree")
    assert form.signed == ("approval",)
    assert form.lock_p == 1
    # Only a stateless field's own appearance is restated (pyHanko's in-place rule);
    # "agree", locked already, has none and is locked again.
    assert form.appearances == ((ap_ref.idnum, 0),)


def _spec(action: str, *names: str) -> g.DictionaryObject:
    d = g.DictionaryObject({_name("Action"): _name(action)})
    if names:
        d[_name("Fields")] = g.ArrayObject(g.TextStringObject(n) for n in names)
    return d


@pytest.mark.parametrize(("where", "spec", "lockable"), [
    ("reference", _spec("Include", "buyer"), ("parties.seller",)),
    ("reference", _spec("Include", "parties"), ("buyer", "note")),
    ("reference", _spec("Exclude", "buyer", "note"), ("buyer", "note")),
    ("reference", _spec("All"), ()),
    ("lock", _spec("Include", "buyer"), ("parties.seller",)),
    ("lock", g.DictionaryObject(), ()),  # no /Action: read as /All
    ("neither", None, ("buyer", "parties.seller", "note")),
], ids=["include", "include_parent", "exclude", "all", "field_lock", "no_action", "unlocked"])
def test_fields_an_earlier_signature_locks_keep_their_appearances(
    where: str, spec: g.DictionaryObject | None, lockable: tuple[str, ...]
) -> None:
    """An earlier signature's lock holds the appearance streams of the fields it
    covers: they are not restated, and the new lock leaves out every field that
    shows one of them ("note" shares the stream of "buyer")."""
    w = PdfWriter()
    streams = []
    for text in (b"buyer", b"seller"):
        ap = g.DecodedStreamObject()
        ap.set_data(b"/Tx BMC (" + text + b") Tj EMC")
        streams.append(w._add_object(ap))
    buyer = _field(w, T=g.TextStringObject("buyer"), FT=_name("Tx"),
                   AP=g.DictionaryObject({_name("N"): streams[0]}))
    note = _field(w, T=g.TextStringObject("note"), FT=_name("Tx"),
                  AP=g.DictionaryObject({_name("N"): streams[0]}))
    seller = _field(w, T=g.TextStringObject("seller"), AP=g.DictionaryObject({_name("N"): streams[1]}))
    parties = _field(w, T=g.TextStringObject("parties"), FT=_name("Tx"), Kids=g.ArrayObject([seller]))
    value = g.DictionaryObject({_name("Type"): _name("Sig")})
    entries: dict[str, object] = {}
    if where == "reference" and spec is not None:
        value[_name("Reference")] = g.ArrayObject([g.DictionaryObject({
            _name("Type"): _name("SigRef"), _name("TransformMethod"): _name("FieldMDP"),
            _name("TransformParams"): w._add_object(spec)})])
    elif where == "lock" and spec is not None:
        entries["Lock"] = spec
    signed = _field(w, T=g.TextStringObject("earlier"), FT=_name("Sig"), V=w._add_object(value), **entries)
    form = read_form(_catalog(w, [signed, buyer, parties, note]))
    assert form.lockable == lockable
    shown = {"buyer": streams[0], "note": streams[0], "parties.seller": streams[1]}
    assert set(form.appearances) == {(shown[n].idnum, 0) for n in lockable}


def test_no_form_no_lock() -> None:
    assert read_form(g.DictionaryObject()) == Form()
    assert field_lock(Form()) is None
    assert fieldmdp_reference(Form(), g.IndirectObject(1, 0, None)) == b""


def test_a_hostile_depth_is_refused() -> None:
    w = PdfWriter()
    ref = _field(w, T=g.TextStringObject("f0"), FT=_name("Tx"))
    top = ref
    for i in range(1, 40):
        kid = _field(w, T=g.TextStringObject(f"f{i}"))
        ref.get_object()[_name("Kids")] = g.ArrayObject([kid])
        ref = kid
    with pytest.raises(LimitExceeded):
        read_form(_catalog(w, [top]))


def test_the_lock_and_its_reference_say_the_same() -> None:
    form = Form(lockable=("buyer_name", "parties.seller", "Zoë"))
    lock = read_object(io.BytesIO(field_lock(form) or b""), None)
    assert lock["/Type"] == "/SigFieldLock" and lock["/Action"] == "/Include"
    assert list(lock["/Fields"]) == ["buyer_name", "parties.seller", "Zoë"]
    text = fieldmdp_reference(form, g.IndirectObject(7, 0, None))
    assert text.startswith(b"/Reference ")
    (ref,) = read_object(io.BytesIO(text[len(b"/Reference "):]), PdfWriter())
    assert ref["/Type"] == "/SigRef" and ref["/TransformMethod"] == "/FieldMDP"
    assert (ref.raw_get("/Data").idnum, ref.raw_get("/Data").generation) == (7, 0)
    params = ref["/TransformParams"]
    assert params["/Type"] == "/TransformParams" and params["/V"] == "/1.2"
    assert params["/Action"] == lock["/Action"] and list(params["/Fields"]) == list(lock["/Fields"])
