"""Each tenant's invoice settings, resolved and checked, and the logos they name.

A tenant's ``[tenants.invoice]`` is laid over the daemon's ``[invoice]``
(:meth:`casesignd.config.Invoice.over`). :func:`load` resolves every tenant's
settings at start and on SIGHUP and checks them: the locale is one CLDR knows,
every printed text can be drawn by invoice-v4's fonts, the labels are known
keys, and the logo is a PNG or JPEG of at most :data:`LOGO_MAX_BYTES` and
:data:`LOGO_MAX_SIDE` pixels a side (:data:`LOGO_MAX_PIXELS` in all) that
decodes whole. A problem is a
ConfigError naming the key (``tenants[1].invoice.logo``): the daemon does not
start, and a reload is refused, keeping the settings it has.

Admission copies a tenant's settings into the job (:meth:`InvoiceSettings.snapshot`),
as it does the tax, so a later change never alters an accepted invoice. The logo
goes in as its SHA-256: :func:`load` keeps each logo's bytes under
``state_dir/branding/<sha256>``, written once and never removed, and the renderer
reads them back by that name and checks the digest.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from casesignd.config import Config, Invoice
from casesignd.core.errors import ConfigError
from casesignd.core.hashing import sha256_hex

LOGO_MAX_BYTES = 1 << 20
LOGO_MAX_SIDE = 4096
# A PNG is embedded decoded (then deflated): this bounds what one invoice reserves.
LOGO_MAX_PIXELS = 4_000_000
# Pixel formats reportlab embeds as they are (a 16-bit grey PNG, "I;16", it does not).
_MODES = frozenset({"1", "L", "LA", "P", "RGB", "RGBA", "CMYK"})
_MEDIA = {b"\x89PNG\r\n\x1a\n": ("PNG", "image/png"), b"\xff\xd8\xff": ("JPEG", "image/jpeg")}

# The words invoice-v4 prints, by key; [invoice] labels and a tenant's replace them.
# "page" is a pattern of {page} and {pages}.
LABELS: dict[str, str] = {
    "invoice": "INVOICE",
    "invoice_no": "Invoice no.",
    "issue_date": "Issue date",
    "bill_to": "Bill to",
    "customer_tax_id": "Customer tax ID",
    "number": "#",
    "description": "Description",
    "quantity": "Qty",
    "unit_price": "Unit price",
    "amount": "Amount",
    "subtotal": "Subtotal",
    "total": "Total",
    "page": "Page {page} of {pages}",
}


@dataclass(frozen=True)
class Logo:
    """A checked logo: its digest, type and size in pixels."""

    sha256: str
    media_type: str
    width: int
    height: int


@dataclass(frozen=True)
class InvoiceSettings:
    """One tenant's resolved invoice settings."""

    template: str
    issuer_name: str
    issuer_address: tuple[str, ...]
    issuer_tax_ids: tuple[str, ...]
    tax_rate: str
    tax_label: str
    footer: tuple[str, ...]
    locale: str
    labels: dict[str, str]
    logo: Logo | None = None

    def snapshot(self) -> dict[str, Any]:
        """What a job keeps of these settings (JSON; the logo by digest)."""
        logo = None if self.logo is None else {
            "sha256": self.logo.sha256, "media_type": self.logo.media_type,
            "width": self.logo.width, "height": self.logo.height}
        return {"name": self.issuer_name, "address": list(self.issuer_address),
                "tax_ids": list(self.issuer_tax_ids), "footer": list(self.footer),
                "locale": self.locale, "labels": dict(self.labels), "logo": logo}


@dataclass(frozen=True)
class Branding:
    """Every tenant's settings; replaced whole on a reload."""

    default: InvoiceSettings
    tenants: dict[str, InvoiceSettings]
    logo_dir: Path | None

    @classmethod
    def unchecked(cls, config: Config) -> Branding:
        """The settings as configured, without checks or logos (until :func:`load`)."""
        return cls(settings_of(config.invoice),
                   {t.name: settings_of(config.invoice.over(t.invoice))
                    for t in config.tenants if t.invoice is not None}, None)

    def for_tenant(self, tenant: str) -> InvoiceSettings:
        return self.tenants.get(tenant, self.default)

    def logo_path(self, sha256: str) -> Path | None:
        """Where a logo's bytes are kept (None: this daemon keeps none)."""
        return None if self.logo_dir is None else self.logo_dir / sha256


def check_logo(data: bytes, key: str) -> Logo:
    """The Logo of ``data``; ConfigError naming ``key`` unless a bounded PNG or JPEG."""
    if len(data) > LOGO_MAX_BYTES:
        raise ConfigError(key, f"the logo has {len(data)} bytes; at most {LOGO_MAX_BYTES}")
    kind = next((v for magic, v in _MEDIA.items() if data.startswith(magic)), None)
    if kind is None:
        raise ConfigError(key, "the logo is not a PNG or JPEG file")
    from PIL import Image  # only where a logo is configured

    try:
        with Image.open(io.BytesIO(data), formats=[kind[0]]) as img:
            width, height = img.size
            if img.mode not in _MODES:
                raise ConfigError(key, f"the logo's pixels are {img.mode}; save it as 8-bit "
                                       "RGB, RGBA, grey or palette")
            if not (0 < width <= LOGO_MAX_SIDE and 0 < height <= LOGO_MAX_SIDE
                    and width * height <= LOGO_MAX_PIXELS):
                raise ConfigError(key, f"the logo is {width}x{height} pixels; at most "
                                       f"{LOGO_MAX_SIDE} a side and {LOGO_MAX_PIXELS:,} in all")
            img.load()  # decodes it whole: a truncated or corrupt file fails here
    except ConfigError:
        raise
    except Exception as e:  # PIL raises many types for a damaged image
        raise ConfigError(key, f"the logo does not decode: {str(e)[:200]}") from None
    return Logo(sha256_hex(data), kind[1], width, height)


def _keep(logo_dir: Path, name: str, data: bytes) -> None:
    """Write ``data`` as ``logo_dir/name`` once: whole or not at all, fsynced, the
    temporary file removed either way (casesignd.files.artifacts.link_new)."""
    from casesignd.files.artifacts import link_new, write_new

    final = logo_dir / name
    if final.exists():
        return
    logo_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Several daemons may share state_dir (PostgreSQL): a name of this write's own.
    tmp = logo_dir / f".{name}.{os.getpid()}.{secrets.token_hex(6)}.tmp"
    link_new(tmp, final, lambda path: write_new([data], path))


# How many lines and characters each printed setting may have: what fits its place
# on the page at the smallest size text shrinks to, with room for the items.
MAX_LINES = {"issuer_address": 6, "issuer_tax_ids": 4, "footer": 4}
MAX_CHARS = {"issuer_name": 200, "issuer_address": 120, "issuer_tax_ids": 120,
             "footer": 160, "tax_label": 40, "labels": 40}


def _check_texts(settings: Invoice, key: str) -> None:
    from casesignd.text.shaping import unprintable

    texts: list[tuple[str, str, str]] = [("issuer_name", "issuer_name", settings.issuer_name),
                                         ("tax_label", "tax_label", settings.tax_label)]
    for field, most in MAX_LINES.items():
        lines = getattr(settings, field)
        if len(lines) > most:
            raise ConfigError(f"{key}.{field}", f"{len(lines)} lines; at most {most}")
        texts += [(f"{field}[{i}]", field, t) for i, t in enumerate(lines)]
    texts += [(f"labels.{k}", "labels", v) for k, v in settings.labels.items()]
    for field, kind, text in texts:
        bad = unprintable(text)
        if bad is not None:
            raise ConfigError(f"{key}.{field}",
                              f"U+{ord(bad):04X} cannot be printed by the invoice fonts")
        if len(text) > MAX_CHARS[kind]:
            raise ConfigError(f"{key}.{field}", f"longer than {MAX_CHARS[kind]} characters")
    for label in settings.labels:
        if label not in LABELS:
            raise ConfigError(f"{key}.labels", f"unknown label {label!r}; known: "
                                               f"{', '.join(LABELS)}")
    rest = re.sub(r"\{pages?\}", "", settings.labels.get("page", LABELS["page"]))
    if "{" in rest or "}" in rest:
        raise ConfigError(f"{key}.labels.page", "may hold only {page} and {pages} in braces")


def _check_locale(tag: str, key: str) -> None:
    """A locale CLDR knows, whose dates, percentages and grouped numbers the fonts print."""
    from decimal import Decimal

    from casesignd.invoices import locales
    from casesignd.text.shaping import unprintable

    loc = locales.parse_locale(tag, key)
    for sample in (locales.format_date("2026-12-31", loc),
                   locales.format_rate(Decimal("0.125"), loc),
                   locales.format_quantity(1234567, loc)):
        bad = unprintable(sample)
        if bad is not None:
            raise ConfigError(key, f"{tag} writes U+{ord(bad):04X}, which the invoice fonts "
                                   "cannot print")


def _resolve(config: Config, settings: Invoice, key: str, logo_dir: Path | None,
             seen: dict[str, Logo]) -> InvoiceSettings:
    from casesignd.invoices import money
    from casesignd.invoices.templates import TEMPLATES

    if settings.default_template not in TEMPLATES:
        raise ConfigError(f"{key}.default_template",
                          f"unknown template {settings.default_template!r}; known: "
                          f"{', '.join(TEMPLATES)}")
    money.parse_rate(settings.tax_rate, f"{key}.tax_rate")
    _check_locale(settings.locale, f"{key}.locale")
    _check_texts(settings, key)
    logo = None
    if settings.logo:
        path = config.path(settings.logo)
        if str(path) in seen:
            logo = seen[str(path)]
        else:
            try:
                with open(path, "rb") as f:
                    data = f.read(LOGO_MAX_BYTES + 1)
            except OSError as e:
                raise ConfigError(f"{key}.logo", f"cannot read {path}: {e.strerror}") from None
            logo = check_logo(data, f"{key}.logo")
            if logo_dir is not None:
                try:
                    _keep(logo_dir, logo.sha256, data)
                except OSError as e:
                    raise ConfigError(f"{key}.logo",
                                      f"cannot keep a copy in {logo_dir}: {e.strerror}") from None
            seen[str(path)] = logo
    return dataclasses.replace(settings_of(settings), logo=logo)


def settings_of(settings: Invoice) -> InvoiceSettings:
    """``settings`` as they are printed, without their logo and unchecked."""
    return InvoiceSettings(
        template=settings.default_template, issuer_name=settings.issuer_name,
        issuer_address=tuple(settings.issuer_address),
        issuer_tax_ids=tuple(settings.issuer_tax_ids), tax_rate=settings.tax_rate,
        tax_label=settings.tax_label, footer=tuple(settings.footer), locale=settings.locale,
        labels={**LABELS, **settings.labels})


def load(config: Config, logo_dir: Path | None) -> Branding:
    """Resolve and check every tenant's settings; keep their logos in ``logo_dir``.

    Blocking (reads and fsyncs logo files). ``logo_dir`` None checks without keeping.
    """
    seen: dict[str, Logo] = {}
    default = _resolve(config, config.invoice, "invoice", logo_dir, seen)
    tenants = {}
    for i, t in enumerate(config.tenants):
        if t.invoice is not None:
            tenants[t.name] = _resolve(config, config.invoice.over(t.invoice),
                                       f"tenants[{i}].invoice", logo_dir, seen)
    return Branding(default, tenants, logo_dir)


def logo_dir_of(config: Config) -> Path:
    """Where the daemon keeps logo bytes: ``state_dir/branding``."""
    return config.path(config.storage.state_dir) / "branding"
