"""The daemon's web console driven in a real Chromium: sign in, live bars, a cut connection, prompts, cancel, trace.

Each page is photographed (``SPARKRUN_SCREENSHOTS`` keeps the pictures; docs/console.md shows them).
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.keys import Keys

from tests.integration.daemon_harness import DaemonProcess, journal_rows, wait_for

pytestmark = pytest.mark.integration
HOSTILE = "<img src=x onerror=alert(1)>"
SECRET = "hunter2-console-secret"


@pytest.fixture
def console(start_daemon) -> DaemonProcess:
    return start_daemon(otel=True)


def _sign_in(browser: Any, daemon: DaemonProcess) -> None:
    browser.open(f"{daemon.url}/ui/")
    browser.wait_for("input[name=token]")
    browser.screenshot("sign-in")
    browser.driver.find_element("css selector", "input[name=token]").send_keys(daemon.token + Keys.ENTER)  # keyboard
    browser.wait_for("h1", text="Jobs")


def _journal_text(daemon: DaemonProcess, job_id: str) -> str:
    return "\n".join(json.dumps(body) for _, body in journal_rows(daemon, job_id))


def test_sign_in_live_bars_and_a_cut_connection_resumed_without_duplicates(browser, console):
    _sign_in(browser, console)
    (cookie,) = [c for c in browser.cookies() if c["name"] == "sparkrun_session"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["value"] != console.token
    job_id = console.submit("console_demo", steps=40, interval=0.15)["job_id"]
    browser.wait_for(f'tr[data-job="{job_id}"]')  # the list refreshed itself
    browser.screenshot("jobs")
    browser.open(f"{console.url}/ui/jobs/{job_id}")
    exact = browser.wait_for("#activities progress")
    first = float(exact.get_attribute("value"))
    browser.wait_until(
        lambda: (
            float(browser.driver.find_element("css selector", "#activities progress").get_attribute("value")) > first
        )
    )
    browser.wait_for("#activities", text="of up to")
    browser.wait_for("#activities .spinner")
    browser.screenshot("job-live")
    browser.set_offline(True)
    browser.wait_for("#stream-state", text="reconnecting")
    browser.set_offline(False)
    browser.wait_for("#stream-state", text="The job ended", timeout=30)
    seqs = [
        int(li.get_attribute("data-seq")) for li in browser.driver.find_elements("css selector", "#events li[data-seq]")
    ]
    assert seqs == sorted(set(seqs)), "an event was shown twice or out of order"
    job = console.job(job_id)
    assert seqs[-1] == job["last_seq"] and len(seqs) == job["last_seq"]
    browser.wait_for("#outcome h2", text="Result")
    text = browser.text_of("#main")
    assert HOSTILE in text  # shown as text ...
    assert not browser.driver.find_elements("css selector", "#main img")  # ... never interpreted
    assert "WARNING" in text and "ERROR" in text  # a word, not a colour alone
    browser.screenshot("job-done")
    # no script error and no policy violation (the cut stream's network error is the test's own doing)
    assert not [m for m in browser.console_errors() if m.source != "network"]
    assert all(console.token not in request.url for request in browser.request_log())
    assert console.token not in browser.page_source()


def test_a_secret_prompt_answered_in_the_page_is_nowhere_afterwards(browser, console):
    _sign_in(browser, console)
    job_id = console.submit("console_demo", steps=2, interval=0.05, ask=True)["job_id"]
    browser.open(f"{console.url}/ui/jobs/{job_id}")
    field = browser.wait_for("#prompts input[type=password]", timeout=30)
    browser.screenshot("prompt")
    field.send_keys(SECRET)
    browser.driver.find_element("css selector", "#prompts form button").click()
    browser.wait_for("#outcome h2", text="Result", timeout=30)
    assert console.job(job_id)["result"]["secret_length"] == len(SECRET)
    assert SECRET not in browser.page_source()
    assert SECRET not in _journal_text(console, job_id)
    assert SECRET not in console.output()
    for request in browser.request_log():
        assert SECRET not in request.url


def test_cancel_trace_deployments_and_sign_out(browser, console):
    _sign_in(browser, console)
    job_id = console.submit("sleep", seconds=60)["job_id"]
    browser.open(f"{console.url}/ui/jobs/{job_id}")
    browser.wait_for("#cancel button").click()
    browser.wait_for("#state", text="cancel", timeout=30)
    wait_for(lambda: console.job(job_id)["state"] == "cancelled", timeout=30, what="the job to be cancelled")
    done = console.submit("console_demo", steps=3, interval=0.05)["job_id"]
    console.wait_state(done)
    browser.open(f"{console.url}/ui/jobs/{done}/trace")
    browser.wait_until(lambda: browser.driver.find_elements("css selector", "#spans tr.span"), timeout=20)
    names = browser.text_of("#spans")
    assert "console_demo" in names and "spark-1" in names
    assert browser.driver.find_elements("css selector", "#spans svg.bar rect")
    browser.screenshot("trace")
    browser.open(f"{console.url}/ui/deployments")
    browser.wait_for("h1", text="Deployments")
    browser.screenshot("deployments")
    browser.driver.find_element("css selector", "form[action='/ui/sign-out'] button").click()
    browser.wait_for("input[name=token]")
    browser.open(f"{console.url}/ui/")
    browser.wait_for("input[name=token]")  # signed out: back to the sign-in page


def test_the_jobs_page_fits_a_phone(phone_browser, console):
    _sign_in(phone_browser, console)
    console.wait_state(console.submit("console_demo", steps=2, interval=0.05)["job_id"])
    phone_browser.open(f"{console.url}/ui/")
    phone_browser.wait_for("#jobs tr")
    width = phone_browser.execute("return document.documentElement.scrollWidth")
    assert width <= 390 + 1, "the page scrolls sideways on a phone"
    phone_browser.screenshot("jobs-phone")


def test_without_a_session_pages_redirect_and_forms_need_their_csrf_token(console):
    with httpx.Client(base_url=console.url, follow_redirects=False, timeout=10) as client:
        page = client.get("/ui/")
        assert page.status_code == 303 and page.headers["location"] == "/ui/sign-in"
        sign_in = client.get("/ui/sign-in")
        policy = sign_in.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy and "frame-ancestors 'none'" in policy
        assert client.get("/v1/jobs").status_code == 401  # no token, no session: the API stays closed
        wrong = client.post("/ui/sign-in", data={"token": "not-the-token"})
        assert wrong.status_code == 403 and "not-the-token" not in wrong.text
        right = client.post("/ui/sign-in", data={"token": console.token})
        assert right.status_code == 303 and console.token not in right.headers.get("set-cookie", "")
        assert re.search(r"HttpOnly", right.headers["set-cookie"]) and "SameSite=strict" in right.headers["set-cookie"]
        job_id = console.submit("sleep", seconds=30)["job_id"]
        forged = client.post(f"/ui/jobs/{job_id}/cancel", data={})
        assert forged.status_code == 403 and "CSRF" in forged.text
        forged = client.post(f"/ui/jobs/{job_id}/cancel", data={"csrf": "guess"})
        assert forged.status_code == 403
        assert console.job(job_id)["state"] in ("queued", "running")
        assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 401  # the cookie never writes to the API
        assert client.get("/v1/jobs").status_code == 200  # ... but it reads it (the page's live streams)
        wait_for(lambda: console.job(job_id)["last_seq"] >= 1, timeout=30, what="the job's first event")
        listed = client.get("/ui/")  # the pages are whole without JavaScript
        assert listed.status_code == 200 and f'data-job="{job_id}"' in listed.text
        shown = client.get(f"/ui/jobs/{job_id}")
        assert 'id="activities"' in shown.text and "test.sleep" in shown.text and 'id="cancel"' in shown.text
        assert "<script>" not in shown.text and 'src="/ui/static/console.js"' in shown.text
    assert console.token not in console.output()
