"""The released invoice templates, and rendering a job's invoice with one of them.

:data:`TEMPLATES` maps a ``template_version`` to a :class:`Template`. A job
renders with the version it was admitted with, and a released version's output
never changes: a new layout is a new version beside the old ones.

:func:`render_to_file` runs in the CPU process pool: it is a top-level picklable
function.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reportlab.platypus.doctemplate import LayoutError

from casesignd.core.errors import PermanentJobError
from casesignd.core.sealed import SealedPath
from casesignd.invoices.layout import v3_render
from casesignd.invoices.v4 import v4_render


@dataclass(frozen=True)
class Template:
    """A released invoice layout.

    ``render(invoice, issuer, out)`` draws the normalized job input ``invoice``
    (see :func:`casesignd.job_kinds.render_invoice.admit`) to ``out`` (a path or a binary file) and
    returns the page count.
    """

    version: str
    render: Callable[[dict[str, Any], dict[str, Any], Any], int]
    description: str = ""
    # Whether it prints the tenant's locale, logo, tax identifiers and footer.
    branded: bool = False


TEMPLATES: dict[str, Template] = {
    "invoice-v3": Template(
        "invoice-v3",
        v3_render,
        "A4, issuer and bill-to header, itemized table with repeated header, "
        "subtotal, optional tax, total, Page X of Y",
    ),
    "invoice-v4": Template(
        "invoice-v4",
        v4_render,
        "invoice-v3's layout by the tenant's settings: its locale's numbers, amounts and "
        "dates (CLDR), right to left where its script is, its logo, tax identifiers, "
        "labels and footer",
        branded=True,
    ),
}


def template(version: str) -> Template:
    """The released template ``version``; PermanentJobError ``unknown_template`` if none."""
    found = TEMPLATES.get(version)
    if found is None:
        raise PermanentJobError(
            f"unknown template {version!r}", code="unknown_template", field="template_version"
        )
    return found


def _render(order: dict[str, Any], template_version: str, out: Any,
            issuer: dict[str, Any]) -> int:
    render = template(template_version).render
    try:
        return render(order, issuer, out)
    except LayoutError as e:
        # Admission bounds every text so that each row fits on a page; reaching
        # this is a bug for this input, and retrying cannot help.
        raise PermanentJobError(
            "the invoice does not fit the template's page layout", code="layout_failed",
            detail={"error": str(e)[:500]},
        ) from None


def render_to_file(order: dict[str, Any], template_version: str, out_path: str | SealedPath,
                   issuer: dict[str, Any]) -> int:
    """Render the invoice to ``out_path`` with ``template_version``; return its pages.

    ``order`` is the normalized job input (``Admission.normalized`` /
    ``ctx.input``: ``{"order": {...}, "tax": {...}, "issuer": {...}, ...}``).
    ``issuer`` is ``{"name": str, "address": [str, ...]}`` and, for a branded
    template, the rest of the job's issuer snapshot with ``logo_path``, where the
    logo's bytes are. A sealed ``out_path`` (a job's temp area) is written sealed.
    """
    if isinstance(out_path, SealedPath):
        with out_path.create() as out:
            return _render(order, template_version, out, issuer)
    return _render(order, template_version, out_path, issuer)


def render_to_bytes(order: dict[str, Any], template_version: str,
                    issuer: dict[str, Any]) -> tuple[bytes, int]:
    """Like :func:`render_to_file`, into memory: ``(pdf_bytes, pages)``."""
    buf = io.BytesIO()
    pages = _render(order, template_version, buf, issuer)
    return buf.getvalue(), pages
