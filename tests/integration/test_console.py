"""The console (GET /console) against one real daemon: its headers and its reads over
HTTP, then the page itself in Debian's Chromium (Playwright): signing in, the jobs, a
failed job retried, the filters, every request kept to the daemon, the token kept out
of storage, cookies and the URL, and axe-core's accessibility rules.

One daemon and one browser page for the module: the browser tests run in file order
on the same signed-in page, as a person would use it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon import Daemon, to_toml
from tests.helpers_browser import CHROMIUM, launch, seed
from tests.helpers_webhooks import Receiver, endpoint, new_secret


@pytest.fixture(scope="module")
def console(tmp_path_factory) -> Iterator[tuple[Daemon, dict[str, Any]]]:
    work = tmp_path_factory.mktemp("console")
    secret = new_secret()
    # Two receivers: one that takes its deliveries, one whose endpoint is gone (410).
    taking, gone = Receiver(secret), Receiver(secret)
    gone.answer = 410
    d = Daemon(work / "state")
    (d.dir / "hook.secret").write_text(secret + "\n")
    d.config["tenants"][0]["webhooks"] = [
        endpoint("erp", taking.url, str(d.dir / "hook.secret")),
        endpoint("crm", gone.url, str(d.dir / "hook.secret"))]
    d.config_path.write_text(to_toml(d.config))
    d.start()
    try:
        jobs = seed(d, work)
        jobs["receivers"] = {"erp": taking, "crm": gone}
        for name in ("erp", "crm"):
            r = d.submit({"kind": "test", "behavior": "succeed", "case_id": f"HOOK-{name}",
                          "tag": name, "webhook": name})
            assert r.status == 202, r.body
            jobs[f"hooked-{name}"] = d.wait_job(r.json()["job_id"])
        yield d, jobs
    finally:
        if d.proc is not None and d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait(timeout=10)
        taking.close()
        gone.close()


# --- over HTTP -----------------------------------------------------------------------


def test_the_page_and_its_assets_carry_a_strict_policy(console):
    d, _ = console
    page = d.request("GET", "/console", auth=False)
    assert page.status == 200 and page.headers["Content-Type"] == "text/html; charset=utf-8"
    csp = page.headers["Content-Security-Policy"]
    for part in ("default-src 'none'", "script-src 'self'", "connect-src 'self'",
                 "frame-ancestors 'none'"):
        assert part in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    assert page.headers["Referrer-Policy"] == "no-referrer"
    html = page.body.decode()
    assert "<script>" not in html and "http://" not in html and "https://" not in html
    for name, media in (("app.js", "text/javascript"), ("console.css", "text/css")):
        r = d.request("GET", f"/console/{name}", auth=False)
        assert r.status == 200 and r.headers["Content-Type"].startswith(media)
        assert r.headers["Cache-Control"] == "no-cache" and r.headers["ETag"]
        assert r.headers["Content-Security-Policy"] == csp
        again = d.request("GET", f"/console/{name}", auth=False,
                          headers={"If-None-Match": r.headers["ETag"]})
        assert again.status == 304
    for missing in ("nope.js", "..", "%2e%2e%2fconfig.toml"):
        assert d.request("GET", f"/console/{missing}", auth=False).status == 404


def test_the_jobs_filter_by_kind_and_case(console):
    d, jobs = console
    r = d.request("GET", "/v1/jobs?kind=sign_case")
    assert [j["job_id"] for j in r.json()["jobs"]] == [jobs["signed"]["job_id"]]
    r = d.request("GET", "/v1/jobs?case_id=MKT-2026-00051&state=failed")
    assert [j["job_id"] for j in r.json()["jobs"]] == [jobs["failed"]["job_id"]]
    assert d.request("GET", "/v1/jobs?kind=sign_case&case_id=EDU-1040").json()["jobs"] == []
    assert d.request("GET", "/v1/jobs?kind=Bad-Kind").json()["error"]["code"] == "invalid_field"
    assert d.request("GET", "/v1/jobs?case_id=a/b").json()["error"]["code"] == "invalid_case_id"


def test_stats_and_the_audit_head(console):
    d, _ = console
    stats = d.request("GET", "/v1/stats").json()
    assert stats["window_s"] == 3600 and stats["bucket_s"] == 60
    assert stats["now"]["failed"] >= 1 and stats["ended"]["ready"] >= 5
    ran = sum(b["ready"] + b["failed"] for b in stats["buckets"])
    assert ran >= 6 and all(b["total_ms"]["max"] >= b["total_ms"]["mean"] > 0
                            for b in stats["buckets"])
    assert d.request("GET", "/v1/stats?window_s=59").status == 422
    assert d.request("GET", "/v1/stats", auth="not-a-token").status == 401
    head = d.request("GET", "/v1/audit/head").json()
    assert head["ok"] and not head["complete"]
    assert head["head"]["seq"] == head["tail"]["to_seq"] >= head["tenant"]["to_seq"]
    assert head["tenant"]["events"] >= 18  # every event of the seeded jobs


# --- in the browser ------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser_page(console) -> Iterator[tuple[Any, list[str]]]:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is not installed (scripts/setup --system installs it)")
    sync_api = pytest.importorskip("playwright.sync_api")
    requests: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = launch(p)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.on("request", lambda r: requests.append(r.url))
        page.set_default_timeout(15000)
        yield page, requests
        context.close()
        browser.close()


def _rows(page: Any) -> list[dict[str, str]]:
    return page.eval_on_selector_all(
        "#jobs-table tbody tr[data-state]",
        "rows => rows.map(r => ({id: r.querySelector('button').dataset.job,"
        " state: r.dataset.state}))")


def test_signing_in_shows_the_known_jobs(console, browser_page):
    d, jobs = console
    page, _ = browser_page
    page.goto(d.url + "/console")
    page.fill("#token", "not-the-token")
    page.press("#token", "Enter")  # the keyboard signs in, as the button does
    page.wait_for_function("() => document.querySelector('#signin-error').textContent.length > 0")
    assert page.is_hidden("#console")
    page.fill("#token", d.token)
    page.press("#token", "Enter")
    page.wait_for_selector(f"button[data-job='{jobs['signed']['job_id']}']")
    assert page.input_value("#token") == ""
    page.click(f"button[data-job='{jobs['signed']['job_id']}']")
    link = page.wait_for_selector("#job-facts a[download]")
    assert link.get_attribute("href").startswith(f"/v1/artifacts/{jobs['signed']['result']['artifact_id']}?")
    # Where its signature went, from its signed event: the default policy's, unseen.
    assert "page 1, invisible" in page.text_content("#job-facts")
    page.wait_for_selector("#queue-body .tile")
    assert "intact" in page.text_content("#audit-body")


def test_a_failed_job_is_retried_and_shows_its_new_attempt(console, browser_page):
    d, jobs = console
    page, _ = browser_page
    failed = jobs["failed"]["job_id"]
    page.click(f"button[data-job='{failed}']")
    page.wait_for_function(f"() => document.querySelector('#job-h').textContent.includes('{failed}')")
    page.click("#job-actions button:has-text('Retry')")
    # The test kind fails again at once: a second claimed event, attempt 2.
    page.wait_for_function(
        "() => [...document.querySelectorAll('#events-table tbody tr')].some("
        "r => r.cells[2].textContent === 'claimed' && r.cells[3].textContent === '2')")
    assert d.job(failed)["attempts"] == 2
    assert "Retry: done." in page.text_content("#job-status")


def test_the_jobs_filter_by_state(console, browser_page):
    _, jobs = console
    page, _ = browser_page
    page.select_option("#f-state", "failed")
    page.click("#filters button[type=submit]")
    # Each wait names the rows it expects: the list shown before may match a looser one.
    shown = ("(ids) => JSON.stringify([...document.querySelectorAll("
             "'#jobs-table tbody tr[data-state] button')].map(b => b.dataset.job))"
             " === JSON.stringify(ids)")
    page.wait_for_function(shown, arg=[jobs["failed"]["job_id"]])
    assert {r["state"] for r in _rows(page)} == {"failed"}
    page.select_option("#f-state", "")
    page.fill("#f-case", "MKT-2026-00042")
    page.click("#filters button[type=submit]")
    page.wait_for_function(shown, arg=[jobs["signed"]["job_id"]])
    page.click("#f-clear")
    page.wait_for_function("() => document.querySelectorAll('#jobs-table tbody tr[data-state]').length > 5")


def test_webhook_deliveries_show_what_each_came_to_and_one_is_redelivered(console,
                                                                          browser_page):
    _, jobs = console
    page, _ = browser_page
    told, gone = jobs["hooked-erp"]["job_id"], jobs["hooked-crm"]["job_id"]
    row = "#hooks-body tr[data-state='{state}']:has(button[aria-label='Open job {job}'])"
    page.wait_for_selector(row.format(state="delivered", job=told))
    dead = page.wait_for_selector(row.format(state="dead", job=gone))
    cells = dead.eval_on_selector_all("td", "tds => tds.map(t => t.textContent)")
    assert cells[1:5] == ["job.ready", "crm", "dead", "1"], cells
    assert cells[5] == "–" and cells[6] == "HTTP 410"
    # The endpoint is back: sent again on request, and delivered at its second attempt.
    jobs["receivers"]["crm"].answer = 204
    dead.query_selector("button[data-delivery]").click()
    page.wait_for_function("() => document.querySelector('#hooks-status').textContent"
                           ".includes('due again')")
    again = page.wait_for_selector(row.format(state="delivered", job=gone))
    assert again.eval_on_selector_all("td", "tds => tds.map(t => t.textContent)")[4] == "2"
    assert len(jobs["receivers"]["crm"].verified) == 1
    # Beside the job: its deliveries among its facts.
    again.query_selector("button[aria-label^='Open job']").click()
    page.wait_for_function(f"() => document.querySelector('#job-h').textContent.includes('{gone}')")
    page.wait_for_function("() => document.querySelector('#job-facts').textContent"
                           ".includes('job.ready to crm: delivered (2 attempts, HTTP 204)')")


def test_markup_in_an_answer_is_shown_as_text_and_never_run(console, browser_page):
    d, jobs = console
    page, _ = browser_page
    evil = '<img src=x onerror="window.__xss=1">'
    job = {**jobs["signed"], "kind": evil, "case_id": evil + "<script>window.__xss=2</script>"}
    job["result"] = {**job["result"], "download_url": "javascript:window.__xss=3"}

    def answer(route: Any) -> None:
        route.fulfill(status=200, content_type="application/json",
                      body=json.dumps({"jobs": [job], "next_cursor": None}))

    # The browser is handed an answer that no daemon gives: what the page does with it.
    page.route("**/v1/jobs?*", answer)
    page.route(f"**/v1/jobs/{job['job_id']}", lambda r: r.fulfill(
        status=200, content_type="application/json", body=json.dumps(job)))
    try:
        page.click("#filters button[type=submit]")
        page.wait_for_function("() => document.querySelector('#jobs-body').textContent"
                               ".includes('onerror')")
        page.click(f"button[data-job='{job['job_id']}']")
        page.wait_for_function("() => document.querySelector('#job-facts').textContent"
                               ".includes('onerror')")
        assert page.evaluate("window.__xss") is None
        assert page.query_selector_all("#main img, #main script") == []
        assert evil in page.text_content("#jobs-body")
        assert page.query_selector("#job-facts a") is None  # no link to javascript:
    finally:
        page.unroute("**/v1/jobs?*")
        page.unroute(f"**/v1/jobs/{job['job_id']}")
    page.click("#filters button[type=submit]")
    page.wait_for_function("() => !document.querySelector('#jobs-body').textContent"
                           ".includes('onerror')")


def test_no_serious_accessibility_violation(console, browser_page):
    page, _ = browser_page
    from axe_playwright_python.sync_playwright import Axe

    for width in (1280, 390):  # a desk, a phone
        page.set_viewport_size({"width": width, "height": 900})
        results = Axe().run(page, options={"runOnly": ["wcag2a", "wcag2aa", "wcag21aa",
                                                       "best-practice"]})
        bad = [(v["id"], v["impact"], len(v["nodes"])) for v in results.response["violations"]
               if v["impact"] in ("serious", "critical")]
        assert bad == [], json.dumps(bad)
    page.set_viewport_size({"width": 1280, "height": 900})


def test_every_control_is_reached_by_the_keyboard(browser_page):
    page, _ = browser_page
    controls = page.eval_on_selector_all(
        "#main button:not([disabled]), #main input, #main select, #main a[href], "
        "header button",
        "els => els.filter(e => e.offsetParent !== null).map(e => e.id || e.textContent)")
    page.focus("body")
    reached = []
    for _ in range(len(controls) * 3):
        page.keyboard.press("Tab")
        reached.append(page.evaluate("document.activeElement.id "
                                     "|| document.activeElement.textContent"))
    assert set(controls) <= set(reached), set(controls) - set(reached)
    # The running job's clocks change, so the list is redrawn at the next refresh: the
    # button that had the focus keeps it.
    first = page.query_selector("#jobs-body button")
    key = first.get_attribute("data-key")
    first.focus()
    before = page.evaluate_handle("document.querySelector('#jobs-body button')")
    page.wait_for_function("(b) => !b.isConnected", arg=before, timeout=12000)
    assert page.evaluate("document.activeElement.dataset.key") == key


def test_the_token_stays_in_the_page_and_requests_stay_on_the_daemon(console, browser_page):
    d, _ = console
    page, requests = browser_page
    assert d.token not in page.url
    assert d.token not in page.evaluate("JSON.stringify(Object.entries(localStorage))")
    assert d.token not in page.evaluate("JSON.stringify(Object.entries(sessionStorage))")
    assert d.token not in page.evaluate("document.cookie")
    assert page.context.cookies() == []
    assert requests and all(u.startswith(d.url + "/") for u in requests), \
        sorted({u for u in requests if not u.startswith(d.url + "/")})
    page.click("#sign-out")
    page.wait_for_selector("#signin:not([hidden])")
    assert page.is_hidden("#console")
    assert Path(page.url).name == "console"



def test_a_refused_document_shows_its_reason_and_where(console, browser_page):
    # Run last: it adds a sign_case job the tests above do not expect.
    from tests.helpers_corpus import _one_page
    from tests.helpers_ops import case_manifest

    d, _ = console
    page, _ = browser_page
    link = (b"<< /Type /Annot /Subtype /Link /Rect [0 0 10 10] "
            rb"/A << /S /URI /URI (\\\\files\\share) >> >>")
    r = d.submit(case_manifest(d, "MKT-2026-00052",
                               _one_page(page_extra=b"/Annots [6 0 R] ", more=[link])))
    refused = d.wait_job(r.json()["job_id"])
    assert refused["error"]["reason"] == "link_scheme"
    page = page.context.new_page()  # a page of its own: earlier tests route answers
    page.goto(d.url + "/console")
    page.fill("#token", d.token)
    page.press("#token", "Enter")
    page.fill("#f-case", "MKT-2026-00052")
    page.click("#filters button[type=submit]")
    page.click(f"button[data-job='{refused['job_id']}']")
    page.wait_for_function("() => document.querySelector('#job-facts').textContent"
                           ".includes('link_scheme')")
    facts = page.text_content("#job-facts")
    assert "object 6" in facts and refused["error"]["message"] in facts
    assert "files" not in facts  # the link's target is nowhere
