"""How a signature may be placed and what a certification permits: the words a policy
and a request use for them, and the one check of a box. Shared by the configuration's
checks and the signing code (:mod:`casesignd.signing.placement`,
:mod:`casesignd.signing.field`), so that neither reaches into the other. Pure.
"""

from __future__ import annotations

from typing import Any

APPEARANCES = ("invisible", "visible")
MAX_POINTS = 14_400.0  # the largest page side PDF 32000-1 Annex C.2 allows (200 in)

# A policy's certify as the DocMDP permission it sets (PDF 32000-1 §12.8.2.2, Table 254).
CERTIFY_P = {"no_changes": 1, "form_filling": 2, "annotations": 3}


def box_problem(box: Any) -> str:
    """What is wrong with a box ``[x1, y1, x2, y2]`` in points, or ""."""
    if not isinstance(box, list) or len(box) != 4 or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in box):
        return "must be four numbers [x1, y1, x2, y2]"
    x1, y1, x2, y2 = (float(v) for v in box)
    if not all(-MAX_POINTS <= v <= MAX_POINTS for v in (x1, y1, x2, y2)):
        return f"coordinates must lie within ±{MAX_POINTS:g} points"
    if x2 - x1 < 1 or y2 - y1 < 1:
        return "x2 must exceed x1 and y2 exceed y1 (by a point at least)"
    return ""
