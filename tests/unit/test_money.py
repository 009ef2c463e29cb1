"""Money rules: strict parsing, minor units, rounding once and half up, formatting."""

from __future__ import annotations

from decimal import Decimal

import pytest

from casesignd.core.errors import ConfigError, ValidationError
from casesignd.invoices import money

D = Decimal


@pytest.mark.parametrize(
    "text, value",
    [("0", D("0")), ("49.00", D("49.00")), ("49", D("49")), ("007.5", D("7.5")),
     ("999999999999.999", D("999999999999.999"))],
)  # fmt: skip
def test_parse_amount_accepts(text: str, value: Decimal) -> None:
    assert money.parse_amount(text, "f") == value


@pytest.mark.parametrize(
    "text",
    ["12,50", "1e3", "-1", " 1", "1 ", "NaN", "Infinity", "", ".5", "1.", "+1", "1_000",
     "١٢", "1\n", "0x10", "1000000000000", 12, 12.5, None, True],
)  # fmt: skip
def test_parse_amount_refuses(text: object) -> None:
    with pytest.raises(ValidationError) as e:
        money.parse_amount(text, "order.items[3].unit_price")  # type: ignore[arg-type]
    assert e.value.code == "invalid_amount"
    assert e.value.field == "order.items[3].unit_price"


@pytest.mark.parametrize(
    "text, currency, value",
    [("49.5", "USD", "49.50"), ("49.500", "USD", "49.50"), ("1000.0", "JPY", "1000"),
     ("0.125", "KWD", "0.125"), ("0", "BHD", "0.000")],
)  # fmt: skip
def test_parse_price_quantizes_exact_values(text: str, currency: str, value: str) -> None:
    got = money.parse_price(text, currency, "p")
    assert got == D(value) and str(got) == value


@pytest.mark.parametrize(
    "text, currency", [("49.005", "USD"), ("1.5", "JPY"), ("0.1234", "KWD"), ("0.001", "EUR")]
)
def test_parse_price_refuses_sub_minor_unit(text: str, currency: str) -> None:
    with pytest.raises(ValidationError) as e:
        money.parse_price(text, currency, "p")
    assert (e.value.code, e.value.field) == ("invalid_amount", "p")


@pytest.mark.parametrize(
    "value, currency, want",
    [("0.005", "USD", "0.01"), ("0.015", "USD", "0.02"), ("0.025", "USD", "0.03"),
     ("0.0049", "USD", "0.00"), ("2.5", "JPY", "3"), ("3.5", "JPY", "4"),
     ("0.0005", "KWD", "0.001")],
)  # fmt: skip
def test_quantize_rounds_half_up(value: str, currency: str, want: str) -> None:
    # Half-even would give 0.02 for 0.025 and 2 for 2.5: the rule is half up.
    assert money.quantize(D(value), currency) == D(want)


def test_tax_is_rounded_once_on_the_subtotal() -> None:
    # Three lines of 0.35 at 7.5 %: per line the tax would be 3 x 0.03 = 0.09;
    # on the subtotal 1.05 x 0.075 = 0.07875 -> 0.08.
    t = money.totals([(1, D("0.35"))] * 3, "USD", D("0.075"))
    assert t.lines == (D("0.35"),) * 3
    assert (t.subtotal, t.tax, t.total) == (D("1.05"), D("0.08"), D("1.13"))


def test_tax_half_up_on_exact_half() -> None:
    t = money.totals([(1, D("0.25"))], "USD", D("0.1"))
    assert t.tax == D("0.03")  # 0.025 rounds up
    assert t.total == D("0.28")


def test_totals_without_tax_and_zero_prices() -> None:
    t = money.totals([(3, D("0")), (2, D("1.10"))], "EUR", None)
    assert t.lines == (D("0.00"), D("2.20"))
    assert (t.subtotal, t.tax, t.total) == (D("2.20"), None, D("2.20"))


def test_totals_are_exact_at_the_limits() -> None:
    # max quantity x max price x many lines never loses a digit.
    price = D("999999999999.999")
    t = money.totals([(1_000_000, price)] * 10_000, "KWD", D("0.2"))
    assert t.subtotal == price * 1_000_000 * 10_000
    assert t.total == t.subtotal + t.tax


@pytest.mark.parametrize(
    "value, currency, text",
    [("1234.5", "USD", "USD 1,234.50"), ("1200", "JPY", "JPY 1,200"),
     ("0.125", "KWD", "KWD 0.125"), ("0", "EUR", "EUR 0.00"),
     ("1234567.891", "BHD", "BHD 1,234,567.891")],
)  # fmt: skip
def test_format_amount(value: str, currency: str, text: str) -> None:
    assert money.format_amount(D(value), currency) == text


@pytest.mark.parametrize(
    "rate, text", [("0.2", "20%"), ("0.075", "7.5%"), ("0", "0%"), ("1", "100%")]
)
def test_format_rate(rate: str, text: str) -> None:
    assert money.format_rate(D(rate)) == text


@pytest.mark.parametrize("text, want", [("", None), (" ", None), ("0.2", D("0.2")), ("0", D(0))])
def test_parse_rate(text: str, want: Decimal | None) -> None:
    assert money.parse_rate(text) == want


@pytest.mark.parametrize("text", ["20%", "-0.1", "1.5", "abc", "0.2e1", "0.123456789"])
def test_parse_rate_refuses(text: str) -> None:
    with pytest.raises(ConfigError) as e:
        money.parse_rate(text)
    assert e.value.key == "invoice.tax_rate"


@pytest.mark.parametrize("text, code", [("usd", "USD"), ("Eur", "EUR"), ("JPY", "JPY")])
def test_normalize_currency(text: str, code: str) -> None:
    assert money.normalize_currency(text, "order.currency") == code


@pytest.mark.parametrize("text", ["XYZ", "", "US", "u\u017fd", "USD ", 840, None])
def test_normalize_currency_refuses(text: object) -> None:
    with pytest.raises(ValidationError) as e:
        money.normalize_currency(text, "order.currency")
    assert (e.value.code, e.value.field) == ("unsupported_currency", "order.currency")


def test_currency_table_is_iso_shaped() -> None:
    required = {"USD": 2, "EUR": 2, "JPY": 0, "KRW": 0, "KWD": 3, "BHD": 3, "JOD": 3, "TND": 3}
    assert required.items() <= money.CURRENCIES.items()
    for code, minor in money.CURRENCIES.items():
        assert len(code) == 3 and code.isascii() and code.isupper()
        assert minor in (0, 2, 3)
