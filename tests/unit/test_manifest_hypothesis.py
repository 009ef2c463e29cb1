"""Property tests of request validation: sign_case manifests (job and kiosk) and invoices.

For arbitrary JSON-like input the validators raise nothing but ValidationError, every
refusal carries a stable snake_case code and names the one field at fault, and what
they accept normalizes to a fixed point (admitting the normalized form again gives
the same normalized form and the same idempotency key material).
"""

from __future__ import annotations

import re
from datetime import date
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from casesignd import config as config_mod
from casesignd.core.errors import ValidationError
from casesignd.core.source_settings import Source
from casesignd.http.kiosk import sign_case_body
from casesignd.job_kinds.render_invoice import admit as invoice_admit
from casesignd.job_kinds.render_invoice import normalize as invoice_normalize
from casesignd.job_kinds.sign_case import admit_body

CFG = config_mod.Config(sources=[Source(name="docs", kind="dir", root="/srv/docs")])
TODAY = date(2026, 11, 29)
CODE = re.compile(r"[a-z][a-z0-9_]*")
HEX = "0123456789abcdef"
SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

# --- strategies ---------------------------------------------------------------------------

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False), st.text(max_size=40),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
sha_hex = st.text(alphabet=HEX, min_size=64, max_size=64)
# Strings that are sometimes valid and sometimes just off (case, length, a stray byte).
case_ids = st.one_of(st.from_regex(r"[A-Za-z0-9._:-]{1,128}", fullmatch=True),
                     st.text(max_size=130))
texts = st.one_of(st.text(min_size=1, max_size=30), st.text(max_size=260), st.integers())
object_refs = st.one_of(
    sha_hex.map(lambda h: f"sha256:{h}"),
    sha_hex.map(lambda h: f"sha256:{h.upper()}"),
    st.from_regex(r"docs:[a-z./]{1,20}", fullmatch=True),
    st.text(max_size=30),
)
media_types = st.sampled_from(["application/pdf", "APPLICATION/PDF; charset=x", "image/png",
                               "image/jpeg", "text/plain", "image/jpg", "application/x-msdownload",
                               "", " ", "pdf"])


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a well-typed value, sometimes any JSON value, sometimes left out."""
    return st.one_of(strategy, strategy, strategy, json_values, st.just(_MISSING))


_MISSING = object()


def _drop_missing(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not _MISSING}


@st.composite
def items(draw: st.DrawFn, role: str | None = None) -> dict[str, Any]:
    sha = draw(sha_hex)
    same_digest = draw(st.booleans())
    item = {
        "role": draw(_maybe(st.just(role) if role else st.sampled_from(["contract", "evidence"]))),
        "name": draw(_maybe(st.sampled_from(["contract.pdf", "photo 1.png", "a/b.pdf", "..", "n\x00"])
                            | texts)),
        "media_type": draw(_maybe(media_types)),
        "object_ref": draw(_maybe(st.just(f"sha256:{sha.upper() if draw(st.booleans()) else sha}")
                                  if same_digest else object_refs)),
        "sha256": draw(_maybe(st.just(sha) | sha_hex.map(str.upper) | st.text(max_size=70))),
        "size": draw(_maybe(st.integers(min_value=-5, max_value=2**40))),
    }
    if draw(st.integers(0, 9)) == 0:
        item[draw(st.text(min_size=1, max_size=8))] = draw(json_values)
    return _drop_missing(item)


@st.composite
def signers(draw: st.DrawFn) -> dict[str, Any]:
    signer = {
        "id": draw(_maybe(st.from_regex(r"[A-Za-z0-9._:@-]{1,20}", fullmatch=True) | texts)),
        "name": draw(_maybe(texts)),
        "role": draw(_maybe(st.sampled_from(["seller", "buyer", "clerk"]) | texts)),
    }
    return _drop_missing(signer)


@st.composite
def sign_case_bodies(draw: st.DrawFn) -> dict[str, Any]:
    contract = draw(items("contract"))
    evidence = draw(st.lists(items(), max_size=3))
    listed = [contract, *evidence]
    if draw(st.booleans()):
        listed = draw(st.permutations(listed))
    body = {
        "kind": draw(_maybe(st.just("sign_case"))),
        "case_id": draw(_maybe(case_ids)),
        "policy_version": draw(_maybe(st.sampled_from(["contract-v1", "contract-v9", ""]))),
        "items": draw(_maybe(st.just(listed))),
        "signers": draw(_maybe(st.lists(signers(), min_size=1, max_size=3))),
    }
    return _drop_missing(body)


@st.composite
def kiosk_manifests(draw: st.DrawFn) -> dict[str, Any]:
    manifest = {
        "case_id": draw(_maybe(case_ids)),
        "policy_version": draw(_maybe(st.sampled_from(["contract-v1", "nope"]))),
        "signers": draw(_maybe(st.lists(signers(), min_size=1, max_size=3))),
        "sha256": draw(_maybe(sha_hex)),
        "name": draw(_maybe(st.sampled_from(["doc.pdf", "../doc.pdf"]) | texts)),
    }
    if draw(st.integers(0, 9)) == 0:
        manifest[draw(st.text(min_size=1, max_size=8))] = draw(json_values)
    return _drop_missing(manifest)


amounts = st.one_of(st.from_regex(r"[0-9]{1,6}(\.[0-9]{1,3})?", fullmatch=True),
                    st.sampled_from(["49.00", "1e3", "-1", " 1", "NaN", "1.", "12,50"]),
                    st.integers(), st.floats(allow_nan=False))


@st.composite
def invoice_bodies(draw: st.DrawFn) -> dict[str, Any]:
    line = st.builds(lambda d, q, p: _drop_missing({"description": d, "quantity": q, "unit_price": p}),
                     _maybe(texts), _maybe(st.integers(-1, 2_000_000)), _maybe(amounts))
    order = _drop_missing({
        "order_id": draw(_maybe(st.from_regex(r"[A-Za-z0-9._:-]{1,64}", fullmatch=True) | texts)),
        "student_name": draw(_maybe(st.sampled_from(["Avery Chen", " Zoë  ", "Jo\u0301se", "\u00a0x"])
                                    | texts)),
        "currency": draw(_maybe(st.sampled_from(["USD", "eur", "JPY", "XXX", "\u017fek"]))),
        "issued_on": draw(_maybe(st.sampled_from(["2026-02-28", "2026-02-30", "26-1-1"]))),
        "items": draw(_maybe(st.lists(line, min_size=1, max_size=3))),
    })
    body = _drop_missing({
        "kind": draw(_maybe(st.just("render_invoice"))),
        "template_version": draw(_maybe(st.sampled_from(["invoice-v3", "invoice-v0"]))),
        "sign": draw(_maybe(st.booleans())),
        "order": draw(_maybe(st.just(order))),
    })
    return body


# --- checks -------------------------------------------------------------------------------


def _assert_clean_refusal(e: ValidationError, *, whole_body_codes: frozenset[str] = frozenset()) -> None:
    assert CODE.fullmatch(e.code), e.code
    assert e.status == 422
    assert e.message
    # An unknown key at the top is named by no field: the key is the client's.
    if e.code not in whole_body_codes and e.code != "unknown_field":
        assert e.field, f"{e.code}: {e.message} names no field"


def _admit_sign_case(body: Any) -> Any:
    try:
        return admit_body(body, CFG)
    except ValidationError as e:
        _assert_clean_refusal(e)
        return None


@SETTINGS
@given(json_values)
@example({"": 1})
@example({"case_id": "C-1", "x" * 100_000: 1})
def test_sign_case_arbitrary_json_is_refused_cleanly(value):
    if not isinstance(value, dict):
        value = {"case_id": value}
    _admit_sign_case(value)


@SETTINGS
@given(sign_case_bodies())
@example({"case_id": "C-1", "items": [{"role": "contract", "name": "c.pdf",
                                         "media_type": "Application/PDF; x=y",
                                         "object_ref": "sha256:" + "A" * 64, "sha256": "A" * 64,
                                         "size": 10}],
          "signers": [{"id": "s-1", "name": "N", "role": "r"}]})
def test_sign_case_admission_refuses_cleanly_and_normalizes_to_a_fixed_point(body):
    admission = _admit_sign_case(body)
    if admission is None:
        return
    again = admit_body({"kind": "sign_case", **admission.normalized}, CFG)
    assert again.normalized == admission.normalized
    assert again.key_material == admission.key_material
    assert again.case_id == admission.case_id and again.version == admission.version
    assert again.declared_bytes == admission.declared_bytes


@SETTINGS
@given(st.one_of(kiosk_manifests(), st.dictionaries(st.text(max_size=10), json_values, max_size=5)),
       sha_hex, st.integers(min_value=0, max_value=2**31))
def test_kiosk_manifest_refuses_cleanly_and_matches_the_job_path(manifest, sha, size):
    try:
        body = sign_case_body(manifest, sha, size)
    except ValidationError as e:
        _assert_clean_refusal(e)
        return
    admission = _admit_sign_case(body)
    if admission is None:
        return
    # The kiosk request is exactly the sign_case job it stands for.
    (item,) = admission.normalized["items"]
    assert item["sha256"] == sha and item["object_ref"] == f"sha256:{sha}" and item["size"] == size
    assert admit_body(admission.normalized, CFG).normalized == admission.normalized


@SETTINGS
@given(st.one_of(invoice_bodies(), json_values))
def test_invoice_admission_refuses_cleanly_and_normalizes_to_a_fixed_point(body):
    try:
        admission = invoice_admit(body, CFG, TODAY)
    except ValidationError as e:
        # A body that is not an object has no one field at fault.
        _assert_clean_refusal(e, whole_body_codes=frozenset({"invalid_body"}))
        return
    once = invoice_normalize(body, CFG, TODAY)
    assert invoice_normalize(once, CFG, TODAY) == once
    again = invoice_admit(once, CFG, TODAY)
    assert again.normalized == admission.normalized


def test_an_unknown_key_is_refused_without_being_echoed():
    for call, where in ((lambda b: admit_body(b, CFG), None),
                        (lambda b: sign_case_body(b, "a" * 64, 1), "manifest"),
                        (lambda b: invoice_admit(b, CFG, TODAY), None)):
        for key in ("", "k" * 10_000, "<script>alert(1)</script>", "Bearer tok_s3cr3t"):
            try:
                call({key: 1})
            except ValidationError as e:
                assert (e.code, e.field) == ("unknown_field", where)
                assert e.message.startswith(f"{where or 'the body'} has an unknown field")
                assert (key or '""') not in e.message and len(e.message) < 300
            else:
                raise AssertionError("an unknown key was accepted")
