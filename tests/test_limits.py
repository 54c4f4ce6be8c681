"""Fleet-wide limits per kind (`@job("kind", max_running=N)`): the lane a
row takes, the limited claim, its race with a negative control for each way
of getting it wrong, and two fleets that keep the limit, unique keys and
schedules through worker kills and a rolling restart."""

import os
import random
import signal
import sys
import threading
import time

import psycopg2
import pytest

from motir_supervisor import db
from tests.apps.limited import THROTTLED_MAX_RUNNING
from tests.helpers import Sql, wait_until
from tests.supervisors import ROOT
from tests.test_job_model import race
from tests.test_operations import cli

pytestmark = pytest.mark.integration


def _lanes(sql):
    return dict(sql.rows("SELECT kind, bool_and(limited) FROM job_queue GROUP BY kind"))


# -- the lanes -----------------------------------------------------------------


def test_the_registry_limits_are_written_once_and_reroute_their_kinds_rows(sql, store):
    sql.rows("INSERT INTO job_queue (kind) VALUES ('a'), ('a'), ('b')")
    assert store.sync_limits({"a": 2, "b": None}) == ["a: at most 2 running"]
    assert _lanes(sql) == {"a": True, "b": False}
    assert store.sync_limits({"a": 2, "b": None}) == []  # nothing differs: nothing written
    assert store.sync_limits({"a": 5}) == ["a: at most 5 running"]
    assert store.limits() == {"a": 5}
    # A kind the registry does not name is left alone.
    assert store.sync_limits({"c": 1}) == ["c: at most 1 running"]
    assert store.sync_limits({"a": None}) == ["a: no limit"]
    assert store.limits() == {"c": 1}
    assert _lanes(sql) == {"a": False, "b": False}


def test_a_reroute_waits_for_no_open_transaction_longer_than_its_timeout(database_url, store):
    # A producer's transaction that inserted a row and stays open: routing
    # by the old limits, it would commit after the reroute read the rows.
    producer = psycopg2.connect(database_url)
    producer.cursor().execute("INSERT INTO job_queue (kind) VALUES ('a')")
    with pytest.raises(psycopg2.errors.LockNotAvailable):
        store.sync_limits({"a": 1})
    assert store.limits() == {}  # nothing half-done
    producer.commit()
    producer.close()
    assert store.sync_limits({"a": 1}) == ["a: at most 1 running"]
    assert store.conn.autocommit


def test_a_sync_finding_another_at_it_does_not_wait(database_url, store):
    other = psycopg2.connect(database_url)
    other.cursor().execute("SELECT pg_advisory_xact_lock(hashtext('motir_supervisor.limits_sync'))")
    assert store.sync_limits({"a": 1}) is None
    other.rollback()
    other.close()
    assert store.sync_limits({"a": 1}) == ["a: at most 1 running"]


def test_a_row_takes_its_kinds_lane_however_it_arrives(sql, store):
    store.sync_limits({"a": 1})
    # The client's own value does not count.
    sql.rows("INSERT INTO job_queue (kind, limited) VALUES ('a', false), ('b', true)")
    assert _lanes(sql) == {"a": True, "b": False}
    # A finished row of a kind limited since goes back by its kind's lane.
    old = sql.value("INSERT INTO job_queue (kind, state, finished_at)"
                    " VALUES ('c', 'failed', now()) RETURNING id")
    store.sync_limits({"c": 1})
    assert not sql.value("SELECT limited FROM job_queue WHERE id = %s", (old,))
    store.retry_job(old)
    assert sql.value("SELECT limited FROM job_queue WHERE id = %s", (old,))
    sql.rows("UPDATE job_queue SET kind = 'a' WHERE kind = 'b'")
    assert _lanes(sql) == {"a": True, "c": True}
    # A client's own revive of several finished rows at once, claiming a
    # lane for them, gets the lane of each row's kind.
    revived = sql.rows(
        "INSERT INTO job_queue (kind, state, finished_at) SELECT kind, 'failed', now()"
        " FROM unnest(ARRAY['a', 'd', 'a', 'd']) AS kind RETURNING id")
    sql.rows("UPDATE job_queue SET state = 'pending', limited = kind = 'd'"
             " WHERE id = ANY(%s)", ([row[0] for row in revived],))
    assert _lanes(sql) == {"a": True, "c": True, "d": False}


def test_the_limited_claim_takes_only_free_slots_and_the_regular_claim_none(sql, store):
    store.sync_limits({"a": 2})
    sql.rows("INSERT INTO job_queue (kind, priority) SELECT 'a', -g FROM generate_series(1, 5) g")
    sql.rows("INSERT INTO job_queue (kind) VALUES ('b'), ('b')")
    jobs, _ = store.claim_due_jobs("c", 10, 30, None)
    assert {j.kind for j in jobs} == {"b"}
    first, more = store.claim_limited_jobs("c", 1, 30, None)
    assert len(first) == 1 and more  # a second slot is free
    second, more = store.claim_limited_jobs("c", 10, 30, None)
    assert len(second) == 1 and not more
    # Smaller priorities first, as in the regular claim.
    assert sql.value("SELECT array_agg(priority ORDER BY priority) FROM job_queue WHERE state ="
                     " 'running' AND kind = 'a'") == [-5, -4]
    assert store.claim_limited_jobs("c", 10, 30, None) == ([], False)
    # A kind at its limit is not waited for: its next slot notifies.
    assert store.seconds_until_next_due(None) == (None, True)
    store.record_outcomes("c", [db.Outcome(first[0].id)])
    assert store.seconds_until_next_due(None)[0] < 0
    assert len(store.claim_limited_jobs("c", 10, 30, None)[0]) == 1


def test_a_limited_claim_short_of_room_says_more_could_run(sql, store):
    store.sync_limits({"a": 3})
    sql.rows("INSERT INTO job_queue (kind) SELECT 'a' FROM generate_series(1, 5)")
    jobs, more = store.claim_limited_jobs("c", 2, 30, None)
    assert len(jobs) == 2 and more  # a third slot is free, and a job for it
    jobs, more = store.claim_limited_jobs("c", 2, 30, None)
    assert len(jobs) == 1 and not more  # at the limit now


def test_a_freed_slot_wakes_the_workers(sql, store, database_url):
    store.sync_limits({"a": 1})
    sql.rows("INSERT INTO job_queue (kind) VALUES ('a'), ('a')")
    (job,), _ = store.claim_limited_jobs("c", 1, 30, None)
    listener = psycopg2.connect(database_url)
    listener.autocommit = True
    listener.cursor().execute(f"LISTEN {db.WAKEUP_CHANNEL}")
    store.record_outcomes("c", [db.Outcome(job.id)])
    wait_until(lambda: listener.poll() or listener.notifies, 5, message="a notification")
    # For every worker, whatever queues it serves: the kind's next job may
    # be in any of them.
    assert [n.payload for n in listener.notifies] == [db.ANY_QUEUE]
    listener.notifies.clear()
    store.sync_limits({"a": 2})  # a raised limit frees a slot too
    wait_until(lambda: listener.poll() or listener.notifies, 5, message="a notification")
    assert [n.payload for n in listener.notifies] == [db.ANY_QUEUE]
    listener.close()


def test_a_worker_of_another_queue_takes_the_slot_a_run_freed(
        database_url, executions, start_supervisor):
    # The kind's every slot is taken by runs in queue "b"; the next job
    # waits in "a", served by another fleet with a long poll.
    a = start_supervisor("--workers", "1", "--queue", "a", "--poll-seconds", "30",
                         "--app", "tests.apps.limited")
    b = start_supervisor("--workers", "1", "--concurrency", str(THROTTLED_MAX_RUNNING),
                         "--queue", "b", "--app", "tests.apps.limited")
    a.wait_for_workers(1)
    b.wait_for_workers(1)
    executions.rows("INSERT INTO job_queue (kind, queue, payload)"
                    " SELECT 'throttled', 'b', '{\"sleep\": 1.0}' FROM generate_series(1, %s)",
                    (THROTTLED_MAX_RUNNING,))
    wait_until(lambda: executions.value("SELECT count(*) FROM test_executions")
               == THROTTLED_MAX_RUNNING, 10, message="the runs in b")
    executions.rows("INSERT INTO job_queue (kind, queue) VALUES ('throttled', 'a')")
    wait_until(lambda: executions.value("SELECT count(*) FROM test_executions")
               == THROTTLED_MAX_RUNNING + 1, 10, message="the run in a")
    first_end, last_start = executions.rows(
        "SELECT min(finished_at), max(started_at) FROM test_executions")[0]
    assert first_end is not None and first_end <= last_start
    assert (last_start - first_end).total_seconds() < 2  # not the 30 s poll


def test_the_limited_claim_walks_its_own_index(sql, store):
    store.sync_limits({"a": 3})
    sql.rows("INSERT INTO job_queue (kind) SELECT 'a' FROM generate_series(1, 20000)")
    sql.rows("INSERT INTO job_queue (kind) SELECT 'b' FROM generate_series(1, 20000)")
    sql.rows("ANALYZE job_queue")
    prepare, execute = db.prepared_form("claim_limited_jobs")
    sql.rows("SET plan_cache_mode = force_generic_plan")
    sql.rows(prepare)
    plan = "\n".join(r[0] for r in sql.rows(
        "EXPLAIN " + execute, {"claimant": "c", "limit": 8, "lease_seconds": 30, "queues": None}))
    assert "job_queue_limited" in plan and "Seq Scan on job_queue " not in plan, plan


# -- the race --------------------------------------------------------------------

RACERS = 6
RACE_JOBS = 90
#: The lock taken inside the claim statement, after its snapshot was taken.
IN_STATEMENT = db.QUERIES["claim_limited_jobs"].replace(
    "    FROM job_queue_limits AS l\n), lanes AS (",
    "    FROM job_queue_limits AS l,\n"
    "         LATERAL (SELECT pg_advisory_xact_lock(hashtext('motir_supervisor.limited_claims'))"
    ") AS locked\n), lanes AS (")
assert IN_STATEMENT != db.QUERIES["claim_limited_jobs"]


def _claim_and_hold(url, variant, barrier):
    """Claim limited jobs until none is left, recording each run's span
    strictly inside the time its row was running."""
    if variant != "real":
        db.QUERIES["lock_limited_claims"] = "SELECT 1;"
    if variant == "lock in the statement":
        db.QUERIES["claim_limited_jobs"] = IN_STATEMENT
    claimant = f"racer-{os.getpid()}"
    store = db.JobStore(url, prepare=False)
    log = psycopg2.connect(url)
    log.autocommit = True
    cur = log.cursor()
    store.conn
    barrier.wait()
    while True:
        jobs, _ = store.claim_limited_jobs(claimant, 2, 30, None)
        if not jobs:
            cur.execute("SELECT count(*) FROM job_queue WHERE state = 'pending'")
            if cur.fetchone()[0] == 0:
                break
            time.sleep(0.0005)
            continue
        cur.execute("INSERT INTO test_executions (job_id, attempt, pid)"
                    " SELECT unnest(%s::bigint[]), 1, %s RETURNING execution_id",
                    ([j.id for j in jobs], os.getpid()))
        executions = [row[0] for row in cur.fetchall()]
        time.sleep(random.uniform(0.0005, 0.003))
        cur.execute("UPDATE test_executions SET finished_at = clock_timestamp()"
                    " WHERE execution_id = ANY(%s)", (executions,))
        store.record_outcomes(claimant, [db.Outcome(j.id) for j in jobs])
    store.close()
    log.close()


def most_at_once(spans):
    """The largest number of (start, end) spans open at one instant."""
    events = sorted([(end, -1) for _, end in spans] + [(start, 1) for start, _ in spans])
    most = running = 0
    for _, change in events:
        running += change
        most = max(most, running)
    return most


def _race_limited_claims(sql, url, variant):
    sql.rows("TRUNCATE test_executions")
    sql.rows("DELETE FROM job_queue")
    store = db.JobStore(url)
    store.sync_limits({"a": THROTTLED_MAX_RUNNING})
    store.close()
    sql.rows("INSERT INTO job_queue (kind) SELECT 'a' FROM generate_series(1, %s)", (RACE_JOBS,))
    race(_claim_and_hold, RACERS, url, variant)
    assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'succeeded'") == RACE_JOBS
    return most_at_once(sql.rows("SELECT started_at, finished_at FROM test_executions"))


def test_racing_limited_claims_never_run_more_than_the_limit(executions, database_url):
    most = _race_limited_claims(executions, database_url, "real")
    assert most <= THROTTLED_MAX_RUNNING
    assert most == THROTTLED_MAX_RUNNING  # the race did fill every slot


@pytest.mark.parametrize("variant", ["no lock", "lock in the statement"])
def test_negative_control_a_limited_claim_without_its_lock_first_overshoots(
        executions, database_url, variant):
    for _ in range(5):
        if _race_limited_claims(executions, database_url, variant) > THROTTLED_MAX_RUNNING:
            return
    pytest.fail(f"five races with {variant} and no overshoot: the race cannot catch one")


# -- two fleets ------------------------------------------------------------------

FLEET = ("--workers", "4", "--concurrency", "2",
         "--app", "tests.apps.limited", "--app", "tests.apps.scheduled")
THROTTLED_JOBS = 150
OTHER_JOBS = 300
KEYS = 5


class KeyedProducer(threading.Thread):
    """Enqueues jobs of a few unique keys as fast as it can, as racing web
    requests would: most inserts find the key taken."""

    def __init__(self, url):
        super().__init__(daemon=True)
        self.url = url
        self.tries = 0
        self.done = threading.Event()

    def run(self):
        sql = Sql(self.url)
        while not self.done.is_set():
            sql.rows("INSERT INTO job_queue (kind, unique_key) VALUES ('keyed', %s)"
                     " ON CONFLICT DO NOTHING", (f"k{self.tries % KEYS}",))
            self.tries += 1
            time.sleep(0.002)
        sql.close()


def _spans(sql, kind, killed_at):
    """(start, end) of every run of ``kind``: a run its worker's SIGKILL cut
    short ended at the kill, which the test records once the process is gone."""
    rows = sql.rows("SELECT e.started_at, e.finished_at, e.pid, j.unique_key"
                    " FROM test_executions AS e JOIN job_queue AS j ON j.id = e.job_id"
                    " WHERE j.kind = %s", (kind,))
    spans = []
    for start, end, pid, key in rows:
        if end is None:
            assert pid in killed_at, f"a run of {kind} in pid {pid} never ended"
            end = max(killed_at[pid], start)
        spans.append((start, end, key))
    return spans


TRANSITIONS = """
CREATE TABLE test_transitions (
    job_id  bigint NOT NULL,
    kind    text NOT NULL,
    running boolean NOT NULL,
    at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION test_record_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO test_transitions (job_id, kind, running)
    VALUES (NEW.id, NEW.kind, NEW.state = 'running');
    RETURN NULL;
END;
$$;
CREATE TRIGGER test_record_transition AFTER UPDATE OF state ON job_queue FOR EACH ROW
    WHEN ((OLD.state = 'running') <> (NEW.state = 'running'))
    EXECUTE FUNCTION test_record_transition();
"""


def _running_spans(sql, kind):
    """(start, end, job id) of every time a job of ``kind`` was `running` in the
    database, as a trigger saw its row change: the limit counts those.
    A claim that takes a slot another run freed starts after that run's
    end was committed, so its start is recorded after that end."""
    spans, started = [], {}
    for job_id, running, at in sql.rows(
            "SELECT job_id, running, at FROM test_transitions WHERE kind = %s ORDER BY at",
            (kind,)):
        if running:
            started[job_id] = at
        else:
            spans.append((started.pop(job_id), at, job_id))
    assert not started, f"jobs of {kind} still running: {sorted(started)}"
    return spans


def _kill(sql, pids, killed_at):
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not any(_alive(pid) for pid in pids), 5, message="killed workers gone")
    now = sql.value("SELECT clock_timestamp()")
    killed_at.update({pid: now for pid in pids})


def _succeeded(sql, kind):
    return sql.value("SELECT count(*) FROM job_queue WHERE kind = %s AND state = 'succeeded'",
                     (kind,))


def test_two_fleets_keep_limits_unique_keys_and_schedules_through_kills_and_a_restart(
        database_url, executions, start_supervisor):
    first, second = start_supervisor(*FLEET), start_supervisor(*FLEET)
    first.wait_for_workers(4)
    second.wait_for_workers(4)
    sql = executions
    sql.rows(TRANSITIONS)
    sql.rows("INSERT INTO job_queue (kind) SELECT 'throttled' FROM generate_series(1, %s)",
             (THROTTLED_JOBS,))
    sql.rows("INSERT INTO job_queue (kind) SELECT 'record' FROM generate_series(1, %s)",
             (OTHER_JOBS,))
    producer = KeyedProducer(database_url)
    producer.start()
    killed_at = {}
    try:
        wait_until(lambda: _succeeded(sql, "throttled") >= 40, 30, message="40 throttled")
        # Kill two workers while they run throttled jobs: their slots free
        # when the supervisor settles them.
        running = wait_until(lambda: sql.value(
            "SELECT array_agg(DISTINCT e.pid) FROM test_executions AS e"
            " JOIN job_queue AS j ON j.id = e.job_id"
            " WHERE j.kind = 'throttled' AND e.finished_at IS NULL"), 10,
            message="throttled jobs running")
        _kill(sql, running[:2], killed_at)
        wait_until(lambda: _succeeded(sql, "throttled") >= 90, 30, message="90 throttled")
        third = start_supervisor(*FLEET)  # a rolling restart of the second fleet
        third.wait_for_workers(4)
        second.signal(signal.SIGTERM)
        assert second.wait(30) == 0
        restarted = third.worker_pids()
        wait_until(lambda: _succeeded(sql, "throttled") == THROTTLED_JOBS, 30,
                   message="every throttled job")
    finally:
        producer.done.set()
        producer.join(10)
    wait_until(lambda: sql.value("SELECT count(*) FROM job_queue WHERE state <> 'succeeded'"
                                 " AND kind <> 'tick'") == 0, 30, message="every job done")
    # The new fleet took its share after the restart.
    assert sql.value("SELECT count(*) FROM test_executions WHERE pid = ANY(%s)", (restarted,)) > 0
    # The limit held at every instant, and the fleets used all of it.
    throttled = _spans(sql, "throttled", killed_at)
    assert len(throttled) > THROTTLED_JOBS  # runs the kills cut short ran again
    most = most_at_once([(start, end) for start, end, _ in _running_spans(sql, "throttled")])
    assert most <= THROTTLED_MAX_RUNNING
    assert most == THROTTLED_MAX_RUNNING
    # Other kinds flowed past the limited backlog: all done before it was.
    assert (sql.value("SELECT max(finished_at) FROM job_queue WHERE kind = 'record'")
            < max(start for start, _, _ in throttled))
    # Never two jobs of one unique key running at once (a job's own runs are
    # the claim's business), and most inserts were refused.
    key_of = dict(sql.rows("SELECT id, unique_key FROM job_queue WHERE kind = 'keyed'"))
    keyed = _running_spans(sql, "keyed")
    for key in set(key_of.values()):
        runs = sorted((start, end, job) for start, end, job in keyed if key_of[job] == key)
        assert all(a_end <= b_start or a_job == b_job
                   for (_, a_end, a_job), (b_start, _, b_job) in zip(runs, runs[1:])), key
    rows = sql.value("SELECT count(*) FROM job_queue WHERE kind = 'keyed'")
    assert 0 < rows < producer.tries
    # Every scheduled instant at most once.
    instants = [text for text, in sql.rows(
        "SELECT payload ->> 'scheduled_for' FROM job_queue WHERE kind = 'tick'")]
    assert instants and len(instants) == len(set(instants))
    status = cli(database_url, "status").stdout
    assert f"throttled            0 of at most {THROTTLED_MAX_RUNNING} running" in status


def test_negative_control_two_fleets_with_a_claim_that_counts_without_the_lock_overshoot(
        database_url, executions, start_supervisor):
    entry = [sys.executable, str(ROOT / "tests" / "naive_limit_cli.py")]
    fleets = [start_supervisor(*FLEET, entry=entry) for _ in range(2)]
    for fleet in fleets:
        fleet.wait_for_workers(4)
    executions.rows(TRANSITIONS)
    for _ in range(3):
        executions.rows("TRUNCATE test_transitions")
        executions.rows("INSERT INTO job_queue (kind) SELECT 'throttled'"
                        " FROM generate_series(1, 60)")
        wait_until(lambda: executions.value(
            "SELECT count(*) FROM job_queue WHERE kind = 'throttled' AND state <> 'succeeded'")
            == 0, 30, message="the throttled jobs")
        spans = [(start, end) for start, end, _ in _running_spans(executions, "throttled")]
        if most_at_once(spans) > THROTTLED_MAX_RUNNING:
            return
    pytest.fail("three runs of two naive fleets without an overshoot: the test cannot catch one")


def _alive(pid):
    """Whether the process still runs: its supervisor may reap it (and its
    /proc entry go) at any moment, between a look and a read too."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return "zombie" not in status.read()
    except FileNotFoundError:
        return False
