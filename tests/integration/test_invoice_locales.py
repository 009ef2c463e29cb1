"""invoice-v4's fidelity corpus: locales and tenants' branding, read back by poppler.

Each case is admitted with a tenant's settings, rendered with invoice-v4 and read
with independent tools: ``pdftotext`` gives the issuer, the names, the date and
every amount as Babel writes it for the locale (the amounts computed here in
integer minor units, formatted by ``babel.numbers.format_currency`` directly, not
by casesignd); ``pdfinfo`` the page count; ``pdffonts`` only embedded fonts;
``pdfimages`` the tenant's own logo. pdftotext puts right-to-left text back in
logical order, so a line drawn in the wrong visual order reads wrong here. Page 1
of each locale matches its golden page (tests/helpers_invoice.py).
"""

from __future__ import annotations

import io
import re
import unicodedata
from datetime import date
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest
from babel.dates import format_skeleton
from babel.numbers import format_currency, format_decimal, get_currency_precision
from bidi import get_display
from PIL import Image

from casesignd import config as config_mod
from casesignd.core.errors import ValidationError
from casesignd.invoices import branding, locales
from casesignd.invoices.templates import render_to_file
from casesignd.job_kinds.render_invoice import InvoiceKind, admit, declared_bytes, render_issuer
from tests.helpers_invoice import POPPLER, check_golden, fonts, page_count, run

pytestmark = pytest.mark.skipif(not POPPLER, reason="poppler-utils not installed")

TODAY = date(2026, 11, 29)
BASE = '''
[invoice]
issuer_name = "Example University"
issuer_address = ["1 Campus Road", "Springfield 12345"]
tax_rate = "0.2"
tax_label = "VAT"
'''

# locale: (currency, student, tenant settings)
LOCALES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "en-US": ("USD", "Avery Chen", {}),
    "de-DE": ("EUR", "Jürgen Groß", {
        "issuer_name": "Städtische Musikschule Berlin",
        "issuer_address": ["Hauptstraße 1", "10115 Berlin"],
        "issuer_tax_ids": ["USt-IdNr. DE123456789"], "tax_rate": "0.19", "tax_label": "MwSt.",
        "footer": ["Bankverbindung: IBAN DE02 1203 0000 0000 2020 51"],
        "labels": {"invoice": "RECHNUNG", "invoice_no": "Rechnungsnr.",
                   "issue_date": "Datum", "bill_to": "An", "description": "Beschreibung",
                   "quantity": "Menge", "unit_price": "Einzelpreis", "amount": "Betrag",
                   "subtotal": "Zwischensumme", "total": "Gesamt",
                   "customer_tax_id": "USt-IdNr. Kunde", "page": "Seite {page} von {pages}"}}),
    "fr-CH": ("CHF", "Élodie Favre", {"issuer_name": "École de Genève", "tax_rate": "0.081",
                                      "tax_label": "TVA", "labels": {"invoice": "FACTURE"}}),
    "ja-JP": ("JPY", "山田 太郎", {"issuer_name": "東京学園", "issuer_address": ["東京都千代田区1-1"],
                                 "tax_rate": "0.1", "tax_label": "消費税",
                                 "labels": {"invoice": "請求書", "total": "合計"}}),
    "ar-EG": ("EGP", "عبد الله محمد", {"issuer_name": "جامعة القاهرة",
                                   "issuer_address": ["شارع الجامعة، الجيزة"], "tax_rate": "0.14",
                                   "tax_label": "ضريبة القيمة المضافة",
                                   "labels": {"invoice": "فاتورة", "subtotal": "المجموع الفرعي",
                                              "total": "الإجمالي", "page": "صفحة {page} من {pages}"}}),
    "hi-IN": ("INR", "Priya Sharma", {"issuer_name": "Delhi Public School", "tax_rate": "0.18",
                                      "tax_label": "GST"}),
    "he-IL": ("ILS", "נועה כהן", {"issuer_name": "האוניברסיטה העברית", "tax_rate": "0.18",
                                  "tax_label": "מע״מ"}),
    "ar-KW": ("KWD", "فاطمة", {"tax_rate": ""}),
}

ITEMS = [("Laboratory safety induction", 1, "1234567.5"),
         ("Textbook bundle (print and digital access, 12 months)", 1200, "49.25"),
         ("Exam fee", 3, "0.125"),
         ("Scholarship", 1, "0")]


def _config(tag: str) -> config_mod.Config:
    _, _, extra = LOCALES[tag]
    tenant = {"name": "t", "token_sha256": "0" * 64,
              "invoice": {"locale": tag, "default_template": "invoice-v4", **extra}}
    from tests.daemon import to_toml

    return config_mod.loads(BASE + to_toml({"tenants": [tenant]}))


def _order(currency: str, student: str, **extra: Any) -> dict[str, Any]:
    units = get_currency_precision(currency)
    q = Decimal(1).scaleb(-units)
    items = [{"description": d, "quantity": n,
              "unit_price": f"{Decimal(p).quantize(q, rounding=ROUND_HALF_UP):f}"}
             for d, n, p in ITEMS]
    return {"kind": "render_invoice", "sign": False,
            "order": {"order_id": "EDU-1042", "student_name": student, "currency": currency,
                      "items": items, **extra}}


def _plain(text: str) -> str:
    """For comparing extracted text: compatibility forms folded (Arabic presentation
    forms), format characters (directional marks) and white space dropped."""
    text = unicodedata.normalize("NFKC", text)
    return "".join(ch for ch in text if not ch.isspace() and unicodedata.category(ch) != "Cf")


_RTL = "\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufefc"


def _on_page(want: str, text: str) -> bool:
    """Whether ``want`` is in the extracted ``text``.

    pdftotext gives a line that is right to left throughout in logical order, but a
    line that mixes directions (an amount in ar-EG: digits, dots, Arabic letters)
    as its runs stand on the page, left to right, the letters of each Arabic word
    put back in logical order. Both forms count; the second is made here from the
    Unicode bidirectional algorithm's visual order of ``want`` (python-bidi)."""
    if _plain(want) in text:
        return True
    shown = get_display(want)
    as_runs = re.sub(f"[{_RTL}]+", lambda m: m.group(0)[::-1], shown)
    if _plain(as_runs) in text:
        return True
    # Arabic punctuation (U+060C) splits a right-to-left line into runs that
    # pdftotext may order either way; words without digits are then each checked.
    words = re.findall(r"\w+", unicodedata.normalize("NFKC", want))
    return (re.search(f"[{_RTL}]", want) is not None and not re.search(r"\d", want)
            and all(w in text for w in words))


def _expected(normalized: dict[str, Any], tag: str) -> list[str]:
    """What the page must say, formatted by Babel from integer minor units."""
    order = normalized["order"]
    cur = order["currency"]
    scale = 10 ** get_currency_precision(cur)
    loc = tag.replace("-", "_")

    def money(minor: int) -> str:
        return format_currency(Decimal(minor) / scale, cur, locale=loc)

    lines = [int(Decimal(it["unit_price"]) * scale) * it["quantity"] for it in order["items"]]
    subtotal = sum(lines)
    rate = normalized["tax"]["rate"]
    want = [money(int(Decimal(it["unit_price"]) * scale)) for it in order["items"]]
    want += [money(x) for x in lines] + [money(subtotal)]
    tax = 0
    if rate:
        tax = int((Decimal(subtotal) * Decimal(rate)).quantize(Decimal(1), rounding=ROUND_HALF_UP))
        want.append(money(tax))
    want.append(money(subtotal + tax))
    want += [format_decimal(it["quantity"], locale=loc) for it in order["items"]]
    want.append(format_skeleton("yMd", date.fromisoformat(order["issued_on"]), locale=loc))
    return want


def _render(normalized: dict[str, Any], cfg: config_mod.Config, pdf: Path) -> int:
    return render_to_file(normalized, "invoice-v4", str(pdf), render_issuer(normalized, cfg))


@pytest.mark.parametrize("tag", list(LOCALES))
def test_locale_case(tag: str, tmp_path: Path) -> None:
    cfg = _config(tag)
    currency, student, extra = LOCALES[tag]
    settings = branding.load(cfg, None).for_tenant("t")
    order_extra = {"customer_tax_id": "DE987654321"} if tag == "de-DE" else {}
    normalized = admit(_order(currency, student, **order_extra), cfg, TODAY, settings).normalized
    assert normalized["template_version"] == "invoice-v4"
    pdf = tmp_path / f"{tag}.pdf"
    assert _render(normalized, cfg, pdf) == 1
    assert page_count(pdf) == 1
    assert pdf.stat().st_size <= declared_bytes(normalized)
    listed = fonts(pdf)
    assert listed and all(emb == "yes" for _, emb in listed), listed
    text = _plain(run("pdftotext", "-enc", "UTF-8", str(pdf), "-"))
    for want in [*_expected(normalized, tag), student, "EDU-1042",
                 extra.get("issuer_name", "Example University"),
                 *extra.get("issuer_address", []), *extra.get("issuer_tax_ids", []),
                 *extra.get("footer", [])]:
        assert _on_page(want, text), f"{tag}: {want!r} not on the page"
    labels = {**branding.LABELS, **extra.get("labels", {})}
    assert _on_page(labels["page"].format(page=1, pages=1), text)
    assert _on_page(labels["total"], text)
    if order_extra:
        assert "DE987654321" in text and _plain(labels["customer_tax_id"]) in text
    check_golden(pdf, 1, f"v4-{tag}", tmp_path)


def test_amounts_are_exact_and_never_rounded(tmp_path: Path) -> None:
    # KWD has three decimals; a fils is printed, and no sum is rounded on the way.
    cfg = _config("ar-KW")
    body = _order("KWD", "فاطمة")
    body["order"]["items"] = [{"description": "Fee", "quantity": 7, "unit_price": "0.001"},
                              {"description": "Big", "quantity": 1_000_000,
                               "unit_price": "999999999999.999"}]
    normalized = admit(body, cfg, TODAY, branding.load(cfg, None).for_tenant("t")).normalized
    pdf = tmp_path / "kwd.pdf"
    _render(normalized, cfg, pdf)
    text = _plain(run("pdftotext", "-enc", "UTF-8", str(pdf), "-"))
    for want in _expected(normalized, "ar-KW"):
        assert _on_page(want, text), want


def test_every_supported_currency_prints_as_babel_writes_it(tmp_path: Path) -> None:
    tags = ["en-US", "de-DE", "fr-CH", "ja-JP", "ar-EG", "hi-IN"]
    configs = {tag: _config(tag) for tag in tags}
    settings = {tag: branding.load(c, None).for_tenant("t") for tag, c in configs.items()}
    codes = sorted(locales._tender_now())
    assert len(codes) > 140
    for i, code in enumerate(codes):
        tag = tags[i % len(tags)]
        body = _order(code, "Avery Chen")
        body["order"]["items"] = body["order"]["items"][:2]
        normalized = admit(body, configs[tag], TODAY, settings[tag]).normalized
        pdf = tmp_path / f"{code}.pdf"
        _render(normalized, configs[tag], pdf)
        text = _plain(run("pdftotext", "-enc", "UTF-8", str(pdf), "-"))
        for want in _expected(normalized, tag):
            assert _on_page(want, text), f"{code} in {tag}: {want!r}"


# --- two tenants, each its own branding -------------------------------------------------


def _logo(path: Path, colour: tuple[int, int, int], fmt: str) -> Path:
    img = Image.new("RGB", (120, 40), colour)
    img.save(path, format=fmt)
    return path


def _two_tenants(tmp_path: Path) -> config_mod.Config:
    from tests.daemon import to_toml

    _logo(tmp_path / "berlin.png", (200, 0, 0), "PNG")
    _logo(tmp_path / "tokyo.jpg", (0, 0, 200), "JPEG")
    tenants = [
        {"name": "berlin", "token_sha256": "1" * 64,
         "invoice": {"default_template": "invoice-v4", "locale": "de-DE",
                     "issuer_name": "Schule Berlin", "issuer_tax_ids": ["USt-IdNr. DE111111111"],
                     "logo": "berlin.png", "tax_rate": "0.19", "tax_label": "MwSt."}},
        {"name": "tokyo", "token_sha256": "2" * 64,
         "invoice": {"default_template": "invoice-v4", "locale": "ja-JP",
                     "issuer_name": "東京学園", "issuer_tax_ids": ["T1234567890123"],
                     "logo": "tokyo.jpg", "tax_rate": "0.1"}},
    ]
    cfg = config_mod.loads(BASE + to_toml({"tenants": tenants}), base_dir=str(tmp_path))
    return cfg


def _logo_colour(pdf: Path, out: Path) -> tuple[int, ...]:
    listed = [r for r in run("pdfimages", "-list", str(pdf)).splitlines()[2:] if r.strip()]
    assert len(listed) == 1, listed
    run("pdfimages", "-png", str(pdf), str(out / "img"))
    (png,) = sorted(out.glob("img-*.png"))
    with Image.open(png) as img:
        return tuple(img.convert("RGB").getpixel((img.width // 2, img.height // 2)))


def test_a_tenant_never_sees_another_tenants_issuer_or_logo(tmp_path: Path) -> None:
    cfg = _two_tenants(tmp_path)
    brands = branding.load(cfg, tmp_path / "branding")
    kind = InvoiceKind(lambda: brands)
    seen = {}
    for tenant, currency in (("berlin", "EUR"), ("tokyo", "JPY")):
        normalized = kind.admit(_order(currency, "Avery Chen"), cfg, tenant).normalized
        out = tmp_path / tenant
        out.mkdir()
        pdf = out / "invoice.pdf"
        _render(normalized, cfg, pdf)
        seen[tenant] = (_plain(run("pdftotext", "-enc", "UTF-8", str(pdf), "-")),
                        _logo_colour(pdf, out))
    berlin, tokyo = seen["berlin"], seen["tokyo"]
    assert "SchuleBerlin" in berlin[0] and "DE111111111" in berlin[0]
    assert "東京学園" in tokyo[0] and "T1234567890123" in tokyo[0]
    assert "東京学園" not in berlin[0] and "T1234567890123" not in berlin[0]
    assert "SchuleBerlin" not in tokyo[0] and "DE111111111" not in tokyo[0]
    assert berlin[1][0] > 150 and berlin[1][2] < 60, berlin[1]  # red
    assert tokyo[1][2] > 150 and tokyo[1][0] < 60, tokyo[1]  # blue
    # A tenant without settings of its own gets the daemon's, never another's.
    plain = kind.admit(_order("USD", "Avery Chen"), cfg, "nobody").normalized
    assert plain["issuer"]["name"] == "Example University" and plain["issuer"]["logo"] is None


def test_an_accepted_invoice_keeps_the_settings_it_was_accepted_with(tmp_path: Path) -> None:
    cfg = _two_tenants(tmp_path)
    brands = branding.load(cfg, tmp_path / "branding")
    normalized = InvoiceKind(lambda: brands).admit(_order("EUR", "Avery Chen"), cfg,
                                                   "berlin").normalized
    # The file is replaced and the settings change after admission ...
    _logo(tmp_path / "berlin.png", (0, 200, 0), "PNG")
    cfg.tenants[0].invoice.issuer_name = "Neue Schule"  # type: ignore[union-attr]
    branding.load(cfg, tmp_path / "branding")
    pdf = tmp_path / "invoice.pdf"
    _render(normalized, cfg, pdf)
    text = _plain(run("pdftotext", "-enc", "UTF-8", str(pdf), "-"))
    assert "SchuleBerlin" in text and "NeueSchule" not in text
    colour = _logo_colour(pdf, tmp_path)
    assert colour[0] > 150 and colour[1] < 60, colour  # still the red one
    # A logo that is not kept any more fails the job for good, with its code.
    for kept in (tmp_path / "branding").iterdir():
        kept.write_bytes(b"gone")
    from casesignd.core.errors import PermanentJobError
    from casesignd.invoices.v4 import _logo_image_bytes

    _logo_image_bytes.cache_clear()
    with pytest.raises(PermanentJobError) as e:
        _render(normalized, cfg, tmp_path / "again.pdf")
    assert e.value.code == "logo_missing"


def test_v4_refuses_what_its_fonts_cannot_print_and_v3_refuses_a_tax_id() -> None:
    cfg = _config("hi-IN")
    settings = branding.load(cfg, None).for_tenant("t")
    with pytest.raises(ValidationError) as e:
        admit(_order("INR", "प्रिया शर्मा"), cfg, TODAY, settings)
    assert (e.value.code, e.value.field) == ("unsupported_character", "order.student_name")
    with pytest.raises(ValidationError) as e:
        admit(_order("XXX", "Priya"), cfg, TODAY, settings)
    assert e.value.code == "unsupported_currency"
    v3 = _order("USD", "Priya", customer_tax_id="X1")
    v3["template_version"] = "invoice-v3"
    with pytest.raises(ValidationError) as e:
        admit(v3, cfg, TODAY, settings)
    assert (e.value.code, e.value.field) == ("invalid_field", "order.customer_tax_id")
    # invoice-v3 still names its own currencies and prints them its own way.
    v3 = _order("USD", "山田")
    v3["template_version"] = "invoice-v3"
    with pytest.raises(ValidationError) as e:
        admit(v3, cfg, TODAY, settings)
    assert e.value.code == "unsupported_character"


def test_logo_is_drawn_from_the_kept_copy(tmp_path: Path) -> None:
    cfg = _two_tenants(tmp_path)
    brands = branding.load(cfg, tmp_path / "branding")
    sha = brands.for_tenant("berlin").logo.sha256  # type: ignore[union-attr]
    kept = tmp_path / "branding" / sha
    assert kept.read_bytes() == (tmp_path / "berlin.png").read_bytes()
    assert kept.stat().st_mode & 0o777 == 0o600
    assert re.fullmatch(r"[0-9a-f]{64}", sha)
    assert Image.open(io.BytesIO(kept.read_bytes())).size == (120, 40)


@pytest.mark.parametrize("tag", ["de-DE", "ar-EG"])
def test_a_long_invoice_repeats_its_header_and_numbers_its_pages(tag: str, tmp_path: Path) -> None:
    cfg = _config(tag)
    currency, student, extra = LOCALES[tag]
    body = _order(currency, student)
    body["order"]["items"] = [{"description": f"Kursmodul {i + 1}", "quantity": i % 4 + 1,
                               "unit_price": f"{(i * 37) % 500}.{(i * 13) % 100:02d}"}
                              for i in range(300)]
    normalized = admit(body, cfg, TODAY, branding.load(cfg, None).for_tenant("t")).normalized
    pdf = tmp_path / "long.pdf"
    pages = _render(normalized, cfg, pdf)
    assert pages == page_count(pdf) and pages > 5
    labels = {**branding.LABELS, **extra.get("labels", {})}
    texts = run("pdftotext", "-enc", "UTF-8", str(pdf), "-").split("\f")[:pages]
    for n, page in enumerate(texts, 1):
        plain = _plain(page)
        assert _on_page(labels["page"].format(page=n, pages=pages), plain), (n, page[-200:])
        assert _plain(labels["description"]) in plain and _plain(labels["amount"]) in plain
    n = len(normalized["order"]["items"])
    for want in _expected(normalized, tag)[2 * n:2 * n + 3]:  # the sums, on the last page
        assert _on_page(want, _plain(texts[-1])), want
    check_golden(pdf, pages, f"v4-{tag}-long", tmp_path)


def test_hostile_but_valid_text_renders_within_its_reservation(tmp_path: Path) -> None:
    cfg = _config("ar-EG")
    body = _order("EGP", "عبد الله (Abdullah) 12")
    body["order"]["customer_tax_id"] = "".join(chr(0x4E00 + i * 37) for i in range(64))
    body["order"]["items"] = [{"description": "م" * 500, "quantity": 1, "unit_price": "1"},
                              {"description": "漢" * 500, "quantity": 2, "unit_price": "2"}]
    normalized = admit(body, cfg, TODAY, branding.load(cfg, None).for_tenant("t")).normalized
    pdf = tmp_path / "hostile.pdf"
    pages = _render(normalized, cfg, pdf)
    assert pages == page_count(pdf)
    assert pdf.stat().st_size <= declared_bytes(normalized)
    text = _plain(run("pdftotext", "-enc", "UTF-8", str(pdf), "-"))
    assert "(Abdullah)" in text and "عبدالله" in text
    assert text.count("漢") == 500
