"""Tenants' own invoices through the daemon: each tenant's issuer and logo on its own
invoices only; SIGHUP changes what new invoices say, never an accepted one; a
reload with a bad logo is refused whole."""

from __future__ import annotations

import hashlib
import signal
import subprocess
import time
from pathlib import Path

from PIL import Image

from tests.daemon import Daemon, to_toml

BERLIN_TOKEN = "csd_berlin-tenant-token-for-tests-0123456789abcdef"


def _logo(path: Path, colour: tuple[int, int, int]) -> None:
    Image.new("RGB", (90, 30), colour).save(path, format="PNG")


def _invoice(d: Daemon, token: str | bool = True, order_id: str = "EDU-7") -> str:
    r = d.request("POST", "/v1/jobs", {"kind": "render_invoice", "order": {
        "order_id": order_id, "student_name": "Avery Chen", "currency": "EUR",
        "items": [{"description": "Kurs", "quantity": 2, "unit_price": "1234.50"}]}}, auth=token)
    assert r.status == 202, r.body
    return r.json()["job_id"]


def _pdf(d: Daemon, job_id: str, token: str | bool, out: Path) -> tuple[str, tuple[int, ...]]:
    job = d.wait_job(job_id) if token is True else _wait(d, job_id, token)
    assert job["state"] == "ready", job
    out.mkdir()
    pdf = out / "invoice.pdf"
    pdf.write_bytes(d.request("GET", job["result"]["download_url"], auth=False).body)
    text = subprocess.run(["pdftotext", "-enc", "UTF-8", str(pdf), "-"], capture_output=True,
                          text=True, timeout=60, check=True).stdout
    colour: tuple[int, ...] = ()
    subprocess.run(["pdfimages", "-png", str(pdf), str(out / "img")], check=True, timeout=60)
    for png in sorted(out.glob("img-*.png"))[:1]:
        with Image.open(png) as img:
            colour = tuple(img.convert("RGB").getpixel((img.width // 2, img.height // 2)))
    return text, colour


def _wait(d: Daemon, job_id: str, token: str) -> dict:
    deadline = time.monotonic() + 60
    while True:
        job = d.request("GET", f"/v1/jobs/{job_id}", auth=token).json()
        if job["state"] in ("ready", "failed", "canceled") or time.monotonic() > deadline:
            return job
        time.sleep(0.05)


def _reloaded(d: Daemon, event: str, seen: int) -> None:
    deadline = time.monotonic() + 10
    while d.logs().count(event) <= seen:
        assert time.monotonic() < deadline, f"no {event} in the log"
        time.sleep(0.05)


def test_each_tenant_its_own_issuer_and_logo_and_sighup_never_alters_an_accepted_one(
        daemon_factory, tmp_path):
    d = daemon_factory({"workers": {"concurrency": 1}}, start=False)
    _logo(d.dir / "berlin.png", (200, 0, 0))
    berlin = {"default_template": "invoice-v4", "locale": "de-DE",
              "issuer_name": "Schule Berlin", "issuer_tax_ids": ["USt-IdNr. DE111111111"],
              "logo": "berlin.png", "tax_rate": "0.19", "tax_label": "MwSt."}
    d.config["tenants"].append({"name": "berlin", "invoice": berlin,
                                "token_sha256": hashlib.sha256(BERLIN_TOKEN.encode()).hexdigest()})
    d.config_path.write_text(to_toml(d.config))
    d.start()

    # The one worker is busy, so the next invoice waits, accepted, through a reload.
    busy = d.submit({"kind": "test", "behavior": "hang", "hang_s": 3}).json()
    d.wait_job(busy["job_id"], states=("processing",))
    accepted = _invoice(d, BERLIN_TOKEN)
    berlin["issuer_name"] = "Neue Schule"
    _logo(d.dir / "berlin.png", (0, 160, 0))
    d.config_path.write_text(to_toml(d.config))
    seen = d.logs().count("config.reloaded")
    d.signal(signal.SIGHUP)
    _reloaded(d, "config.reloaded", seen)
    after = _invoice(d, BERLIN_TOKEN, "EDU-8")
    other = _invoice(d)  # the default tenant: the daemon's own [invoice]

    text, colour = _pdf(d, accepted, BERLIN_TOKEN, tmp_path / "accepted")
    assert "Schule Berlin" in text and "Neue Schule" not in text and "DE111111111" in text
    assert "2.469,00 €" in text.replace("\u00a0", " ")  # de-DE, as accepted
    assert colour[0] > 150 and colour[1] < 60, colour
    text, colour = _pdf(d, after, BERLIN_TOKEN, tmp_path / "after")
    assert "Neue Schule" in text and colour[1] > 120 and colour[0] < 60, colour
    text, colour = _pdf(d, other, True, tmp_path / "other")
    assert "Schule" not in text and "DE111111111" not in text and colour == ()
    assert "EUR 2,469.00" in text  # invoice-v3, the daemon's default, unchanged
    # Another tenant cannot read berlin's invoice.
    assert d.request("GET", f"/v1/jobs/{accepted}").status == 404

    # A reload whose logo is not an image is refused whole: the settings stay.
    berlin["issuer_name"] = "Falsche Schule"
    (d.dir / "berlin.png").write_bytes(b"not a png")
    d.config_path.write_text(to_toml(d.config))
    seen = d.logs().count("config.reload_refused")
    d.signal(signal.SIGHUP)
    _reloaded(d, "config.reload_refused", seen)
    assert "tenants[1].invoice.logo" in d.logs()
    text, _ = _pdf(d, _invoice(d, BERLIN_TOKEN, "EDU-9"), BERLIN_TOKEN, tmp_path / "refused")
    assert "Neue Schule" in text and "Falsche" not in text
