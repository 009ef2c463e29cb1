"""The ``render_invoice`` job kind: admission (validation, normalization) and run.

Admission is pure: it takes the request body and the config (and the date to
issue on) and returns values or raises :class:`casesignd.core.errors.ValidationError`
with a stable ``code`` and the ``field`` at fault (``order.items[3].unit_price``).

Codes: ``invalid_body``, ``missing_field``, ``unknown_field``, ``invalid_field``,
``invalid_amount``, ``invalid_quantity``, ``unsupported_currency``,
``too_many_items``, ``unknown_template``, ``unsupported_character``.

Choices (README-ready):

- ``order.issued_on`` (``YYYY-MM-DD``) is optional. When absent the invoice is
  dated with the UTC day of admission, and that date is stored in the job input,
  so a retry renders the same document. The derived idempotency key does not
  cover a defaulted date: a blind retry the next day finds the same job.
- Text (names, descriptions) is NFC-normalized and stripped of surrounding
  whitespace. Control and format characters (Unicode Cc, Cf, Cs, Co, Cn, Zl, Zp)
  are refused, and so is any character the invoice font has no glyph for
  (``unsupported_character``): an invoice never shows a missing-glyph box.
- Unit prices are refused when they are not a whole number of the currency's
  minor units (see :mod:`casesignd.invoices.money`).
- The tax rate and label, and the tenant's other invoice settings (issuer,
  logo by digest, locale, labels, footer: :mod:`casesignd.invoices.branding`), are taken
  from the config at admission and stored with the job, so a config change does
  not alter invoices already accepted.
- A branded template (invoice-v4 on) takes its currencies and their minor units
  from CLDR (:mod:`casesignd.invoices.locales`), accepts what its fonts can draw
  (:mod:`casesignd.text.shaping`: East Asian scripts and Arabic too), refuses a
  currency its fonts cannot print in the tenant's locale
  (``unsupported_currency``), and takes ``order.customer_tax_id`` (1-64
  characters), which invoice-v3 refuses (``invalid_field``): it cannot print it.
"""

from __future__ import annotations

import re
import time
import unicodedata
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from casesignd.config import Config
from casesignd.core.appearance import CERTIFY_P
from casesignd.core.errors import ConfigError, ValidationError
from casesignd.core.fields import object_field, refuse_unknown, required
from casesignd.core.policy import Policy
from casesignd.core.sealed import SealedPath
from casesignd.engine.kinds import Admission, Finish, JobContext
from casesignd.invoices import locales, money
from casesignd.invoices.branding import Branding, InvoiceSettings, logo_dir_of, settings_of
from casesignd.invoices.templates import TEMPLATES, render_to_file, template
from casesignd.job_kinds.signing import JobSteps, signing_policy, stamp_logo
from casesignd.signing import placement
from casesignd.signing.ladder import Ladder
from casesignd.signing.pades import SignatureMeta
from casesignd.text import shaping
from casesignd.text.faces import font_coverage

KIND = "render_invoice"
MAX_QUANTITY = 1_000_000
MAX_NAME_CHARS = 200
MAX_DESCRIPTION_CHARS = 500
MAX_TAX_ID_CHARS = 64

_ORDER_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_TOP_FIELDS = ("kind", "template_version", "sign", "order")
_ORDER_FIELDS = ("order_id", "student_name", "currency", "items", "issued_on", "customer_tax_id")
_ITEM_FIELDS = ("description", "quantity", "unit_price")
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})

# Output size estimate: the one-line invoice is about 46 KB (mostly the two font
# subsets); each line adds its text plus about 100 bytes of drawing operators. A
# signed invoice also keeps the unsigned file and adds the signature container.
_BASE_BYTES = 48 * 1024
_LINE_BYTES = 160
_SIGNATURE_BYTES = 64 * 1024
_GLYPH_BYTES = 700  # one glyph in an embedded subset (an ideograph's), outline and metrics


# --- pure helpers ---------------------------------------------------------------------


def _refuse(code: str, field: str | None, message: str) -> ValidationError:
    return ValidationError(message, code=code, field=field)


def _object(value: Any, field: str) -> dict[str, Any]:
    return object_field(required(value, field), field)


def _text(value: Any, field: str, max_chars: int, branded: bool = False) -> str:
    """NFC, stripped, 1..max_chars printable characters the template's fonts can draw."""
    if not isinstance(required(value, field), str):
        raise _refuse("invalid_field", field, f"{field} must be a string")
    if len(value) > 4 * max_chars:  # bound the work before normalizing
        raise _refuse("invalid_field", field, f"{field} is longer than {max_chars} characters")
    if value.isascii() and value.isprintable():
        # Fast path: printable ASCII is NFC and in the font; only trim and measure.
        text = value.strip()
        if not text or len(text) > max_chars:
            raise _refuse(
                "invalid_field", field, f"{field} must be 1-{max_chars} characters"
            )
        return text
    for ch in value:
        if unicodedata.category(ch) in _REFUSED_CATEGORIES:
            raise _refuse(
                "invalid_field", field, f"{field} contains control character U+{ord(ch):04X}"
            )
    text = unicodedata.normalize("NFC", value).strip()
    if not text:
        raise _refuse("invalid_field", field, f"{field} must not be empty")
    if len(text) > max_chars:
        raise _refuse("invalid_field", field, f"{field} is longer than {max_chars} characters")
    # Other spaces (no-break, thin, ...) print as a plain space; the font may lack them.
    text = "".join(" " if ch.isspace() else ch for ch in text)
    if branded:
        bad = shaping.unprintable(text)
    else:
        covered = font_coverage()
        bad = next((ch for ch in text if ord(ch) not in covered), None)
    if bad is not None:
        raise _refuse("unsupported_character", field,
                      f"{field} contains U+{ord(bad):04X}, which the invoice font cannot print")
    return text


def _quantity(value: Any, field: str) -> int:
    # bool is an int subclass; JSON true is not a quantity. Floats (1.0) are refused too.
    if type(value) is not int or not 1 <= value <= MAX_QUANTITY:
        raise _refuse(
            "invalid_quantity", field, f"quantity must be an integer from 1 to {MAX_QUANTITY:,}"
        )
    return value


def _issued_on(value: Any, today: date) -> str:
    if value is None:
        return today.isoformat()
    field = "order.issued_on"
    if not isinstance(value, str) or not _DATE.fullmatch(value):
        raise _refuse("invalid_field", field, "issued_on must be a date YYYY-MM-DD")
    try:
        return date.fromisoformat(value).isoformat()
    except ValueError:
        raise _refuse("invalid_field", field, f"{value!r} is not a calendar date") from None


def _template(value: Any, default: str) -> str:
    version = default if value is None else value
    if not isinstance(version, str) or version not in TEMPLATES:
        raise _refuse(
            "unknown_template", "template_version",
            f"unknown template; known: {', '.join(TEMPLATES)}",
        )  # fmt: skip
    return version


def _currency(value: Any, branded: bool, settings: InvoiceSettings) -> tuple[str, int]:
    """The upper-case code and its minor unit: CLDR's for a branded template."""
    field = "order.currency"
    if value is None:
        raise _refuse("missing_field", field, "order.currency is required")
    if not branded:
        code = money.normalize_currency(value, field)
        return code, money.minor_unit(code)
    code = value.upper() if isinstance(value, str) and value.isascii() else ""
    units = locales.currency_units(code) if len(code) == 3 and code.isalpha() else None
    if units is None:
        raise _refuse("unsupported_currency", field,
                      f"unsupported currency {str(value)[:16]!r}: not an ISO 4217 code in use")
    # Grouped, with every decimal: each mark the amounts of this invoice may show.
    sample = locales.format_money(Decimal(1234567).scaleb(-units), code, units,
                                  locales.locale_of(settings.locale))
    bad = shaping.unprintable(sample)
    if bad is not None:
        raise _refuse("unsupported_currency", field,
                      f"{code} in {settings.locale} is written with U+{ord(bad):04X}, which "
                      "the invoice fonts cannot print")
    return code, units


def normalize(body: Any, config: Config, today: date | None = None,
              settings: InvoiceSettings | None = None) -> dict[str, Any]:
    """The request in canonical form; ``normalize(normalize(b)) == normalize(b)``.

    ``today`` dates an invoice whose order has no ``issued_on`` (default: the
    current UTC day). ``settings`` are the tenant's (default: ``[invoice]``).
    """
    settings = settings or settings_of(config.invoice)
    if not isinstance(body, dict):
        raise _refuse("invalid_body", None, "the request body must be a JSON object")
    refuse_unknown(body, _TOP_FIELDS)
    if body.get("kind", KIND) != KIND:
        raise _refuse("invalid_field", "kind", f"kind must be {KIND!r}")
    version = _template(body.get("template_version"), settings.template)
    branded = TEMPLATES[version].branded
    sign = body.get("sign", False)
    if not isinstance(sign, bool):
        raise _refuse("invalid_field", "sign", "sign must be true or false")

    order = _object(body.get("order"), "order")
    refuse_unknown(order, _ORDER_FIELDS, "order")
    order_id = order.get("order_id")
    if order_id is None:
        raise _refuse("missing_field", "order.order_id", "order.order_id is required")
    if not isinstance(order_id, str) or not _ORDER_ID.fullmatch(order_id):
        raise _refuse(
            "invalid_field", "order.order_id", "order_id must be 1-64 of [A-Za-z0-9._:-]"
        )
    student = _text(order.get("student_name"), "order.student_name", MAX_NAME_CHARS, branded)
    currency, units = _currency(order.get("currency"), branded, settings)
    customer_tax_id = order.get("customer_tax_id")
    if customer_tax_id is not None:
        if not branded:
            raise _refuse("invalid_field", "order.customer_tax_id",
                          f"{version} cannot print a customer tax ID; use invoice-v4")
        customer_tax_id = _text(customer_tax_id, "order.customer_tax_id", MAX_TAX_ID_CHARS,
                                branded)
    issued_on = _issued_on(order.get("issued_on"), today or datetime.now(UTC).date())

    raw_items = order.get("items")
    if raw_items is None:
        raise _refuse("missing_field", "order.items", "order.items is required")
    if not isinstance(raw_items, list) or not raw_items:
        raise _refuse("invalid_field", "order.items", "items must be a non-empty list")
    if len(raw_items) > config.invoice.max_items:
        raise _refuse(
            "too_many_items", "order.items",
            f"{len(raw_items)} items; at most {config.invoice.max_items} per invoice",
        )  # fmt: skip
    items = []
    for i, raw in enumerate(raw_items):
        at = f"order.items[{i}]"
        raw = _object(raw, at)
        refuse_unknown(raw, _ITEM_FIELDS, at)
        description = _text(raw.get("description"), f"{at}.description", MAX_DESCRIPTION_CHARS,
                            branded)
        if raw.get("quantity") is None:
            raise _refuse("missing_field", f"{at}.quantity", f"{at}.quantity is required")
        quantity = _quantity(raw["quantity"], f"{at}.quantity")
        if raw.get("unit_price") is None:
            raise _refuse("missing_field", f"{at}.unit_price", f"{at}.unit_price is required")
        price = money.parse_price(raw["unit_price"], currency, f"{at}.unit_price",
                                  units if branded else None)
        items.append(
            {"description": description, "quantity": quantity,
             "unit_price": f"{price:f}"}  # already quantized
        )  # fmt: skip
    normalized_order: dict[str, Any] = {
        "order_id": order_id,
        "student_name": student,
        "currency": currency,
        "issued_on": issued_on,
        "items": items,
    }
    if customer_tax_id is not None:
        normalized_order["customer_tax_id"] = customer_tax_id
    return {"kind": KIND, "template_version": version, "sign": sign, "order": normalized_order}


def declared_bytes(request: dict[str, Any]) -> int:
    """An upper estimate of the bytes the job writes (rendered, and signed if asked).

    A branded invoice adds its logo (a PNG is embedded decoded and deflated: at most
    4 bytes a pixel) and the glyphs of the characters beyond ASCII it prints.
    """
    order = request["order"]
    text = sum(len(it["description"].encode()) for it in order["items"])
    rendered = (_BASE_BYTES + len(order["student_name"].encode()) + text
                + _LINE_BYTES * len(order["items"]))  # fmt: skip
    issuer = request.get("issuer")
    if issuer is not None and TEMPLATES[request["template_version"]].branded:
        logo = issuer.get("logo")
        if logo:
            rendered += 4 * logo["width"] * logo["height"] + 4096
        texts = [order["student_name"], order.get("customer_tax_id", ""),
                 *(it["description"] for it in order["items"]),
                 issuer["name"], *issuer["address"], *issuer["tax_ids"], *issuer["footer"],
                 *issuer["labels"].values()]
        # Each other character is a glyph of its own in up to two faces, and an
        # Arabic letter in up to four joining forms.
        rendered += 8 * _GLYPH_BYTES * len({ch for t in texts for ch in t if not ch.isascii()})
        rendered += 200 * (len(issuer["address"]) + len(issuer["tax_ids"]) + len(issuer["footer"]))
    return 2 * rendered + _SIGNATURE_BYTES if request["sign"] else rendered


def admit(body: Any, config: Config, today: date | None = None,
          settings: InvoiceSettings | None = None) -> Admission:
    """Validate and normalize a ``render_invoice`` body (pure; see the module doc).

    ``Admission.normalized`` is the request from :func:`normalize` plus
    ``"tax": {"rate": "0.2" or "", "label": "VAT"}`` and ``"issuer"`` (the
    settings' snapshot) from ``settings`` (the tenant's; default ``[invoice]``),
    and for a branded template ``"units"``, the currency's minor unit; it is what
    the job renders. ``key_material`` leaves out an ``issued_on`` that was
    defaulted rather than sent.
    """
    settings = settings or settings_of(config.invoice)
    request = normalize(body, config, today, settings)
    rate = money.parse_rate(settings.tax_rate)
    key = {**request, "order": dict(request["order"])}
    sent_date = isinstance(body, dict) and isinstance(body.get("order"), dict) and (
        body["order"].get("issued_on") is not None
    )
    if not sent_date:
        del key["order"]["issued_on"]
    normalized = {
        **request,
        "tax": {"rate": "" if rate is None else f"{rate:f}", "label": settings.tax_label},
        "issuer": settings.snapshot(),
    }
    if TEMPLATES[request["template_version"]].branded:
        units = locales.currency_units(request["order"]["currency"])
        assert units is not None  # normalize refused it otherwise
        normalized["units"] = units
    return Admission(
        normalized=normalized,
        version=request["template_version"],
        case_id=None,
        declared_bytes=declared_bytes(normalized),
        key_material=key,
        # A replay on another day, or after a tax or branding change, is still the
        # same request.
        fingerprint_material=key,
    )


def check_config(config: Config) -> None:
    """Startup check of the ``[invoice]`` section; raises ConfigError naming the key.

    Also loads the invoice fonts' glyph coverage that admission uses (about 50 ms,
    once per process), so call it before serving. Each tenant's settings are
    checked by :func:`casesignd.invoices.branding.load`.
    """
    if config.invoice.default_template not in TEMPLATES:
        raise ConfigError(
            "invoice.default_template",
            f"unknown template {config.invoice.default_template!r}; known: {', '.join(TEMPLATES)}",
        )
    money.parse_rate(config.invoice.tax_rate)
    if config.invoice.max_items <= 0:
        raise ConfigError("invoice.max_items", "must be positive")
    try:
        font_coverage()  # loads the shipped fonts once, so the first request does not
        # (shaping.warm loads the rest, in the background: Services.warm_cpu)
    except OSError as e:
        raise ConfigError("invoice", f"invoice fonts unreadable: {e}") from None


def issuer_of(config: Config) -> dict[str, Any]:
    """The issuer block invoice-v3 prints, from the config."""
    return {"name": config.invoice.issuer_name, "address": list(config.invoice.issuer_address)}


def render_issuer(invoice: dict[str, Any], config: Config) -> dict[str, Any]:
    """What the template of a job's ``invoice`` is given as its issuer.

    invoice-v3: the name and address of the job's snapshot (a job accepted before
    snapshots: the config's). A branded template: the whole snapshot and where its
    logo's bytes are kept.
    """
    snapshot = invoice.get("issuer")
    if not template(invoice["template_version"]).branded:
        if snapshot is None:
            return issuer_of(config)
        return {"name": snapshot["name"], "address": list(snapshot["address"])}
    logo = snapshot.get("logo") if snapshot else None
    path = str(logo_dir_of(config) / logo["sha256"]) if logo else ""
    return {"snapshot": snapshot, "logo_path": path}


# --- the job kind --------------------------------------------------------------------


class InvoiceKind:
    """``render_invoice``: render with the admitted template, sign if asked, publish."""

    name = KIND

    def __init__(self, branding: Callable[[], Branding] | None = None,
                 ladder: Ladder | None = None) -> None:
        # The daemon's current settings (replaced on SIGHUP); None: [invoice] only.
        self._branding = branding
        # The daemon's signing ladder; None: admission only.
        self._ladder = ladder

    def admit(self, body: dict[str, Any], config: Config, tenant: str) -> Admission:
        """See :func:`admit`, with ``tenant``'s settings."""
        settings = self._branding().for_tenant(tenant) if self._branding else \
            settings_of(config.invoice_for(tenant))
        return admit(body, config, settings=settings)

    def needs_area(self, input: dict[str, Any], config: Config) -> bool:
        return True

    async def run(self, ctx: JobContext) -> Finish:
        """Render in the CPU pool, optionally sign, publish the PDF."""
        invoice = ctx.input
        version = ctx.version or invoice["template_version"]
        assert ctx.area is not None
        # Sealed in the attempt's area, like every file there.
        path = ctx.area.sealed("invoice.pdf")
        started = time.perf_counter()
        issuer = render_issuer({**invoice, "template_version": version}, ctx.config)
        async with ctx.phase("render"):
            pages = await ctx.cpu(render_to_file, invoice, version, path, issuer)
        ctx.services.metrics.observe_invoice_render(
            version, len(invoice["order"]["items"]), time.perf_counter() - started)
        tail = b""
        if invoice.get("sign"):
            signed = ctx.area.sealed("invoice-signed.pdf")
            reason = f"Invoice {invoice['order']['order_id']}"
            policy, branding = ctx.config.policy(None), self._branding() if self._branding else None
            logo = b"" if policy is None or branding is None else await stamp_logo(
                branding, ctx.tenant, policy)
            tail = await sign_invoice(self._ladder, ctx, path, signed, reason, logo)
            path = signed
        artifact = await ctx.services.publish(ctx, path, "application/pdf", tail=tail)
        return Finish(artifact=artifact, detail={"pages": pages, "template_version": version})


async def sign_invoice(ladder: Ladder | None, ctx: JobContext, src: SealedPath, dst: SealedPath,
                       reason: str, logo: bytes = b"") -> bytes:
    """Sign a document the service made itself (an invoice): same signer, same PAdES
    profile, same TSA as the default policy, its visible stamp when the policy draws
    one and its certification when the policy certifies (:func:`invoice_meta`). The
    signed document is ``dst`` and then the bytes returned
    (:meth:`casesignd.signing.ladder.Ladder.sign_file`)."""
    if ladder is None:
        raise RuntimeError("a signed invoice needs the daemon's signing ladder")
    policy = ctx.config.policy(None)
    visible = policy is not None and policy.appearance == "visible"
    meta = invoice_meta(policy, ctx.config.signing.signer_name, reason,
                        ladder.signer_subject() if visible else "", logo)
    signed = await ladder.sign_file(JobSteps(ctx), src, dst, meta=meta, attachments=[],
                                    policy=signing_policy(policy) if policy is not None else None)
    return signed.appended.tail


def invoice_meta(policy: Policy | None, signer_name: str, reason: str, subject: str = "",
                 logo: bytes = b"") -> SignatureMeta:
    """What an invoice's signature says, and where it goes: under a visible policy, the
    same stamp as a contract's (:mod:`casesignd.signing.placement`), on the policy's
    page in its box. An invoice the service drew has no signature field of its own,
    so a policy that names one places the invoice's stamp by its page and box. A policy
    that certifies makes it a certification with its DocMDP permission, as it does a
    contract's first signature: the service has just drawn the invoice, so its
    signature is always the first."""
    signing_time = datetime.now(UTC).replace(microsecond=0)
    version = policy.version if policy else ""
    certify = CERTIFY_P.get(policy.certify) if policy else None
    if policy is None or policy.appearance != "visible":
        return SignatureMeta(signing_time=signing_time, name=signer_name, reason=reason,
                             policy_version=version, certify=certify)
    stamp = placement.words(subject=subject, signer_name=signer_name, parties=(),
                            signing_time=signing_time, policy_version=version, reason=reason,
                            location=policy.location)
    return SignatureMeta(signing_time=signing_time, name=signer_name, reason=reason,
                         location=policy.location, policy_version=version, stamp=stamp, logo=logo,
                         place=(policy.signature_page, tuple(policy.signature_box)),  # type: ignore[arg-type]
                         certify=certify)
