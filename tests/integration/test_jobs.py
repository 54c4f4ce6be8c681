"""The Python API that looks at and steers jobs, against real transactions:
get_job, find_jobs, cancel_job and retry_job on the caller's connection and
in its transaction (a rollback leaves no cancel or retry behind), the
command line's semantics for cancel and retry, and the duplicate flag of
enqueue."""

import dataclasses
import datetime

import psycopg2
import psycopg2.extensions
import psycopg2.extras
import pytest

from motir_supervisor import db
from motir_supervisor import (Enqueued, JobNotFound, JobRow, JobState, UniqueKeyHeld, cancel_job,
                              enqueue, enqueue_many, find_jobs, get_job, retry_job)
from tests.helpers import state_of

IN_TRANSACTION = psycopg2.extensions.TRANSACTION_STATUS_INTRANS


@pytest.fixture
def conn(database_url):
    """A connection as a web request holds it: not in autocommit."""
    connection = psycopg2.connect(database_url)
    yield connection
    connection.close()


def insert(sql, kind="x", **columns):
    columns = {"kind": kind, **columns}
    names = ", ".join(columns)
    marks = ", ".join(["%s"] * len(columns))
    return sql.value(f"INSERT INTO job_queue ({names}) VALUES ({marks}) RETURNING id",
                     list(columns.values()))


def claim(store, count=1):
    """Claim due jobs as a worker would: they are running, leased to us."""
    claimed, _ = store.claim_due_jobs("test-worker", count, 60.0, None)
    return [job.id for job in claimed]


# -- get_job ---------------------------------------------------------------------


def test_get_job_reads_the_row_in_the_callers_transaction(conn, sql):
    run_at = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    job_id = enqueue(conn, "send_email", {"to": "a@b.c"}, queue="mail", priority=-3,
                     run_at=run_at, max_attempts=7, unique_key="u", concurrency_key="c")
    job = get_job(conn, job_id)  # not committed: only this transaction sees it
    assert sql.value("SELECT count(*) FROM job_queue") == 0
    assert isinstance(job, JobRow)
    assert (job.id, job.kind, job.queue, job.state, job.payload, job.priority, job.attempts,
            job.max_attempts, job.run_at, job.started_at, job.finished_at, job.last_error,
            job.output, job.errors, job.unique_key, job.concurrency_key,
            job.cancel_requested) == (
        job_id, "send_email", "mail", JobState.PENDING, {"to": "a@b.c"}, -3, 0, 7, run_at,
        None, None, None, None, (), "u", "c", False)
    assert job.state is JobState.PENDING and job.state == "pending"
    assert job.created_at.tzinfo is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.state = JobState.FAILED
    assert conn.info.transaction_status == IN_TRANSACTION and not conn.autocommit


def test_get_job_of_an_unknown_id_is_none(conn):
    assert get_job(conn, 12345) is None


def test_get_job_reads_what_a_run_left(conn, sql):
    job_id = insert(sql, "report", state="succeeded", attempts=2, output='{"pages": 3}',
                    last_error="ValueError: first try", finished_at=datetime.datetime.now(
                        datetime.timezone.utc))
    job = get_job(conn, job_id)
    assert (job.state, job.attempts, job.output, job.last_error) == (
        JobState.SUCCEEDED, 2, {"pages": 3}, "ValueError: first try")
    assert job.finished_at is not None


def test_a_job_s_error_history_comes_with_it(conn, sql, store):
    job_id = insert(sql, max_attempts=3)
    assert get_job(conn, job_id).errors == ()  # NULL reads as none
    conn.rollback()
    [claimed], _ = store.claim_due_jobs("w", 1, 30, None)
    store.record_outcomes("w", [db.Outcome(claimed.id, "ValueError: boom", 0.0)])
    [entry] = get_job(conn, job_id).errors
    assert (entry["attempt"], entry["error"]) == (1, "ValueError: boom")


def test_a_connection_that_makes_dict_rows_still_gets_job_rows(database_url, sql):
    job_id = insert(sql)
    connection = psycopg2.connect(database_url, cursor_factory=psycopg2.extras.RealDictCursor)
    assert get_job(connection, job_id).id == job_id
    assert [job.id for job in find_jobs(connection)] == [job_id]
    assert cancel_job(connection, job_id).state is JobState.CANCELLED
    connection.close()


def test_the_states_are_the_schemas(sql):
    [check] = sql.rows("SELECT pg_get_constraintdef(oid) FROM pg_constraint"
                       " WHERE conrelid = 'job_queue'::regclass AND contype = 'c'"
                       " AND pg_get_constraintdef(oid) LIKE '%%state = ANY%%'")
    assert sorted(JobState) == sorted(
        word.split("'")[1] for word in check[0].split("ARRAY[")[1].split(","))


def test_bad_arguments_raise_before_anything_is_sent(conn):
    for call in (lambda: get_job(conn, "7"), lambda: get_job(conn, True),
                 lambda: find_jobs(conn, kind=[1]), lambda: find_jobs(conn, limit=2.0),
                 lambda: get_job(object(), 1)):
        with pytest.raises(TypeError):
            call()
    for call in (lambda: find_jobs(conn, state="done"), lambda: find_jobs(conn, limit=0),
                 lambda: find_jobs(conn, order="random")):
        with pytest.raises(ValueError):
            call()
    assert conn.info.transaction_status == psycopg2.extensions.TRANSACTION_STATUS_IDLE


# -- find_jobs -------------------------------------------------------------------


def test_find_jobs_filters_by_kind_state_and_queue(conn, sql, store):
    a1 = insert(sql, "a")
    b1 = insert(sql, "b", queue="mail")
    a2 = insert(sql, "a", state="failed", finished_at=datetime.datetime.now(
        datetime.timezone.utc))
    c1 = insert(sql, "c", queue="mail", state="cancelled", finished_at=datetime.datetime.now(
        datetime.timezone.utc))
    a3 = enqueue(conn, "a", queue="mail")  # this transaction's own, not committed

    def ids(**filters):
        return [job.id for job in find_jobs(conn, **filters)]

    assert ids() == [a3, c1, a2, b1, a1]
    assert ids(order="oldest") == [a1, b1, a2, c1, a3]
    assert ids(kind="a") == [a3, a2, a1]
    assert ids(kind=["b", "c"]) == [c1, b1]
    assert ids(state=JobState.FAILED) == [a2]
    assert ids(state="pending") == [a3, b1, a1]
    assert ids(state=[JobState.FAILED, JobState.CANCELLED]) == [c1, a2]
    assert ids(queue="mail") == [a3, c1, b1]
    assert ids(kind="a", queue="mail", state="pending") == [a3]
    assert ids(kind="a", limit=2) == [a3, a2]
    assert ids(kind="a", limit=2, order="oldest") == [a1, a2]
    assert ids(kind="nothing") == [] and ids(kind=[]) == []
    assert all(isinstance(job, JobRow) for job in find_jobs(conn))
    conn.rollback()
    assert ids(queue="mail") == [c1, b1]


# -- cancel_job ------------------------------------------------------------------


def test_cancel_job_cancels_a_pending_or_failed_job_in_the_callers_transaction(conn, sql):
    pending = insert(sql)
    failed = insert(sql, state="failed", finished_at=datetime.datetime.now(
        datetime.timezone.utc))
    for job_id in (pending, failed):
        job = cancel_job(conn, job_id)
        assert (job.id, job.state, job.cancel_requested) == (job_id, JobState.CANCELLED, False)
        assert job.finished_at is not None
    assert [state_of(sql, pending), state_of(sql, failed)] == ["pending", "failed"]
    conn.commit()
    assert [state_of(sql, pending), state_of(sql, failed)] == ["cancelled", "cancelled"]


def test_cancel_job_asks_a_running_job_to_stop(conn, sql, store):
    job_id = insert(sql)
    assert claim(store) == [job_id]
    job = cancel_job(conn, job_id)
    assert (job.state, job.cancel_requested) == (JobState.RUNNING, True)
    conn.commit()
    # The worker hears it at its next lease renewal.
    assert store.renew_leases("test-worker", [job_id], 60.0) == {job_id: True}


def test_cancel_job_leaves_a_finished_job_as_it_is(conn, sql):
    done = insert(sql, state="succeeded", finished_at=datetime.datetime.now(
        datetime.timezone.utc))
    cancelled = insert(sql, state="cancelled", finished_at=datetime.datetime.now(
        datetime.timezone.utc))
    assert cancel_job(conn, done).state is JobState.SUCCEEDED
    assert cancel_job(conn, cancelled).state is JobState.CANCELLED
    assert cancel_job(conn, cancelled) == get_job(conn, cancelled)  # as often as asked


def test_a_cancel_rolled_back_leaves_nothing(conn, sql, store):
    running = insert(sql)
    assert claim(store) == [running]
    pending = insert(sql)
    before = [get_job(conn, pending), get_job(conn, running)]
    assert cancel_job(conn, pending).state is JobState.CANCELLED
    assert cancel_job(conn, running).cancel_requested
    conn.rollback()
    assert [get_job(conn, pending), get_job(conn, running)] == before
    assert store.renew_leases("test-worker", [running], 60.0) == {running: False}


def test_cancel_job_of_an_unknown_id_raises(conn):
    with pytest.raises(JobNotFound, match="no job 404") as raised:
        cancel_job(conn, 404)
    assert raised.value.job_id == 404 and isinstance(raised.value, LookupError)


# -- retry_job -------------------------------------------------------------------


def test_retry_job_puts_a_failed_or_cancelled_job_back_with_fresh_attempts(conn, sql):
    ended = datetime.datetime.now(datetime.timezone.utc)
    failed = insert(sql, state="failed", attempts=5, last_error="boom", finished_at=ended,
                    run_at=ended - datetime.timedelta(hours=1))
    cancelled = insert(sql, state="cancelled", attempts=1, finished_at=ended)
    for job_id in (failed, cancelled):
        job = retry_job(conn, job_id)
        assert (job.state, job.attempts, job.finished_at) == (JobState.PENDING, 0, None)
        assert job.run_at > ended - datetime.timedelta(minutes=1)
    assert get_job(conn, failed).last_error == "boom"  # kept until the next run
    assert [state_of(sql, failed), state_of(sql, cancelled)] == ["failed", "cancelled"]
    conn.commit()
    assert [state_of(sql, failed), state_of(sql, cancelled)] == ["pending", "pending"]


def test_retry_job_leaves_a_pending_running_or_succeeded_job_as_it_is(conn, sql, store):
    running = insert(sql)
    claim(store)
    pending = insert(sql, attempts=2)
    done = insert(sql, state="succeeded", attempts=1, finished_at=datetime.datetime.now(
        datetime.timezone.utc))
    for job_id in (pending, running, done):
        before = get_job(conn, job_id)
        assert retry_job(conn, job_id) == before


def test_a_retry_rolled_back_leaves_nothing(conn, sql):
    failed = insert(sql, state="failed", attempts=5, finished_at=datetime.datetime.now(
        datetime.timezone.utc))
    before = get_job(conn, failed)
    assert retry_job(conn, failed).state is JobState.PENDING
    conn.rollback()
    assert get_job(conn, failed) == before


def test_retry_job_of_a_job_whose_unique_key_is_held_names_the_holder(conn, sql):
    failed = insert(sql, state="failed", unique_key="k", finished_at=datetime.datetime.now(
        datetime.timezone.utc))
    holder = enqueue(conn, "x", unique_key="k")
    with pytest.raises(UniqueKeyHeld) as raised:
        retry_job(conn, failed)
    assert (raised.value.job_id, raised.value.holder) == (failed, holder)
    assert f"job {holder} holds its unique key" in str(raised.value)
    # Nothing failed on the server: the transaction goes on.
    assert get_job(conn, failed).state is JobState.FAILED
    conn.commit()
    assert state_of(sql, holder) == "pending"


def test_retry_job_of_an_unknown_id_raises(conn):
    with pytest.raises(JobNotFound, match="no job 404"):
        retry_job(conn, 404)


# -- enqueue's duplicate flag ------------------------------------------------------


def test_enqueue_says_whether_a_unique_key_made_it_a_duplicate(conn, sql):
    first = enqueue(conn, "x", unique_key="k")
    again = enqueue(conn, "x", {"other": 1}, unique_key="k")
    keyless = enqueue(conn, "x")
    elsewhere = enqueue(conn, "x", unique_key="k", queue="other")
    assert isinstance(first, Enqueued) and isinstance(first, int)
    assert (first.duplicate, again.duplicate, keyless.duplicate, elsewhere.duplicate) == (
        False, True, False, False)
    assert again == first and str(again) == str(int(first)) and f"{again}" == str(int(first))
    # Sent back as a query parameter, it is the plain id.
    assert get_job(conn, again).id == first
    assert sql.value("SELECT count(*) FROM job_queue") == 0
    conn.commit()
    committed = enqueue(conn, "x", unique_key="k")
    assert committed == first and committed.duplicate


def test_enqueue_many_flags_each_duplicate(conn, sql):
    held = insert(sql, unique_key="held")
    ids = enqueue_many(conn, [{"kind": "x", "unique_key": "held"},
                              {"kind": "x", "unique_key": "new"},
                              {"kind": "x", "unique_key": "new"},
                              {"kind": "x"}])
    assert [int(i) for i in ids[:3]] == [held, ids[1], ids[1]]
    assert [i.duplicate for i in ids] == [True, False, True, False]


def test_the_filters_left_out_and_the_order_not_asked_for_are_planned_away(sql):
    sql.rows("INSERT INTO job_queue (kind, state, finished_at)"
             " SELECT 'k' || (i % 10), 'succeeded', now() FROM generate_series(1, 20000) AS i")
    sql.rows("ANALYZE job_queue")

    def plan(**given):
        params = {"ids": None, "kinds": None, "states": None, "queues": None, "limit": 10,
                  "newest_first": True, **given}
        return "\n".join(r[0] for r in sql.rows("EXPLAIN " + db.QUERIES["find_jobs"], params))

    by_id = plan(ids=[5], limit=1)
    assert "job_queue_pkey" in by_id and "Index Cond: (id = ANY" in by_id
    for newest_first, scan in ((True, "Index Scan Backward using job_queue_pkey"),
                               (False, "Index Scan using job_queue_pkey")):
        walk = plan(kinds=["k3"], newest_first=newest_first)
        assert scan in walk and "Sort" not in walk, walk
