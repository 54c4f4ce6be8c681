"""Fleet-wide limits per kind (`@job("kind", max_running=N)`) against
PostgreSQL: the limits written from the registry, the lane a row takes
however it arrives, the limited claim and its index, a freed slot's
wake-up, and forked claimants racing limited claims, with a negative
control for each way of getting the lock wrong."""

import threading

import psycopg2
import pytest

from motir_supervisor import db
from tests.apps.limited import THROTTLED_MAX_RUNNING
from tests.helpers import LOCKING_AS_READ, hold_limited_claims, most_at_once, race, wait_until


def _lanes(sql):
    return dict(sql.rows("SELECT kind, bool_and(limited) FROM job_queue GROUP BY kind"))


# -- the lanes -----------------------------------------------------------------


def test_the_registry_limits_are_written_once_and_reroute_their_kinds_rows(sql, store):
    sql.rows("INSERT INTO job_queue (kind) VALUES ('a'), ('a'), ('b')")
    assert store.sync_limits({"a": db.Limits(2), "b": None}) == ["a: at most 2 running"]
    assert _lanes(sql) == {"a": True, "b": False}
    # Nothing differs: nothing is written.
    assert store.sync_limits({"a": db.Limits(2), "b": None}) == []
    assert store.sync_limits({"a": db.Limits(5)}) == ["a: at most 5 running"]
    assert store.limits() == {"a": db.Limits(5)}
    # A kind the registry does not name is left alone.
    assert store.sync_limits({"c": db.Limits(1)}) == ["c: at most 1 running"]
    assert store.sync_limits({"a": None}) == ["a: no limit"]
    assert store.limits() == {"c": db.Limits(1)}
    assert _lanes(sql) == {"a": False, "b": False}


def test_a_reroute_waits_for_no_open_transaction_longer_than_its_timeout(database_url, store):
    # A producer's transaction that inserted a row and stays open: routing
    # by the old limits, it would commit after the reroute read the rows.
    producer = psycopg2.connect(database_url)
    producer.cursor().execute("INSERT INTO job_queue (kind) VALUES ('a')")
    with pytest.raises(psycopg2.errors.LockNotAvailable):
        store.sync_limits({"a": db.Limits(1)})
    assert store.limits() == {}  # nothing half-done
    producer.commit()
    producer.close()
    assert store.sync_limits({"a": db.Limits(1)}) == ["a: at most 1 running"]
    assert store.conn.autocommit


def test_a_sync_finding_another_at_it_does_not_wait(database_url, store):
    other = psycopg2.connect(database_url)
    other.cursor().execute("SELECT pg_advisory_xact_lock(hashtext('motir_supervisor.limits_sync'))")
    assert store.sync_limits({"a": db.Limits(1)}) is None
    other.rollback()
    other.close()
    assert store.sync_limits({"a": db.Limits(1)}) == ["a: at most 1 running"]


def test_a_row_takes_its_kinds_lane_however_it_arrives(sql, store):
    store.sync_limits({"a": db.Limits(1)})
    # The client's own value does not count.
    sql.rows("INSERT INTO job_queue (kind, limited) VALUES ('a', false), ('b', true)")
    assert _lanes(sql) == {"a": True, "b": False}
    # A finished row of a kind limited since goes back by its kind's lane.
    old = sql.value("INSERT INTO job_queue (kind, state, finished_at)"
                    " VALUES ('c', 'failed', now()) RETURNING id")
    store.sync_limits({"c": db.Limits(1)})
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
    store.sync_limits({"a": db.Limits(2)})
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
    store.sync_limits({"a": db.Limits(3)})
    sql.rows("INSERT INTO job_queue (kind) SELECT 'a' FROM generate_series(1, 5)")
    jobs, more = store.claim_limited_jobs("c", 2, 30, None)
    assert len(jobs) == 2 and more  # a third slot is free, and a job for it
    jobs, more = store.claim_limited_jobs("c", 2, 30, None)
    assert len(jobs) == 1 and not more  # at the limit now


def test_a_freed_slot_wakes_the_workers(sql, store, database_url):
    store.sync_limits({"a": db.Limits(1)})
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
    store.sync_limits({"a": db.Limits(2)})  # a raised limit frees a slot too
    wait_until(lambda: listener.poll() or listener.notifies, 5, message="a notification")
    assert [n.payload for n in listener.notifies] == [db.ANY_QUEUE]
    listener.close()


def test_the_limited_claim_walks_its_own_index(sql, store):
    store.sync_limits({"a": db.Limits(3)})
    sql.rows("INSERT INTO job_queue (kind) SELECT 'a' FROM generate_series(1, 20000)")
    sql.rows("INSERT INTO job_queue (kind) SELECT 'b' FROM generate_series(1, 20000)")
    sql.rows("ANALYZE job_queue")
    prepare, execute = db.prepared_form("claim_limited_jobs")
    sql.rows("SET plan_cache_mode = force_generic_plan")
    sql.rows(prepare)
    plan = "\n".join(r[0] for r in sql.rows(
        "EXPLAIN " + execute,
        {"claimant": "c", "limit": 8, "free": 8, "lease_seconds": 30, "queues": None}))
    assert "job_queue_limited" in plan and "Seq Scan on job_queue " not in plan, plan


# -- the race --------------------------------------------------------------------

RACERS = 6
RACE_JOBS = 90
#: The lock taken inside the claim statement, after its snapshot was taken
#: (by a claim that locks rows as it reads them: see LOCKING_AS_READ).
IN_STATEMENT = LOCKING_AS_READ.replace(
    "    FROM job_queue_limits AS l\n), lanes AS (",
    "    FROM job_queue_limits AS l,\n"
    "         LATERAL (SELECT pg_advisory_xact_lock(hashtext('motir_supervisor.limited_claims'))"
    ") AS locked\n), lanes AS (")
assert IN_STATEMENT != db.QUERIES["claim_limited_jobs"]


def _claim_and_hold(url, variant, barrier):
    if variant != "real":
        db.QUERIES["lock_limited_claims"] = "SELECT 1;"
        db.QUERIES["claim_limited_jobs"] = LOCKING_AS_READ
    if variant == "lock in the statement":
        db.QUERIES["claim_limited_jobs"] = IN_STATEMENT
    hold_limited_claims(url, barrier, 2, (0.005, 0.02))


def _race_limited_claims(sql, url, variant):
    sql.rows("TRUNCATE test_executions")
    sql.rows("DELETE FROM job_queue")
    store = db.JobStore(url)
    store.sync_limits({"a": db.Limits(THROTTLED_MAX_RUNNING)})
    store.close()
    sql.rows("INSERT INTO job_queue (kind) SELECT 'a' FROM generate_series(1, %s)", (RACE_JOBS,))
    race(_claim_and_hold, RACERS, url, variant)
    assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'succeeded'") == RACE_JOBS
    return most_at_once(sql.rows("SELECT started_at, finished_at FROM test_executions"))


def test_racing_limited_claims_never_run_more_than_the_limit(executions, database_url):
    # Each race stays within the limit; one of three at least fills every
    # slot, or the race could not have shown an overshoot.
    most = []
    while len(most) < 3 and THROTTLED_MAX_RUNNING not in most:
        most.append(_race_limited_claims(executions, database_url, "real"))
        assert most[-1] <= THROTTLED_MAX_RUNNING
    assert THROTTLED_MAX_RUNNING in most


@pytest.mark.parametrize("variant", ["no lock", "lock in the statement"])
def test_negative_control_a_limited_claim_without_its_lock_first_overshoots(
        executions, database_url, variant):
    for _ in range(5):
        if _race_limited_claims(executions, database_url, variant) > THROTTLED_MAX_RUNNING:
            return
    pytest.fail(f"five races with {variant} and no overshoot: the race cannot catch one")


@pytest.mark.parametrize("locked", [True, False])
def test_two_claims_that_see_different_lanes_need_the_lock(sql, database_url, locked):
    # The claim locks only the rows it takes, so two claims at once that see
    # the same lane meet on the same rows. A row that comes in ahead between
    # their snapshots sends them to different rows: only the lock, taken
    # before the snapshot, keeps the second from counting the first's slot
    # as free. Without it (the negative control) the kind runs two at once.
    store = db.JobStore(database_url)
    store.sync_limits({"a": db.Limits(max_running=1)})
    store.close()
    first_row = sql.value("INSERT INTO job_queue (kind) VALUES ('a') RETURNING id")
    params = {"claimant": "c", "limit": 1, "free": 1, "lease_seconds": 30, "queues": None}
    before = db.QUERIES["lock_limited_claims"] if locked else db.QUERIES["read_committed"]
    claim = before + db.QUERIES["claim_limited_jobs"]
    first, second = psycopg2.connect(database_url), psycopg2.connect(database_url)
    try:
        with first.cursor() as cur:
            cur.execute(claim, params)  # taken, not committed yet
            assert [row[0] for row in cur.fetchall()] == [first_row]
        ahead = sql.value("INSERT INTO job_queue (kind, priority) VALUES ('a', -1) RETURNING id")
        taken: list = []
        claiming = threading.Thread(target=lambda: taken.extend(_claim_on(second, claim, params)))
        claiming.start()
        claiming.join(0.5)
        first.commit()
        claiming.join()
        second.commit()
    finally:
        first.close()
        second.close()
    running = sql.value("SELECT count(*) FROM job_queue WHERE state = 'running'")
    if locked:
        assert taken == [] and running == 1
    else:
        assert taken == [ahead] and running == 2


def _claim_on(conn, claim, params):
    with conn.cursor() as cur:
        cur.execute(claim, params)
        return [row[0] for row in cur.fetchall() if row[0] is not None]
