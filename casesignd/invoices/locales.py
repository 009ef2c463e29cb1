"""Numbers, money and dates as a locale writes them, from CLDR through Babel.

invoice-v4 prints every number with this module; invoice-v3 keeps its own
``USD 1,234.50`` (:mod:`casesignd.invoices.money`). Rules (README-ready):

- **Locales** are BCP 47 tags (``de-DE``, ``fr-CH``, ``ar-EG``) that CLDR knows;
  anything else is a config error naming the key.
- **Currencies** are the ISO 4217 codes that CLDR lists as legal tender, today,
  in at least one territory; a currency's minor unit is CLDR's (``JPY`` 0,
  ``KWD`` 3; CLDR gives ``IQD`` 0 where ISO says 3, as it is paid).
- **Amounts** are written with the locale's standard currency pattern: its
  symbol and where it stands, its grouping (``12,34,567.50`` in ``hi-IN``) and
  decimal marks, and exactly the currency's minor digits. Formatting never
  rounds: it takes an amount that is already a whole number of minor units and
  refuses any other (ValueError), and its digits are exactly the amount's.
- **Digits** are Latin in every locale (Babel's default; CLDR's ``ar-EG`` also
  has Arabic-Indic digits, which a reader may expect, but the dates Babel
  writes stay Latin, and one invoice should not mix them).
- **Dates** are the locale's numeric year-month-day (CLDR skeleton ``yMd``):
  ``11/29/2026``, ``29.11.2026``, ``2026/11/29``; no month names, so no font
  needs the script of a month's name.
- **Rates** are percentages in the locale's pattern with as many decimals as the
  rate has (7.5 % stays 7.5, never 8).
"""

from __future__ import annotations

import copy
import functools
from datetime import date
from decimal import Decimal

from babel import Locale, UnknownLocaleError
from babel.core import get_global
from babel.dates import format_skeleton
from babel.numbers import format_decimal, get_currency_precision

from casesignd.core.errors import ConfigError

__all__ = ["currency_units", "format_date", "format_money", "format_quantity",
           "format_rate", "is_rtl", "locale_of", "parse_locale"]


def parse_locale(tag: str, key: str) -> Locale:
    """The CLDR locale of the BCP 47 ``tag``; ConfigError naming ``key`` otherwise."""
    try:
        return locale_of(tag)
    except (ValueError, UnknownLocaleError, TypeError):
        raise ConfigError(key, f"not a locale CLDR knows (BCP 47, like de-DE): {tag!r}") from None


@functools.lru_cache(maxsize=256)
def locale_of(tag: str) -> Locale:
    """The Babel locale of a BCP 47 tag (``de-DE``; ``de_DE`` too)."""
    return Locale.parse(tag.replace("_", "-"), sep="-")


def is_rtl(locale: Locale) -> bool:
    """Whether the locale's script is written right to left (ar, he, fa, ur, ...)."""
    return bool(locale.character_order == "right-to-left")


@functools.cache
def _tender_now() -> frozenset[str]:
    """ISO codes that are legal tender in some territory today (CLDR)."""
    today = date.today()
    codes = set()
    for spans in get_global("territory_currencies").values():
        for code, _start, end, tender in spans:
            if tender and (end is None or date(*end) >= today):
                codes.add(code)
    return frozenset(codes)


def currency_units(code: str) -> int | None:
    """The minor unit (decimals) of an upper-case ISO code in use; None if not in use."""
    if code not in _tender_now():
        return None
    return int(get_currency_precision(code))


@functools.lru_cache(maxsize=1024)
def _currency_pattern(locale: Locale, units: int) -> object:
    pattern = copy.copy(locale.currency_formats["standard"])
    pattern.frac_prec = (units, units)
    return pattern


def format_money(value: Decimal, currency: str, units: int, locale: Locale) -> str:
    """``value`` (a whole number of minor units) as ``locale`` writes ``currency``."""
    if value != value.quantize(Decimal(1).scaleb(-units)):
        raise ValueError(f"{value} is not a whole number of {currency} minor units")
    pattern = _currency_pattern(locale, units)
    return str(pattern.apply(value, locale, currency=currency,  # type: ignore[attr-defined]
                             currency_digits=False, decimal_quantization=True))


def format_quantity(n: int, locale: Locale) -> str:
    """A whole number with the locale's grouping (``1.000.000`` in de-DE)."""
    return str(format_decimal(n, locale=locale))


@functools.lru_cache(maxsize=1024)
def _percent_pattern(locale: Locale, digits: int) -> object:
    pattern = copy.copy(locale.percent_formats[None])
    pattern.frac_prec = (digits, digits)
    return pattern


def format_rate(rate: Decimal, locale: Locale) -> str:
    """A fraction as the locale's percentage, keeping every digit (0.075 -> 7.5 %)."""
    exponent = (rate * 100).normalize().as_tuple().exponent
    digits = max(0, -int(exponent))
    pattern = _percent_pattern(locale, digits)
    return str(pattern.apply(rate, locale))  # type: ignore[attr-defined]


def format_date(iso: str, locale: Locale) -> str:
    """A ``YYYY-MM-DD`` date as the locale writes it in numbers."""
    return str(format_skeleton("yMd", date.fromisoformat(iso), locale=locale))
