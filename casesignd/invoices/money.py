"""Money: supported currencies, strict amount parsing, rounding and formatting.

Amounts are :class:`decimal.Decimal` from the request to the PDF; no float ever
touches a price.

Rules (README-ready):

- **Currencies.** The ISO 4217 codes in :data:`CURRENCIES`, each with its minor
  unit (USD 2, JPY 0, KWD 3, ...). Codes are accepted in any case and stored
  upper-case.
- **Amounts** are decimal strings of ASCII digits with an optional fraction
  (``^[0-9]+(\\.[0-9]+)?$``): no sign, no exponent, no thousands separator, no
  spaces, no ``NaN``. At most :data:`MAX_INTEGER_DIGITS` digits before the point.
- **Precision.** A unit price must be a whole number of the currency's minor
  units: ``"49.005"`` USD is refused (``invalid_amount``) rather than silently
  rounded, because changing a price the caller sent is worse than refusing it.
  Trailing zeros are fine (``"49.500"`` USD is 49.50; ``"1000.0"`` JPY is 1000).
- **Line total** = quantity x unit price, quantized once to the minor unit.
  Because unit prices are whole minor units this never actually rounds.
- **Tax** = subtotal x ``invoice.tax_rate``, rounded once, on the subtotal (not
  per line), with **ROUND_HALF_UP** (commercial rounding: a half minor unit
  rounds away from zero), which is what tax authorities and customers expect on
  an invoice; banker's rounding (half-even) would surprise a reader checking the
  sum by hand. **Total** = subtotal + tax, exact.
- **Formatting** uses the currency code, never a symbol, so every currency
  renders with the same font: ``format_amount(Decimal("1234.5"), "USD")`` is
  ``"USD 1,234.50"``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Context, Decimal, localcontext

from casesignd.core.errors import ConfigError, ValidationError

# ISO 4217 code -> minor unit (number of decimals).
CURRENCIES: dict[str, int] = {
    "USD": 2, "EUR": 2, "GBP": 2, "CHF": 2, "CAD": 2, "AUD": 2, "NZD": 2,
    "SEK": 2, "NOK": 2, "DKK": 2, "ISK": 0, "PLN": 2, "CZK": 2, "HUF": 2,
    "RON": 2, "BGN": 2, "TRY": 2, "ILS": 2, "AED": 2, "SAR": 2, "QAR": 2,
    "JPY": 0, "KRW": 0, "VND": 0, "CLP": 0, "PYG": 0, "UGX": 0, "XOF": 0,
    "XAF": 0, "INR": 2, "CNY": 2, "HKD": 2, "SGD": 2, "TWD": 2, "THB": 2,
    "MYR": 2, "IDR": 2, "PHP": 2, "MXN": 2, "BRL": 2, "ARS": 2, "COP": 2,
    "PEN": 2, "ZAR": 2, "EGP": 2, "NGN": 2, "KES": 2, "MAD": 2,
    "KWD": 3, "BHD": 3, "JOD": 3, "OMR": 3, "TND": 3, "LYD": 3, "IQD": 3,
}  # fmt: skip

# 10**12 major units per price is far above any invoice line and keeps every sum
# (max_items x max quantity x price) well inside the working precision below.
MAX_INTEGER_DIGITS = 12
# Every computation runs in this context: 60 digits, so sums and tax are never
# inexact, and half-up rounding when quantizing to a minor unit.
_CTX = Context(prec=60, rounding=ROUND_HALF_UP)

_AMOUNT = re.compile(r"[0-9]+(?:\.[0-9]+)?")
_RATE = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,8})?")


def minor_unit(currency: str) -> int:
    """Decimals of ``currency`` (an upper-case supported code)."""
    return CURRENCIES[currency]


def normalize_currency(text: object, field: str) -> str:
    """The upper-case supported code for ``text``; ``unsupported_currency`` otherwise."""
    if not isinstance(text, str):
        raise ValidationError("currency must be a string", code="unsupported_currency", field=field)
    # isascii first: str.upper maps some non-ASCII letters to ASCII ("\u017f" -> "S").
    code = text.upper() if text.isascii() else ""
    if code not in CURRENCIES:
        raise ValidationError(
            f"unsupported currency {text[:16]!r}", code="unsupported_currency", field=field
        )
    return code


def parse_amount(text: str, field: str) -> Decimal:
    """Parse a non-negative decimal string strictly; ``invalid_amount`` naming ``field``.

    ``"12,50"``, ``"1e3"``, ``"-1"``, ``" 1"``, ``"NaN"``, ``"1."`` and non-strings
    are refused.
    """
    if not isinstance(text, str) or not _AMOUNT.fullmatch(text):
        raise ValidationError(
            "amount must be a decimal string like \"49.00\"", code="invalid_amount", field=field
        )
    integer = text.partition(".")[0].lstrip("0")
    if len(integer) > MAX_INTEGER_DIGITS:
        raise ValidationError(
            f"amount has more than {MAX_INTEGER_DIGITS} integer digits",
            code="invalid_amount",
            field=field,
        )
    return Decimal(text)


_QUANTUM = {code: Decimal(1).scaleb(-units) for code, units in CURRENCIES.items()}


def exponent(currency: str) -> Decimal:
    """The quantum of ``currency``: Decimal("0.01") for USD, Decimal("1") for JPY."""
    return _QUANTUM[currency]


def quantize(value: Decimal, currency: str, units: int | None = None) -> Decimal:
    """Round ``value`` to the currency's minor unit, ROUND_HALF_UP.

    ``units`` (decimals) overrides :data:`CURRENCIES` (invoice-v4 takes CLDR's).
    """
    quantum = _QUANTUM[currency] if units is None else Decimal(1).scaleb(-units)
    return value.quantize(quantum, context=_CTX)


def parse_price(text: str, currency: str, field: str, units: int | None = None) -> Decimal:
    """A unit price: :func:`parse_amount` that is also a whole number of minor units.

    Returned quantized (``"49.5"`` USD -> ``Decimal("49.50")``).
    """
    value = parse_amount(text, field)
    q = quantize(value, currency, units)
    if q != value:
        units = CURRENCIES[currency] if units is None else units
        raise ValidationError(
            f"{currency} amounts have at most {units} decimals" if units
            else f"{currency} amounts have no decimals",
            code="invalid_amount",
            field=field,
        )
    return q


def parse_rate(text: str, key: str = "invoice.tax_rate") -> Decimal | None:
    """The configured tax rate: empty for none, else a fraction in [0, 1] (``"0.2"``).

    Raises :class:`ConfigError` naming ``key``.
    """
    text = text.strip()
    if not text:
        return None
    if not _RATE.fullmatch(text):
        raise ConfigError(key, f"expected a decimal fraction like \"0.2\", got {text!r}")
    rate = Decimal(text)
    if rate > 1:
        raise ConfigError(key, f"must be at most 1, got {text!r}")
    return rate


@dataclass(frozen=True)
class Totals:
    """The sums printed on an invoice, all quantized to the currency."""

    lines: tuple[Decimal, ...]
    subtotal: Decimal
    tax: Decimal | None
    total: Decimal


def line_total(quantity: int, unit_price: Decimal, currency: str,
               units: int | None = None) -> Decimal:
    """quantity x unit price, rounded once to the minor unit."""
    return quantize(_CTX.multiply(unit_price, quantity), currency, units)


def totals(
    items: Iterable[tuple[int, Decimal]], currency: str, tax_rate: Decimal | None,
    units: int | None = None,
) -> Totals:
    """Line totals, subtotal, tax (rounded once on the subtotal) and total."""
    with localcontext(_CTX):
        lines = tuple(line_total(q, p, currency, units) for q, p in items)
        subtotal = quantize(sum(lines, Decimal(0)), currency, units)
        tax = None if tax_rate is None else quantize(subtotal * tax_rate, currency, units)
        total = subtotal + (tax or 0)
    return Totals(lines=lines, subtotal=subtotal, tax=tax, total=total)


def to_text(value: Decimal, currency: str) -> str:
    """The canonical decimal string of ``value`` at the currency's minor unit ("49.00")."""
    return f"{quantize(value, currency):f}"


def format_amount(value: Decimal, currency: str) -> str:
    """For people: ``"USD 1,234.50"``, ``"JPY 1,200"``, ``"KWD 0.125"``."""
    q = quantize(value, currency)
    return f"{currency} {q:,.{CURRENCIES[currency]}f}"


def format_rate(rate: Decimal) -> str:
    """A rate as a percentage without trailing zeros: Decimal("0.075") -> "7.5%"."""
    pct = (rate * 100).normalize()
    return f"{pct:f}%"
