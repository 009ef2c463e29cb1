"""Invoice fidelity corpus: real PDFs checked with poppler and against golden pages.

Each case is admitted, rendered with invoice-v3 and checked with independent
tools: ``pdftotext`` carries the order ID, the names, every line and the right
totals (computed here in integer minor units, not with casesignd.invoices.money);
``pdfinfo`` has the expected page count; ``pdffonts`` lists only embedded fonts;
selected pages match the PNGs under tests/golden/invoice (``pdftoppm -r 40
-gray``): at most 0.5 % of pixels may differ by more than 32 grey levels. A
failing page writes the rendering and a diff image to tests/golden/invoice/_diff/
and names them. Regenerate goldens with CASESIGND_UPDATE_GOLDEN=1.
"""

from __future__ import annotations

import pickle
import re
from concurrent.futures import ProcessPoolExecutor
from datetime import date
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest

from casesignd import config as config_mod
from casesignd.core.errors import PermanentJobError
from casesignd.invoices import money
from casesignd.invoices.templates import TEMPLATES, render_to_bytes, render_to_file
from casesignd.job_kinds.render_invoice import admit, declared_bytes, issuer_of
from tests.helpers_invoice import POPPLER, check_golden, fonts, page_count, run, squeeze

pytestmark = pytest.mark.skipif(not POPPLER, reason="poppler-utils not installed")

TODAY = date(2026, 11, 29)
CFG = config_mod.loads(
    '[invoice]\nissuer_name = "Example University"\n'
    'issuer_address = ["1 Campus Road", "Springfield 12345"]\n'
    'tax_rate = "0.2"\ntax_label = "VAT"\n'
)
CFG_NO_TAX = config_mod.loads('[invoice]\nissuer_name = "Example University"\n')


# --- the oracle: totals in integer minor units ------------------------------------------


def fmt(minor: int, currency: str) -> str:
    units = money.CURRENCIES[currency]
    major, frac = divmod(minor, 10**units)
    return f"{currency} {major:,}" + (f".{frac:0{units}d}" if units else "")


def expected(normalized: dict[str, Any]) -> dict[str, Any]:
    order = normalized["order"]
    cur = order["currency"]
    scale = 10 ** money.CURRENCIES[cur]
    lines = []
    for it in order["items"]:
        price = int(Decimal(it["unit_price"]) * scale)
        lines.append((price, it["quantity"] * price))
    subtotal = sum(total for _, total in lines)
    rate = normalized["tax"]["rate"]
    tax = None
    if rate:
        tax = int((Decimal(subtotal) * Decimal(rate)).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    return {"lines": lines, "subtotal": subtotal, "tax": tax, "total": subtotal + (tax or 0)}


def check_text(pdf: Path, normalized: dict[str, Any], pages: int) -> None:
    order = normalized["order"]
    cur = order["currency"]
    raw = squeeze(run("pdftotext", "-enc", "UTF-8", str(pdf), "-"))
    layout = run("pdftotext", "-enc", "UTF-8", "-layout", str(pdf), "-")
    assert squeeze(order["order_id"]) in raw
    assert squeeze(order["student_name"]) in raw
    assert order["issued_on"] in raw
    want = expected(normalized)
    for i, (it, (price, total)) in enumerate(zip(order["items"], want["lines"], strict=True), 1):
        assert squeeze(it["description"]) in raw, f"line {i} description missing"
        qty = f"{it['quantity']:,}"
        row = (rf"^\s*{i}\s.*?\s{re.escape(qty)}\s+"
               rf"{re.escape(fmt(price, cur))}\s+{re.escape(fmt(total, cur))}\s*$")  # fmt: skip
        assert re.search(row, layout, re.M), f"line {i} not printed as {row!r}"
    assert re.search(rf"Subtotal\s+{re.escape(fmt(want['subtotal'], cur))}\s*$", layout, re.M)
    if want["tax"] is not None:
        label = f"{normalized['tax']['label']} {money.format_rate(Decimal(normalized['tax']['rate']))}"
        assert re.search(rf"{re.escape(label)}\s+{re.escape(fmt(want['tax'], cur))}\s*$", layout, re.M)
    else:
        assert "VAT" not in layout
    assert re.search(rf"^\s*Total\s+{re.escape(fmt(want['total'], cur))}\s*$", layout, re.M)
    for p in range(1, pages + 1):
        assert f"Page {p} of {pages}" in layout


def check_fonts(pdf: Path) -> None:
    listed = fonts(pdf)
    assert listed, "no fonts listed"
    assert all(emb == "yes" for _, emb in listed), f"not embedded: {listed}"
    assert all("DejaVuSans" in name for name, _ in listed), listed


# --- the corpus --------------------------------------------------------------------------

ISSUER = issuer_of(CFG)


def body(items: list[dict[str, Any]], **order: Any) -> dict[str, Any]:
    o = {"order_id": "EDU-1042", "student_name": "Avery Chen", "currency": "USD", "items": items}
    o.update(order)
    return {"kind": "render_invoice", "template_version": "invoice-v3", "sign": False, "order": o}


WORDS = ("Laboratory safety induction", "Organic chemistry II: reaction mechanisms",
         "Field trip", "Textbook bundle (print and digital access, 12 months)",
         "Exam fee", "Studio time")  # fmt: skip
LONG_NAME = ("Maximiliana Alexandra Konstantinopoulou-Wiśniewska de la Vega y "
             "Fernández-Østergaard Nakamura-Okonkwo Ó Briain-Þórsdóttir Łukasiewicz ")  # fmt: skip
LONG_NAME = (LONG_NAME * 2)[:200].strip()
LONG_DESC = ("Advanced laboratory course in computational chemistry, spectroscopy and "
             "molecular modelling with supervised practical sessions and a final project. ") * 4  # fmt: skip
LONG_DESC = LONG_DESC[:500].strip()

CASES: dict[str, tuple[dict[str, Any], config_mod.Config, int, tuple[int, ...]]] = {
    # name: (body, config, pages, golden pages)
    "one_line": (
        body([{"description": "Lab course", "quantity": 1, "unit_price": "49.00"}]),
        CFG, 1, (1,),
    ),
    "lines_300": (
        body([{"description": f"{WORDS[i % len(WORDS)]} #{i + 1}", "quantity": i % 4 + 1,
               "unit_price": f"{(i * 37) % 500}.{(i * 13) % 100:02d}"} for i in range(300)],
             order_id="EDU-300"),
        CFG, 10, (1, 10),
    ),
    "long_names": (
        body([{"description": LONG_DESC, "quantity": 2, "unit_price": "1234567.89"},
              {"description": "X" * 300, "quantity": 1, "unit_price": "5.00"},
              {"description": LONG_DESC[::-1], "quantity": 1, "unit_price": "0.05"}],
             order_id="EDU." + "7" * 60, student_name=LONG_NAME, currency="EUR"),
        CFG, 1, (1,),
    ),
    "zero_priced": (
        body([{"description": "Scholarship-covered tuition", "quantity": 1, "unit_price": "0"},
              {"description": "Library card", "quantity": 3, "unit_price": "0.00"}],
             currency="GBP"),
        CFG, 1, (),
    ),
    "quantities": (
        body([{"description": "Printing (pages)", "quantity": 250, "unit_price": "7"},
              {"description": "Lab credits", "quantity": 1_000_000, "unit_price": "999999999999"},
              {"description": "Seminar", "quantity": 7, "unit_price": "15000"}],
             currency="JPY", order_id="JP-7"),
        CFG_NO_TAX, 1, (1,),
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any]]]:
    out = tmp_path_factory.mktemp("invoices")
    done = {}
    for name, (b, cfg, _, _) in CASES.items():
        normalized = admit(b, cfg, TODAY).normalized
        pdf = out / f"{name}.pdf"
        render_to_file(normalized, "invoice-v3", str(pdf), ISSUER)
        done[name] = (pdf, normalized)
    return done


@pytest.mark.parametrize("name", list(CASES))
def test_corpus_case(name: str, rendered: dict[str, Any], tmp_path: Path) -> None:
    pdf, normalized = rendered[name]
    pages = CASES[name][2]
    assert page_count(pdf) == pages
    assert pdf.stat().st_size <= declared_bytes(normalized)  # the reservation covers it
    check_fonts(pdf)
    check_text(pdf, normalized, pages)
    for page in CASES[name][3]:
        check_golden(pdf, page, name, tmp_path)


def test_table_header_repeats_on_every_page(rendered: dict[str, Any]) -> None:
    pdf, _ = rendered["lines_300"]
    layout = run("pdftotext", "-layout", str(pdf), "-")
    pages = layout.split("\f")[: page_count(pdf)]
    for text in pages:
        assert re.search(r"#\s+Description\s+Qty\s+Unit price\s+Amount", text)


@pytest.mark.parametrize("currency", sorted(money.CURRENCIES))
def test_every_currency(currency: str, tmp_path: Path) -> None:
    units = money.CURRENCIES[currency]
    price = "1234" + ("." + "5" * units if units else "")
    b = body([{"description": "Tuition", "quantity": 3, "unit_price": price},
              {"description": "Materials", "quantity": 1, "unit_price": "0"}],
             currency=currency.lower())  # fmt: skip
    normalized = admit(b, CFG, TODAY).normalized
    pdf = tmp_path / "invoice.pdf"
    assert render_to_file(normalized, "invoice-v3", str(pdf), ISSUER) == 1
    assert page_count(pdf) == 1
    check_fonts(pdf)
    check_text(pdf, normalized, 1)


def test_same_input_same_bytes_in_and_across_processes() -> None:
    normalized = admit(CASES["lines_300"][0], CFG, TODAY).normalized
    first, pages = render_to_bytes(normalized, "invoice-v3", ISSUER)
    again, _ = render_to_bytes(normalized, "invoice-v3", ISSUER)
    assert first == again
    with ProcessPoolExecutor(max_workers=1) as pool:
        other = pool.submit(render_to_bytes, normalized, "invoice-v3", ISSUER).result(timeout=60)
    assert other == (first, pages)


def test_render_to_file_runs_in_a_process_pool(tmp_path: Path) -> None:
    normalized = admit(CASES["one_line"][0], CFG, TODAY).normalized
    out = tmp_path / "invoice.pdf"
    with ProcessPoolExecutor(max_workers=1) as pool:
        pages = pool.submit(render_to_file, normalized, "invoice-v3", str(out), ISSUER).result(
            timeout=60
        )
    assert pages == 1 and out.read_bytes().startswith(b"%PDF-")


def test_unknown_template_is_a_permanent_error_that_survives_pickling(tmp_path: Path) -> None:
    normalized = admit(CASES["one_line"][0], CFG, TODAY).normalized
    with pytest.raises(PermanentJobError) as e:
        render_to_file(normalized, "invoice-v0", str(tmp_path / "x.pdf"), ISSUER)
    back = pickle.loads(pickle.dumps(e.value))
    assert (back.code, back.field, back.retryable) == ("unknown_template", "template_version", False)


def test_registry_starts_with_v3() -> None:
    assert next(iter(TEMPLATES)) == "invoice-v3"
    assert TEMPLATES["invoice-v3"].version == "invoice-v3"


def test_markup_characters_print_literally(tmp_path: Path) -> None:
    # Long texts go through reportlab paragraphs, which parse markup: it must be escaped.
    long = "R&D <b>not bold</b> &amp; <br/> " + "filler words " * 30
    b = body([{"description": "R&D <i>short</i>", "quantity": 1, "unit_price": "1.00"},
              {"description": long.strip(), "quantity": 1, "unit_price": "2.00"}],
             student_name="O'Brien & <Sons> " + "Avery " * 30)  # fmt: skip
    normalized = admit(b, CFG, TODAY).normalized
    pdf = tmp_path / "markup.pdf"
    render_to_file(normalized, "invoice-v3", str(pdf), ISSUER)
    check_text(pdf, normalized, page_count(pdf))


@pytest.mark.parametrize(
    "name",
    ["Zoë Ångström-Łukasiewicz", "Ζωή Παπαδοπούλου", "Анна Кузнецова", "Nguyễn Thị Minh Khai",
     "Zoe\u0308 Decomposed", "Şükrü Çelik", "Ηλέκτρα Ὀδυσσεύς"],
)  # fmt: skip
def test_names_in_other_scripts_print(name: str, tmp_path: Path) -> None:
    b = body([{"description": f"Course for {name}", "quantity": 1, "unit_price": "10.00"}],
             student_name=name)  # fmt: skip
    normalized = admit(b, CFG, TODAY).normalized
    pdf = tmp_path / "names.pdf"
    render_to_file(normalized, "invoice-v3", str(pdf), ISSUER)
    check_fonts(pdf)
    check_text(pdf, normalized, 1)


def test_layout_failure_is_permanent(tmp_path: Path) -> None:
    # Admission never lets a row outgrow a page; a stored input that does (bypassing
    # admission) fails permanently instead of retrying forever.
    normalized = admit(CASES["one_line"][0], CFG, TODAY).normalized
    normalized["order"]["items"][0]["description"] = "word " * 8000
    with pytest.raises(PermanentJobError) as e:
        render_to_file(normalized, "invoice-v3", str(tmp_path / "x.pdf"), ISSUER)
    assert e.value.code == "layout_failed" and not e.value.retryable


# invoice-v3 is released: these are its bytes for the corpus, as they were before
# invoice-v4 was added beside it. A change here is a change of a released template.
V3_SHA256 = {
    "one_line": "ab8a2502b18a5c03e9a506b71889992b23b89606e0b9b6752e2f1e36273bf8a0",
    "lines_300": "e5cc800902f4bc83804870f5c807d89a8c4798af008a077b62b2cc17707283fc",
    "long_names": "c6ee1d8ba689686b879977e19644c4b16b07abf069698853af8407609c32a24c",
    "zero_priced": "fdd557938569a865664e1e195b18d90599184827d3ad27eee19c1825ad893ffb",
    "quantities": "d86021cc813039a0c7d9eb1da799de97f359be3041a55d8a4de15f39c334dbac",
}


@pytest.mark.parametrize("name", list(V3_SHA256))
def test_invoice_v3_bytes_are_unchanged(name: str) -> None:
    import hashlib

    from casesignd.job_kinds.render_invoice import render_issuer

    b, cfg, _, _ = CASES[name]
    normalized = admit(b, cfg, TODAY).normalized
    # The issuer the job path gives v3 (its snapshot) is the config's, byte for byte.
    assert render_issuer(normalized, cfg) == issuer_of(cfg)
    data, _ = render_to_bytes(normalized, "invoice-v3", ISSUER)
    assert hashlib.sha256(data).hexdigest() == V3_SHA256[name]
