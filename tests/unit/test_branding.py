"""Tenants' invoice settings: laid over [invoice], checked at start, each problem a
ConfigError naming its key, and logos kept by digest."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import pytest
from PIL import Image

from casesignd import config as config_mod
from casesignd.core.errors import ConfigError
from casesignd.invoices import branding

TOKEN = "0" * 64


def _cfg(tmp_path: Path, invoice: str = "", tenant: str = "") -> config_mod.Config:
    text = f'[invoice]\nissuer_name = "Daemon School"\n{invoice}\n' \
           f'[[tenants]]\nname = "t"\ntoken_sha256 = "{TOKEN}"\n'
    if tenant:
        text += f"[tenants.invoice]\n{tenant}\n"
    return config_mod.loads(text, base_dir=str(tmp_path))


def _png(w: int = 30, h: int = 10) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (1, 2, 3)).save(buf, format="PNG")
    return buf.getvalue()


def test_a_tenants_settings_lie_over_the_daemons(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, 'locale = "fr-CH"\nlabels = { total = "Total TTC", invoice = "FACTURE" }',
               'issuer_name = "Ecole"\nlabels = { total = "Somme" }')
    mine = branding.load(cfg, None).for_tenant("t")
    assert (mine.issuer_name, mine.locale) == ("Ecole", "fr-CH")
    assert mine.labels["total"] == "Somme" and mine.labels["invoice"] == "FACTURE"
    assert mine.labels["subtotal"] == "Subtotal"
    assert branding.load(cfg, None).for_tenant("nobody").issuer_name == "Daemon School"
    assert cfg.invoice_for("t").issuer_name == "Ecole"


@pytest.mark.parametrize("tenant,key", [
    ('locale = "xx-QQ"', "tenants[0].invoice.locale"),
    ('locale = "not a locale"', "tenants[0].invoice.locale"),
    ('labels = { totl = "x" }', "tenants[0].invoice.labels"),
    ('labels = { page = "Page {n}" }', "tenants[0].invoice.labels.page"),
    ('labels = { page = "{page.__class__}" }', "tenants[0].invoice.labels.page"),
    ('labels = { page = "{page} }" }', "tenants[0].invoice.labels.page"),
    ('issuer_name = "प्रिया"', "tenants[0].invoice.issuer_name"),
    ('footer = ["ok", "\\u0915"]', "tenants[0].invoice.footer[1]"),
    ('tax_rate = "1.5"', "tenants[0].invoice.tax_rate"),
    ('default_template = "invoice-v9"', "tenants[0].invoice.default_template"),
    ('logo = "missing.png"', "tenants[0].invoice.logo"),
])
def test_each_bad_setting_is_refused_naming_its_key(tmp_path: Path, tenant: str, key: str) -> None:
    with pytest.raises(ConfigError) as e:
        branding.load(_cfg(tmp_path, tenant=tenant), None)
    assert e.value.key == key, e.value


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


@pytest.mark.parametrize("data,why", [
    (b"GIF89a" + b"\0" * 40, "not a PNG or JPEG"),
    (_png()[:60], "does not decode"),
    (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0))
     + _chunk(b"IEND", b""), "pixels"),
    (b"\xff\xd8\xff" + b"\0" * (branding.LOGO_MAX_BYTES + 10), "bytes"),
])
def test_a_bad_logo_is_refused(tmp_path: Path, data: bytes, why: str) -> None:
    (tmp_path / "logo.bin").write_bytes(data)
    with pytest.raises(ConfigError) as e:
        branding.load(_cfg(tmp_path, tenant='logo = "logo.bin"'), tmp_path / "kept")
    assert e.value.key == "tenants[0].invoice.logo" and why in str(e.value)
    assert not (tmp_path / "kept").exists()


def test_logos_are_kept_once_by_digest_and_privately(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(_png())
    cfg = _cfg(tmp_path, 'logo = "a.png"', 'logo = "a.png"')
    brands = branding.load(cfg, tmp_path / "kept")
    logo = brands.for_tenant("t").logo
    assert logo is not None and (logo.width, logo.height, logo.media_type) == (30, 10, "image/png")
    kept = list((tmp_path / "kept").iterdir())
    assert [p.name for p in kept] == [logo.sha256]
    assert kept[0].stat().st_mode & 0o777 == 0o600
    assert brands.logo_path(logo.sha256) == kept[0]
    assert brands.for_tenant("t").snapshot()["logo"]["sha256"] == logo.sha256


@pytest.mark.parametrize("tenant,key", [
    ('labels = { total = "a\\tb" }', "tenants[0].invoice.labels.total"),
    ('footer = ["1", "2", "3", "4", "5"]', "tenants[0].invoice.footer"),
    ('issuer_address = ["a", "b", "c", "d", "e", "f", "g"]', "tenants[0].invoice.issuer_address"),
    ('labels = { invoice = "' + "W" * 41 + '" }', "tenants[0].invoice.labels.invoice"),
    ('tax_label = "' + "W" * 41 + '"', "tenants[0].invoice.tax_label"),
    ('locale = "ff-Adlm-GN"', "tenants[0].invoice.locale"),  # groups with U+2E41
])
def test_what_would_not_fit_or_print_is_refused(tmp_path: Path, tenant: str, key: str) -> None:
    with pytest.raises(ConfigError) as e:
        branding.load(_cfg(tmp_path, tenant=tenant), None)
    assert e.value.key == key, e.value


def test_an_ideographic_space_is_drawn_by_the_east_asian_font(tmp_path: Path) -> None:
    from casesignd.text import shaping

    branding.load(_cfg(tmp_path, tenant='labels = { total = "合計\\u3000金額" }'), None)
    assert shaping.runs("合計\u3000金額", False) == [("DroidSansFallback", "合計\u3000金額")]


def test_a_16_bit_grey_logo_is_refused(tmp_path: Path) -> None:
    Image.new("I;16", (20, 10)).save(tmp_path / "g16.png", format="PNG")
    with pytest.raises(ConfigError) as e:
        branding.load(_cfg(tmp_path, tenant='logo = "g16.png"'), None)
    assert "8-bit" in str(e.value)


def test_a_tenant_with_settings_of_its_own_defaults_to_the_branded_template(tmp_path: Path) -> None:
    brands = branding.load(_cfg(tmp_path, tenant='locale = "de-DE"'), None)
    assert brands.for_tenant("t").template == "invoice-v4"
    assert brands.for_tenant("nobody").template == "invoice-v3"
    named = branding.load(_cfg(tmp_path, tenant='default_template = "invoice-v3"'), None)
    assert named.for_tenant("t").template == "invoice-v3"
