"""The README's picture of the console: a daemon on loopback with a few jobs (a signed
case packet, test jobs that succeed, one that failed, one still running), the console
signed in and one job opened, written as docs/console.png.

    .venv/bin/python scripts/console_screenshot.py [--out docs/console.png]

Needs Playwright for Python and Debian's Chromium (``scripts/setup --system``).
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from playwright.sync_api import sync_playwright  # noqa: E402

from tests.daemon import Daemon, kill_all  # noqa: E402
from tests.helpers_browser import launch, seed  # noqa: E402


def small_png(png: bytes, colors: int = 128) -> bytes:
    """The screenshot in a palette of ``colors``: a page of flat colours and text loses
    nothing a reader sees, and the file stays small enough to keep in the repository."""
    from PIL import Image

    out = io.BytesIO()
    Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=colors).save(
        out, format="PNG", optimize=True)
    return out.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "console.png")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Daemon(Path(tmp) / "state").start()
        try:
            jobs = seed(d, Path(tmp))
            with sync_playwright() as p:
                browser = launch(p)
                page = browser.new_page(viewport={"width": 1280, "height": 900},
                                        device_scale_factor=1)
                page.goto(d.url + "/console")
                page.fill("#token", d.token)
                page.click("#signin-form button[type=submit]")
                page.wait_for_selector("#jobs-table tbody button")
                page.click(f"button[data-job='{jobs['failed']['job_id']}']")
                page.wait_for_selector("#job:not([hidden]) #events-table tbody tr")
                page.wait_for_selector("#phases-chart svg")
                args.out.parent.mkdir(parents=True, exist_ok=True)
                png = page.screenshot(full_page=True)
                browser.close()
            args.out.write_bytes(small_png(png))
        finally:
            kill_all([d])
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
