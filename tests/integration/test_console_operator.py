"""The console's operator part in Debian's Chromium (Playwright): the operator signs in
with the operator's token, sees two tenants' queues, pauses a tenant, retries its
failed jobs in one go, and resumes it; axe-core finds no violation.

One daemon and one browser page for the module, the tests in file order, as a person
would use them."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.daemon import Daemon
from tests.helpers_browser import CHROMIUM, launch
from tests.integration.test_admin_http import OPERATOR_TOKEN, OTHER_TOKEN, with_operator


def _wait(d: Daemon, jid: str, state: str) -> None:
    deadline = time.monotonic() + 60
    while d.job(jid)["state"] != state:
        assert time.monotonic() < deadline, d.job(jid)
        time.sleep(0.05)


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Iterator[tuple[Daemon, list[str]]]:
    d = with_operator(Daemon(tmp_path_factory.mktemp("operator") / "state")).start()
    try:
        failed = [d.submit({"kind": "test", "behavior": "fail_permanent", "tag": f"f{i}"})
                  .json()["job_id"] for i in range(2)]
        for jid in failed:
            _wait(d, jid, "failed")
        # The other tenant's job waits behind a pause of its claims.
        assert d.request("POST", "/v1/admin/pause", {"tenant": "other"},
                         auth=OPERATOR_TOKEN).status == 200
        r = d.request("POST", "/v1/jobs", {"kind": "test", "tag": "waits"}, auth=OTHER_TOKEN)
        assert r.status == 202
        yield d, failed
    finally:
        if d.proc is not None and d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def page(setup) -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is not installed (scripts/setup --system installs it)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = launch(p)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.set_default_timeout(15000)
        yield page
        context.close()
        browser.close()


def test_the_operator_signs_in_and_sees_two_tenants_queues(setup, page):
    d, _ = setup
    page.goto(d.url + "/console")
    page.fill("#token", OPERATOR_TOKEN)
    page.press("#token", "Enter")
    page.wait_for_selector("#op-queues-body tr[data-tenant='default']")
    page.wait_for_selector("#op-queues-body tr[data-tenant='other']")
    assert page.is_hidden("#console") and page.is_visible("#operator")
    other = page.text_content("#op-queues-body tr[data-tenant='other']")
    assert other.startswith("othertest1")  # tenant, kind, one queued
    assert "tenant other, every kind" in page.text_content("#op-pause-list")
    assert d.node in page.text_content("#op-nodes-body")


def test_pause_a_tenant_retry_its_failed_jobs_at_once_and_resume(setup, page):
    d, failed = setup
    page.select_option("#p-tenant", "default")
    page.click("#p-pause")
    page.wait_for_selector("#op-pause-list li[data-tenant='default']")
    assert "Paused: tenant default" in page.text_content("#op-pause-status")
    page.select_option("#d-tenant", "default")
    page.click("#op-dead-filters button[type=submit]")
    for jid in failed:
        page.wait_for_selector(f"#op-dead-body input[data-job='{jid}']")
    page.check("#d-all")
    page.click("#d-retry")
    page.wait_for_function("() => document.querySelector('#op-dead-status').textContent"
                           ".includes('Retry: 2 of 2 done.')")
    for jid in failed:
        assert d.job(jid)["state"] == "queued"  # the tenant is paused: they wait
        assert ("replayed", "operator") in [(e["type"], e["actor"]) for e in d.events(jid)]
    page.select_option("#p-tenant", "default")
    page.click("#p-resume")
    page.wait_for_function("() => document.querySelector('#op-pause-status').textContent"
                           ".includes('Resumed: tenant default')")
    for jid in failed:
        _wait(d, jid, "failed")  # claimed at once, and the test kind fails it again


def test_no_accessibility_violation_in_the_operators_part(page):
    from axe_playwright_python.sync_playwright import Axe

    for width in (1280, 390):  # a desk, a phone
        page.set_viewport_size({"width": width, "height": 900})
        results = Axe().run(page, options={"runOnly": ["wcag2a", "wcag2aa", "wcag21aa",
                                                       "best-practice"]})
        # None at all, of any impact, in the operator's part.
        bad = [(v["id"], v["impact"], len(v["nodes"])) for v in results.response["violations"]]
        assert bad == [], json.dumps(bad)
    page.set_viewport_size({"width": 1280, "height": 900})
