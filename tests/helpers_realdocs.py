"""Documents people send, made at test time by the producers they come from.

``build_real_corpus(dest)`` writes links and forms as pdflatex (hyperref), LibreOffice,
Chromium, Ghostscript and reportlab make them, and a few shapes real forms take
(a checkbox whose widget has appearance states but no ``/AS``, a radio group, a form
that leaves its look to the viewer). Every one of them must be signed, read alike by
qpdf, poppler and pypdf, look the same before and after to poppler and to MuPDF, and
validate. An entry whose tool is missing is left out (``missing`` says why), so a thin
machine skips rather than fails.

:func:`render_pages` and :func:`pages_differ` compare pages as pictures, each engine
with itself (two engines differ in anti-aliasing and font substitution even on one
file): the tests' own comparison, independent of the service's.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers_corpus import _chromium_exe, _run, assemble, libreoffice_html, stream

# Renders at this resolution; a changed word changes many pixels even here.
RENDER_DPI = 50
# A page differs when more than this share of its pixels differ by more than
# PIXEL_DELTA gray levels (anti-aliasing of the same drawing moves a few edge pixels).
PIXEL_DELTA = 48
MAX_CHANGED_SHARE = 0.002


def _pdflatex_links(work: Path, out: Path) -> None:
    (work / "links.tex").write_text(r"""\documentclass{article}
\usepackage[pdfborder={0 0 1}]{hyperref}
\hypersetup{pdftitle={Lease agreement},pdfauthor={casesignd}}
\begin{document}
\section{Parties}\label{parties}
Landlord and tenant, as in section~\ref{rent}. Questions:
\href{mailto:office@example.org}{office@example.org}.
\section{Rent}\label{rent}
The rent is paid as \url{https://example.org/pay} says; the rules are at
\href{http://example.org/rules}{the rules page}.
\end{document}
""")
    for _ in range(2):
        _run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "links.tex"], cwd=work)
    shutil.copyfile(work / "links.pdf", out)


def _pdflatex_form(work: Path, out: Path) -> None:
    # hyperref's forms ask the viewer to draw their fields (/NeedAppearances true).
    (work / "form.tex").write_text(r"""\documentclass{article}
\usepackage{hyperref}
\begin{document}
\section*{Application}
\begin{Form}
\TextField[name=applicant,width=6cm,value={J. Doe}]{Name:}\par
\CheckBox[name=agree,checked=true]{I agree}\par
\ChoiceMenu[name=plan,combo,default=Basic]{Plan:}{Basic,Plus}\par
\end{Form}
\end{document}
""")
    _run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "form.tex"], cwd=work)
    shutil.copyfile(work / "form.pdf", out)


def _libreoffice_links(work: Path, out: Path) -> None:
    shutil.copyfile(libreoffice_html(work, "lo_links", (
        "<html><body><h1>Supply contract</h1><p>Terms: <a href='https://example.org/terms'>"
        "example.org/terms</a>. Contact <a href='mailto:sales@example.org'>sales</a>.</p>"
        "<p><a href='#annex'>See the annex</a>.</p><h2 id='annex'>Annex</h2>"
        "<p>Delivery within 30 days.</p></body></html>")), out)


def _libreoffice_form(work: Path, out: Path) -> None:
    # LibreOffice turns an HTML form's controls into form fields, and exports them.
    shutil.copyfile(libreoffice_html(work, "lo_form", (
        "<html><body><h1>Order form</h1><form>"
        "<p>Name: <input type='text' name='customer' value='J. Doe'></p>"
        "<p><input type='checkbox' name='express' checked> Express delivery</p>"
        "<p><input type='radio' name='pay' value='card' checked> Card "
        "<input type='radio' name='pay' value='cash'> Cash</p>"
        "</form></body></html>")), out)


def _chromium_links(work: Path, out: Path) -> None:
    exe = _chromium_exe()
    assert exe is not None
    page = work / "chromium_links.html"
    page.write_text(
        "<html><body><h1>Receipt</h1><p>Paid 49.00 USD. Details: "
        "<a href='https://example.org/receipt/1'>example.org/receipt/1</a>, questions to "
        "<a href='mailto:help@example.org'>help@example.org</a>.</p></body></html>")
    _run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync",
          f"--user-data-dir={work / 'profile'}", f"--print-to-pdf={out}", "--no-pdf-header-footer",
          page.as_uri()], env={"HOME": str(work)})


def _ghostscript_links(work: Path, out: Path) -> None:
    # Ghostscript's pdfwrite of a PostScript page with a pdfmark link.
    ps = work / "gs_links.ps"
    ps.write_text("%!PS\n/Helvetica findfont 14 scalefont setfont\n"
                  "72 700 moveto (Policy document: see example.org/policy) show\n"
                  "[ /Rect [72 690 400 716] /Border [0 0 1] /Action << /Subtype /URI "
                  "/URI (https://example.org/policy) >> /Subtype /Link /ANN pdfmark\n"
                  "showpage\n")
    _run(["gs", "-dBATCH", "-dNOPAUSE", "-dSAFER", "-dQUIET", "-sDEVICE=pdfwrite",
          f"-sOutputFile={out}", str(ps)])


def _reportlab_acroform(work: Path, out: Path) -> None:
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(out), pagesize=A4)
    form = c.acroForm
    c.drawString(72, 770, "Claim form")
    c.drawString(72, 740, "Name:")
    form.textfield(name="claimant", x=140, y=730, width=200, height=20, value="J. Doe")
    c.drawString(72, 700, "Urgent:")
    form.checkbox(name="urgent", x=140, y=695, size=16, checked=True)
    c.drawString(72, 670, "Channel:")
    form.radio(name="channel", value="mail", selected=True, x=140, y=665, size=16)
    form.radio(name="channel", value="phone", selected=False, x=180, y=665, size=16)
    form.choice(name="office", value="North", options=["North", "South"], x=140, y=630,
                width=120, height=20)
    c.linkURL("https://example.org/claims", (72, 600, 300, 615), relative=0)
    c.drawString(72, 603, "How claims work: example.org/claims")
    c.showPage()
    c.save()


_FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
_FORM_XOBJECT = b"/Type /XObject /Subtype /Form /BBox [0 0 16 16] "
_ON = stream(b"0 0 1 rg 2 2 12 12 re f", _FORM_XOBJECT)
_OFF = stream(b"0 0 0 RG 1 1 14 14 re S", _FORM_XOBJECT)


def _checkbox_without_as(work: Path, out: Path) -> None:
    # A checked box whose widget has its two appearance states and no /AS choosing
    # one (PDF 32000-1 §12.5.5 requires it): its value /V says which.
    text = stream(b"BT /F1 14 Tf 72 720 Td (Terms accepted:) Tj ET")
    out.write_bytes(assemble([
        b"<< /Type /Catalog /Pages 2 0 R /AcroForm << /Fields [6 0 R] >> >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> /Annots [6 0 R] >>",
        text, _FONT,
        b"<< /Type /Annot /Subtype /Widget /FT /Btn /T (accepted) /V /Yes /F 4 "
        b"/Rect [200 715 216 731] /P 3 0 R /AP << /N << /Yes 7 0 R /Off 8 0 R >> >> >>",
        _ON, _OFF,
    ]))


# name -> (required tool or None, builder(work, out))
RECIPES: dict[str, tuple[str | None, Callable[[Path, Path], None]]] = {
    "pdflatex_links": ("pdflatex", _pdflatex_links),
    "pdflatex_form": ("pdflatex", _pdflatex_form),
    "libreoffice_links": ("soffice", _libreoffice_links),
    "libreoffice_form": ("soffice", _libreoffice_form),
    "chromium_links": ("chromium", _chromium_links),
    "ghostscript_links": ("gs", _ghostscript_links),
    "reportlab_acroform": (None, _reportlab_acroform),
    "checkbox_without_as": (None, _checkbox_without_as),
}
REAL_NAMES = tuple(RECIPES)
# What each must still show after signing (pypdf and poppler alike).
MARKERS: dict[str, tuple[str, ...]] = {
    "pdflatex_links": ("Parties", "Rent"), "pdflatex_form": ("Application",),
    "libreoffice_links": ("Delivery within 30 days", "Annex"), "libreoffice_form": ("Express delivery",),
    "chromium_links": ("Receipt",), "ghostscript_links": ("Policy document",),
    "reportlab_acroform": ("Claim form",), "checkbox_without_as": ("Terms accepted",),
}

_CACHE: dict[Path, tuple[dict[str, Path], dict[str, str]]] = {}


def _have(tool: str | None) -> bool:
    if tool is None:
        return True
    if tool == "chromium":
        return _chromium_exe() is not None
    return shutil.which(tool) is not None


def build_real_corpus(dest: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """Build (once per ``dest``) every entry this machine can make: (name -> path,
    name -> why it is missing)."""
    dest = dest.resolve()
    if dest in _CACHE:
        return _CACHE[dest]
    dest.mkdir(parents=True, exist_ok=True)
    built: dict[str, Path] = {}
    missing: dict[str, str] = {}
    for name, (tool, build) in RECIPES.items():
        if not _have(tool):
            missing[name] = f"{tool} is not installed"
            continue
        work = dest / f"work-{name}"
        work.mkdir(exist_ok=True)
        out = dest / f"{name}.pdf"
        try:
            build(work, out)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
            missing[name] = f"{tool} failed: {e}"
            continue
        built[name] = out
    _CACHE[dest] = (built, missing)
    return built, missing


@pytest.fixture(scope="session")
def real_corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], dict[str, str]]:
    return build_real_corpus(tmp_path_factory.mktemp("real_corpus"))


# --- pages as pictures ---------------------------------------------------------------


def render_pages(path: Path, engine: str) -> list[bytes]:
    """Each page of ``path`` as 8-bit gray pixels (PGM) at :data:`RENDER_DPI`, drawn
    by ``engine`` ("poppler" or "mupdf")."""
    with tempfile.TemporaryDirectory() as tmp:
        if engine == "poppler":
            _run(["pdftoppm", "-r", str(RENDER_DPI), "-gray", str(path), f"{tmp}/p"])
        else:
            _run(["mutool", "draw", "-q", "-r", str(RENDER_DPI), "-c", "gray",
                  "-o", f"{tmp}/p-%d.pgm", str(path)])
        files = sorted(Path(tmp).glob("p-*.pgm"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
        return [f.read_bytes() for f in files]


def _pixels(pgm: bytes) -> tuple[int, int, bytes]:
    # P5 header: magic, width, height, maxval, then one byte a pixel (maxval < 256).
    parts = pgm.split(maxsplit=4)
    width, height = int(parts[1]), int(parts[2])
    return width, height, parts[4][-width * height:]


def pages_differ(before: list[bytes], after: list[bytes]) -> int | None:
    """The first page (from 1) that looks different, or None."""
    if len(before) != len(after):
        return min(len(before), len(after)) + 1
    for n, (a, b) in enumerate(zip(before, after, strict=True), start=1):
        wa, ha, pa = _pixels(a)
        wb, hb, pb = _pixels(b)
        if (wa, ha) != (wb, hb):
            return n
        changed = sum(1 for x, y in zip(pa, pb, strict=True) if abs(x - y) > PIXEL_DELTA)
        if changed > MAX_CHANGED_SHARE * wa * ha:
            return n
    return None
