"""Forms that leave their look to viewers, from real producers, and how pages look.

``viewer_drawn_forms(dest)`` makes forms with /NeedAppearances (PDF 32000-1 §12.7.2)
or a widget with appearance states and no /AS (§12.5.5): reportlab's AcroForm (text
fields, check boxes, a radio group) with the flag set as its users set it, a check box
assembled by hand, hyperref's form (pdflatex) and an HTML form LibreOffice exports.
An entry whose tool is missing is left out and named in ``missing``, as
:mod:`tests.helpers_corpus` does.

``render(path)`` draws a document's pages with poppler (``pdftoppm -r 50``, gray), and
``widget_boxes(path)`` gives the pixel boxes of its widgets, to compare a received
form (drawn by poppler itself) with its rewrite (drawn by the service).
"""

from __future__ import annotations

import io
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers_corpus import assemble, libreoffice_html, stream

RESOLUTION_DPI = 50
TOOL_TIMEOUT_S = 180


@dataclass
class Forms:
    built: dict[str, Path] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)


def _reportlab(out: Path) -> None:
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfbase.acroform import PDFFromString
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(out), pagesize=A4)
    form = c.acroForm
    # reportlab draws its fields; a user who fills them later sets the flag so that
    # viewers draw the new values (reportlab has no option for it: the dictionary's).
    form.extras["NeedAppearances"] = PDFFromString("true")
    c.drawString(72, 770, "Buyer name:")
    form.textfield(name="buyer", x=160, y=760, width=200, height=20, value="J. Doe")
    c.drawString(72, 740, "City:")
    form.textfield(name="city", x=160, y=730, width=200, height=20, value="")
    c.drawString(72, 705, "I agree / newsletter:")
    form.checkbox(name="agree", x=200, y=700, buttonStyle="check", checked=True)
    form.checkbox(name="news", x=240, y=700, buttonStyle="cross", checked=False)
    c.drawString(72, 675, "Payment (card / cash):")
    form.radio(name="pay", value="card", selected=True, x=200, y=670)
    form.radio(name="pay", value="cash", selected=False, x=240, y=670)
    c.showPage()
    c.save()


_BOX = b"0 G 1 w 0.5 0.5 13 13 re S"
_CHECK = b" 0 g 3 7 m 6 3 l 11 11 l 6 5 l f"


def checkbox_without_state() -> bytes:
    """Two check boxes whose states are drawn but none chosen (no /AS): one whose value
    is /Off, one with no value. A widget dictionary as Word and older Acrobat write it."""
    form = b"/Type /XObject /Subtype /Form /BBox [0 0 14 14] "

    def widget(name: bytes, y: int, value: bytes) -> bytes:
        return (b"<< /Type /Annot /Subtype /Widget /FT /Btn /T (" + name + b") " + value +
                b"/F 4 /Rect [150 %d 164 %d] /P 3 0 R /MK << /CA (4) >> "
                b"/AP << /N << /Yes 8 0 R /Off 9 0 R >> >> >>" % (y, y + 14))

    return assemble([
        b"<< /Type /Catalog /Pages 2 0 R /AcroForm << /Fields [6 0 R 7 0 R] >> >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 400 300] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> /Annots [6 0 R 7 0 R] >>",
        stream(b"BT /F1 12 Tf 40 202 Td (I agree) Tj 0 -30 Td (Newsletter) Tj ET"),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        widget(b"agree", 200, b"/V /Off "),
        widget(b"news", 170, b""),
        stream(_BOX + _CHECK, form),
        stream(_BOX, form),
    ])


HYPERREF_FIELDS = ("\\TextField[name=buyer,width=6cm,value={J. Doe}]{Buyer name:}\\par"
                   "\\CheckBox[name=agree,checked]{I agree}\\par"
                   "\\CheckBox[name=news]{Newsletter}")
# A multiline field's value: viewers wrap it, qpdf would draw one line.
HYPERREF_MULTILINE = ("\\TextField[name=notes,multiline,width=6cm,height=2cm,"
                      "value={Delivery to the back door, not the front, on weekdays only}]"
                      "{Notes:}")


def _pdflatex(work: Path, out: Path, fields: str = HYPERREF_FIELDS) -> None:
    # Zapf Dingbats' TeX metrics (pzdr.tfm) come with texlive-fonts-recommended; a TeX
    # without them gets cmr's for the check boxes' marks (the PDF names ZapfDingbats).
    (work / "form.tex").write_text(
        "\\documentclass{article}\\usepackage{hyperref}"
        "\\DeclareFontFamily{U}{pzd}{}\\DeclareFontShape{U}{pzd}{m}{n}{<->cmr10}{}"
        "\\begin{document}Service agreement.\\begin{Form}" + fields +
        "\\end{Form}\\end{document}\n")
    subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "form.tex"],
                   cwd=work, check=True, timeout=TOOL_TIMEOUT_S, capture_output=True)
    shutil.copyfile(work / "form.pdf", out)


def _libreoffice(work: Path, out: Path) -> None:
    made = libreoffice_html(work, "form", (
        "<html><body><h1>Service agreement</h1><form>"
        '<p>Buyer name: <input type="text" name="buyer" value="J. Doe" size="30"></p>'
        '<p><input type="checkbox" name="agree" value="yes" checked> I agree</p>'
        '<p><input type="checkbox" name="news" value="yes"> Newsletter</p>'
        '<p><input type="radio" name="pay" value="card" checked> Card '
        '<input type="radio" name="pay" value="cash"> Cash</p>'
        "</form></body></html>"))
    shutil.copyfile(made, out)


def viewer_drawn_forms(dest: Path) -> Forms:
    """Build the forms this machine can make; name -> path, and what is missing."""
    dest.mkdir(parents=True, exist_ok=True)
    forms = Forms()
    recipes = [
        ("reportlab", None, lambda o, w: _reportlab(o)),
        ("checkbox_without_state", None, lambda o, w: o.write_bytes(checkbox_without_state())),
        ("pdflatex_hyperref", "pdflatex", lambda o, w: _pdflatex(w, o)),
        ("pdflatex_multiline", "pdflatex", lambda o, w: _pdflatex(w, o, HYPERREF_MULTILINE)),
        ("libreoffice", "soffice", lambda o, w: _libreoffice(w, o)),
    ]
    for name, tool, build in recipes:
        if tool is not None and shutil.which(tool) is None:
            forms.missing[name] = f"{tool} not installed"
            continue
        if name.startswith("pdflatex") and not _kpsewhich("hyperref.sty"):
            forms.missing[name] = "hyperref.sty not installed (Debian: texlive-latex-base)"
            continue
        work = dest / name
        work.mkdir(exist_ok=True)
        out = dest / f"{name}.pdf"
        try:
            build(out, work)
        except (subprocess.SubprocessError, OSError) as e:
            forms.missing[name] = f"{type(e).__name__}: {e}"[:400]
            continue
        forms.built[name] = out
    return forms


def _kpsewhich(name: str) -> bool:
    try:
        found = subprocess.run(["kpsewhich", name], capture_output=True, text=True,
                               timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return bool(found.stdout.strip())


def asks_viewers_again(data: bytes) -> bytes:
    """``data`` with an incremental update that sets /NeedAppearances again, as a form
    filler does after a signature (pyHanko clears the flag when it signs)."""
    from pyhanko.pdf_utils import generic
    from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter

    writer = IncrementalPdfFileWriter(io.BytesIO(data), strict=False)
    ref = writer.root.raw_get("/AcroForm")
    form = ref.get_object() if isinstance(ref, generic.IndirectObject) else ref
    form[generic.pdf_name("/NeedAppearances")] = generic.BooleanObject(True)
    if isinstance(ref, generic.IndirectObject):
        writer.mark_update(ref)
    else:
        writer.update_root()
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


# --- how the pages look --------------------------------------------------------------


def render(path: Path) -> list:
    """The pages of ``path`` as poppler draws them, gray, at RESOLUTION_DPI."""
    from PIL import Image

    pages = []
    page = 1
    while True:
        done = subprocess.run(["pdftoppm", "-r", str(RESOLUTION_DPI), "-gray", "-f", str(page),
                               "-l", str(page), "-singlefile", str(path)],
                              capture_output=True, timeout=TOOL_TIMEOUT_S, check=False)
        if done.returncode != 0 or not done.stdout:
            break
        image = Image.open(io.BytesIO(done.stdout))
        image.load()
        pages.append(image)
        page += 1
    return pages


def widget_boxes(path: Path, margin_px: int = 3) -> dict[int, list[tuple[int, int, int, int]]]:
    """The pixel boxes (left, top, right, bottom) of each page's widgets at
    RESOLUTION_DPI, widened by ``margin_px``; page index -> boxes."""
    import pikepdf

    scale = RESOLUTION_DPI / 72
    boxes: dict[int, list[tuple[int, int, int, int]]] = {}
    with pikepdf.open(path) as pdf:
        for i, page in enumerate(pdf.pages):
            top = float(page.mediabox[3])
            for annot in page.obj.get("/Annots", []):
                if str(annot.get("/Subtype", "")) != "/Widget" or "/Rect" not in annot:
                    continue
                x0, y0, x1, y1 = (float(v) for v in annot.Rect)
                boxes.setdefault(i, []).append((
                    int(min(x0, x1) * scale) - margin_px, int((top - max(y0, y1)) * scale) - margin_px,
                    int(max(x0, x1) * scale) + margin_px + 1, int((top - min(y0, y1)) * scale) + margin_px + 1))
    return boxes


@dataclass(frozen=True)
class Difference:
    """How two renderings of a page differ: pixels that differ by more than the
    threshold, outside the widgets and in all; and the page's pixel count."""

    outside: int
    total: int
    pixels: int


def difference(a, b, boxes: list[tuple[int, int, int, int]], threshold: int = 48) -> Difference:
    from PIL import ImageChops, ImageDraw

    assert a.size == b.size, (a.size, b.size)
    changed = ImageChops.difference(a, b).point(lambda v: 255 if v > threshold else 0)
    total = changed.histogram()[255]
    masked = changed.copy()
    draw = ImageDraw.Draw(masked)
    for box in boxes:
        draw.rectangle(box, fill=0)
    return Difference(masked.histogram()[255], total, a.size[0] * a.size[1])
