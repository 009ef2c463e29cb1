"""Amounts as a locale writes them: what Babel's format_currency writes, digit for
digit, for every currency in use and several locales; never rounded."""

from __future__ import annotations

from decimal import Decimal

import pytest
from babel.numbers import format_currency
from hypothesis import given, settings
from hypothesis import strategies as st

from casesignd.core.errors import ConfigError
from casesignd.invoices import locales

TAGS = ["en-US", "de-DE", "fr-CH", "ja-JP", "ar-EG", "hi-IN", "he-IL", "ar-KW", "pt-BR"]
CODES = sorted(locales._tender_now())


@settings(max_examples=400, deadline=None)
@given(tag=st.sampled_from(TAGS), code=st.sampled_from(CODES),
       minor=st.integers(min_value=0, max_value=10**18))
def test_format_money_is_babels_and_keeps_every_digit(tag: str, code: str, minor: int) -> None:
    units = locales.currency_units(code)
    assert units is not None
    value = Decimal(minor).scaleb(-units)
    loc = locales.locale_of(tag)
    got = locales.format_money(value, code, units, loc)
    assert got == format_currency(value, code, locale=loc)
    digits = "".join(ch for ch in got if ch.isdigit())
    assert int(digits) == minor  # every digit printed, none rounded away


def test_an_amount_finer_than_the_minor_unit_is_refused_not_rounded() -> None:
    with pytest.raises(ValueError):
        locales.format_money(Decimal("1.005"), "USD", 2, locales.locale_of("en-US"))


def test_rates_dates_and_directions() -> None:
    de, ar = locales.locale_of("de-DE"), locales.locale_of("ar-EG")
    assert locales.format_rate(Decimal("0.075"), de) == "7,5\u00a0%"
    assert locales.format_rate(Decimal("0.19"), locales.locale_of("en-US")) == "19%"
    assert locales.format_date("2026-11-29", de) == "29.11.2026"
    assert locales.format_date("2026-11-29", locales.locale_of("ja-JP")) == "2026/11/29"
    assert locales.is_rtl(ar) and not locales.is_rtl(de)
    assert locales.format_quantity(1234567, locales.locale_of("hi-IN")) == "12,34,567"


def test_currencies_out_of_use_and_unknown_locales() -> None:
    assert locales.currency_units("DEM") is None and locales.currency_units("JPY") == 0
    assert locales.currency_units("KWD") == 3
    for bad in ("xx-QQ", "", "de_DE_x!"):
        with pytest.raises(ConfigError):
            locales.parse_locale(bad, "invoice.locale")
    assert str(locales.parse_locale("de_DE", "k")) == "de_DE"
