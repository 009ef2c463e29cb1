"""Pages compared as pictures: what poppler and MuPDF draw of a received document and
of its rewrite.

A rewrite (:mod:`casesignd.pdf.normalize`) is qpdf's reading of a document. pypdf's
reading of the same pages (:func:`casesignd.pdf.normalize.page_digests`) is one check
that it shows what was received; it compares object graphs, and pypdf repairs some
files otherwise than qpdf, poppler and MuPDF all do, so alone it refuses documents
every viewer shows alike. The two rendering engines most viewers are built on
(poppler: Evince, Okular, pdftoppm; MuPDF: SumatraPDF, zathura, many phones) decide
what a page *shows*: each draws every page of the received document and of the
rewrite, and each engine is compared with itself only, since two engines differ
from each other in anti-aliasing and font substitution on the very same file.
:func:`verdict` turns those comparisons and pypdf's into one decision
(:mod:`casesignd.signing.pipeline` raises it).

What counts as the same page (:class:`Tolerance`): pages of the same pixel size
whose gray values differ nowhere by more than :data:`PIXEL_DELTA`, save at most
:data:`MAX_CHANGED_FRACTION` of the page. Pages are drawn at :data:`RENDER_DPI`, in
gray: the lowest resolution at which a changed digit, word or decimal comma in
8-point Helvetica still moves pixels past the delta in both engines
(``scripts/bench_render.py`` prints the table).

A reader that cannot draw the received document — it fails, is killed by its
budgets, or runs past its time — does not agree: hostile input is refused, never
passed because a reader gave up on it. The same holds for the rewrite.

A renderer that is not installed is the service's fault, not the document's: the
check raises :class:`~casesignd.core.errors.RendererUnavailable` (``renderer_unavailable``,
retryable: a job waits for the operator to install ``poppler-utils`` and
``mupdf-tools``), and ``/readyz`` reports ``renderers`` not ready while one is
missing and a policy may rewrite documents. It never passes a document unchecked.

Each call draws into a private directory made by :mod:`tempfile` under the
directory the caller gives (the one the rewrite is written to), removed whatever
happens. Each renderer runs with a time limit (:func:`timeout_s`), a memory limit
and a limit on the size of any file it writes (one page), and draws no more pages
than the rewrite has, plus one to see a page the received document has more,
:data:`RENDER_BATCH_PAGES` at a time (:func:`batches`): the drawings on disk stay
few, and the first difference ends the drawing.

pdftoppm and mutool are the tools that insist on a path: they are separate programs
that open the document by name. A document held in memory or sealed on the temp
volume (:mod:`casesignd.core.sealed`) is handed to them as a memory-only file
(``memfd_create``, close-on-exec in this process and inherited by the renderer alone
through ``pass_fds``) named ``/proc/self/fd/N``. Its plain bytes exist there for one
:func:`compare`, from before the first renderer starts until the last one returns,
in memory no file system shows; the descriptor is closed as the call ends. The
drawings (grey pixels of pages, never the document's bytes) go to the private
directory.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from casesignd.core.errors import RendererUnavailable
from casesignd.core.sealed import SealedPath, plain_memfd

if TYPE_CHECKING:  # Pillow is imported where pages are compared, not by the daemon's API
    from PIL import Image

POPPLER = "poppler"
MUPDF = "mupdf"
ENGINES = (POPPLER, MUPDF)
# The program each engine is run as, and the Debian package it comes in.
COMMANDS = {POPPLER: "pdftoppm", MUPDF: "mutool"}
PACKAGES = {POPPLER: "poppler-utils", MUPDF: "mupdf-tools"}

# 40 dpi, the lowest resolution with a margin: at 30 dpi both engines miss a decimal
# comma made a point in 8-point Helvetica; at 36 they see it (one pixel, by 32 gray
# levels) but an 8-point digit moves MuPDF's pixels by 32 at most, at 40 by 89 (and
# the comma by 26-34). Costs hardly differ from 30 to 50 dpi: starting the renderer
# is most of it (scripts/bench_render.py). A letter page is 340 x 440 pixels.
RENDER_DPI = 40
# The same engine draws an unchanged page identically: zero pixels differed between
# the received file and its rewrite across 14 producers' files and 80 rewritten
# hostile ones. 16 of 255 gray levels leaves room for a rewrite that writes a number
# of the page (a box, a matrix) differently and shifts an edge by a rounding, and is
# below the least the smallest real change measured moves (26: the comma, above).
PIXEL_DELTA = 16
# None: any allowance of whole pixels would let a changed digit through at this
# resolution (it moves 2-4 pixels of a page's 150,000).
MAX_CHANGED_FRACTION = 0.0

# Pages drawn by one call of a renderer: the drawings of a batch of both documents are
# on disk at once (about 150 kB a letter page), the next batch after they are compared.
RENDER_BATCH_PAGES = 50
# Time for one renderer on one batch: a start, and a share per page drawn.
RENDER_BASE_TIMEOUT_S = 20.0
RENDER_TIMEOUT_S_PER_PAGE = 0.5
# A renderer's address space, and the largest file it may write (one page: 64 MiB of
# gray is a page of 200 x 200 inches at RENDER_DPI). A page past either fails to draw.
# 1 GiB: half of the systemd unit's MemoryMax=2G, and room for an A4 scan at 600 dpi
# decoded whole (100 MB) many times over; every producer's file in the test corpus
# draws in 512 MiB.
RENDER_MEMORY_BYTES = 1 << 30
RENDER_PAGE_MAX_BYTES = 64 << 20


@dataclass(frozen=True)
class Tolerance:
    """When two drawings of a page count as the same (see the module docstring)."""

    pixel_delta: int = PIXEL_DELTA
    max_changed_fraction: float = MAX_CHANGED_FRACTION


DEFAULT_TOLERANCE = Tolerance()


# --- pure: comparing drawings ---------------------------------------------------------


def changed_pixels(a: Image.Image, b: Image.Image, pixel_delta: int) -> int:
    """How many pixels of two gray images of one size differ by more than
    ``pixel_delta`` gray levels."""
    from PIL import ImageChops

    histogram = ImageChops.difference(a.convert("L"), b.convert("L")).histogram()
    return sum(histogram[pixel_delta + 1:])


# A box of a page, as fractions of its drawn width and height from the top left:
# (left, top, right, bottom).
Box = tuple[float, float, float, float]
# Pixels around a masked box also left out (anti-aliasing of its border).
MASK_MARGIN_PX = 2


def same_page(a: Image.Image, b: Image.Image, tolerance: Tolerance = DEFAULT_TOLERANCE,
              masks: Sequence[Box] = ()) -> bool:
    """Whether two drawings of a page by one engine show the same thing, outside the
    boxes ``masks``: form fields whose look a viewer chose in the received document
    and the rewrite drew from their values, where the two drawings differ by design
    (the caller masks them only where pypdf found the pages' content alike)."""
    if a.size != b.size:
        return False
    if masks:
        a, b = _masked(a, masks), _masked(b, masks)
    allowed = int(tolerance.max_changed_fraction * a.size[0] * a.size[1])
    return changed_pixels(a, b, tolerance.pixel_delta) <= allowed


def _masked(image: Image.Image, masks: Sequence[Box]) -> Image.Image:
    from PIL import ImageDraw

    out = image.convert("L").copy()
    w, h = out.size
    draw = ImageDraw.Draw(out)
    for x, t, r, btm in masks:
        draw.rectangle((int(x * w) - MASK_MARGIN_PX, int(t * h) - MASK_MARGIN_PX,
                        int(r * w) + MASK_MARGIN_PX, int(btm * h) + MASK_MARGIN_PX), fill=0)
    return out


def drawn_boxes(reader: Any, widgets: frozenset[tuple[int, int]]
                ) -> dict[int, list[Box]]:
    """Where on its page each widget the rewrite drew is (``reader``: pypdf's reading
    of the rewrite), by page number (from 1), as fractions of the page's crop box
    from its top left: the boxes :func:`same_page` leaves out,
    since a viewer drew the received field its own way. A widget on a rotated page, or
    without a usable /Rect, has none: its page is compared whole."""
    boxes: dict[int, list[Box]] = {}
    for page_index, annot_index in sorted(widgets):
        try:
            page = reader.pages[page_index]
            if int(page.rotation) % 360:
                continue
            rect = [float(v) for v in page["/Annots"][annot_index].get_object()["/Rect"]]
            crop = page.cropbox
            x0, y0, x1, y1 = (float(crop.left), float(crop.bottom), float(crop.right),
                              float(crop.top))
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            continue
        width, height = x1 - x0, y1 - y0
        if width <= 0 or height <= 0 or len(rect) != 4:
            continue
        left, right = sorted((rect[0], rect[2]))
        bottom, top = sorted((rect[1], rect[3]))
        box = ((left - x0) / width, (y1 - top) / height,
               (right - x0) / width, (y1 - bottom) / height)
        boxes.setdefault(page_index + 1, []).append(
            tuple(min(max(v, 0.0), 1.0) for v in box))  # type: ignore[arg-type]
    return boxes


def first_differing_page(a: Sequence[Image.Image | Path | None],
                         b: Sequence[Image.Image | Path | None],
                         tolerance: Tolerance = DEFAULT_TOLERANCE,
                         masks: Mapping[int, Sequence[Box]] | None = None,
                         first: int = 1) -> int | None:
    """The first page (1-based) two drawings of a document by one engine show
    differently, or None. A page one has and the other has not (None, or past its
    end) differs. Drawings given as files are opened two at a time; ``masks`` by
    page number (the first drawing is page ``first``): see :func:`same_page`."""
    for number, (x, y) in enumerate(itertools.zip_longest(a, b), start=1):
        if x is None or y is None:
            if x is not y:
                return number
            continue
        with _opened(x) as image_a, _opened(y) as image_b:
            boxes = (masks or {}).get(first + number - 1, ())
            if not same_page(image_a, image_b, tolerance, boxes):
                return number
    return None


def _opened(page: Image.Image | Path) -> contextlib.AbstractContextManager[Image.Image]:
    from PIL import Image

    # A file is closed again; an image the caller holds is left to the caller.
    return Image.open(page) if isinstance(page, Path) else contextlib.nullcontext(page)


@dataclass(frozen=True)
class EngineResult:
    """What one engine made of the received document and its rewrite: the first page
    it draws differently (None: every page alike), why it could not draw one of
    them ("" when it could), and the milliseconds it took for both."""

    engine: str
    page: int | None
    failed: str = ""
    ms: float = 0.0
    pages: int = 0  # pages of the rewrite

    @property
    def abstained(self) -> bool:
        """It could not draw the received document: it says nothing of the rewrite
        (the rewrite it must draw, or it differs)."""
        return self.failed.startswith("received")


# A verdict's reasons (words of casesignd.core.codes.REASONS).
PAGES_RENDER_DIFFERENTLY = "pages_render_differently"
READERS_DISAGREE = "readers_disagree"


def verdict(pypdf_page: int | None, engines: Mapping[str, EngineResult]
            ) -> tuple[str, int] | None:
    """Whether the rewrite may be signed, from what each reader made of the received
    document compared with qpdf's rewrite: pypdf's first differing page
    (``pypdf_page``, None when its readings agree) and each engine's. Pure.

    None: no engine that drew the received document draws the rewrite otherwise,
    and besides qpdf at least two readers agree with it: both engines (pypdf alone
    may read it otherwise), or one engine and pypdf (the other engine could not
    draw the received document at all: a viewer built on it shows nothing, so it
    says nothing of what the document means). Else ``(reason, page)``:
    :data:`PAGES_RENDER_DIFFERENTLY` when an engine draws a page of the rewrite
    differently from the received one, or no engine can draw the received one;
    :data:`READERS_DISAGREE` when no two readers agree with the rewrite."""
    drew = [r for r in engines.values() if not r.abstained]
    differ = [r.page for r in drew if r.page is not None]
    if differ:
        if pypdf_page is not None and len(differ) == len(engines):
            return READERS_DISAGREE, min(pypdf_page, *differ)
        return PAGES_RENDER_DIFFERENTLY, min(differ)
    if len(drew) + (pypdf_page is None) >= 2:
        return None
    abstained = [r.page or 1 for r in engines.values() if r.abstained]
    if not drew:
        return PAGES_RENDER_DIFFERENTLY, min(abstained)
    return READERS_DISAGREE, min(pypdf_page or 1, *abstained)


# --- I/O: drawing ---------------------------------------------------------------------


def missing_renderers() -> list[str]:
    """The engines whose program is not installed here."""
    return [e for e in ENGINES if shutil.which(COMMANDS[e]) is None]


def readiness(normalize_modes: Iterable[str]) -> dict[str, object] | None:
    """``/readyz``'s ``renderers`` check: not ready while an engine is missing and a
    policy may rewrite documents (``normalize`` other than "never"); None when no
    policy ever rewrites, so nothing here is needed."""
    if all(mode == "never" for mode in normalize_modes):
        return None
    missing = missing_renderers()
    if not missing:
        return {"ok": True}
    return {"ok": False, "detail": "not installed: " + ", ".join(
        f"{COMMANDS[e]} ({PACKAGES[e]})" for e in missing)}


def require_renderers() -> None:
    """Raise :class:`RendererUnavailable` unless every engine is installed."""
    missing = missing_renderers()
    if missing:
        raise RendererUnavailable(
            "the page renderers that check a rewritten document are not installed: "
            + ", ".join(f"{COMMANDS[e]} ({PACKAGES[e]})" for e in missing),
            detail={"missing": [COMMANDS[e] for e in missing]})


def timeout_s(pages: int) -> float:
    """The time one renderer has to draw ``pages`` pages of one document."""
    return RENDER_BASE_TIMEOUT_S + RENDER_TIMEOUT_S_PER_PAGE * pages


def _argv(engine: str, pdf: Path, outdir: Path, first_page: int, last_page: int,
          dpi: int) -> list[str]:
    exe = shutil.which(COMMANDS[engine])
    if exe is None:
        require_renderers()
        raise AssertionError("unreachable")  # pragma: no cover
    # Absolute paths: a file name that starts with "-" is not read as an option.
    pdf, outdir = pdf.absolute(), outdir.absolute()
    if engine == POPPLER:
        # The crop box, as viewers show a page and as MuPDF draws it (pdftoppm would
        # draw the media box): what lies outside it is never seen.
        return [exe, "-q", "-r", str(dpi), "-gray", "-cropbox", "-f", str(first_page),
                "-l", str(last_page), str(pdf), str(outdir / "p")]
    return [exe, "draw", "-q", "-r", str(dpi), "-c", "gray", "-o", str(outdir / "p%d.pgm"),
            str(pdf), f"{first_page}-{last_page}"]


def _limited(argv: list[str]) -> tuple[list[str], Callable[[], None] | None]:
    """``argv`` under the renderers' limits: a renderer that a page makes grow is
    stopped by the kernel, not by the worker's memory running out. util-linux's
    ``prlimit`` sets them where it is installed (Debian always has it); else the
    child sets them itself before exec, which costs a fork rather than a spawn and
    is unsafe in a process with threads, so it is only the fallback."""
    limits = {"--as": RENDER_MEMORY_BYTES, "--fsize": RENDER_PAGE_MAX_BYTES, "--core": 0}
    prlimit = shutil.which("prlimit")
    if prlimit is not None:
        return [prlimit, *(f"{k}={v}" for k, v in limits.items()), "--", *argv], None
    return argv, _limit_child


def _limit_child() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (RENDER_MEMORY_BYTES, RENDER_MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_FSIZE, (RENDER_PAGE_MAX_BYTES, RENDER_PAGE_MAX_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def render(engine: str, pdf: Path, outdir: Path, *, last_page: int, first_page: int = 1,
           dpi: int = RENDER_DPI, limit_s: float | None = None) -> tuple[list[Path], str]:
    """Draw pages ``first_page``..``last_page`` of ``pdf`` (those it has) with
    ``engine`` into ``outdir`` (empty, private): the drawings in page order, and why
    drawing failed ("" when it did not). Raises :class:`RendererUnavailable` when the
    engine is not installed."""
    argv, preexec = _limited(_argv(engine, pdf, outdir, first_page, last_page, dpi))
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, pass_fds=_inherited(pdf),
                              timeout=limit_s if limit_s is not None
                              else timeout_s(last_page - first_page + 1),
                              preexec_fn=preexec, env={**os.environ, "LC_ALL": "C"},
                              check=False)
    except subprocess.TimeoutExpired:
        return [], "timeout"
    except OSError as e:
        return [], type(e).__name__
    pages = sorted(outdir.iterdir(), key=_page_number)
    # What a renderer printed is left out: its complaints quote the document (names
    # of fonts and objects, operators), and the reason goes to the operator's log.
    if proc.returncode < 0:
        return pages, f"signal {-proc.returncode}"
    if proc.returncode != 0:
        return pages, f"exit {proc.returncode}"
    return pages, ""


def compare(original: Path | SealedPath | bytes, rewrite: Path | SealedPath | bytes, *, pages: int, workdir: Path | None,
            tolerance: Tolerance = DEFAULT_TOLERANCE, engines: Sequence[str] = ENGINES,
            dpi: int = RENDER_DPI, stop_at_difference: bool = False,
            masks: Mapping[int, Sequence[Box]] | None = None) -> dict[str, EngineResult]:
    """Each engine's drawing of the received document (``original``) against its
    drawing of the rewrite (``rewrite``, which has ``pages`` pages), in a private
    directory under ``workdir`` (the system's temp directory when None), removed
    again. With ``stop_at_difference``, the engines after one that draws a page
    differently are not asked (the caller refuses whatever they say: a hostile
    document that makes a renderer run to its time costs that time once). Raises
    :class:`RendererUnavailable` before drawing anything when an engine is not
    installed."""
    require_renderers()
    results = {}
    with tempfile.TemporaryDirectory(prefix=".render-", dir=workdir) as private, \
            contextlib.ExitStack() as held:
        root = Path(private)
        os.chmod(root, 0o700)
        original_pdf = _as_file(original, held, "received")
        rewrite_pdf = _as_file(rewrite, held, "rewrite")
        for engine in engines:
            started = time.perf_counter()
            page, failed = _compare_engine(engine, original_pdf, rewrite_pdf, pages, root,
                                           tolerance, dpi, masks)
            results[engine] = EngineResult(engine, page, failed,
                                           (time.perf_counter() - started) * 1000, pages)
            if page is not None and stop_at_difference \
                    and not results[engine].abstained:
                break
    return results


def batches(pages: int, size: int | None = None) -> list[tuple[int, int]]:
    """The page ranges a document of ``pages`` pages is drawn in: ``size`` pages at a
    time, the last one reaching one page past the end (a page the received document
    has more shows there), and never that page alone (a renderer asked only for a
    page past the end fails). Pure."""
    size = size or RENDER_BATCH_PAGES
    starts = range(1, max(pages, 1) + 1, size)
    return [(f, min(f + size - 1, pages) if f + size <= pages else pages + 1) for f in starts]


def _compare_engine(engine: str, a_pdf: Path, b_pdf: Path, pages: int, root: Path,
                    tolerance: Tolerance, dpi: int,
                    masks: Mapping[int, Sequence[Box]] | None = None) -> tuple[int | None, str]:
    """One engine: the first page drawn differently (None: none), and why it could
    not draw one ("" when it could), drawing a batch of pages of each at a time."""
    for first, last in batches(pages):
        a_dir, b_dir = root / f"{engine}-received", root / f"{engine}-rewrite"
        a_dir.mkdir()
        b_dir.mkdir()
        try:
            a, a_failed = render(engine, a_pdf, a_dir, first_page=first, last_page=last, dpi=dpi)
            b, b_failed = render(engine, b_pdf, b_dir, first_page=first, last_page=last, dpi=dpi)
            failed = (f"received: {a_failed}" if a_failed else "") or \
                (f"rewrite: {b_failed}" if b_failed else "")
            # Drawings by page number: a page a renderer skipped is a page it did not draw.
            page = first_differing_page(_aligned(a, first, last), _aligned(b, first, last),
                                        tolerance, masks, first)
            if page is not None:
                return first + page - 1, failed
            # A reader that could not draw a document does not agree with anything,
            # even where what it drew looks alike.
            if failed:
                return first, failed
        finally:
            shutil.rmtree(a_dir)
            shutil.rmtree(b_dir)
    return None, ""


def _page_number(drawing: Path) -> int:
    return int("".join(filter(str.isdigit, drawing.stem)) or 0)


def _aligned(drawings: list[Path], first: int, last: int) -> list[Path | None]:
    """Pages ``first``..``last`` in order, None where no drawing is, trailing Nones
    dropped (the document ended)."""
    by_number = {_page_number(d): d for d in drawings}
    out = [by_number.get(n) for n in range(first, last + 1)]
    while out and out[-1] is None:
        out.pop()
    return out


def _as_file(doc: Path | SealedPath | bytes, held: contextlib.ExitStack, name: str) -> Path:
    """A path the renderers can open: a plain file's own, else a memory-only file
    (``memfd``) holding the plain bytes while ``held`` lasts, named by the
    ``/proc/self/fd/N`` that the renderer process (which inherits the descriptor,
    :func:`render`) opens."""
    if isinstance(doc, Path):
        return doc
    fd = held.enter_context(plain_memfd(doc, name))
    return Path(f"/proc/self/fd/{fd}")


def _inherited(pdf: Path) -> tuple[int, ...]:
    """The descriptor a renderer must inherit to open ``pdf`` (a memfd's path)."""
    if pdf.parent == Path("/proc/self/fd"):
        return (int(pdf.name),)
    return ()


__all__ = ["DEFAULT_TOLERANCE", "ENGINES", "MAX_CHANGED_FRACTION", "PIXEL_DELTA", "RENDER_DPI",
           "EngineResult", "Tolerance", "changed_pixels", "compare", "first_differing_page",
           "batches", "missing_renderers", "readiness", "render", "require_renderers", "same_page",
           "verdict"]
