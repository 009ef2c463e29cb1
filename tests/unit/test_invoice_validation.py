"""render_invoice admission: table-driven refusals, normalization, properties, run."""

from __future__ import annotations

import copy
from contextlib import asynccontextmanager
from datetime import date
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from casesignd import config as config_mod
from casesignd.core.errors import ConfigError, ValidationError
from casesignd.core.sealed import SealedPath, SealKey, is_sealed
from casesignd.engine.kinds import Artifact, Finish
from casesignd.invoices.branding import LABELS
from casesignd.job_kinds.render_invoice import InvoiceKind, admit, check_config, normalize
from casesignd.observability.metrics import Metrics

TODAY = date(2026, 11, 29)
CFG = config_mod.Config()


def body(**order: Any) -> dict[str, Any]:
    b: dict[str, Any] = {
        "kind": "render_invoice",
        "template_version": "invoice-v3",
        "sign": True,
        "order": {
            "order_id": "EDU-1042",
            "student_name": "Avery Chen",
            "currency": "USD",
            "items": [{"description": "Lab course", "quantity": 1, "unit_price": "49.00"}],
        },
    }
    b["order"].update(order)
    return b


def test_contract_example_is_admitted() -> None:
    a = admit(body(), CFG, TODAY)
    assert a.version == "invoice-v3"
    assert a.case_id is None
    assert a.normalized == {
        "kind": "render_invoice",
        "template_version": "invoice-v3",
        "sign": True,
        "order": {
            "order_id": "EDU-1042",
            "student_name": "Avery Chen",
            "currency": "USD",
            "issued_on": "2026-11-29",
            "items": [{"description": "Lab course", "quantity": 1, "unit_price": "49.00"}],
        },
        "tax": {"rate": "", "label": "Tax"},
        "issuer": {"name": "casesignd", "address": [], "tax_ids": [], "footer": [],
                   "locale": "en-US", "labels": LABELS, "logo": None},
    }
    # A defaulted date is not part of the derived idempotency key.
    assert "issued_on" not in a.key_material["order"]
    assert 40_000 < a.declared_bytes < 200_000


def test_defaults_and_normal_forms() -> None:
    b = body(currency="eur", student_name="  Zoë\u00a0Ångström ", issued_on="2026-01-31")
    del b["template_version"], b["sign"], b["kind"]
    b["order"]["items"] = [{"description": "Fee", "quantity": 3, "unit_price": "7.5"}]
    a = admit(b, CFG, TODAY)
    n = a.normalized
    assert (n["template_version"], n["sign"], n["kind"]) == ("invoice-v3", False, "render_invoice")
    assert n["order"]["currency"] == "EUR"
    assert n["order"]["student_name"] == "Zoë Ångström"
    assert n["order"]["issued_on"] == "2026-01-31"
    assert a.key_material["order"]["issued_on"] == "2026-01-31"  # sent, so covered
    assert n["order"]["items"][0]["unit_price"] == "7.50"


def test_tax_snapshot_from_config() -> None:
    cfg = config_mod.loads('[invoice]\ntax_rate = "0.20"\ntax_label = "VAT"\n')
    assert admit(body(), cfg, TODAY).normalized["tax"] == {"rate": "0.20", "label": "VAT"}


def _set(path: str, value: Any) -> dict[str, Any]:
    """body() with the value at a dotted path set (or deleted when value is DELETE)."""
    b = body()
    node: Any = b
    keys = [int(k) if k.isdigit() else k for k in path.replace("[", ".").replace("]", "").split(".")]
    for k in keys[:-1]:
        node = node[k]
    if value is DELETE:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return b


DELETE = object()
REFUSALS = [
    # path, value, code, field
    ("extra", 1, "unknown_field", None),
    ("order.discount", "1", "unknown_field", "order"),
    ("order.items[0].tax", "1", "unknown_field", "order.items[0]"),
    ("kind", "sign_case", "invalid_field", "kind"),
    ("template_version", "invoice-v0", "unknown_template", "template_version"),
    ("template_version", 3, "unknown_template", "template_version"),
    ("sign", "yes", "invalid_field", "sign"),
    ("order", DELETE, "missing_field", "order"),
    ("order", [], "invalid_field", "order"),
    ("order.order_id", DELETE, "missing_field", "order.order_id"),
    ("order.order_id", "", "invalid_field", "order.order_id"),
    ("order.order_id", "a/b", "invalid_field", "order.order_id"),
    ("order.order_id", "x" * 65, "invalid_field", "order.order_id"),
    ("order.order_id", "EDU-1\n", "invalid_field", "order.order_id"),
    ("order.student_name", DELETE, "missing_field", "order.student_name"),
    ("order.student_name", "", "invalid_field", "order.student_name"),
    ("order.student_name", "   ", "invalid_field", "order.student_name"),
    ("order.student_name", "x" * 201, "invalid_field", "order.student_name"),
    ("order.student_name", "Avery\nChen", "invalid_field", "order.student_name"),
    ("order.student_name", "Avery\u202eChen", "invalid_field", "order.student_name"),
    ("order.student_name", "Avery\u200bChen", "invalid_field", "order.student_name"),
    ("order.student_name", "\ud800", "invalid_field", "order.student_name"),
    ("order.student_name", "陈安", "unsupported_character", "order.student_name"),
    ("order.student_name", 42, "invalid_field", "order.student_name"),
    ("order.currency", DELETE, "missing_field", "order.currency"),
    ("order.currency", "XXX", "unsupported_currency", "order.currency"),
    ("order.currency", "dollar", "unsupported_currency", "order.currency"),
    ("order.issued_on", "29.11.2026", "invalid_field", "order.issued_on"),
    ("order.issued_on", "20261129", "invalid_field", "order.issued_on"),
    ("order.issued_on", "2026-02-30", "invalid_field", "order.issued_on"),
    ("order.items", DELETE, "missing_field", "order.items"),
    ("order.items", [], "invalid_field", "order.items"),
    ("order.items", {"a": 1}, "invalid_field", "order.items"),
    ("order.items[0]", "Lab", "invalid_field", "order.items[0]"),
    ("order.items[0].description", DELETE, "missing_field", "order.items[0].description"),
    ("order.items[0].description", "", "invalid_field", "order.items[0].description"),
    ("order.items[0].description", "x" * 501, "invalid_field", "order.items[0].description"),
    ("order.items[0].description", "a\tb", "invalid_field", "order.items[0].description"),
    ("order.items[0].quantity", DELETE, "missing_field", "order.items[0].quantity"),
    ("order.items[0].quantity", 0, "invalid_quantity", "order.items[0].quantity"),
    ("order.items[0].quantity", -1, "invalid_quantity", "order.items[0].quantity"),
    ("order.items[0].quantity", 1.0, "invalid_quantity", "order.items[0].quantity"),
    ("order.items[0].quantity", True, "invalid_quantity", "order.items[0].quantity"),
    ("order.items[0].quantity", "1", "invalid_quantity", "order.items[0].quantity"),
    ("order.items[0].quantity", 1_000_001, "invalid_quantity", "order.items[0].quantity"),
    ("order.items[0].unit_price", DELETE, "missing_field", "order.items[0].unit_price"),
    ("order.items[0].unit_price", 49, "invalid_amount", "order.items[0].unit_price"),
    ("order.items[0].unit_price", "-1", "invalid_amount", "order.items[0].unit_price"),
    ("order.items[0].unit_price", "12,50", "invalid_amount", "order.items[0].unit_price"),
    ("order.items[0].unit_price", "1e3", "invalid_amount", "order.items[0].unit_price"),
    ("order.items[0].unit_price", "NaN", "invalid_amount", "order.items[0].unit_price"),
    ("order.items[0].unit_price", " 1", "invalid_amount", "order.items[0].unit_price"),
    ("order.items[0].unit_price", "49.001", "invalid_amount", "order.items[0].unit_price"),
]


@pytest.mark.parametrize("path, value, code, field", REFUSALS)
def test_refusals(path: str, value: Any, code: str, field: str | None) -> None:
    with pytest.raises(ValidationError) as e:
        admit(_set(path, value), CFG, TODAY)
    assert (e.value.code, e.value.field) == (code, field)
    assert e.value.status == 422


def test_not_an_object() -> None:
    for b in (None, [], "x", 3):
        with pytest.raises(ValidationError) as e:
            admit(b, CFG, TODAY)
        assert e.value.code == "invalid_body"


def test_field_path_names_the_failing_item() -> None:
    b = body()
    b["order"]["items"] = [dict(b["order"]["items"][0]) for _ in range(5)]
    b["order"]["items"][3]["unit_price"] = "1.234"
    with pytest.raises(ValidationError) as e:
        admit(b, CFG, TODAY)
    assert e.value.field == "order.items[3].unit_price"


def test_too_many_items_is_refused_before_looking_at_them() -> None:
    b = body()
    b["order"]["items"] = [None] * 100_000  # invalid items: the count is checked first
    with pytest.raises(ValidationError) as e:
        admit(b, CFG, TODAY)
    assert (e.value.code, e.value.field) == ("too_many_items", "order.items")


def test_jpy_and_kwd_minor_units() -> None:
    n = admit(body(currency="JPY", items=[{"description": "a", "quantity": 2, "unit_price": "1500"}]), CFG, TODAY)
    assert n.normalized["order"]["items"][0]["unit_price"] == "1500"
    with pytest.raises(ValidationError):
        admit(body(currency="JPY", items=[{"description": "a", "quantity": 2, "unit_price": "15.5"}]), CFG, TODAY)
    n = admit(body(currency="kwd", items=[{"description": "a", "quantity": 1, "unit_price": "0.125"}]), CFG, TODAY)
    assert n.normalized["order"]["items"][0]["unit_price"] == "0.125"


def test_check_config() -> None:
    check_config(CFG)
    with pytest.raises(ConfigError) as e:
        check_config(config_mod.loads('[invoice]\ndefault_template = "invoice-v9"\n'))
    assert e.value.key == "invoice.default_template"
    with pytest.raises(ConfigError) as e:
        check_config(config_mod.loads('[invoice]\ntax_rate = "20%"\n'))
    assert e.value.key == "invoice.tax_rate"


# --- properties -------------------------------------------------------------------------

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=10), kids, max_size=4),
    max_leaves=20,
)
# Mostly plausible values (so many bodies pass), with arbitrary ones mixed in.
printable = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x24F, exclude_categories=("Cc",)),
    min_size=1, max_size=40,
)  # fmt: skip
texts = printable | printable | st.text(max_size=10)
amounts = st.from_regex(r"[0-9]{1,13}(\.[0-9]{1,4})?", fullmatch=True) | st.text(max_size=8)
items = st.fixed_dictionaries(
    {"description": texts,
     "quantity": st.one_of(st.integers(1, 1_000_000), st.integers(1, 99),
                           st.integers(-2, 2_000_000), st.deferred(lambda: json_scalars)),
     "unit_price": amounts}
)  # fmt: skip
orders = st.fixed_dictionaries(
    {"order_id": st.from_regex(r"[A-Za-z0-9._:-]{1,64}", fullmatch=True),
     "student_name": printable,
     "currency": st.sampled_from(["USD", "jpy", "KWD", "XXX", "Eur"]),
     "items": st.lists(items, min_size=1, max_size=4) | st.lists(items, max_size=1)},
    optional={"issued_on": st.dates().map(date.isoformat) | st.text(max_size=10)},
)  # fmt: skip
bodies = st.fixed_dictionaries(
    {"order": orders},
    optional={"sign": st.booleans(), "template_version": st.just("invoice-v3"),
              "kind": st.just("render_invoice")},
)  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(b=bodies | json_values)
def test_admit_raises_only_validation_error_and_normalizes_idempotently(b: Any) -> None:
    original = copy.deepcopy(b)
    try:
        n = normalize(b, CFG, TODAY)
    except ValidationError as e:
        assert e.code and e.code == e.code.lower()
        return
    assert b == original  # the input is not mutated
    assert normalize(copy.deepcopy(n), CFG, TODAY) == n
    a = admit(b, CFG, TODAY)
    assert {k: v for k, v in a.normalized.items() if k not in ("tax", "issuer", "units")} == n


KEY = SealKey.generate()


# --- run, against a fake context -----------------------------------------------------


class FakeServices:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.metrics = Metrics(strict=True)

    async def publish(self, ctx: Any, path: SealedPath, media_type: str,
                      tail: bytes = b"") -> Artifact:
        with path.open() as f:  # the area's files are sealed
            data = f.read() + tail
        self.calls.append(("publish", (path.name, media_type, data)))
        return Artifact(artifact_id="a1", sha256="0" * 64, size=len(data), media_type=media_type)


class FakeLadder:
    """The signing ladder's face to the invoice kind: it records the call on the
    services' list and copies the (sealed) file."""

    def __init__(self, calls: list[tuple[str, Any]]) -> None:
        self.calls = calls

    async def sign_file(self, steps: Any, src: SealedPath, dst: SealedPath, *, meta: Any,
                        attachments: Any, policy: Any) -> Any:
        self.calls.append(("sign", (src.name, dst.name, meta.reason)))
        with src.open() as f, dst.create() as w:
            w.write(f.read())
        return SimpleNamespace(appended=SimpleNamespace(tail=b""))


class FakeCtx:
    def __init__(self, normalized: dict[str, Any], workdir: Path) -> None:
        self.input = normalized
        self.version = normalized["template_version"]
        self.config = CFG
        self.area = SimpleNamespace(sealed=lambda name: SealedPath(workdir / name, KEY))
        self.services = FakeServices()
        self.phases: list[str] = []

    @asynccontextmanager
    async def phase(self, name: str) -> Any:
        self.phases.append(name)
        yield

    async def cpu(self, fn: Any, *args: Any) -> Any:
        return fn(*args)  # in-process: the real pool pickles the same call


@pytest.mark.parametrize("sign", [True, False])
async def test_run_renders_signs_and_publishes(tmp_path: Path, sign: bool) -> None:
    ctx = FakeCtx(admit(body(), CFG, TODAY).normalized | {"sign": sign}, tmp_path)
    ladder = FakeLadder(ctx.services.calls)
    out = await InvoiceKind(ladder=ladder).run(ctx)  # type: ignore[arg-type]
    assert isinstance(out, Finish)
    assert out.detail["pages"] == 1
    assert out.artifact is not None and out.artifact.size > 1000
    assert ctx.phases == ["render"]
    kinds = [c[0] for c in ctx.services.calls]
    assert kinds == (["sign", "publish"] if sign else ["publish"])
    published, _media_type, data = ctx.services.calls[-1][1]
    assert data.startswith(b"%PDF-")
    # On disk in the area, ciphertext only.
    assert all(is_sealed(p.read_bytes()) for p in tmp_path.iterdir())
    if sign:
        assert ctx.services.calls[0][1][2] == "Invoice EDU-1042"
        assert published.endswith("invoice-signed.pdf")


def test_kind_name_and_admit() -> None:
    kind = InvoiceKind()
    assert kind.name == "render_invoice"
    assert kind.admit(body(), CFG, "default").version == "invoice-v3"
