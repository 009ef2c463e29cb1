"""Where a signature goes and whether it is seen: the policy's default, the request's
choice within it, and the stamp's words (pure).

A policy's ``appearance`` is ``invisible`` (an invisible field on page 1, as before)
or ``visible``: a stamp (:mod:`casesignd.signing.stamp`) on ``signature_page`` in
``signature_box``, or in the document's own field ``signature_field`` when it names
one. A request's ``signature`` object may name a field (``{"field": "Buyer"}``,
visible or not as the policy says) or, under a visible policy, a page and a box
(``{"page": -1, "box": [x1, y1, x2, y2]}``), or ask that the signature be seen where
the policy puts it (``{"visible": true}``: refused under an invisible policy, and the
same signature as no ``signature`` under a visible one). Admission checks the shapes; whether the
field is there and the box on its page is the worker's to check before the key is
used (:mod:`casesignd.signing.field`).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from casesignd.core.appearance import box_problem
from casesignd.core.errors import ValidationError
from casesignd.core.fields import refuse_unknown


def admit(raw: Any, appearance: str) -> dict[str, Any]:
    """The request's ``signature`` object, checked and normalized (pure); ``appearance``
    its policy's. Empty: the policy's own placement."""
    if not isinstance(raw, dict):
        raise ValidationError("signature must be an object", code="invalid_field", field="signature")
    refuse_unknown(raw, ("field", "page", "box", "visible"), "signature")
    if "visible" in raw:
        if raw["visible"] is not True or len(raw) != 1:
            raise ValidationError("signature.visible is true, and alone: the policy's own "
                                  "page and box, or its field", code="invalid_field",
                                  field="signature.visible")
        if appearance != "visible":
            raise ValidationError("the policy's signatures are invisible: a visible stamp "
                                  "needs a policy with appearance = \"visible\"",
                                  code="invalid_field", field="signature.visible")
        return {}
    if "field" in raw:
        if "page" in raw or "box" in raw:
            raise ValidationError("signature names a field or a page and box, not both",
                                  code="invalid_field", field="signature")
        field = raw["field"]
        if not isinstance(field, str) or not 1 <= len(field) <= 255 or not field.isprintable():
            raise ValidationError("signature.field must be a field name of 1 to 255 characters",
                                  code="invalid_field", field="signature.field")
        return {"field": field}
    if "box" not in raw:
        raise ValidationError("signature must name a field, or a box (and a page)",
                              code="invalid_field", field="signature.field")
    if appearance != "visible":
        raise ValidationError("the policy's signatures are invisible: it allows no box",
                              code="invalid_field", field="signature.box")
    page = raw.get("page", 1)
    if not isinstance(page, int) or isinstance(page, bool) or page == 0 or abs(page) > 1_000_000:
        raise ValidationError("signature.page must be a page number (1 the first, -1 the last)",
                              code="invalid_field", field="signature.page")
    problem = box_problem(raw["box"])
    if problem:
        raise ValidationError(f"signature.box {problem}", code="invalid_field", field="signature.box")
    return {"page": page, "box": [float(v) for v in raw["box"]]}


def placement(signature: dict[str, Any] | None, policy: Any
              ) -> tuple[str, tuple[int, tuple[float, float, float, float]] | None, bool]:
    """(field to sign into or "", a new field's page and box or None, whether a stamp
    is drawn) for a request's normalized ``signature`` under ``policy`` (pure)."""
    visible = policy.appearance == "visible"
    if signature and "field" in signature:
        return signature["field"], None, visible
    if signature and "box" in signature:
        return "", (signature["page"], tuple(signature["box"])), True  # type: ignore[return-value]
    if not visible:
        return "", None, False
    if policy.signature_field:
        return policy.signature_field, None, True
    return "", (policy.signature_page, tuple(policy.signature_box)), True  # type: ignore[return-value]


def subject_of(cert: Any) -> str:
    """The certificate's subject as people read it (RFC 4514, most specific first)."""
    try:
        return str(cert.subject.rfc4514_string())
    except AttributeError:
        return ""


def words(*, subject: str, signer_name: str, parties: Any, signing_time: dt.datetime,
          policy_version: str, reason: str, location: str) -> tuple[str, ...]:
    """The stamp's lines for a signature (see :func:`casesignd.signing.stamp.stamp_lines`)."""
    from casesignd.signing.stamp import stamp_lines

    return stamp_lines(subject=subject or signer_name,
                       parties=[(p.name, p.role) for p in parties], signing_time=signing_time,
                       policy_version=policy_version, reason=reason, location=location)
