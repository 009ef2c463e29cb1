"""Download names and headers: what a browser saves a signed document under is always
a plain, bounded ASCII name, whatever a tenant put in its case id."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from casesignd.config import loads
from casesignd.core.errors import ConfigError
from casesignd.core.kiosk_limits import Kiosk
from casesignd.http.common import artifact_response
from casesignd.http.download_headers import (
    MAX_FILENAME_CHARS,
    content_disposition,
    download_filename,
)

_SAFE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")


def _assert_safe(name: str) -> None:
    assert _SAFE.fullmatch(name), name
    assert 0 < len(name) <= MAX_FILENAME_CHARS
    assert not name.startswith(".")


@pytest.mark.parametrize("stem,media_type,expected", [
    ("KIOSK-1-signed", "application/pdf", "KIOSK-1-signed.pdf"),
    ("art_0123abcd", "application/pdf", "art_0123abcd.pdf"),
    ("CASE:2024:7-signed", "application/pdf", "CASE_2024_7-signed.pdf"),
    ("case.v2-signed", "application/pdf", "case.v2-signed.pdf"),
    ("doc.pdf", "application/pdf", "doc.pdf"),
    ("doc.PDF", "application/pdf; charset=binary", "doc.pdf"),
    ("a\"b", "application/pdf", "a_b.pdf"),
    ("evil\r\nSet-Cookie: x=1", "application/pdf", "evil_Set-Cookie_x_1.pdf"),
    ("../../etc/passwd", "application/pdf", "_._etc_passwd.pdf"),
    ("..\\..\\boot.ini", "application/pdf", "_._boot.ini.pdf"),
    (".hidden", "application/pdf", "hidden.pdf"),
    ("...", "application/pdf", "download.pdf"),
    ("", "application/pdf", "download.pdf"),
    (None, "application/pdf", "download.pdf"),
    ("\u2028\u0000\x7f", "application/pdf", "download.pdf"),
    ("-rf", "application/pdf", "rf.pdf"),
    ("Vertrag Müller–Øst 文件", "application/pdf", "Vertrag_Muller_st_.pdf"),
    ("\u202egpj.exe", "application/pdf", "_gpj.exe.pdf"),
    ("CON", "application/pdf", "_CON.pdf"),
    ("nul.tar", "application/pdf", "_nul.tar.pdf"),
    ("report", "text/plain", "report.txt"),
    ("blob", "application/x-unknown", "blob"),
])
def test_download_filename(stem, media_type, expected):
    name = download_filename(stem, media_type)
    assert name == expected
    _assert_safe(name)


@pytest.mark.parametrize("stem", [
    "x" * 1000, "é" * 1000, "文" * 1000, ":" * 1000, "." * 999 + "a", "a" + "." * 999,
    "ab" * 500 + ".pdf",
])
def test_long_names_are_cut_and_keep_their_extension(stem):
    name = download_filename(stem, "application/pdf")
    _assert_safe(name)
    assert name.endswith(".pdf") and not name.endswith("..pdf")


@pytest.mark.parametrize("name", [
    "KIOSK-1-signed.pdf", 'a"b.pdf', "x\r\ny.pdf", "ü.pdf", "../a.pdf", "", "x" * 500,
])
def test_content_disposition_is_an_attachment_with_both_names(name):
    header = content_disposition(name)
    m = re.fullmatch(r'attachment; filename="([^"\\\r\n]*)"; filename\*=UTF-8\'\'(\S*)', header)
    assert m, header
    assert m.group(1) == m.group(2)  # the safe name needs no escape in either form
    _assert_safe(m.group(1))
    assert all(32 <= ord(c) < 127 for c in header)


@pytest.mark.parametrize("source", [b"%PDF-1.7 signed", "file"])
def test_every_artifact_response_is_nosniff_and_an_attachment(tmp_path, source):
    if source == "file":
        path = tmp_path / "a.pdf"
        path.write_bytes(b"%PDF-1.7 signed")
        source = Path(path)
    resp = asyncio.run(artifact_response(source, {"Content-Type": "application/pdf"},
                                         filename="CASE:1-signed"))
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    assert resp.headers["Content-Disposition"] == (
        "attachment; filename=\"CASE_1-signed.pdf\"; filename*=UTF-8''CASE_1-signed.pdf")
    unnamed = asyncio.run(artifact_response(source, {"Content-Type": "application/pdf"}))
    assert unnamed.headers["Content-Disposition"].startswith('attachment; filename="signed.pdf"')


@pytest.mark.parametrize("max_concurrent,per_tenant,tenants,share", [
    (16, 0, 2, 8), (3, 0, 2, 1), (1, 0, 3, 1), (16, 3, 2, 3), (4, 10, 2, 10),
    # A daemon of one tenant gives it everything unless the setting says otherwise.
    (16, 0, 1, 16), (16, 3, 1, 3),
])
def test_a_tenants_kiosk_share(max_concurrent, per_tenant, tenants, share):
    kiosk = Kiosk(max_concurrent=max_concurrent, max_concurrent_per_tenant=per_tenant)
    assert kiosk.tenant_share(tenants) == share


def test_a_negative_tenant_share_names_its_key():
    with pytest.raises(ConfigError) as e:
        loads("[kiosk]\nmax_concurrent_per_tenant = -1\n")
    assert e.value.key == "kiosk.max_concurrent_per_tenant"


@pytest.mark.parametrize("processes,per_tenant,tenants,share", [
    (2, 0, 1, 2), (2, 0, 2, 1), (4, 0, 3, 2), (1, 0, 2, 1), (4, 3, 2, 3), (2, 5, 2, 2),
])
def test_a_tenants_share_of_kiosk_processes(processes, per_tenant, tenants, share):
    kiosk = Kiosk(cpu_processes=processes, cpu_processes_per_tenant=per_tenant)
    assert kiosk.process_share(tenants) == share
