"""A form's appearances drawn once, in the rewrite, so that no viewer draws its own.

A form that sets /NeedAppearances (PDF 32000-1 §12.7.2, Table 218) asks every viewer
to construct the appearances of its fields from their values; a widget with appearance
states and no /AS (§12.5.5) leaves the viewer to pick the state. Either way what a
reader shows is its own drawing, not what was signed (:mod:`casesignd.pdf.inspect` finds
both). Real producers make such forms all the time (hyperref, LibreOffice, Word), so
the rewrite (:func:`casesignd.pdf.normalize.rewrite`) draws them the way viewers do and
drops the flag:

* text and choice fields: a frame drawn here from the widget's /MK background and
  border colours and its /BS border (§12.5.6.19, Table 189; §12.5.4), around the
  value that qpdf draws in the field's /DA font between ``/Tx BMC`` and ``EMC``
  (§12.7.3.3, variable text; one line, the fonts' simple encodings);
* check boxes and radio buttons (§12.7.4.2.3-4): states whose appearance is missing or
  not a stream are drawn here (the /MK /CA caption in ZapfDingbats on the same frame,
  nothing but the frame for /Off); /AS takes the state the field's /V names when the
  widget has it, else /Off;
* push buttons, rotated widgets (/MK /R), a button whose on-state cannot be told, and
  a multiline, comb, rich text or password field with a value are not drawn: the form
  keeps /NeedAppearances (or the widget its missing /AS), and the check of the rewrite
  refuses it as before.

The pure parts (:func:`parse_da`, :func:`frame`, :func:`caption`, :func:`state_for`)
take values and return content-stream bytes or names; :func:`complete` walks a
pikepdf document and changes it in memory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pikepdf

MAX_DEPTH = 32  # a field's /Parent chain (§12.7.3.1); deeper is hostile

# Field flags (§12.7.3.1 Table 226, §12.7.4.2.1 Table 228, §12.7.4.3 Table 230).
FF_RADIO = 1 << 15
FF_PUSHBUTTON = 1 << 16
# Text fields qpdf does not draw as viewers do: it draws one line of plain text, where
# viewers wrap a multiline value, space a comb's characters into cells, lay out rich
# text (/RV) and hide a password. Such a field with a value is left to viewers.
FF_MULTILINE = 1 << 12
FF_TEXT_UNDRAWN = (1 << 12) | (1 << 13) | (1 << 24) | (1 << 25)
# Annotation flags (§12.5.3, Table 165): Hidden, NoView; such widgets are not drawn.
F_HIDDEN = 1 << 1
F_NOVIEW = 1 << 5

# Widths of ZapfDingbats glyphs that /MK /CA names for check boxes and radio buttons
# (check '4', cross '8', circle 'l', square 'n', diamond 'u', star 'H'; '3' and '5'
# are other checks and crosses), in 1/1000 em, from the font's AFM (a core font,
# PDF 32000-1 §9.6.2.2: readers carry its metrics).
ZAPF_WIDTHS = {"3": 755, "4": 846, "5": 762, "8": 677, "H": 816, "l": 791, "n": 761,
               "u": 788}
DEFAULT_CAPTION = {"checkbox": "4", "radio": "l"}

_DA_TOKEN = re.compile(rb"/[^\s/\[\]<>(){}%]*|[-+]?(?:\d+\.?\d*|\.\d+)|[A-Za-z'\"*]+")
_COLOR_OPS = {b"g": 1, b"rg": 3, b"k": 4}


@dataclass(frozen=True)
class Appearance:
    """What a widget's default appearance string (/DA, §12.7.3.3) says: its font's
    resource name and size (0: fit the box), and the fill colour as its components."""

    font: str = ""
    size: float = 0.0
    color: tuple[float, ...] = (0.0,)


def parse_da(da: bytes) -> Appearance:
    """The last ``Tf`` and the last fill colour of ``da``; what is not understood is
    left at the defaults (black, the size to fit)."""
    font, size = "", 0.0
    color: tuple[float, ...] = (0.0,)
    operands: list[bytes] = []
    for token in _DA_TOKEN.findall(da[:4096]):
        if token[:1] == b"/" or not token[:1].isalpha():
            operands.append(token)
            continue
        if token == b"Tf" and len(operands) >= 2 and operands[-2][:1] == b"/":
            font, size = operands[-2].decode("latin-1"), _number(operands[-1])
        elif token in _COLOR_OPS and len(operands) >= _COLOR_OPS[token]:
            color = tuple(_number(x) for x in operands[-_COLOR_OPS[token]:])
        operands = []
    return Appearance(font, max(size, 0.0), color)


def _number(token: bytes) -> float:
    try:
        return float(token)
    except ValueError:
        return 0.0


def color_op(components: tuple[float, ...], stroke: bool) -> bytes:
    """The operator that sets ``components`` as the fill (or stroke) colour: gray, RGB
    or CMYK by their number (§8.6.8, Table 74); empty for none (transparent)."""
    ops = {1: b"g", 3: b"rg", 4: b"k"}
    op = ops.get(len(components))
    if op is None:
        return b""
    return b" ".join(_fmt(c) for c in components) + b" " + (op.upper() if stroke else op)


def _fmt(x: float) -> bytes:
    return (b"%.4f" % x).rstrip(b"0").rstrip(b".") or b"0"


@dataclass(frozen=True)
class Border:
    """A widget's border (§12.5.4, Table 166 /BS; else /Border, Table 164)."""

    width: float = 1.0
    style: str = "/S"
    dash: tuple[float, ...] = (3.0,)


def frame(width: float, height: float, background: tuple[float, ...],
          border_color: tuple[float, ...], border: Border) -> bytes:
    """The background and border a viewer draws for a widget of ``width`` by ``height``
    from /MK /BG and /BC: the box filled, then its border stroked inside the box
    (underlined: its bottom line alone). Bevelled and inset borders are drawn solid."""
    out = []
    if background:
        out.append(b"q %s 0 0 %s %s re f Q" % (color_op(background, False),
                                               _fmt(width), _fmt(height)))
    w = border.width
    if border_color and w > 0:
        dash = b"[%s] 0 d " % b" ".join(_fmt(d) for d in border.dash) \
            if border.style == "/D" else b""
        half = w / 2
        if border.style == "/U":
            path = b"0 %s m %s %s l S" % (_fmt(half), _fmt(width), _fmt(half))
        else:
            path = b"%s %s %s %s re S" % (_fmt(half), _fmt(half), _fmt(width - w),
                                          _fmt(height - w))
        out.append(b"q %s %s w %s%s Q" % (color_op(border_color, True), _fmt(w), dash, path))
    return b"\n".join(out) + (b"\n" if out else b"")


def caption(char: str, width: float, height: float, border_width: float,
            da: Appearance, font: str = "/ZaDb") -> bytes:
    """The on-state mark of a check box or radio button: ``char`` in ZapfDingbats,
    centred in the box, at the /DA size (0: fitted inside the border), in the /DA
    colour."""
    inner = min(width, height) - 2 * max(border_width, 0.0)
    size = da.size or max(inner * 0.8, 1.0)
    glyph = ZAPF_WIDTHS.get(char, 800) / 1000 * size
    x = (width - glyph) / 2
    # Centred on the box's middle; ZapfDingbats marks stand about 0.7 em tall.
    y = (height - 0.7 * size) / 2
    code = char.encode("latin-1")
    escaped = code.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")
    return b"q BT %s %s %s Tf %s %s Td (%s) Tj ET Q\n" % (
        color_op(da.color, False), font.encode("latin-1"), _fmt(size), _fmt(x), _fmt(y), escaped)


def state_for(states: set[str], value: str | None) -> str | None:
    """The appearance state a widget with ``states`` shows when its field's value is
    ``value``: the state the value names (a check box that is on, the chosen radio
    button), else /Off; None when the widget has no /Off state to show (which state
    is off cannot be told)."""
    if value is not None and value in states:
        return value
    return "/Off" if "/Off" in states else None


# --- the document (pikepdf) ----------------------------------------------------------


@dataclass(frozen=True)
class Drawn:
    """What :func:`complete` did: the widgets whose appearance or state it set, as
    (page index, index in the page's /Annots), and how many it could not draw (then
    the form keeps /NeedAppearances, or the widget lacks its /AS)."""

    widgets: frozenset[tuple[int, int]] = frozenset()
    undrawn: int = 0
    # Every widget a viewer drew its own way in the received form (/NeedAppearances:
    # push buttons too, whose look the rewrite leaves as it was).
    viewer_drawn: frozenset[tuple[int, int]] = frozenset()


def _string(obj: Any) -> bytes:
    """A string object's bytes; b"" for anything else."""
    return bytes(obj) if isinstance(obj, pikepdf.String) else b""


def _is_dict(obj: Any) -> bool:
    """A dictionary (a stream's dictionary does not count: pikepdf types them apart)."""
    return isinstance(obj, pikepdf.Dictionary)


def _inherited(widget: Any, key: str) -> Any:
    """A field attribute, from the widget or the nearest field above it (§12.7.3.1)."""
    node, seen = widget, 0
    while node is not None and seen <= MAX_DEPTH:
        if key in node:
            return node[key]
        node = node.get("/Parent")
        seen += 1
        if node is not None and not _is_dict(node):
            return None
    return None


def _flags(widget: Any) -> int:
    try:
        return int(_inherited(widget, "/Ff") or 0)
    except (TypeError, ValueError):
        return 0


def _laid_out(widget: Any) -> bool:
    """A text field with a value that viewers lay out in ways qpdf does not: a comb,
    rich text or password value, or a multiline one qpdf's single line would not
    hold (a line break, or wider than its box)."""
    if str(_inherited(widget, "/FT")) != "/Tx" or not _flags(widget) & FF_TEXT_UNDRAWN:
        return False
    value = str(_inherited(widget, "/V") or "")
    if not value:
        return False
    if _flags(widget) & FF_TEXT_UNDRAWN != FF_MULTILINE:
        return True
    return not _fits_one_line(widget, value)


# Wider than any Latin glyph of the standard fonts, as a share of the font size (an
# estimate that errs towards refusing: Courier's 0.6, Helvetica's widest capitals).
GLYPH_WIDTH_EM = 0.72


def _fits_one_line(widget: Any, value: str) -> bool:
    """Whether a multiline field's value is one line that its box holds as qpdf draws
    it (at the /DA size; an automatic size, 0, is taken as 12)."""
    if any(c in value for c in "\r\n\u2028\u2029"):
        return False
    try:
        x0, _, x1, _ = (float(v) for v in widget.get("/Rect"))
    except (TypeError, ValueError):
        return False
    size = parse_da(_string(_inherited(widget, "/DA") or b"")).size or 12.0
    return len(value) * size * GLYPH_WIDTH_EM <= abs(x1 - x0) - 4


def _kind(widget: Any) -> str:
    ft = str(_inherited(widget, "/FT") or "")
    if ft in ("/Tx", "/Ch"):
        return "text"
    if ft != "/Btn":
        return ""  # signature fields and widgets of no field: viewers draw nothing
    flags = _flags(widget)
    if flags & FF_PUSHBUTTON:
        return "pushbutton"
    return "radio" if flags & FF_RADIO else "checkbox"


def _numbers(obj: Any) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in obj) if obj is not None else ()
    except (TypeError, ValueError):
        return ()


def _border(widget: Any) -> Border:
    bs = widget.get("/BS")
    if _is_dict(bs):
        width = _numbers([bs.get("/W", 1)])
        dash = _numbers(bs.get("/D")) or (3.0,)
        return Border(width[0] if width else 1.0, str(bs.get("/S", "/S")), dash)
    legacy = _numbers(widget.get("/Border"))
    return Border(legacy[2] if len(legacy) >= 3 else 1.0)


def _size(widget: Any) -> tuple[float, float] | None:
    rect = _numbers(widget.get("/Rect"))
    if len(rect) != 4:
        return None
    width, height = abs(rect[2] - rect[0]), abs(rect[3] - rect[1])
    return (width, height) if width > 0 and height > 0 else None


def _shown(widget: Any) -> bool:
    try:
        flags = int(widget.get("/F", 0))
    except (TypeError, ValueError):
        flags = 0
    return not flags & (F_HIDDEN | F_NOVIEW) and _size(widget) is not None


def _rotated(widget: Any) -> bool:
    mk = widget.get("/MK")
    return _is_dict(mk) and _numbers([mk.get("/R", 0)]) != (0.0,)


def _field_widgets(acroform: Any) -> set[tuple[int, int]]:
    """The widgets the form's field tree reaches (§12.7.3.1), by object id: viewers
    and qpdf draw those; a widget outside the tree is an annotation like any other."""
    found: set[tuple[int, int]] = set()
    fields = acroform.get("/Fields")
    stack = [(f, 0) for f in fields] if isinstance(fields, pikepdf.Array) else []
    seen: set[tuple[int, int]] = set()
    while stack:
        node, depth = stack.pop()
        if not _is_dict(node) or depth > MAX_DEPTH:
            continue
        key = node.objgen
        if key != (0, 0):
            if key in seen:
                continue
            seen.add(key)
        kids = node.get("/Kids")
        if isinstance(kids, pikepdf.Array) and len(kids):
            stack.extend((k, depth + 1) for k in kids)
        else:
            kids = None
        if key != (0, 0) and (kids is None or str(node.get("/Subtype", "")) == "/Widget"):
            found.add(key)
    return found


def complete(pdf: Any) -> Drawn:
    """Draw what ``pdf``'s form leaves to viewers (see the module's docstring) and drop
    /NeedAppearances when nothing is left to them. A form that needs nothing is not
    changed."""
    acroform = pdf.Root.get("/AcroForm")
    if not _is_dict(acroform):
        acroform = None
    need = acroform is not None and str(acroform.get("/NeedAppearances", "")).lower() == "true"
    fields = _field_widgets(acroform) if acroform is not None else set()
    widgets = []
    for p, page in enumerate(pdf.pages):
        annots = page.obj.get("/Annots")
        if not isinstance(annots, pikepdf.Array):
            continue
        for i, annot in enumerate(annots):
            if _is_dict(annot) and str(annot.get("/Subtype", "")) == "/Widget":
                widgets.append(((p, i), annot))
    drawn: set[tuple[int, int]] = set()
    undrawn = 0
    da_default = _string(acroform.get("/DA")) if acroform is not None else b""
    if need:
        for at, widget in widgets:
            if widget.objgen not in fields or not _shown(widget) or _kind(widget) != "text":
                continue
            if _rotated(widget) or _laid_out(widget):
                undrawn += 1
                continue
            _text_frame(pdf, widget)
            drawn.add(at)
        # qpdf draws every text and choice field's value into its frame, resets each
        # check box and radio group to its own /V (which sets /AS), and removes the flag.
        acroform["/NeedAppearances"] = True
        pdf.generate_appearance_streams()
    for at, widget in widgets:
        kind = _kind(widget) if widget.objgen in fields else ""
        if kind in ("checkbox", "radio") and (need or "/AS" not in widget) and _shown(widget):
            if _rotated(widget) or not _draw_button(pdf, widget, kind, da_default):
                undrawn += 1
                continue
            drawn.add(at)
        elif kind == "pushbutton" and need and _shown(widget) and not _has_stream(widget):
            undrawn += 1
        if "/AS" not in widget and _states(widget):
            value = _inherited(widget, "/V")
            state = state_for(_states(widget), str(value) if value is not None else None)
            if state is None:
                undrawn += 1
                continue
            widget["/AS"] = pikepdf.Name(state)
            drawn.add(at)
    if need and undrawn:
        acroform["/NeedAppearances"] = True  # left to viewers: the check refuses it
    elif need and "/NeedAppearances" in acroform:
        del acroform["/NeedAppearances"]
    chosen = frozenset(at for at, widget in widgets if need and _shown(widget)) | drawn
    return Drawn(frozenset(drawn), undrawn, chosen)


def _normal(widget: Any) -> Any:
    ap = widget.get("/AP")
    return ap.get("/N") if _is_dict(ap) else None


def _has_stream(widget: Any) -> bool:
    return isinstance(_normal(widget), pikepdf.Stream)


def _states(widget: Any) -> set[str]:
    normal = _normal(widget)
    return {str(k) for k in normal} if _is_dict(normal) else set()


def _form_xobject(pdf: Any, content: bytes, width: float, height: float,
                  resources: Any = None) -> Any:
    return pdf.make_stream(content, {
        "/Type": pikepdf.Name.XObject, "/Subtype": pikepdf.Name.Form,
        "/BBox": pikepdf.Array([0, 0, width, height]),
        "/Resources": resources if resources is not None else pikepdf.Dictionary()})


def _mk(widget: Any, key: str) -> tuple[float, ...]:
    mk = widget.get("/MK")
    return _numbers(mk.get(key)) if _is_dict(mk) else ()


def _text_frame(pdf: Any, widget: Any) -> None:
    """A new normal appearance for a text or choice widget: its frame, and an empty
    ``/Tx BMC … EMC`` that qpdf fills with the value (a viewer told to construct the
    appearance ignores the one there, and so does this)."""
    size = _size(widget)
    assert size is not None
    content = frame(*size, _mk(widget, "/BG"), _mk(widget, "/BC"), _border(widget))
    xobject = _form_xobject(pdf, content + b"/Tx BMC\nEMC\n", *size)
    widget["/AP"] = pikepdf.Dictionary({"/N": xobject})


def _draw_button(pdf: Any, widget: Any, kind: str, da_default: bytes) -> bool:
    """Streams for the states of a check box or radio button that have none (§12.7.4.2):
    the on-state with the /MK /CA mark, /Off with the frame alone. False when its
    on-state cannot be told (no state named, or several)."""
    normal = _normal(widget)
    states = _states(widget)
    on = states - {"/Off"}
    if not on and kind == "checkbox":
        value = str(_inherited(widget, "/V") or "")
        on = {value if value.startswith("/") and value != "/Off" else "/Yes"}
    if len(on) != 1:
        return False
    (on_state,) = on
    if _is_dict(normal) and all(isinstance(normal.get(s), pikepdf.Stream)
                                for s in (on_state, "/Off")):
        return True  # every state is drawn: only /AS may be missing
    size = _size(widget)
    mk = widget.get("/MK")
    mark = str(mk.get("/CA")) if _is_dict(mk) and "/CA" in mk \
        else DEFAULT_CAPTION[kind]
    if size is None or len(mark) != 1 or not mark.isascii():
        return False
    da = parse_da(_string(_inherited(widget, "/DA")) or da_default)
    border = _border(widget)
    base = frame(*size, _mk(widget, "/BG"), _mk(widget, "/BC"), border)
    font = pikepdf.Dictionary({"/Type": pikepdf.Name.Font, "/Subtype": pikepdf.Name.Type1,
                               "/BaseFont": pikepdf.Name.ZapfDingbats})
    resources = pikepdf.Dictionary({"/Font": pikepdf.Dictionary({"/ZaDb": font})})
    new = pikepdf.Dictionary()
    for state in (on_state, "/Off"):
        old = normal.get(state) if _is_dict(normal) else None
        if isinstance(old, pikepdf.Stream):
            new[state] = old
            continue
        content = base + (caption(mark, *size, border.width, da) if state == on_state else b"")
        new[state] = _form_xobject(pdf, content, *size, resources)
    ap = widget.get("/AP")
    if not _is_dict(ap):
        widget["/AP"] = pikepdf.Dictionary({"/N": new})
    else:
        ap["/N"] = new
        # Down appearances of other states would show while pressed only; a /D that
        # names states without streams is dropped rather than left to the viewer.
        down = ap.get("/D")
        if _is_dict(down) and not all(isinstance(v, pikepdf.Stream) for v in down.values()):
            del ap["/D"]
    return True

