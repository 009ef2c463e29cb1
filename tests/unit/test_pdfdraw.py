"""Forms whose viewers would draw their own appearances: found by the checks, drawn
once by the rewrite, and signed; refused where nothing draws them or a signature is
in the way. Pure parts table-driven; documents hand-assembled (PDF 32000-1 §12.7)."""

from __future__ import annotations

import io

import pikepdf
import pytest

from casesignd.core.errors import CasesignError
from casesignd.pdf import normalize
from casesignd.pdf.draw import Appearance, Border, caption, frame, parse_da, state_for
from casesignd.pdf.inspect import PdfLimits, inspect_document
from casesignd.signing import pipeline
from tests.helpers_corpus import _one_page, stream

# --- pure parts -------------------------------------------------------------------------


@pytest.mark.parametrize(("da", "expected"), [
    (b"/Helv 10 Tf 0 0 0 rg", Appearance("/Helv", 10.0, (0.0, 0.0, 0.0))),
    (b"0 g /ZaDb 0 Tf", Appearance("/ZaDb", 0.0, (0.0,))),
    (b"/F2 12.5 Tf 1 0 0 0 k", Appearance("/F2", 12.5, (1.0, 0.0, 0.0, 0.0))),
    (b"", Appearance()),
    # What is not understood is left at the defaults.
    (b"Tf rg /X", Appearance()),
    (b"/F -3 Tf", Appearance("/F", 0.0, (0.0,))),
])
def test_parse_da(da: bytes, expected: Appearance) -> None:
    assert parse_da(da) == expected


@pytest.mark.parametrize(("background", "border_color", "border", "expected"), [
    ((), (), Border(), b""),
    ((1.0,), (), Border(), b"q 1 g 0 0 20 10 re f Q\n"),
    ((), (1.0, 0.0, 0.0), Border(2.0), b"q 1 0 0 RG 2 w 1 1 18 8 re S Q\n"),
    ((), (0.0,), Border(1.0, "/D", (2.0,)), b"q 0 G 1 w [2] 0 d 0.5 0.5 19 9 re S Q\n"),
    ((), (0.0,), Border(1.0, "/U"), b"q 0 G 1 w 0 0.5 m 20 0.5 l S Q\n"),
    # No border width: no border, whatever its colour.
    ((), (0.0,), Border(0.0), b""),
])
def test_frame(background, border_color, border, expected) -> None:
    assert frame(20, 10, background, border_color, border) == expected


def test_caption_centres_the_mark_in_the_da_colour() -> None:
    mark = caption("4", 20, 20, 1, Appearance("/ZaDb", 10, (1.0, 0.0, 0.0)))
    # '4' is 0.846 em wide: (20 - 8.46) / 2; the mark stands 0.7 em: (20 - 7) / 2.
    assert mark == b"q BT 1 0 0 rg /ZaDb 10 Tf 5.77 6.5 Td (4) Tj ET Q\n"
    fitted = caption("l", 20, 20, 1, Appearance())
    assert b" 14.4 Tf " in fitted  # 0.8 of the box inside its border


@pytest.mark.parametrize(("states", "value", "state"), [
    ({"/Yes", "/Off"}, "/Yes", "/Yes"),
    ({"/Yes", "/Off"}, "/Off", "/Off"),
    ({"/Yes", "/Off"}, None, "/Off"),
    # A radio button the group's value does not choose.
    ({"/card", "/Off"}, "/cash", "/Off"),
    # Which state is off cannot be told.
    ({"/Yes"}, None, None),
    ({"/A", "/B"}, "/C", None),
])
def test_state_for(states: set[str], value: str | None, state: str | None) -> None:
    assert state_for(states, value) == state


# --- documents --------------------------------------------------------------------------

_STATES = b"<< /Type /XObject /Subtype /Form /BBox [0 0 12 12] /Length 0 >>\nstream\n\nendstream"
_FIELD_FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


def _checkbox_without_as(value: bytes = b"/Yes", extra_widget: bytes = b"",
                         catalog_extra: bytes = b"") -> bytes:
    """A check box whose appearance states are drawn but none is chosen (§12.5.5)."""
    widget = (b"<< /Type /Annot /Subtype /Widget /FT /Btn /T (agree) /V " + value +
              b" /Rect [72 600 84 612] /F 4 /P 3 0 R /AP << /N << /Yes 7 0 R /Off 8 0 R >> >> "
              + extra_widget + b">>")
    return _one_page(
        catalog_extra=b"/AcroForm << /Fields [6 0 R] >> " + catalog_extra,
        page_extra=b"/Annots [6 0 R]",
        more=[widget, _STATES.replace(b"/Length 0", b"/Length 3").replace(
            b"\n\nendstream", b"\n0 g\nendstream"), _STATES])


def _text_field(extra_widget: bytes = b"", kind: bytes = b"/FT /Tx",
                catalog_extra: bytes = b"", value: bytes = b"/V (J. Doe) ",
                form_extra: bytes = b"") -> bytes:
    """A text field whose form asks viewers to draw it (/NeedAppearances, §12.7.2)."""
    widget = (b"<< /Type /Annot /Subtype /Widget " + kind + b" /T (buyer) " + value +
              b"/DA (/Helv 10 Tf 0 g) /Rect [72 500 272 520] /F 4 /P 3 0 R "
              b"/MK << /BC [1 0 0] /BG [1 1 1] >> " + extra_widget + b">>")
    return _one_page(
        catalog_extra=b"/AcroForm << /Fields [6 0 R] /NeedAppearances true " + form_extra +
                      b"/DR << /Font << /Helv 7 0 R >> >> /DA (/Helv 0 Tf 0 g) >> " + catalog_extra,
        page_extra=b"/Annots [6 0 R]", more=[widget, _FIELD_FONT])


def _findings(data: bytes) -> list[tuple[str, tuple]]:
    report, reader = inspect_document(data, PdfLimits())
    reader.stream.close()
    return [(f.code, f.where) for f in report.findings]


def _signed_as(data: bytes) -> tuple[pipeline.Checked, pikepdf.Pdf]:
    checked, source, reader = pipeline.check(data, PdfLimits())
    reader.stream.close()
    assert isinstance(source, bytes)
    return checked, pikepdf.open(io.BytesIO(source))


def _refusal(data: bytes, normalize_mode: str = "when_needed") -> CasesignError:
    with pytest.raises(CasesignError) as info:
        pipeline.check(data, PdfLimits(normalize=normalize_mode))
    return info.value


def test_the_findings_name_their_reason_and_field() -> None:
    assert _findings(_checkbox_without_as()) == [("viewer_drawn_form", (("field", "agree"),))]
    assert _findings(_text_field()) == [("viewer_drawn_form", ())]  # a direct /AcroForm
    # Another annotation's states are not a form's: readers simply disagree on them.
    square = _one_page(page_extra=b"/Annots [6 0 R]", more=[
        b"<< /Type /Annot /Subtype /Square /Rect [0 0 9 9] /AP << /N << /On 7 0 R >> >> >>",
        _STATES])
    assert _findings(square) == [("", (("object", 6),))]
    assert _refusal(square).reason == "readers_disagree"


@pytest.mark.parametrize(("value", "state"), [(b"/Yes", "/Yes"), (b"/Off", "/Off")])
def test_a_missing_state_is_set_from_the_fields_value(value: bytes, state: str) -> None:
    checked, pdf = _signed_as(_checkbox_without_as(value))
    assert checked.normalized
    assert str(pdf.pages[0].Annots[0].AS) == state
    assert any("appearances were generated" in r for r in checked.reasons)
    assert not any("agree" in r for r in checked.audit_detail()["normalize_reasons"])


def test_a_text_field_is_drawn_in_its_frame_and_the_flag_dropped() -> None:
    checked, pdf = _signed_as(_text_field())
    assert "/NeedAppearances" not in pdf.Root.AcroForm
    content = pdf.pages[0].Annots[0].AP.N.read_bytes()
    # The frame a viewer draws from /MK, and the value in the /DA font.
    assert content.startswith(b"q 1 1 1 rg 0 0 200 20 re f Q\nq 1 0 0 RG 1 w")
    assert b"/Helv 10 Tf" in content and b"(J. Doe) Tj" in content
    assert checked.reasons == (
        "the form asks viewers to draw their own appearances (/NeedAppearances)",
        "the form's appearances were generated: 1 field widget(s) drawn once, so that no "
        "viewer draws its own")


def test_a_stale_appearance_is_replaced_by_the_value() -> None:
    # The value a viewer draws, not the appearance stream the file carried (which a
    # viewer told to draw its own never shows).
    stale = stream(b"BT /Helv 10 Tf 2 5 Td (PAY 10 EUR) Tj ET",
                   b"/Type /XObject /Subtype /Form /BBox [0 0 200 20] ")
    widget = (b"<< /Type /Annot /Subtype /Widget /FT /Tx /T (amount) /V (PAY 999 EUR) "
              b"/DA (/Helv 10 Tf 0 g) /Rect [72 500 272 520] /F 4 /P 3 0 R /AP << /N 8 0 R >> >>")
    doc = _one_page(
        catalog_extra=b"/AcroForm << /Fields [6 0 R] /NeedAppearances true "
                      b"/DR << /Font << /Helv 7 0 R >> >> >> ",
        page_extra=b"/Annots [6 0 R]", more=[widget, _FIELD_FONT, stale])
    _checked, pdf = _signed_as(doc)
    content = pdf.pages[0].Annots[0].AP.N.read_bytes()
    assert b"(PAY 999 EUR) Tj" in content and b"PAY 10 EUR" not in content


def test_a_push_button_no_one_can_draw_stays_refused() -> None:
    push = _text_field(b"/Ff 65536 ", kind=b"/FT /Btn")
    error = _refusal(push)
    assert (error.code, error.reason) == ("ambiguous_pdf", "viewer_drawn_form")
    rewritten, _warnings, drawn = normalize.rewrite(push)
    assert drawn.undrawn == 1
    assert pikepdf.open(io.BytesIO(rewritten)).Root.AcroForm.NeedAppearances is True


@pytest.mark.parametrize("extra", [
    b"/MK << /R 90 >> ",  # rotated
    b"/Ff 8192 ",  # password: viewers hide it, qpdf would draw it
    b"/Ff 16777216 /MaxLen 8 ",  # comb: viewers space the characters into cells
])
def test_a_field_qpdf_does_not_draw_as_viewers_do_stays_refused(extra: bytes) -> None:
    assert _refusal(_text_field(extra)).reason == "viewer_drawn_form"


def test_an_empty_multiline_field_is_drawn() -> None:
    checked, pdf = _signed_as(_text_field(b"/Ff 4096 ", value=b""))
    assert checked.normalized and "/NeedAppearances" not in pdf.Root.AcroForm


def test_a_multiline_value_is_drawn_only_where_qpdfs_one_line_holds_it() -> None:
    # The box is 200 points wide at 10 points: one short line is all of it.
    checked, pdf = _signed_as(_text_field(b"/Ff 4096 ", value=b"/V (J. Doe) "))
    assert checked.normalized and "/NeedAppearances" not in pdf.Root.AcroForm
    for value in (b"/V (J. Doe\\nflat 3) ", b"/V (" + b"a long address line " * 3 + b") "):
        assert _refusal(_text_field(b"/Ff 4096 ", value=value)).reason == "viewer_drawn_form"


@pytest.mark.parametrize("build", [_checkbox_without_as, _text_field])
def test_never_normalise_and_a_signature_keep_the_refusal(build) -> None:
    assert _refusal(build(), "never").reason == "viewer_drawn_form"
    # A signature (here its dictionary alone) forbids the rewrite.
    signed = build(catalog_extra=b"/X << /Type /Sig >> ")
    assert _refusal(signed).reason == "viewer_drawn_form"


def test_an_xfa_form_stays_refused_as_active_content() -> None:
    # The rewrite never sees it: XFA carries its own scripts (pdfrules).
    error = _refusal(_text_field(form_extra=b"/XFA [(template) 5 0 R] "))
    assert error.code == "active_content" and "XFA" in error.detail["rule"]


def test_a_form_that_needs_nothing_is_rewritten_unchanged() -> None:
    plain = _checkbox_without_as(extra_widget=b"/AS /Yes ")
    assert _findings(plain) == []
    _rewritten, _warnings, drawn = normalize.rewrite(plain)
    assert drawn.widgets == frozenset() and drawn.undrawn == 0
