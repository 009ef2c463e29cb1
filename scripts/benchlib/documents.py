"""Documents the benchmarks sign: plain contracts of a few pages of text."""

from __future__ import annotations

from pathlib import Path


def make_pages(path: Path, pages: int) -> Path:
    """A contract of ``pages`` pages of text (reportlab), written at ``path``."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=A4)
    for i in range(pages):
        for line in range(40):
            c.drawString(60, 800 - 18 * line, f"Page {i + 1}, line {line + 1}: terms and conditions apply.")
        c.showPage()
    c.save()
    return path
