"""The dashboard over HTTP (WSGI, against the real database): its login,
its pages, its actions and their CSRF guard, escaping, and paging."""

import datetime
import html
import re

import psycopg2
import psycopg2.extras
import pytest
from werkzeug.test import Client

import motir_supervisor.web.dashboard as dashboard
from motir_supervisor import db, get_job
from motir_supervisor.web import server as web
from motir_supervisor.web.dashboard import create_app
from motir_supervisor.web.dashboard.reads import PAGE_SIZE, DashboardStore, EndedPerMinute
from tests.dashboard_client import PASSWORD, credentials, csrf_token, page, post
from tests.helpers import state_of


def insert(sql, **columns):
    columns.setdefault("kind", "noop")
    names = ", ".join(columns)
    marks = ", ".join(["%s"] * len(columns))
    values = [psycopg2.extras.Json(v) if isinstance(v, dict) else v for v in columns.values()]
    return sql.value(f"INSERT INTO job_queue ({names}) VALUES ({marks}) RETURNING id", values)


def failed(sql, **columns):
    columns.setdefault("last_error", "ValueError: boom\nTraceback (most recent call last):"
                                     '\n  File "app.py", line 3, in handler')
    columns.setdefault("max_attempts", 5)  # its last attempt
    return insert(sql, state="failed", attempts=5,
                  finished_at=datetime.datetime.now(datetime.timezone.utc), **columns)


def test_the_dashboard_is_off_without_a_password(database_url):
    store = db.JobStore(database_url)
    client = Client(web.make_app(store))
    try:
        response = client.get("/")
        assert response.status_code == 404
        assert "MOTIR_WEB_PASSWORD" in response.get_data(as_text=True)
        assert client.get("/healthz").status_code == 200
    finally:
        store.close()
    with pytest.raises(ValueError):
        create_app(database_url, "")


def test_login_is_basic_auth_with_the_password_and_any_user(client):
    refused = client.get("/")
    assert refused.status_code == 401
    assert refused.headers["WWW-Authenticate"].startswith('Basic realm="motir-supervisor"')
    assert client.get("/", headers=credentials("wrong")).status_code == 401
    assert client.get("/", headers=credentials(PASSWORD[:-1])).status_code == 401
    assert client.get("/jobs/1", headers=credentials("")).status_code == 401
    assert client.get("/", headers={"Authorization": "Bearer " + PASSWORD}).status_code == 401
    for user in ("admin", "", "someone else"):
        assert client.get("/", headers=credentials(user=user)).status_code == 200
    # Nothing of the dashboard shows before the login, its styles included.
    assert client.get("/static/dashboard.css").status_code == 401
    assert client.get("/healthz").status_code == 200
    assert client.get("/metrics").status_code == 200


def test_a_post_needs_the_token_of_the_session(client, sql):
    job_id = failed(sql)
    token = csrf_token(page(client, f"/jobs/{job_id}"))
    assert post(client, f"/jobs/{job_id}/retry", "").status_code == 400
    assert post(client, f"/jobs/{job_id}/retry", token[:-2] + "xx").status_code == 400
    # The same token sent without the session it belongs to: what a forged
    # cross-site form would send, lacking the cookie (SameSite=Strict).
    stranger = Client(client.application)
    assert post(stranger, f"/jobs/{job_id}/retry", token).status_code == 400
    assert state_of(sql, job_id) == "failed"
    # A GET changes nothing.
    assert client.get(f"/jobs/{job_id}/retry", headers=credentials()).status_code == 405

    done = post(client, f"/jobs/{job_id}/retry", token)
    assert done.status_code == 303
    assert done.headers["Location"].endswith(f"/jobs/{job_id}")
    assert sql.rows("SELECT state, attempts FROM job_queue WHERE id = %s",
                    (job_id,)) == [("pending", 0)]
    # A browser's first try without credentials does not take the message.
    assert client.get(f"/jobs/{job_id}").status_code == 401
    assert "it is pending again with fresh attempts" in page(client, f"/jobs/{job_id}")


def test_the_session_cookie_is_strict_and_hidden_from_scripts(client, sql):
    response = client.get(f"/jobs/{failed(sql)}", headers=credentials())
    cookie = response.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie


def test_everything_a_job_row_holds_is_escaped(client, sql):
    evil = "<script>alert('x')</script>"
    job_id = failed(sql, kind=f"kind{evil}", queue=f"q{evil}", unique_key=f"k{evil}",
                    payload={"html": evil}, checkpoint={"step": evil},
                    last_error=f"ValueError: {evil}\n<img src=x onerror=alert(1)>")
    for path in (f"/jobs/{job_id}", "/jobs", "/jobs?state=failed", "/"):
        text = page(client, path)
        assert "<script>alert" not in text and "<img src=x" not in text, path
    text = html.unescape(page(client, f"/jobs/{job_id}"))
    assert evil in text and "<img src=x onerror=alert(1)>" in text


def test_one_job_shows_its_payload_attempts_error_and_checkpoint(client, sql):
    job_id = failed(sql, kind="send_email", payload={"to": "a@example.com"},
                    checkpoint={"sent": 3}, priority=-2, unique_key="user-7")
    text = html.unescape(page(client, f"/jobs/{job_id}"))
    for expected in ('"to": "a@example.com"', '"sent": 3', "5 of 5", "user-7", ">-2<",
                     "ValueError: boom", 'File "app.py", line 3, in handler',
                     "Retry", "Cancel"):
        assert expected in text, expected
    assert client.get("/jobs/987654", headers=credentials()).status_code == 404
    assert client.get("/jobs/x", headers=credentials()).status_code == 404


def test_a_job_shows_its_error_history_with_each_traceback_folded(client, sql, store):
    evil = "<img src=x onerror=alert(1)>"
    job_id = insert(sql, kind="sync_order", max_attempts=3)
    for attempt, error in enumerate((
            f"ValueError: partner answered 503 {evil}\nTraceback (innermost last):\n"
            f'  File "jobs.py", line 12, in sync_order {evil}\n',
            "worker host:1:2 was killed by signal 9"), start=1):
        store.claim_due_jobs("w", 1, 30, None)
        store.record_outcomes("w", [db.Outcome(job_id, error)])
        sql.rows("UPDATE job_queue SET run_at = now() WHERE id = %s", (job_id,))
    text = page(client, f"/jobs/{job_id}")
    assert "<img src=x" not in text
    history = text[text.index("Error history</h2>"):text.index("Checkpoint</h2>")]
    rows = re.findall(r'<tr data-attempt="(\d)">(.*?)</tr>', history, re.S)
    assert [attempt for attempt, _ in rows] == ["1", "2"]
    first, second = (html.unescape(row) for _, row in rows)
    # The error line is the summary; its traceback unfolds under it.
    assert re.search(r"<summary[^>]*>ValueError: partner answered 503 <img src=x onerror="
                     r"alert\(1\)></summary>\s*<pre[^>]*>ValueError: .*\nTraceback \(innermost"
                     r' last\):\n  File "jobs.py", line 12, in sync_order', first, re.S), first
    assert " UTC</td>" in first
    # A failure without a traceback has nothing to unfold.
    assert "worker host:1:2 was killed by signal 9" in second and "<details>" not in second
    plain = insert(sql, kind="noop")
    assert "Error history</h2>\n<p>None.</p>" in page(client, f"/jobs/{plain}")


@pytest.mark.parametrize("history", ["null", '{"note": "set by hand"}'])
def test_a_job_whose_errors_a_client_set_to_no_list_still_shows(
        client, sql, database_url, history):
    job_id = insert(sql, kind="sync_order")
    sql.rows("UPDATE job_queue SET errors = %s::jsonb WHERE id = %s", (history, job_id))
    assert "Error history</h2>\n<p>None.</p>" in page(client, f"/jobs/{job_id}")
    conn = psycopg2.connect(database_url)
    try:
        assert get_job(conn, job_id).errors == ()
    finally:
        conn.close()


def test_a_succeeded_job_shows_its_output_and_key_escaped(client, sql):
    evil = "<script>alert('out')</script>"
    job_id = insert(sql, kind="sync_account", state="succeeded", concurrency_key="account:42",
                    output={"rows": 1204, "note": evil},
                    finished_at=datetime.datetime.now(datetime.timezone.utc))
    text = page(client, f"/jobs/{job_id}")
    assert "<script>alert" not in text
    text = html.unescape(text)
    assert '"rows": 1204' in text and evil in text and "account:42" in text
    plain = insert(sql, kind="noop")
    assert "Output</h2>\n<p>None.</p>" in page(client, f"/jobs/{plain}")


def test_jobs_are_filtered_and_paged_newest_first(client, sql):
    sql.rows("INSERT INTO job_queue (queue, kind, state, finished_at)"
             " SELECT CASE WHEN g % 2 = 0 THEN 'mail' ELSE 'default' END,"
             "        CASE WHEN g % 3 = 0 THEN 'report' ELSE 'noop' END,"
             "        CASE WHEN g % 5 = 0 THEN 'failed' ELSE 'succeeded' END, now()"
             " FROM generate_series(1, 400) AS g")
    everything = sql.rows("SELECT id, queue, kind, state FROM job_queue ORDER BY id DESC")

    def listed(query):
        ids, path, pages = [], f"/jobs?{query}", 0
        while path:
            text = page(client, path)
            ids += [int(i) for i in re.findall(r'<tr data-job="(\d+)"', text)]
            older = re.search(r'<a rel="next" href="([^"]+)"', text)
            path = html.unescape(older[1]) if older else None
            pages += 1
        return ids, pages

    ids, pages = listed("")
    assert ids == [row[0] for row in everything]
    assert pages == -(-len(everything) // PAGE_SIZE)
    for query, keep in [
        ("queue=mail", lambda r: r[1] == "mail"),
        ("kind=report&state=failed", lambda r: r[2] == "report" and r[3] == "failed"),
        ("queue=default&kind=noop&state=succeeded",
         lambda r: r[1:] == ("default", "noop", "succeeded")),
        ("kind=nosuch", lambda r: False),
    ]:
        assert listed(query)[0] == [r[0] for r in everything if keep(r)], query
    assert client.get("/jobs?state=lost", headers=credentials()).status_code == 400
    assert "No jobs" in page(client, "/jobs?kind=nosuch")


def test_paging_walks_an_index_on_a_large_table(database_url, sql):
    """A page must not read the whole table, whichever filter it has: the
    plans, on 200,000 finished rows among which few failed or run."""
    sql.rows("INSERT INTO job_queue (kind, state, finished_at)"
             " SELECT 'noop', 'succeeded', now() FROM generate_series(1, 200000)")
    failed(sql)
    sql.rows("INSERT INTO job_queue (kind, state, locked_by, lease_expires_at, started_at)"
             " VALUES ('noop', 'running', 'w1', now() + interval '30 s', now())")
    sql.rows("ANALYZE job_queue")
    before = sql.value("SELECT max(id) - 1000 FROM job_queue")
    for filters in ({}, {"state": "failed"}, {"state": "running"}, {"state": "cancelled"},
                    {"state": "succeeded", "before": before}, {"before": before}):
        params = {"queue": None, "kind": None, "state": None, "before": None,
                  "limit": PAGE_SIZE + 1, **filters}
        plan = "\n".join(r[0] for r in sql.rows("EXPLAIN " + db.QUERIES["dashboard_jobs"],
                                                params))
        assert "Seq Scan" not in plan, (filters, plan)


def test_queues_show_depth_oldest_due_pause_and_throughput(client, sql):
    insert(sql, queue="mail", run_at=datetime.datetime.now(datetime.timezone.utc)
           - datetime.timedelta(seconds=90))
    insert(sql, queue="mail", run_at=datetime.datetime.now(datetime.timezone.utc)
           + datetime.timedelta(hours=1))
    failed(sql, queue="mail")
    sql.rows("INSERT INTO job_queue (queue, kind, state, finished_at)"
             " SELECT 'reports', 'noop', 'succeeded', now() FROM generate_series(1, 7)")
    text = page(client, "/")
    mail = re.search(r'<tr data-queue="mail">(.*?)</tr>', text, re.S)[1]
    cells = re.findall(r"<td>(.*?)</td>", mail, re.S)
    numbers = [re.sub(r"<[^>]+>", "", c).strip() for c in cells[1:6]]
    assert numbers == ["1", "1", "0", "1", "0"]  # due, scheduled, running, failed, cancelled
    assert re.search(r"<td>1\.\d min</td>|<td>9\d\.\d s</td>", mail), mail
    assert "1 failed" in mail
    # A queue whose jobs all succeeded shows while they are in the chart.
    reports = re.search(r'<tr data-queue="reports">(.*?)</tr>', text, re.S)[1]
    assert "7 succeeded" in reports

    token = csrf_token(text)
    assert post(client, "/queues/pause", token, queue="mail").status_code == 303
    assert sql.value("SELECT count(*) FROM job_queue_paused WHERE queue = 'mail'") == 1
    text = page(client, "/")
    assert "is paused" in text
    mail = re.search(r'<tr data-queue="mail">(.*?)</tr>', text, re.S)[1]
    assert "Resume" in mail and "paused" in mail
    assert post(client, "/queues/resume", token, queue="mail").status_code == 303
    assert sql.value("SELECT count(*) FROM job_queue_paused") == 0


def test_queues_show_each_limited_kind_with_its_busiest_keys(client, sql, store):
    assert "Flow control" not in page(client, "/")
    store.sync_limits({"sync_account": db.Limits(max_running_per_key=1),
                       "call_partner": db.Limits(max_running=5, rate_limit=100,
                                                 rate_seconds=60.0)})
    sql.rows("INSERT INTO job_queue (kind, concurrency_key)"
             " SELECT 'sync_account', 'account:' || (g % 7) FROM generate_series(1, 30) g")
    store.claim_limited_jobs("c", 3, 30, None)
    text = page(client, "/")
    row = re.search(r'<tr data-kind="sync_account">(.*?)</tr>', text, re.S)[1]
    cells = [re.sub(r"<[^>]+>", " ", c).strip() for c in re.findall(r"<td>(.*?)</td>", row, re.S)]
    assert cells[1:3] == ["3", "27"]  # running, waiting
    assert "at most 1 running per key" in cells[3]
    # The busiest keys first: one running, then the most waiting.
    assert cells[4].startswith("account:1: 1 running, 4 waiting"), cells[4]
    partner = re.search(r'<tr data-kind="call_partner">(.*?)</tr>', text, re.S)[1]
    assert "at most 5 running" in partner and "0 of at most 100 starts in 60s" in partner


def test_a_minute_that_is_over_is_counted_once(database_url, sql):
    store = DashboardStore(database_url)
    ended = EndedPerMinute()
    try:
        now = store.database_now()
        three_ago = now.replace(second=0, microsecond=0) - datetime.timedelta(minutes=3)
        sql.rows("INSERT INTO job_queue (kind, state, finished_at)"
                 " SELECT 'noop', 'succeeded', %s FROM generate_series(1, 4)",
                 (three_ago + datetime.timedelta(seconds=10),))
        sql.rows("INSERT INTO job_queue (kind, state, finished_at)"
                 " VALUES ('noop', 'failed', now())")
        first = ended.count(store)
        assert first[three_ago] == {"default": (4, 0)}
        current = max(first)
        assert first[current] == {"default": (0, 1)}
        # Gone from the table (pruned, say): the settled minute keeps its
        # count, the current one is counted again.
        sql.rows("DELETE FROM job_queue")
        again = ended.count(store)
        assert again[three_ago] == {"default": (4, 0)}
        if max(again) == current:
            assert again[current] == {}
        assert list(again) == sorted(again) and len(again) == 15
    finally:
        store.close()


def test_a_minute_is_not_settled_while_a_transaction_begun_in_it_is_open(database_url, sql):
    """A row stamped with the now() of a transaction still open becomes
    visible later: the minute waits for it. The clock is moved two minutes
    on, so that the current minute counts as over."""
    store = DashboardStore(database_url)
    ended = EndedPerMinute()
    writer = psycopg2.connect(database_url)
    try:
        with writer.cursor() as cur:
            cur.execute("INSERT INTO job_queue (kind, state, finished_at)"
                        " VALUES ('noop', 'succeeded', now()) RETURNING now()")
            stamped = cur.fetchone()[0]
        minute = stamped.replace(second=0, microsecond=0)
        later = stamped + datetime.timedelta(minutes=2)
        assert ended.count(store, later)[minute] == {}
        assert minute not in ended.settled
        writer.commit()
        assert ended.count(store, later)[minute] == {"default": (1, 0)}
        assert ended.settled[minute] == {"default": (1, 0)}
    finally:
        writer.close()
        store.close()


def test_cancel_pending_and_running_jobs(client, sql):
    pending = insert(sql)
    running = insert(sql, state="running", locked_by="host:1:w1",
                     lease_expires_at=datetime.datetime.now(datetime.timezone.utc)
                     + datetime.timedelta(seconds=30), started_at=datetime.datetime.now(
                         datetime.timezone.utc), attempts=1)
    text = page(client, "/running")
    assert "host:1:w1" in text and f'data-job="{running}"' in text
    token = csrf_token(text)
    assert post(client, f"/jobs/{pending}/cancel", token).status_code == 303
    assert post(client, f"/jobs/{running}/cancel", token).status_code == 303
    assert sql.rows("SELECT id, state, cancel_requested FROM job_queue ORDER BY id") == [
        (pending, "cancelled", False), (running, "running", True)]
    assert "its worker asks the handler to stop" in page(client, f"/jobs/{running}")
    assert "cancel asked" in page(client, "/running")
    # Nothing left to cancel, nothing to retry: said, and nothing changes.
    post(client, f"/jobs/{pending}/cancel", token)
    assert "nothing to cancel" in page(client, f"/jobs/{pending}")
    post(client, f"/jobs/{running}/retry", token)
    assert "only failed or cancelled jobs can be retried" in page(client, f"/jobs/{running}")
    assert post(client, "/jobs/987654/cancel", token).status_code == 404


def test_schedules_show_their_next_instant(client, sql):
    sql.rows("INSERT INTO job_queue_schedules (kind, spec, last_instant)"
             " VALUES ('nightly_report', '0 3 * * *', '2026-01-01 03:00+00')")
    text = page(client, "/schedules")
    assert "nightly_report" in text and "0 3 * * *" in text
    assert "2026-01-01 03:00:00.000 UTC" in text
    assert re.search(r"\d{4}-\d\d-\d\d 03:00:00\.000 UTC</td>\s*</tr>", text)


def test_schedules_show_their_time_zone_and_next_local_instant(client, sql):
    sql.rows("INSERT INTO job_queue_schedules (kind, spec, tz, last_instant) VALUES"
             " ('paris_report', '0 9 * * *', 'Europe/Paris', '2026-01-01 08:00+00'),"
             " ('nightly', '0 3 * * *', NULL, '2026-01-01 03:00+00')")
    text = page(client, "/schedules")
    assert re.search(r"<code>0 9 \* \* \*</code></td>\s*<td>Europe/Paris</td>", text)
    assert re.search(r"<code>0 3 \* \* \*</code></td>\s*<td>UTC</td>", text)
    # 09:00 in Paris is 08:00 UTC in winter, 07:00 in summer.
    assert re.search(r"\d{4}-\d\d-\d\d 0[78]:00:00\.000 UTC"
                     r" \(\d{4}-\d\d-\d\d 09:00 CES?T\)</td>", text)


def test_an_unreachable_database_is_one_line_without_the_password():
    client = Client(create_app("postgresql://app:hunter2secret@127.0.0.1:1/motir", PASSWORD))
    response = client.get("/jobs", headers=credentials())
    assert response.status_code == 503
    text = response.get_data(as_text=True)
    assert "hunter2secret" not in text and "app@127.0.0.1:1/motir" in text
    assert re.search(r'<p class="error-message">[^\n<]+</p>', text)


def test_a_read_that_takes_too_long_gives_up(database_url, monkeypatch):
    monkeypatch.setattr(dashboard, "STATEMENT_TIMEOUT", "200ms")
    client = Client(create_app(database_url, PASSWORD))
    blocker = psycopg2.connect(database_url)
    try:
        with blocker.cursor() as cur:
            cur.execute("LOCK TABLE job_queue IN ACCESS EXCLUSIVE MODE")
        response = client.get("/jobs", headers=credentials())
        assert response.status_code == 503
        assert "took longer than 200ms" in response.get_data(as_text=True)
    finally:
        blocker.close()
    assert client.get("/jobs", headers=credentials()).status_code == 200


def test_every_response_forbids_framing_and_caching(client, sql):
    for response in (client.get("/"), client.get("/", headers=credentials()),
                     client.get(f"/jobs/{failed(sql)}", headers=credentials()),
                     client.get("/jobs/987654", headers=credentials())):
        assert response.headers["X-Frame-Options"] == "DENY"
        assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]
        assert "script-src" not in response.headers["Content-Security-Policy"]  # none at all
        assert response.headers["Cache-Control"] == "no-store"
        assert response.headers["X-Content-Type-Options"] == "nosniff"


def test_bad_input_is_a_clear_refusal_that_changes_nothing(client, sql, caplog):
    token = csrf_token(page(client, f"/jobs/{failed(sql)}"))
    for path in ("/jobs?before=99999999999999999999", "/jobs?before=-3", "/jobs?queue=a%00b",
                 "/jobs?kind=%00"):
        response = client.get(path, headers=credentials())
        assert response.status_code == 400, path
    assert client.get(f"/jobs/{2**63}", headers=credentials()).status_code == 404
    assert post(client, f"/jobs/{2**63}/retry", token).status_code == 404
    assert post(client, "/queues/pause", token).status_code == 400
    assert post(client, "/queues/pause", token, queue="a\0b").status_code == 400
    assert sql.value("SELECT count(*) FROM job_queue_paused") == 0
    # A filter is taken as written: a queue named " mail" is not "mail".
    insert(sql, queue="mail")
    assert 'data-job' not in page(client, "/jobs?queue=%20mail")
    # The connection survives a refused value: the next page needs no reconnect.
    assert page(client, "/jobs?queue=mail").count("data-job") == 1
    # Wrong passwords are logged with where they came from, never themselves.
    with caplog.at_level("WARNING", logger="motir_supervisor.dashboard"):
        client.get("/", headers=credentials("guess-1"))
    assert any("wrong password" in r.getMessage() for r in caplog.records)
    assert not any("guess-1" in r.getMessage() for r in caplog.records)


def test_a_schedule_row_that_cannot_be_read_is_shown_as_invalid(client, sql):
    sql.rows("INSERT INTO job_queue_schedules (kind, spec, last_instant) VALUES"
             " ('huge', 'every 1000000000000s', now()), ('odd', 'every abcs', now())")
    text = page(client, "/schedules")
    assert text.count("invalid:") == 2


def test_a_schema_never_migrated_says_to_migrate(pg):
    url = pg.create_database("dashboard_unmigrated")
    try:
        response = Client(create_app(url, PASSWORD)).get("/", headers=credentials())
        assert response.status_code == 503
        assert "run motir-supervisor migrate" in response.get_data(as_text=True)
    finally:
        pg.drop_database("dashboard_unmigrated")
