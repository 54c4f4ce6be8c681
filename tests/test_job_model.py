"""Issue 10's job model, enforced by the database: priorities, unique keys,
snoozed jobs and paused queues, each through a plain INSERT as well as the
command line, and against real supervisors where it concerns them."""

import datetime
import multiprocessing
import os
import re
import signal
import time

import psycopg2
import pytest

from motir_supervisor import db, registry
from motir_supervisor.worker import batching as sizing
from motir_supervisor.config import Config
from motir_supervisor.worker.executor import Executor
from motir_supervisor.worker.batching import RoundTrips
from motir_supervisor.worker.completer import Completer
from motir_supervisor.worker.leases import Leases
from motir_supervisor.worker.producer import Producer
from motir_supervisor.ipc.ledger import Ledger
from motir_supervisor.maintenance.scheduler import Schedule, Scheduler, instant_text
from tests.helpers import wait_until
from tests.test_operations import cli

pytestmark = pytest.mark.integration

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
    assert sql.value("SELECT state FROM job_queue WHERE id = %s", (urgent,)) == "running"
    assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'running'") == 1


@registry.job("model_quick")
def _quick(j):
    return None


@pytest.fixture
def one_slot_holdings(database_url):
    """A worker's own claims, as its main thread makes them, with one slot:
    a claim for it takes a whole batch (--batch-size 512)."""
    config = Config(database_url=database_url, concurrency=1, batch_size=512)
    entries = Ledger(config.ledger_entries)
    executor = Executor(1, entries, retry_base=1, retry_cap=1, wake=lambda: None,
                        save_checkpoint=lambda *a: True, title=lambda text: None)
    store = db.JobStore(database_url)
    held: dict = {}
    round_trips = RoundTrips()
    completer = Completer(config, "model:1", 1, store, executor, entries, held, round_trips)
    leases = Leases(config, "model:1", 1, store, executor, held)
    producer = Producer(config, "model:1", 1, store, executor, entries, held, completer, leases,
                        None, round_trips)
    producer.batch_size = 512

    def write_finished() -> None:
        producer.collect_finished()
        completer.write_finished(now_or_never=True)
    yield producer, write_finished
    signal.setitimer(signal.ITIMER_REAL, 0)  # the lease alarm its claims armed
    store.close()


@pytest.mark.parametrize("urgent", [True, False])
def test_a_job_claimed_ahead_of_a_backlog_keeps_the_next_claims_short(one_slot_holdings, sql,
                                                                      urgent):
    held, write_finished = one_slot_holdings

    def claim_and_run() -> int:
        count, _ = held.claim(1)
        wait_until(lambda: all(run.ended for run in held.held.values()), 10)
        return count

    sql.rows("INSERT INTO job_queue (kind, priority) SELECT 'model_quick', 10"
             " FROM generate_series(1, 3000)")
    assert claim_and_run() == 512
    write_finished()
    if urgent:
        sql.rows("INSERT INTO job_queue (kind, priority) VALUES ('model_quick', -1)")
    assert claim_and_run() == 512
    first = min(held.held.values(), key=lambda run: run.started).claimed.priority
    assert first == (-1 if urgent else 10)
    write_finished()
    # After a job that came ahead of the backlog, more may follow: short
    # claims. Otherwise whole batches, as before.
    size = sizing.URGENT_CLAIM_ROWS if urgent else 512
    assert claim_and_run() == size
    # A short claim is recorded at its own size: the batch size grows
    # from what its few jobs took, not from what 512 would have.
    assert {run.claim.size for run in held.held.values()} == {size}
    assert claim_and_run() == size
    write_finished()
    assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'succeeded'") == (
        1024 + 2 * size)
    assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'running'") == 0


def test_an_urgent_job_with_no_backlog_behind_it_leaves_claims_whole(one_slot_holdings, sql):
    """The watch is for a backlog: a claim that emptied the queue (or a job
    given back) before a more urgent one arrived arms nothing."""
    held, write_finished = one_slot_holdings

    def claim_and_run() -> int:
        count, _ = held.claim(1)
        wait_until(lambda: all(run.ended for run in held.held.values()), 10)
        write_finished()
        return count

    sql.rows("INSERT INTO job_queue (kind, priority) SELECT 'model_quick', 10"
             " FROM generate_series(1, 100)")
    assert claim_and_run() == 100  # the queue ran dry
    held.batch_size = 512
    sql.rows("INSERT INTO job_queue (kind, priority) SELECT 'model_quick', 10"
             " FROM generate_series(1, 3000)")
    sql.rows("INSERT INTO job_queue (kind, priority) VALUES ('model_quick', -1)")
    assert claim_and_run() == 512
    assert not held.watching_for_urgent(time.monotonic())
    assert claim_and_run() == 512


def test_enqueue_takes_a_priority(database_url, sql):
    result = cli(database_url, "enqueue", "x", "--priority", "-3")
    assert result.returncode == 0, result.stderr
    assert sql.value("SELECT priority FROM job_queue WHERE id = %s",
                     (int(result.stdout),)) == -3


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


def race(target, processes, url, naive):
    """Fork ``processes`` copies of ``target(url, naive, barrier)``, released
    together once each has its warm connection; wait for all of them."""
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(processes)
    procs = [ctx.Process(target=target, args=(url, naive, barrier))
             for _ in range(processes)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0


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


def test_enqueue_with_a_taken_key_prints_the_existing_id_and_says_so(database_url):
    first = cli(database_url, "enqueue", "x", "--unique-key", "report:7")
    again = cli(database_url, "enqueue", "x", "--unique-key", "report:7")
    assert first.returncode == again.returncode == 0, again.stderr
    assert again.stdout == first.stdout
    assert "already pending or running" in again.stderr
    assert "nothing was inserted" in again.stderr


def test_a_retry_never_makes_a_second_holder_of_a_key(database_url, sql):
    failed = sql.value("INSERT INTO job_queue (kind, unique_key, state, finished_at)"
                       " VALUES ('x', 'k', 'failed', now()) RETURNING id")
    holder = sql.value("INSERT INTO job_queue (kind, unique_key) VALUES ('x', 'k') RETURNING id")
    result = cli(database_url, "retry", str(failed))
    assert result.returncode == 1
    assert f"job {holder} holds its unique key" in result.stderr
    result = cli(database_url, "retry", "--kind", "x")
    assert result.returncode == 0, result.stderr
    assert "0 failed x jobs are pending again" in result.stdout
    assert sql.value("SELECT state FROM job_queue WHERE id = %s", (failed,)) == "failed"
    # Several failed jobs with one free key: the newest alone is retried.
    sql.rows("UPDATE job_queue SET state = 'failed', finished_at = now() WHERE id = %s",
             (holder,))
    result = cli(database_url, "retry", "--kind", "x")
    assert "1 failed x jobs are pending again" in result.stdout, result.stderr
    assert sql.rows("SELECT id, state FROM job_queue ORDER BY id") == [
        (failed, "failed"), (holder, "pending")]


# -- snooze -----------------------------------------------------------------------


def test_a_snoozed_job_comes_back_later_without_spending_an_attempt(executions,
                                                                    start_supervisor):
    supervisor = start_supervisor("--workers", "1")
    job_id = executions.value(
        "INSERT INTO job_queue (kind, payload, max_attempts)"
        " VALUES ('snooze', '{\"seconds\": 0.3, \"times\": 2}', 1) RETURNING id")
    wait_until(lambda: executions.value("SELECT state FROM job_queue WHERE id = %s",
                                        (job_id,)) == "succeeded", 15)
    runs = executions.rows("SELECT attempt, started_at FROM test_executions"
                           " WHERE job_id = %s ORDER BY started_at", (job_id,))
    # Three runs of a job allowed one attempt: the snoozes spent none.
    assert [attempt for attempt, _ in runs] == [1, 1, 1]
    assert executions.value("SELECT attempts FROM job_queue WHERE id = %s", (job_id,)) == 1
    gaps = [(b - a).total_seconds() for (_, a), (_, b) in zip(runs, runs[1:])]
    assert min(gaps) >= 0.3, gaps
    assert supervisor.output().count(f"job {job_id} snooze attempt 1/1 snoozed") == 2


def test_a_dead_workers_snooze_is_written_by_its_supervisor(sql, store):
    from motir_supervisor.ipc import ledger
    from motir_supervisor.supervisor.rescuer import Rescuer

    job_id = sql.value("INSERT INTO job_queue (kind, last_error) VALUES ('x', 'earlier')"
                       " RETURNING id")
    store.claim_due_jobs("dead:1", 1, 30, None)
    entries = ledger.Ledger(4)
    entry = entries.claim(job_id)
    entries.decide(entry, ledger.SNOOZED, 0.01, retry_in_seconds=60)
    settler = Rescuer(store, "")
    settler.queue("dead:1", "killed", tuple(entries.entries()))
    settler.settle_due()
    state, attempts, wait, error = sql.rows(
        "SELECT state, attempts, extract(epoch FROM run_at - now()), last_error"
        " FROM job_queue WHERE id = %s", (job_id,))[0]
    assert (state, attempts, error) == ("pending", 0, "earlier")
    assert 50 < wait <= 60


# -- pause and resume --------------------------------------------------------------


def test_a_paused_queue_is_not_claimed_until_resumed(database_url, executions,
                                                     start_supervisor):
    assert "is paused" in cli(database_url, "pause", "reports").stdout
    assert "paused already" in cli(database_url, "pause", "reports").stdout
    # A long poll: only the resume's wake-up can start the paused job soon.
    start_supervisor("--workers", "2", "--poll-seconds", "30")
    held = executions.value("INSERT INTO job_queue (kind, queue) VALUES ('record', 'reports')"
                            " RETURNING id")
    other = executions.value("INSERT INTO job_queue (kind) VALUES ('record') RETURNING id")
    wait_until(lambda: executions.value("SELECT state FROM job_queue WHERE id = %s",
                                        (other,)) == "succeeded", 10)
    assert executions.value("SELECT state FROM job_queue WHERE id = %s", (held,)) == "pending"
    assert "paused queues: reports" in cli(database_url, "status").stdout
    assert "running again" in cli(database_url, "resume", "reports").stdout
    wait_until(lambda: executions.value("SELECT state FROM job_queue WHERE id = %s",
                                        (held,)) == "succeeded", 5)
    assert "was not paused" in cli(database_url, "resume", "reports").stdout
    assert "paused queues: none" in cli(database_url, "status").stdout


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


def test_two_fleets_enqueue_every_instant_once_through_kills_and_a_restart(
        database_url, executions, start_supervisor):
    options = ("--workers", "2", "--concurrency", "2", "--app", "tests.apps.scheduled")
    first = start_supervisor(*options)
    second = start_supervisor(*options)
    first.wait_for_workers(2)
    second.wait_for_workers(2)

    def ticks():
        return executions.value("SELECT count(*) FROM job_queue WHERE kind = 'tick'"
                                " AND state = 'succeeded'")
    wait_until(lambda: ticks() >= 3, 10, message="three ticks")
    for pid in first.worker_pids():  # whichever of them schedules
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: ticks() >= 6, 10, message="ticks after the kills")
    third = start_supervisor(*options)  # a rolling restart of the second fleet
    third.wait_for_workers(2)
    second.signal(signal.SIGTERM)
    assert second.wait(30) == 0
    wait_until(lambda: ticks() >= 10, 10, message="ticks after the restart")
    instants = [datetime.datetime.fromisoformat(text) for text, in executions.rows(
        "SELECT payload ->> 'scheduled_for' FROM job_queue WHERE kind = 'tick'"
        " ORDER BY 1")]
    assert len(instants) == len(set(instants)), instants
    # Each instant at most once, and none skipped but when both fleets'
    # schedulers were away at once (a start-up on a busy machine): then the
    # next look enqueues the latest one missed.
    gaps = [(b - a).total_seconds() for a, b in zip(instants, instants[1:])]
    assert set(gaps) <= {1.0, 2.0} and gaps.count(2.0) <= 1, instants
    assert "tick" in cli(database_url, "status").stdout
