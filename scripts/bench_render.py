#!/usr/bin/env python3
"""Benchmark: what drawing a rewritten document's pages costs (casesignd.pdf.render).

Every document the pipeline rewrites is drawn twice (received, rewrite) by poppler and
by MuPDF, inside the worker call that checks it. For a 1-page and a 10-page contract
(40 lines of text a page) this prints, per engine and resolution, the milliseconds
per page of the document (both drawings and the comparison) and the renderers' CPU;
beside them pypdf's page digests (the reading the drawings arbitrate) and qpdf's
rewrite, the other costs of a rewritten document. A second table says, per
resolution, whether each engine sees the smallest changes measured (a digit, a word,
a decimal comma made a point, in 8- and 10-point type): the lowest resolution that
sees them all is the one to use. The last line is one JSON object of the figures.

    .venv/bin/python scripts/bench_render.py [--repeat 5] [--dpi 30,36,40,50,72]
    scripts/bench render
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchlib import loadavg  # noqa: E402  (scripts/, beside this file)
from benchlib.documents import make_pages  # noqa: E402

from casesignd.pdf import normalize  # noqa: E402
from casesignd.pdf import render as pdfrender  # noqa: E402


def _children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def time_compare(src: Path, rewrite: Path, pages: int, dpi: int, repeat: int,
                 work: Path) -> dict[str, dict[str, float]]:
    """Per engine, medians per page of the document: wall ms, the renderers' CPU ms
    (both drawings), and this process's CPU ms (starting them, comparing pixels)."""
    wall: dict[str, list[float]] = {e: [] for e in pdfrender.ENGINES}
    cpu: dict[str, list[float]] = {e: [] for e in pdfrender.ENGINES}
    own: dict[str, list[float]] = {e: [] for e in pdfrender.ENGINES}
    for _ in range(repeat):
        for engine in pdfrender.ENGINES:
            before, own_before = _children_cpu_s(), time.process_time()
            started = time.perf_counter()
            result = pdfrender.compare(src, rewrite, pages=pages, workdir=work,
                                       engines=(engine,), dpi=dpi)[engine]
            wall[engine].append((time.perf_counter() - started) * 1000 / pages)
            cpu[engine].append((_children_cpu_s() - before) * 1000 / pages)
            own[engine].append((time.process_time() - own_before) * 1000 / pages)
            assert result.page is None and not result.failed, result
    return {e: {"ms_per_page": round(statistics.median(wall[e]), 2),
                "renderer_cpu_ms_per_page": round(statistics.median(cpu[e]), 2),
                "compare_cpu_ms_per_page": round(statistics.median(own[e]), 2)}
            for e in pdfrender.ENGINES}


def time_digests(src: Path, repeat: int) -> float:
    from pypdf import PdfReader

    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        with open(src, "rb") as f:
            reader = PdfReader(f)
            n = len(normalize.page_digests(reader))
        times.append((time.perf_counter() - started) * 1000 / n)
    return round(statistics.median(times), 2)


def time_rewrite(src: Path, dst: Path, pages: int, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        normalize.rewrite(src, dst)
        times.append((time.perf_counter() - started) * 1000 / pages)
    return round(statistics.median(times), 2)


# --- what each resolution sees ------------------------------------------------------

CHANGES = {"digit": ("Salary 1000 EUR", "Salary 1900 EUR"),
           "word": ("the buyer agrees", "the buyer agreed"),
           "point": ("Pay 1,000 EUR", "Pay 1.000 EUR")}


def _line(text: str, size: int) -> bytes:
    from tests.helpers_corpus import assemble, stream

    content = b"BT /F1 %d Tf 72 720 Td (%s) Tj ET" % (size, text.encode())
    return assemble([
        b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        stream(content), b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"])


def sensitivity(dpis: list[int], work: Path) -> dict[str, dict[int, list[str]]]:
    """Per engine and resolution: the changes it misses (empty: it sees them all)."""
    out: dict[str, dict[int, list[str]]] = {e: {} for e in pdfrender.ENGINES}
    for dpi in dpis:
        for engine in pdfrender.ENGINES:
            missed = []
            for name, (before, after) in CHANGES.items():
                for size in (8, 10):
                    a, b = work / "a.pdf", work / "b.pdf"
                    a.write_bytes(_line(before, size))
                    b.write_bytes(_line(after, size))
                    if pdfrender.compare(a, b, pages=1, workdir=work, engines=(engine,),
                                         dpi=dpi)[engine].page is None:
                        missed.append(f"{name}@{size}pt")
            out[engine][dpi] = missed
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dpi", default="30,36,40,50,72")
    args = ap.parse_args()
    dpis = [int(x) for x in args.dpi.split(",")]
    if pdfrender.RENDER_DPI not in dpis:
        dpis.append(pdfrender.RENDER_DPI)
    load_start = loadavg.snapshot()
    figures: dict[str, object] = {"dpi_used": pdfrender.RENDER_DPI}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rows = []
        for pages in (1, 10):
            src = make_pages(work / f"doc{pages}.pdf", pages)
            rewrite, _ = normalize.rewrite(src, work / f"doc{pages}.rewrite.pdf")
            assert isinstance(rewrite, Path)
            per_dpi = {dpi: time_compare(src, rewrite, pages, dpi, args.repeat, work)
                       for dpi in dpis}
            rows.append((pages, per_dpi, time_digests(src, args.repeat),
                         time_rewrite(src, work / "again.pdf", pages, args.repeat)))
        seen = sensitivity(dpis, work)

    print("render check per page of a rewritten document (both drawings and the comparison), "
          f"median of {args.repeat}")
    print(f"{'pages':>5} {'dpi':>4} {'engine':<8} {'ms/page':>8} {'renderer cpu':>13} "
          f"{'compare cpu':>12}")
    for pages, per_dpi, _, _ in rows:
        for dpi in dpis:
            for engine, r in per_dpi[dpi].items():
                mark = " <- used" if dpi == pdfrender.RENDER_DPI else ""
                print(f"{pages:>5} {dpi:>4} {engine:<8} {r['ms_per_page']:>8.2f} "
                      f"{r['renderer_cpu_ms_per_page']:>13.2f} "
                      f"{r['compare_cpu_ms_per_page']:>12.2f}{mark}")
    print()
    print("the other costs of a rewritten document, per page")
    print(f"{'pages':>5} {'pypdf page digests ms':>22} {'qpdf rewrite ms':>16}")
    for pages, _, digests_ms, rewrite_ms in rows:
        print(f"{pages:>5} {digests_ms:>22.2f} {rewrite_ms:>16.2f}")
    print()
    print("changes each engine misses (a digit, a word, a comma made a point; 8 and 10 pt)")
    for dpi in dpis:
        print(f"{dpi:>4} dpi  " + "  ".join(
            f"{engine}: {', '.join(seen[engine][dpi]) or 'none'}" for engine in pdfrender.ENGINES))
    print(loadavg.describe(load_start, loadavg.snapshot()))
    figures["render_check"] = {
        f"{pages}_page{'s' if pages > 1 else ''}": {
            str(dpi): per_dpi[dpi] for dpi in dpis} for pages, per_dpi, _, _ in rows}
    figures["pypdf_digests_ms_per_page"] = {str(p): d for p, _, d, _ in rows}
    figures["qpdf_rewrite_ms_per_page"] = {str(p): r for p, _, _, r in rows}
    figures["missed"] = {e: {str(d): m for d, m in v.items()} for e, v in seen.items()}
    figures["load"] = {"start": load_start, "end": loadavg.snapshot()}
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
