"""The dashboard in a real headless browser (Debian's chromium through its
chromedriver), against `motir-supervisor web` and a running supervisor:
log in, find a failed job, unfold its error history, retry it, see it
succeed; see a workflow's graph drawn, retry its failed step, see the rest
of it wait and then run."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request

import port_for
import pytest

from tests.helpers import ROOT, state_of, wait_until

PASSWORD = "dashboard-test-password"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def browser():
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        why = (f"{CHROMIUM} and {CHROMEDRIVER} are needed (Debian: apt-get install chromium"
               " chromium-driver; bin/setup installs them when run as root)")
        if os.environ.get("MOTIR_REQUIRE_BROWSER"):
            pytest.fail(why)
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="motir-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    # Headless as root in a container; and no calls home, which this
    # machine's closed network would refuse one by one.
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--disable-quic", "--no-first-run", "--disable-background-networking",
                     "--disable-component-update", "--disable-sync",
                     f"--user-data-dir={profile}"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.implicitly_wait(0)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def dashboard(database_url):
    port = port_for.select_random()
    process = subprocess.Popen(
        [sys.executable, "-m", "motir_supervisor", "web", "--host", "127.0.0.1",
         "--port", str(port)],
        env={**os.environ, "DATABASE_URL": database_url, "MOTIR_WEB_PASSWORD": PASSWORD},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)

    def listening():
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).status
        except OSError:
            return None
    wait_until(listening, 15, message="the dashboard to listen")
    yield port
    process.send_signal(signal.SIGTERM)
    process.wait(10)


def test_log_in_find_a_failed_job_retry_it_and_see_it_succeed(
        browser, dashboard, start_supervisor, sql, tmp_path):
    from selenium.common.exceptions import NoAlertPresentException, WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    marker = tmp_path / "still-failing"
    marker.touch()
    start_supervisor("--app", "tests.apps.flaky", "--workers", "1")
    job_id = sql.value(
        "INSERT INTO job_queue (kind, queue, payload) VALUES"
        " ('flaky', 'mail', json_build_object('marker', %s::text, 'note', %s::text))"
        " RETURNING id", (str(marker), "<script>alert('payload')</script>"))
    wait_until(lambda: state_of(sql, job_id) == "failed", 20,
               message="the flaky job to fail")

    def text():
        return browser.find_element(By.TAG_NAME, "main").text

    def follow(element):
        """Click, and wait until the page it leads to has replaced this one
        (a click returns before the browser has navigated)."""
        browser.execute_script("window.leftBehind = true")
        element.click()
        # The old document's window carries the mark; the new one does not.
        # While the browser swaps them, a query may fail outright (not as a
        # stale element): that is a poll to repeat.
        WebDriverWait(browser, 10, ignored_exceptions=(WebDriverException,)).until(
            lambda b: b.execute_script(
                "return !window.leftBehind && document.readyState === 'complete'"))

    # Logging in: the browser answers the server's basic-auth challenge
    # with the credentials of the address.
    browser.get(f"http://operator:{PASSWORD}@127.0.0.1:{dashboard}/")
    assert browser.find_element(By.TAG_NAME, "h1").text == "Queues"
    mail = browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="mail"]')
    failed_link = mail.find_element(By.CSS_SELECTOR, "a.failed-count")
    assert failed_link.text == "1"

    follow(failed_link)
    assert browser.find_element(By.TAG_NAME, "h1").text == "Jobs"
    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-job="{job_id}"]')
    assert row.find_element(By.CSS_SELECTOR, ".state").text == "failed"
    assert "is still there" in row.find_element(By.CSS_SELECTOR, ".error-line").text

    follow(row.find_element(By.LINK_TEXT, str(job_id)))
    assert browser.find_element(By.TAG_NAME, "h1").text == f"Job {job_id}: flaky"
    assert "PermanentFailure" in browser.find_element(By.CSS_SELECTOR, ".last-error").text
    # The error history: the attempt's error line, its traceback folded
    # until the line is clicked.
    entry = browser.find_element(By.CSS_SELECTOR, '.error-history tr[data-attempt="1"]')
    assert "PermanentFailure: the marker" in entry.find_element(By.TAG_NAME, "summary").text
    traceback = entry.find_element(By.CSS_SELECTOR, "pre.traceback")
    assert not traceback.is_displayed()
    entry.find_element(By.TAG_NAME, "summary").click()
    assert traceback.is_displayed() and "flaky.py" in traceback.text
    # The payload's markup is shown as text, never run.
    assert "<script>alert('payload')</script>" in browser.find_element(
        By.CSS_SELECTOR, ".payload").text
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text

    marker.unlink()
    follow(browser.find_element(By.CSS_SELECTOR, 'button[name="retry"]'))
    assert "it is pending again with fresh attempts" in browser.find_element(
        By.CSS_SELECTOR, ".flash.done").text

    def state_shown():
        browser.refresh()
        return browser.find_element(By.CSS_SELECTOR, ".state-line .state").text == "succeeded"
    wait_until(state_shown, 20, interval=0.2, message="the retried job to succeed")
    assert sql.rows("SELECT state, attempts FROM job_queue WHERE id = %s",
                    (job_id,)) == [("succeeded", 1)]
    assert "succeeded" in text()
    # Its success keeps the history of the attempt that failed.
    assert len(browser.find_elements(By.CSS_SELECTOR, ".error-history tr[data-attempt]")) == 1

    # Pausing the queue from its page, and resuming it.
    follow(browser.find_element(By.LINK_TEXT, "Queues"))
    follow(browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="mail"] button'))
    assert "is paused" in browser.find_element(By.CSS_SELECTOR, ".flash.done").text
    assert sql.value("SELECT count(*) FROM job_queue_paused WHERE queue = 'mail'") == 1
    follow(browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="mail"] button'))
    assert "running again" in browser.find_element(By.CSS_SELECTOR, ".flash.done").text
    assert sql.value("SELECT count(*) FROM job_queue_paused") == 0


def test_a_workflows_graph_is_drawn_and_retrying_its_failed_step_resumes_it(
        browser, dashboard, start_supervisor, sql, store, tmp_path):
    """A workflow run by a supervisor: fetch, then embed, which fails, then
    publish, which its failure cancels. Its page draws the three steps in
    their states; retrying embed brings publish back to waiting, and once
    embed succeeds publish runs."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def follow(element):
        browser.execute_script("window.leftBehind = true")
        element.click()
        WebDriverWait(browser, 10, ignored_exceptions=(WebDriverException,)).until(
            lambda b: b.execute_script(
                "return !window.leftBehind && document.readyState === 'complete'"))

    def boxes():
        """{step: (state, its box's rectangle)} as the browser drew them."""
        drawn = {}
        for g in browser.find_elements(By.CSS_SELECTOR, "svg.workflow-graph g.step[data-step]"):
            rect = g.find_element(By.TAG_NAME, "rect")
            assert g.find_element(By.CSS_SELECTOR, "text.state").text == g.get_attribute(
                "data-state")
            drawn[g.get_attribute("data-step")] = (g.get_attribute("data-state"), rect.rect)
        return drawn

    marker = tmp_path / "embedding-fails"
    marker.touch()
    absent = str(tmp_path / "absent")
    start_supervisor("--app", "tests.apps.flaky", "--workers", "1")
    steps = [{"ref": "fetch", "kind": "flaky", "queue": "index", "payload": {"marker": absent}},
             {"ref": "embed", "kind": "flaky", "queue": "index", "after": ["fetch"],
              "payload": {"marker": str(marker)}},
             {"ref": "publish", "kind": "flaky", "queue": "index", "after": ["embed"],
              "payload": {"marker": absent}}]
    rows = sql.rows("SELECT workflow_id, ref, job_id FROM job_queue_workflow('index_repo', %s)",
                    (json.dumps(steps),))
    workflow_id, ids = rows[0][0], {ref: job_id for _, ref, job_id in rows}
    wait_until(lambda: state_of(sql, ids["publish"]) == "cancelled", 20,
               message="embed to fail and its failure to cancel publish")
    # Held, so that the retried step waits where the page can show it.
    store.pause_queue("index")

    browser.get(f"http://operator:{PASSWORD}@127.0.0.1:{dashboard}/")
    follow(browser.find_element(By.LINK_TEXT, "Workflows"))
    follow(browser.find_element(By.CSS_SELECTOR, f'tr[data-workflow="{workflow_id}"] a'))
    assert browser.find_element(By.TAG_NAME, "h1").text == f"Workflow {workflow_id}: index_repo"
    drawn = boxes()
    assert {step: state for step, (state, _) in drawn.items()} == {
        "fetch": "succeeded", "embed": "failed", "publish": "cancelled"}
    # A layered drawing: each step below the one it waits for, every box
    # drawn with its state's colours, and an edge between each pair.
    fetch, embed, publish = (drawn[s][1] for s in ("fetch", "embed", "publish"))
    assert fetch["y"] + fetch["height"] < embed["y"]
    assert embed["y"] + embed["height"] < publish["y"]
    assert all(box["width"] > 50 and box["height"] > 20 for box in (fetch, embed, publish))
    failed_box = browser.find_element(By.CSS_SELECTOR, 'g.step[data-step="embed"] rect')
    assert failed_box.value_of_css_property("fill") == "rgb(251, 228, 228)"
    edges = browser.find_elements(By.CSS_SELECTOR, "svg.workflow-graph path.edge")
    assert sorted((e.get_attribute("data-parent"), e.get_attribute("data-child"))
                  for e in edges) == sorted([(str(ids["fetch"]), str(ids["embed"])),
                                             (str(ids["embed"]), str(ids["publish"]))])
    step_of = {str(job_id): step for step, job_id in ids.items()}
    for edge in edges:
        parent = drawn[step_of[edge.get_attribute("data-parent")]][1]
        child = drawn[step_of[edge.get_attribute("data-child")]][1]
        line = edge.rect  # from the parent's bottom edge to the child's top
        assert abs(line["y"] - (parent["y"] + parent["height"])) < 3, (line, parent)
        assert abs(line["y"] + line["height"] - child["y"]) < 3, (line, child)
    embed_row = browser.find_element(By.CSS_SELECTOR, 'table.steps tr[data-step="embed"]')
    assert "is still there" in embed_row.find_element(By.CSS_SELECTOR, ".step-error").text

    follow(embed_row.find_element(By.CSS_SELECTOR, 'button[name="retry-step"]'))
    assert "it is pending again" in browser.find_element(By.CSS_SELECTOR, ".flash.done").text
    assert {step: state for step, (state, _) in boxes().items()} == {
        "fetch": "succeeded", "embed": "pending", "publish": "waiting"}
    assert [state_of(sql, ids[s]) for s in ("embed", "publish")] == ["pending", "waiting"]

    marker.unlink()
    store.resume_queue("index")

    def all_succeeded():
        browser.refresh()
        return {state for state, _ in boxes().values()} == {"succeeded"}
    wait_until(all_succeeded, 20, interval=0.2, message="the rest of the workflow to run")

    # A step's box leads to its job, whose page leads back to the workflow.
    follow(browser.find_element(By.CSS_SELECTOR, 'svg.workflow-graph a g[data-step="publish"]'))
    assert browser.find_element(By.TAG_NAME, "h1").text == f"Job {ids['publish']}: flaky"
    follow(browser.find_element(By.CSS_SELECTOR, "a.workflow-link"))
    assert browser.find_element(By.TAG_NAME, "h1").text == f"Workflow {workflow_id}: index_repo"
