"""The job model against PostgreSQL: the claim's order by priority, unique
keys held by the index through racing inserts, and periodic jobs enqueued
once per instant by racing schedulers, each race with its negative control."""

import datetime
import re

import psycopg2
import pytest

from click.testing import CliRunner

from motir_supervisor import cli, db
from motir_supervisor.maintenance.scheduler import Scheduler
from motir_supervisor.schedule import Schedule, instant_text
from tests.helpers import race, state_of

# -- priorities ----------------------------------------------------------------


def test_a_claim_takes_smaller_priorities_first_then_the_oldest_due(sql, store):
    sql.rows("INSERT INTO job_queue (kind, priority, run_at) VALUES"
             " ('late', 5, now() - interval '1 hour'), ('urgent', -1, now()),"
             " ('normal_new', 0, now()), ('normal_old', 0, now() - interval '1 min')")
    jobs, more_due = store.claim_due_jobs("c", 3, 30, None)
    assert [j.kind for j in jobs] == ["urgent", "normal_old", "normal_new"]
    assert more_due  # the priority-5 job is still due
    assert [j.kind for j in store.claim_due_jobs("c", 3, 30, None)[0]] == ["late"]


def test_a_claim_says_whether_a_due_row_follows_its_last_one(sql, store):
    sql.rows("INSERT INTO job_queue (kind, run_at) SELECT 'x', now() - g * interval '1 s'"
             " FROM generate_series(1, 3) AS g")
    sql.rows("INSERT INTO job_queue (kind, queue) VALUES ('x', 'other')")
    sql.rows("INSERT INTO job_queue (kind, run_at) VALUES ('x', now() + interval '1 hour')")
    # The third due row follows in the same priority...
    assert store.claim_due_jobs("c", 2, 30, ["default"])[1]
    # ...and after it only another queue's row and one not due yet.
    jobs, more_due = store.claim_due_jobs("c", 1, 30, ["default"])
    assert len(jobs) == 1 and not more_due
    # A due row of a greater priority follows the last one claimed, however
    # long it has been due; the row another claimant took does not.
    sql.rows("INSERT INTO job_queue (kind, priority, run_at) VALUES ('x', 0, now()),"
             " ('x', 0, now()), ('x', 3, now() - interval '1 hour')")
    [held] = store.claim_due_jobs("other", 1, 30, ["default"])[0]
    jobs, more_due = store.claim_due_jobs("c", 1, 30, ["default"])
    assert [j.priority for j in jobs] == [0] and jobs[0].id != held.id and more_due
    assert not store.claim_due_jobs("c", 1, 30, ["default"])[1]


def test_a_higher_priority_job_is_the_first_entry_behind_a_deep_backlog(sql, store):
    sql.rows("INSERT INTO job_queue (kind, priority) SELECT 'bulk', 10"
             " FROM generate_series(1, 50000)")
    # Statistics that show the backlog at one priority, as they are when an
    # urgent job arrives behind it.
    sql.rows("ANALYZE job_queue")
    urgent = sql.value("INSERT INTO job_queue (kind, priority) VALUES ('urgent', 0)"
                       " RETURNING id")
    prepare, execute = db.prepared_form("claim_due_jobs")
    sql.rows("SET plan_cache_mode = force_generic_plan")
    sql.rows(prepare)
    params = {"claimant": "c", "limit": 1, "lease_seconds": 30, "queues": None}
    plan = "\n".join(r[0] for r in sql.rows("EXPLAIN (ANALYZE, BUFFERS) " + execute, params))
    # The claim found it through its index, reading a handful of pages, not
    # the 50,000 rows ahead of it in the table.
    assert "job_queue_claim" in plan and "Seq Scan on job_queue " not in plan, plan
    pages = sum(int(n) for n in re.findall(r"shared hit=(\d+)", plan.split("\n")[1]))
    assert pages < 100, plan
    assert state_of(sql, urgent) == "running"
    assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'running'") == 1


# -- unique keys ----------------------------------------------------------------

KEYS = 150
INSERTERS = 4

ON_CONFLICT = ("INSERT INTO job_queue (kind, unique_key) VALUES ('x', %s)"
               " ON CONFLICT DO NOTHING")
# What a unique job is without the index: look, then insert. Two producers
# both look before either inserts, and both insert.
NAIVE_LOOK = ("SELECT EXISTS (SELECT FROM job_queue WHERE unique_key = %s"
              " AND state IN ('pending', 'running'))")
NAIVE_INSERT = "INSERT INTO job_queue (kind, unique_key) VALUES ('x', %s)"


def _insert_keys(url, naive, barrier):
    conn = psycopg2.connect(url)  # opened after the fork, warmed before the race
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("SELECT 1")
    barrier.wait()
    for key in range(KEYS):
        if naive:
            cur.execute(NAIVE_LOOK, (str(key),))
            if not cur.fetchone()[0]:
                cur.execute(NAIVE_INSERT, (str(key),))
        else:
            cur.execute(ON_CONFLICT, (str(key),))
    conn.close()


def _race_inserts(url, naive):
    race(_insert_keys, INSERTERS, url, naive)


def _rows_per_key(sql):
    return dict(sql.rows("SELECT unique_key, count(*) FROM job_queue GROUP BY unique_key"))


def test_racing_inserts_of_one_unique_key_give_one_job(database_url, sql):
    _race_inserts(database_url, naive=False)
    per_key = _rows_per_key(sql)
    assert len(per_key) == KEYS and set(per_key.values()) == {1}


def test_negative_control_a_look_then_insert_without_the_index_gives_duplicates(
        database_url, sql):
    # The same race, with the rule in the producers instead of the database:
    # it must come out with duplicates, or the race above proves nothing.
    sql.rows("DROP INDEX job_queue_unique_key")
    for _ in range(5):
        sql.rows("TRUNCATE job_queue")
        _race_inserts(database_url, naive=True)
        if max(_rows_per_key(sql).values()) > 1:
            return
    pytest.fail("five naive races without a duplicate: the race cannot catch one")


def test_a_key_is_held_while_pending_or_running_and_freed_once_finished(sql, store):
    first, inserted = store.enqueue("x", unique_key="k")
    assert inserted
    assert store.enqueue("x", unique_key="k") == (first, False)
    store.claim_due_jobs("c", 1, 30, None)  # running holds it too
    assert store.enqueue("x", unique_key="k") == (first, False)
    # Another queue has keys of its own.
    assert store.enqueue("x", unique_key="k", queue="other")[1]
    store.record_outcomes("c", [db.Outcome(first)])
    second, inserted = store.enqueue("x", unique_key="k")
    assert inserted and second != first


# -- periodic jobs --------------------------------------------------------------

SCHEDULERS = 4
INSTANTS = 30
EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)

# A scheduler that looks whether the instant was enqueued, then enqueues it.
NAIVE_SEEN = ("SELECT EXISTS (SELECT FROM job_queue WHERE kind = 'tick'"
              " AND payload ->> 'scheduled_for' = %s)")
NAIVE_ENQUEUE = ("INSERT INTO job_queue (kind, payload)"
                 " VALUES ('tick', jsonb_build_object('scheduled_for', %s::text))")


def _schedule_instants(url, naive, barrier):
    store = db.JobStore(url)  # opened after the fork, warmed before the race
    store.database_now()
    scheduler = Scheduler(store, [Schedule.parse("tick", 60)])
    barrier.wait()
    for n in range(INSTANTS):
        now = EPOCH + datetime.timedelta(seconds=60 * n + 1)
        if naive:
            text = instant_text(EPOCH + datetime.timedelta(seconds=60 * n))
            with store.conn.cursor() as cur:
                cur.execute(NAIVE_SEEN, (text,))
                if not cur.fetchone()[0]:
                    cur.execute(NAIVE_ENQUEUE, (text,))
        else:
            scheduler.run_once(now)
    store.close()


def _race_schedulers(url, naive):
    race(_schedule_instants, SCHEDULERS, url, naive)
    return dict(_rows_per_instant_of(url))


def _rows_per_instant_of(url):
    conn = psycopg2.connect(url)
    with conn, conn.cursor() as cur:
        cur.execute("SELECT payload ->> 'scheduled_for', count(*) FROM job_queue"
                    " WHERE kind = 'tick' GROUP BY 1")
        rows = cur.fetchall()
    conn.close()
    return rows


def test_racing_schedulers_enqueue_each_instant_once(database_url):
    per_instant = _race_schedulers(database_url, naive=False)
    # The first instant is the schedule's first sight: it starts with the next.
    expected = {instant_text(EPOCH + datetime.timedelta(seconds=60 * n))
                for n in range(1, INSTANTS)}
    assert set(per_instant) == expected
    assert set(per_instant.values()) == {1}


def test_negative_control_a_look_then_enqueue_scheduler_doubles_instants(database_url, sql):
    for _ in range(5):
        sql.rows("TRUNCATE job_queue")
        if max(_race_schedulers(database_url, naive=True).values()) > 1:
            return
    pytest.fail("five naive races without a doubled instant: the race cannot catch one")


def test_kinds_sharing_an_instant_each_get_their_job(store, sql):
    scheduler = Scheduler(store, [Schedule.parse("tick", 60), Schedule.parse("tock", 60)])
    scheduler.run_once(EPOCH)
    assert len(scheduler.run_once(EPOCH + datetime.timedelta(minutes=1))) == 2
    assert sorted(k for k, in sql.rows("SELECT kind FROM job_queue")) == ["tick", "tock"]


def test_cron_instants_are_utc_whatever_the_sessions_time_zone(database_url, sql):
    store = db.JobStore(database_url)
    store.conn.cursor().execute("SET TIME ZONE 'Asia/Kolkata'")  # UTC+05:30
    Scheduler(store, [Schedule.parse("hourly", "0 * * * *")]).run_once()
    store.close()
    assert sql.value("SELECT extract(minute FROM last_instant AT TIME ZONE 'UTC')"
                     " FROM job_queue_schedules WHERE kind = 'hourly'") == 0


def test_a_scheduler_that_was_away_enqueues_only_the_latest_missed_instant(store, sql):
    scheduler = Scheduler(store, [Schedule.parse("tick", 60)])
    assert scheduler.run_once(EPOCH) == []  # first sight
    [late] = scheduler.run_once(EPOCH + datetime.timedelta(minutes=10, seconds=5))
    assert sql.value("SELECT payload ->> 'scheduled_for' FROM job_queue WHERE id = %s",
                     (late,)) == instant_text(EPOCH + datetime.timedelta(minutes=10))
    # A restarted one (nothing in memory) neither doubles nor skips.
    again = Scheduler(store, [Schedule.parse("tick", 60)])
    assert again.run_once(EPOCH + datetime.timedelta(minutes=10, seconds=30)) == []
    assert len(again.run_once(EPOCH + datetime.timedelta(minutes=11))) == 1


def _scheduled_for(sql, kind):
    return [text for text, in sql.rows(
        "SELECT payload ->> 'scheduled_for' FROM job_queue WHERE kind = %s ORDER BY id",
        (kind,))]


@pytest.mark.parametrize("start, end, expected", [
    # Spring forward: 02:30 does not exist on 29 March; it runs at 03:00 CEST.
    ("2026-03-27 12:00", "2026-03-31 12:00",
     ["2026-03-28T01:30:00+00:00", "2026-03-29T01:00:00+00:00", "2026-03-30T00:30:00+00:00",
      "2026-03-31T00:30:00+00:00"]),
    # Fall back: 02:30 comes twice on 25 October; it runs at the first.
    ("2026-10-23 12:00", "2026-10-27 12:00",
     ["2026-10-24T00:30:00+00:00", "2026-10-25T00:30:00+00:00", "2026-10-26T01:30:00+00:00",
      "2026-10-27T01:30:00+00:00"]),
])
def test_a_zoned_schedule_enqueues_each_local_instant_once_across_a_change_of_offset(
        database_url, sql, start, end, expected):
    """Two supervisors' schedulers look every 5 minutes across Paris's change
    of offset, and a third starts inside it (in the repeated hour, for the
    fall-back): each day's 02:30 is enqueued once, by the wall clock."""
    stores = [db.JobStore(database_url) for _ in range(3)]
    try:
        def scheduler(store):
            return Scheduler(store, [Schedule.parse("paris", "30 2 * * *", tz="Europe/Paris")])
        schedulers = [scheduler(stores[0]), scheduler(stores[1])]
        now = datetime.datetime.fromisoformat(start).replace(tzinfo=datetime.timezone.utc)
        late_start = (now + datetime.timedelta(days=2)).replace(hour=1, minute=20)
        while now <= datetime.datetime.fromisoformat(end).replace(tzinfo=datetime.timezone.utc):
            if now == late_start:
                schedulers.append(scheduler(stores[2]))
            for each in schedulers:
                each.run_once(now)
            now += datetime.timedelta(minutes=5)
        assert len(schedulers) == 3
    finally:
        for store in stores:
            store.close()
    assert _scheduled_for(sql, "paris") == expected
    assert sql.rows("SELECT spec, tz FROM job_queue_schedules WHERE kind = 'paris'") == [
        ("30 2 * * *", "Europe/Paris")]


def test_a_schedule_enqueues_its_payload_on_its_queue_at_its_priority(store, sql):
    digest = Schedule.parse("digest", 60, payload={"list": "weekly", "n": 3}, queue="mail",
                            priority=-2)
    scheduler = Scheduler(store, [digest, Schedule.parse("tick", 60)])
    scheduler.run_once(EPOCH)  # first sight
    assert len(scheduler.run_once(EPOCH + datetime.timedelta(minutes=1))) == 2
    instant = instant_text(EPOCH + datetime.timedelta(minutes=1))
    assert sql.rows("SELECT kind, queue, priority, payload, unique_key FROM job_queue"
                    " ORDER BY kind") == [
        ("digest", "mail", -2, {"list": "weekly", "n": 3, "scheduled_for": instant},
         f"schedule:digest:{instant}"),
        ("tick", "default", 0, {"scheduled_for": instant}, f"schedule:tick:{instant}")]
    # Once per instant on its own queue too.
    again = Scheduler(store, [digest])
    assert again.run_once(EPOCH + datetime.timedelta(minutes=1, seconds=30)) == []
    assert sql.value("SELECT count(*) FROM job_queue WHERE kind = 'digest'") == 1


def test_status_shows_each_schedule_s_time_zone_and_its_next_local_instant(database_url, sql):
    sql.rows("INSERT INTO job_queue_schedules (kind, spec, tz, last_instant) VALUES"
             " ('paris_report', '0 9 * * *', 'Europe/Paris', '2026-01-01 08:00+00'),"
             " ('nightly', '0 3 * * *', NULL, '2026-01-01 03:00+00')")
    result = CliRunner().invoke(cli.main, ["status", "--database-url", database_url])
    assert result.exit_code == 0, result.output
    assert re.search(r"nightly +0 3 \* \* \* +UTC +last 2026-01-01T03:00:00\+00:00,"
                     r" next \d{4}-\d\d-\d\dT03:00:00\+00:00\n", result.output)
    # 09:00 in Paris is 08:00 UTC in winter, 07:00 in summer.
    assert re.search(r"paris_report +0 9 \* \* \* +Europe/Paris +last 2026-01-01T08:00:00"
                     r"\+00:00, next \d{4}-\d\d-\d\dT0[78]:00:00\+00:00"
                     r" \(\d{4}-\d\d-\d\d 09:00 CES?T\)\n", result.output)
