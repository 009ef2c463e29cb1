"""Checking a request's fields, one way for every body: the job kinds' manifests, the
kiosk's, a signature's placement (pure functions raising
:class:`~casesignd.core.errors.ValidationError` with the field at fault).

A refusal never echoes what the client sent where a name was expected: an unknown
key (which may be markup, or a token pasted in the wrong place) is counted, not
quoted, in the answer and the log; the refusal names the object that holds it and
the fields it allows.
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from collections.abc import Collection, Mapping
from typing import Any

from casesignd.core.errors import ValidationError

# Unicode categories no human-readable field holds: controls, format characters
# (bidirectional overrides among them) and lone surrogates.
CONTROL_CATEGORIES = ("Cc", "Cf", "Cs")


def refuse_unknown(obj: Mapping[Any, Any], allowed: Collection[str], where: str = "") -> None:
    """Refuse ``obj`` (the body, or the object at path ``where``) if it has a key
    outside ``allowed``: ``unknown_field`` with a fixed message, never the key."""
    unknown = sum(1 for key in obj if key not in allowed)
    if not unknown:
        return
    fields = "an unknown field" if unknown == 1 else f"{unknown} unknown fields"
    raise ValidationError(f"{where or 'the body'} has {fields}; it allows "
                          + ", ".join(sorted(allowed)), code="unknown_field", field=where or None)


def required(value: Any, field: str) -> Any:
    """``value``, unless it is missing (None): ``missing_field``."""
    if value is None:
        raise ValidationError(f"{field} is required", code="missing_field", field=field)
    return value


def object_field(value: Any, field: str) -> dict[str, Any]:
    """``value`` if it is a JSON object, else ``invalid_field``."""
    if not isinstance(value, dict):
        raise ValidationError(f"{field} must be an object", code="invalid_field", field=field)
    return value


def integer(value: Any, field: str, lo: int, hi: int, *, label: str | None = None,
            code: str = "invalid_field") -> int:
    """``value`` if it is an integer (a JSON number, not a boolean) from ``lo`` to ``hi``,
    else ``code``: "<label> must be an integer from <lo> to <hi>" (``label``: the
    field's own name where ``field`` is a longer path)."""
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ValidationError(f"{label or field} must be an integer from {lo} to {hi}",
                              code=code, field=field)
    return value


# RFC 3339's date-time (section 5.6): a full date, a full time and an offset, which may
# not be left out (a time without one means a different instant on every server).
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})")


def rfc3339_time(value: Any, field: str, *, code: str = "invalid_field") -> float:
    """``value``, an RFC 3339 date-time with its offset (``2026-12-05T09:00:00Z``,
    ``...+01:00``), as Unix seconds; else ``code``."""
    when = None
    if isinstance(value, str) and _RFC3339.fullmatch(value):
        text = value.upper().replace("Z", "+00:00")
        head, dot, rest = text.partition(".")
        if dot:  # at most microseconds: Python reads no more
            digits = rest[:-6]
            text = f"{head}.{digits[:6].ljust(6, '0')}{rest[-6:]}"
        try:
            # In UTC too, so that the instant is one every date shown (years 1-9999)
            # can say: "9999-12-31T23:59:59-23:59" is valid RFC 3339 but falls in
            # year 10000, which no job resource could print.
            when = dt.datetime.fromisoformat(text).astimezone(dt.UTC)
        except (ValueError, OverflowError):
            when = None
    if when is None:
        raise ValidationError(f"{field} must be an RFC 3339 date-time with an offset "
                              "(2026-12-05T09:00:00Z)", code=code, field=field)
    return when.timestamp()


def query_integer(raw: str | None, field: str, default: int, lo: int, hi: int, *,
                  code: str = "invalid_field") -> int:
    """A query parameter's integer (``default`` when it is absent), as :func:`integer`."""
    try:
        value = default if raw is None else int(raw)
    except ValueError:
        value = None
    return integer(value, field, lo, hi, code=code)


def plain_text(value: Any, field: str, max_chars: int) -> str:
    """A human-readable string of 1 to ``max_chars`` characters and no control
    characters, else ``invalid_field``."""
    if not isinstance(value, str) or not 1 <= len(value) <= max_chars:
        raise ValidationError(f"{field} must be a string of 1 to {max_chars} characters",
                              code="invalid_field", field=field)
    if any(unicodedata.category(c) in CONTROL_CATEGORIES for c in value):
        raise ValidationError(f"{field} must not contain control characters",
                              code="invalid_field", field=field)
    return value
