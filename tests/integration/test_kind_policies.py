"""A kind's policy in the database (migrations/0016): what a row leaves
unset is filled from job_queue_kinds, whoever inserts it, and a run whose
worker died or whose lease lapsed waits its kind's delay."""

import psycopg2
import pytest

from motir_supervisor import db, enqueue, enqueue_many, testing
from motir_supervisor.maintenance.policies import kind_policy
from motir_supervisor.policy import DEFAULT_MAX_ATTEMPTS, Policy, Retry

CHARGE = Policy(max_attempts=3, retry=Retry(base=40, cap=80), queue="billing", priority=-2)


def _write(store, **policies):
    return store.sync_kind_policies({kind: kind_policy(p, Retry()) for kind, p in policies.items()})


def _row(sql, job_id):
    return sql.rows("SELECT max_attempts, queue, priority FROM job_queue WHERE id = %s",
                    (job_id,))[0]


def test_a_plain_insert_that_leaves_the_columns_unset_follows_its_kind(store, sql):
    _write(store, charge=CHARGE)
    unset = sql.value("INSERT INTO job_queue (kind) VALUES ('charge') RETURNING id")
    assert _row(sql, unset) == (3, "billing", -2)
    own = sql.value("INSERT INTO job_queue (kind, max_attempts, queue, priority)"
                    " VALUES ('charge', 9, 'default', 0) RETURNING id")
    assert _row(sql, own) == (9, "default", 0)
    # One column set, the others the kind's.
    some = sql.value("INSERT INTO job_queue (kind, max_attempts) VALUES ('charge', 1)"
                     " RETURNING id")
    assert _row(sql, some) == (1, "billing", -2)
    other = sql.value("INSERT INTO job_queue (kind) VALUES ('no_policy') RETURNING id")
    assert _row(sql, other) == (DEFAULT_MAX_ATTEMPTS, "default", 0)


def test_without_the_trigger_a_row_that_leaves_max_attempts_unset_is_refused(store, sql):
    """The negative control: only the trigger fills the column in."""
    _write(store, charge=CHARGE)
    sql.rows("ALTER TABLE job_queue DISABLE TRIGGER job_queue_kind_defaults")
    with pytest.raises(psycopg2.errors.NotNullViolation):
        sql.rows("INSERT INTO job_queue (kind, queue, priority) VALUES ('charge', 'q', 0)")


def test_the_python_api_follows_the_kind_as_a_plain_insert_does(store, sql, database_url):
    _write(store, charge=CHARGE)
    conn = psycopg2.connect(database_url)
    try:
        with conn:
            unset = enqueue(conn, "charge")
            own = enqueue(conn, "charge", queue="default", priority=4, max_attempts=7)
            many = enqueue_many(conn, [{"kind": "charge"}, {"kind": "no_policy"}])
            keyed = enqueue(conn, "charge", unique_key="order:1")
            # The key is unique within the kind's queue, where it landed.
            again = enqueue(conn, "charge", unique_key="order:1")
            elsewhere = enqueue(conn, "charge", unique_key="order:1", queue="default")
    finally:
        conn.close()
    assert _row(sql, unset) == _row(sql, many[0]) == _row(sql, keyed) == (3, "billing", -2)
    assert _row(sql, own) == (7, "default", 4)
    assert _row(sql, many[1]) == (DEFAULT_MAX_ATTEMPTS, "default", 0)
    assert again == keyed and elsewhere != keyed
    assert _row(sql, elsewhere) == (3, "default", -2)


def test_a_kind_s_queue_is_where_its_rows_wait_paused_or_claimed(store, sql):
    _write(store, charge=CHARGE)
    store.sync_limits({"charge": None})
    job_id = sql.value("INSERT INTO job_queue (kind) VALUES ('charge') RETURNING id")
    store.pause_queue("billing")
    assert store.claim_due_jobs("w", 10, 30, None)[0] == []
    store.resume_queue("billing")
    assert store.claim_due_jobs("w", 10, 30, ["default"])[0] == []
    [claimed], _ = store.claim_due_jobs("w", 10, 30, ["billing"])
    assert (claimed.id, claimed.queue, claimed.max_attempts) == (job_id, "billing", 3)


def test_a_limited_kind_with_a_policy_still_takes_the_limited_lane(store, sql):
    _write(store, charge=CHARGE)
    store.sync_limits({"charge": db.Limits(max_running=1)})
    job_id = sql.value("INSERT INTO job_queue (kind) VALUES ('charge') RETURNING id")
    assert sql.rows("SELECT limited, queue FROM job_queue WHERE id = %s", (job_id,)) == [
        (True, "billing")]


def _running(sql, kind, attempts, max_attempts, lease="now() + interval '30 s'"):
    return sql.value(
        "INSERT INTO job_queue (kind, state, locked_by, lease_expires_at, attempts, max_attempts,"
        f" started_at) VALUES (%s, 'running', 'dead', {lease}, %s, %s, now()) RETURNING id",
        (kind, attempts, max_attempts))


def _wait_of(sql, job_id):
    return sql.value("SELECT extract(epoch FROM run_at - now()) FROM job_queue WHERE id = %s",
                     (job_id,))


def test_a_job_whose_worker_died_waits_its_kind_s_delay(store, sql):
    _write(store, charge=CHARGE)
    first = _running(sql, "charge", 1, 3)
    second = _running(sql, "charge", 2, 3)
    last = _running(sql, "charge", 3, 3)
    fleet = _running(sql, "no_policy", 1, 3)
    settled = dict(store.fail_claims_of_dead(["dead"], [first, second, last, fleet], "killed"))
    assert settled == {first: "pending", second: "pending", last: "failed", fleet: "pending"}
    # Retry(base=40, cap=80), jitter over the upper half.
    assert 19 < _wait_of(sql, first) <= 40
    assert 39 < _wait_of(sql, second) <= 80
    # A kind no worker wrote: the fleet's default, 5 s on the first attempt.
    assert 2 < _wait_of(sql, fleet) <= 5


def test_a_job_whose_lease_lapsed_waits_its_kind_s_delay(store, sql):
    _write(store, charge=CHARGE)
    lapsed = _running(sql, "charge", 1, 3, lease="now() - interval '1 s'")
    assert dict(store.expire_stale_leases()) == {lapsed: "pending"}
    assert 19 < _wait_of(sql, lapsed) <= 40


def test_a_retry_function_s_delays_are_written_for_the_rescuer(store, sql):
    _write(store, steps=Policy(max_attempts=3, retry=lambda attempt: 100 * attempt))
    assert store.kind_policies()["steps"].retry_delays == (100.0, 200.0, 300.0)
    beyond = _running(sql, "steps", 5, 9)
    store.fail_claims_of_dead(["dead"], [beyond], "killed")
    assert 299 < _wait_of(sql, beyond) <= 300  # the last delay written, no jitter


def test_a_delay_past_the_calendar_does_not_stop_the_reaper_or_the_rescuer(store, sql):
    # A retry function that grows tenfold an attempt passes the year 294276,
    # where now() + the delay overflows: one such row failed every batch of
    # the reaper it was in, and every settling of its dead worker, with the
    # rows of other kinds beside it left running.
    _write(store, steep=Policy(max_attempts=25, retry=lambda attempt: 60.0 * 10 ** attempt))
    lapsed = _running(sql, "steep", 12, 25, lease="now() - interval '1 s'")
    beside = _running(sql, "no_policy", 1, 3, lease="now() - interval '1 s'")
    assert dict(store.expire_stale_leases()) == {lapsed: "pending", beside: "pending"}
    dead = _running(sql, "steep", 20, 25)
    assert dict(store.fail_claims_of_dead(["dead"], [dead], "killed")) == {dead: "pending"}
    # Far off, and still a time a client can read (a year below 10000).
    assert sql.value("SELECT extract(year FROM max(run_at)) FROM job_queue") < 10000
    # A delay a client left NULL in the list is the fleet's, not the bound.
    sql.rows("UPDATE job_queue_kinds SET retry_delays = '{NULL}' WHERE kind = 'steep'")
    again = _running(sql, "steep", 1, 25)
    store.fail_claims_of_dead(["dead"], [again], "killed")
    assert 2 < _wait_of(sql, again) <= 5


def test_writing_policies_changes_only_what_differs(store):
    assert _write(store, charge=CHARGE, plain=Policy()) == [
        "charge: max_attempts 3, queue billing, priority -2, retry delays 40, 80, 80s",
        "plain: max_attempts 25, queue default, priority 0, retry delays 5, 10, 20, 40, ...s"]
    assert _write(store, charge=CHARGE, plain=Policy()) == []
    assert store.sync_kind_policies({"plain": None}) == ["plain: none"]
    assert set(store.kind_policies()) == {"charge"}


def test_drain_runs_a_row_inserted_after_the_policies_were_written_by_its_kind(store, sql):
    from tests.apps import handlers_under_test  # noqa: F401 - registers helper_flaky

    before, _ = store.enqueue("helper_flaky", {"succeed_on_attempt": 99})
    testing.write_policies(store)
    after, _ = store.enqueue("helper_flaky", {"succeed_on_attempt": 99})
    # helper_flaky allows 5 attempts; the row inserted before its policy was
    # written took the fleet's 25.
    assert [_row(sql, job_id)[0] for job_id in (before, after)] == [DEFAULT_MAX_ATTEMPTS, 5]
    ran = testing.drain(store, retry_base_seconds=0, max_jobs=60)
    assert [o.outcome for o in ran if o.job_id == after] == ["retry"] * 4 + ["failed"]
    assert len([o for o in ran if o.job_id == before]) == DEFAULT_MAX_ATTEMPTS
