"""The Python API against real transactions: enqueue and enqueue_many insert
in the caller's transaction and never end it, so a commit shows the jobs (and
wakes the workers) and a rollback leaves nothing; unique keys, the columns a
job sets, and errors that leave the transaction usable or say why not."""

import datetime
import re
import threading

import psycopg2
import psycopg2.errors
import psycopg2.extensions
import psycopg2.extras
import pytest

from motir_supervisor import enqueue, enqueue_many
from motir_supervisor import db
from motir_supervisor.db import enqueueing
from tests.helpers import notifications, wait_until, wakeup_listener

IN_TRANSACTION = psycopg2.extensions.TRANSACTION_STATUS_INTRANS
IDLE = psycopg2.extensions.TRANSACTION_STATUS_IDLE


@pytest.fixture
def conn(database_url):
    """A connection as a web request holds it: not in autocommit."""
    connection = psycopg2.connect(database_url)
    yield connection
    connection.close()


def rows_of(sql):
    return sql.rows("SELECT id, kind, payload, queue, state, unique_key FROM job_queue ORDER BY id")


# -- transactions ----------------------------------------------------------------


def test_the_job_is_the_callers_to_commit_and_then_another_connection_sees_it(conn, sql):
    job_id = enqueue(conn, "send_email", {"to": "a@b.c"}, queue="mail")
    [many_id] = enqueue_many(conn, [{"kind": "send_sms", "payload": {"to": "+1"}}])
    assert conn.info.transaction_status == IN_TRANSACTION and not conn.autocommit
    assert rows_of(sql) == []  # not committed by either call
    conn.commit()
    assert rows_of(sql) == [
        (job_id, "send_email", {"to": "a@b.c"}, "mail", "pending", None),
        (many_id, "send_sms", {"to": "+1"}, "default", "pending", None)]


def test_a_rolled_back_transaction_enqueues_nothing_and_wakes_nobody(conn, sql, database_url):
    listener = wakeup_listener(database_url)
    enqueue(conn, "send_email", {"to": "a@b.c"})
    enqueue_many(conn, [{"kind": "x", "unique_key": "k"}, {"kind": "y"}])
    conn.rollback()
    assert rows_of(sql) == []
    assert notifications(listener) == []
    # The key was only ever held by the rolled-back transaction: it is free.
    job_id = enqueue(conn, "x", unique_key="k")
    conn.commit()
    assert [row[0] for row in rows_of(sql)] == [job_id]
    listener.close()


def test_the_workers_are_woken_when_the_transaction_commits_not_before(conn, database_url):
    listener = wakeup_listener(database_url)
    enqueue(conn, "send_email", queue="mail")
    enqueue_many(conn, [{"kind": "x", "queue": "mail"}, {"kind": "x", "queue": "reports"}])
    assert notifications(listener) == []
    conn.commit()
    heard = set()

    def woken():
        heard.update(notifications(listener, settle=0.05))
        return {"mail", "reports"} <= heard

    wait_until(woken, 5, message="the wake-ups of both queues")
    listener.close()


def test_on_an_autocommit_connection_each_call_is_its_own_transaction(conn, sql):
    conn.autocommit = True
    job_id = enqueue(conn, "x")
    ids = enqueue_many(conn, [{"kind": "y"}, {"kind": "z"}])
    assert conn.autocommit and conn.info.transaction_status == IDLE
    assert [row[0] for row in rows_of(sql)] == [job_id, *ids]


def test_enqueue_many_of_no_jobs_sends_nothing(conn):
    assert enqueue_many(conn, []) == []
    assert conn.info.transaction_status == IDLE  # not even a BEGIN


def test_a_connection_that_makes_dict_rows_still_gets_ids(database_url, sql):
    connection = psycopg2.connect(database_url, cursor_factory=psycopg2.extras.RealDictCursor)
    job_id = enqueue(connection, "x")
    assert enqueue_many(connection, [{"kind": "y"}]) == [job_id + 1]
    connection.commit()
    connection.close()
    assert sql.value("SELECT count(*) FROM job_queue") == 2


# -- enqueue_many ------------------------------------------------------------------


STATEMENT_COUNTER = """
CREATE TABLE test_insert_statements (at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE FUNCTION test_count_insert_statement() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO test_insert_statements DEFAULT VALUES;
    RETURN NULL;
END;
$$;
CREATE TRIGGER test_count_insert_statement AFTER INSERT ON job_queue
    FOR EACH STATEMENT EXECUTE FUNCTION test_count_insert_statement();
"""


def test_enqueue_many_inserts_in_one_statement_and_returns_ids_in_the_order_given(conn, sql):
    taken = sql.value("INSERT INTO job_queue (kind, unique_key) VALUES ('held', 'k21')"
                      " RETURNING id")
    sql.rows(STATEMENT_COUNTER)

    def jobs():  # any iterable; keyed, unkeyed, defaulted and held jobs mixed
        for n in range(300):
            job = {"kind": f"k{n % 4}", "payload": {"n": n}}
            if n % 3 == 0:
                job["unique_key"] = f"k{n}"
            if n % 5 == 0:
                job["max_attempts"] = 2
            yield job

    ids = enqueue_many(conn, jobs())
    conn.commit()
    assert sql.value("SELECT count(*) FROM test_insert_statements") == 1
    assert ids[21] == taken
    payloads = dict(sql.rows("SELECT id, payload->'n' FROM job_queue"))
    assert [payloads[job_id] for job_id in ids] == [None if n == 21 else n for n in range(300)]
    assert sql.value("SELECT count(*) FROM job_queue WHERE max_attempts = 2") == 60
    # Drawn in the order given, the ids run in that order among jobs due together.
    inserted = ids[:21] + ids[22:]
    assert inserted == sorted(inserted)


def test_a_key_taken_by_a_committed_job_gives_its_id_in_enqueue_many(conn, sql):
    taken = sql.value("INSERT INTO job_queue (kind, unique_key) VALUES ('held', 'report:7')"
                      " RETURNING id")
    ids = enqueue_many(conn, [{"kind": "a"}, {"kind": "b", "unique_key": "report:7"},
                              {"kind": "c", "unique_key": "report:8"}])
    conn.commit()
    assert ids[1] == taken
    assert [row[1] for row in rows_of(sql)] == ["held", "a", "c"]
    assert sql.value("SELECT kind FROM job_queue WHERE id = %s", (ids[2],)) == "c"


def test_two_jobs_with_one_key_in_one_call_get_the_first_ones_id(conn, sql):
    ids = enqueue_many(conn, [
        {"kind": "first", "payload": {"n": 1}, "unique_key": "k"},
        {"kind": "plain"},
        {"kind": "second", "payload": {"n": 2}, "unique_key": "k", "max_attempts": 3},
        {"kind": "other_queue", "unique_key": "k", "queue": "other"},
    ])
    conn.commit()
    assert ids[0] == ids[2] and len(set(ids)) == 3
    assert rows_of(sql) == [
        (ids[0], "first", {"n": 1}, "default", "pending", "k"),
        (ids[1], "plain", {}, "default", "pending", None),
        (ids[3], "other_queue", {}, "other", "pending", "k")]


# -- unique keys -------------------------------------------------------------------


def test_a_taken_key_returns_the_holder_while_it_is_pending_or_running(conn, sql, store):
    holder = sql.value("INSERT INTO job_queue (kind, unique_key) VALUES ('x', 'k') RETURNING id")
    assert enqueue(conn, "x", unique_key="k") == holder
    conn.commit()
    store.claim_due_jobs("c", 1, 30, None)
    assert enqueue(conn, "x", unique_key="k") == holder
    assert enqueue(conn, "x", unique_key="k", queue="other") != holder
    conn.commit()
    store.record_outcomes("c", [db.Outcome(holder)])
    again = enqueue(conn, "x", unique_key="k")
    conn.commit()
    assert again != holder
    assert sql.rows("SELECT state FROM job_queue WHERE id IN (%s, %s) ORDER BY id",
                    (holder, again)) == [("succeeded",), ("pending",)]


def test_a_key_taken_earlier_in_the_same_transaction_returns_that_job(conn, sql):
    first = enqueue(conn, "x", {"n": 1}, unique_key="k")
    assert enqueue(conn, "x", {"n": 2}, unique_key="k") == first
    assert enqueue_many(conn, [{"kind": "x", "unique_key": "k"}, {"kind": "y"}])[0] == first
    conn.commit()
    assert sql.rows("SELECT id, payload FROM job_queue WHERE unique_key = 'k'") == [
        (first, {"n": 1})]


@pytest.mark.parametrize("ending", ["commit", "rollback"])
def test_a_key_held_by_a_transaction_not_committed_waits_for_its_end(database_url, sql, ending):
    holding = psycopg2.connect(database_url)
    holder = enqueue(holding, "x", unique_key="k")
    waiting = psycopg2.connect(database_url)
    result = {}

    def enqueue_behind():
        try:
            result["id"] = enqueue(waiting, "x", unique_key="k")
        except Exception as exc:  # reported below
            result["error"] = exc

    thread = threading.Thread(target=enqueue_behind)
    thread.start()
    wait_until(lambda: sql.value("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                                 (waiting.info.backend_pid,)) == "Lock",
               10, message="the second enqueue to wait on the first's transaction")
    assert thread.is_alive()
    getattr(holding, ending)()
    thread.join(10)
    assert "error" not in result, result
    waiting.commit()
    if ending == "commit":
        assert result["id"] == holder
        assert sql.value("SELECT count(*) FROM job_queue") == 1
    else:
        assert result["id"] != holder
        assert sql.rows("SELECT id FROM job_queue") == [(result["id"],)]
    holding.close()
    waiting.close()


def _finish_holders(sql):
    sql.rows("UPDATE job_queue SET state = 'succeeded', finished_at = now()"
             " WHERE unique_key = 'k' AND state = 'pending'")


def test_a_holder_that_finishes_before_its_look_up_makes_the_job_go_in(conn, sql, monkeypatch):
    holder = sql.value("INSERT INTO job_queue (kind, unique_key) VALUES ('x', 'k') RETURNING id")
    look_up = enqueueing._holders_of_keys

    def finish_then_look_up(jobs):
        # Another connection, between the insert that found the holder and
        # the look-up of its id.
        _finish_holders(sql)
        return look_up(jobs)

    monkeypatch.setattr(enqueueing, "_holders_of_keys", finish_then_look_up)
    [job_id] = enqueue_many(conn, [{"kind": "x", "unique_key": "k"}])
    conn.commit()
    assert job_id != holder
    assert sql.rows("SELECT id, state FROM job_queue ORDER BY id") == [
        (holder, "succeeded"), (job_id, "pending")]


def test_a_key_that_keeps_changing_hands_is_given_up_on_and_the_transaction_stays_usable(
        conn, sql, monkeypatch):
    sql.rows("INSERT INTO job_queue (kind, unique_key) VALUES ('x', 'k')")
    look_up = enqueueing._holders_of_keys
    looks = []

    def finish_look_up_then_take_the_key(jobs):
        _finish_holders(sql)
        found = yield from look_up(jobs)
        sql.rows("INSERT INTO job_queue (kind, unique_key) VALUES ('x', 'k')")
        looks.append(found)
        return found

    monkeypatch.setattr(enqueueing, "_holders_of_keys", finish_look_up_then_take_the_key)
    plain = enqueue(conn, "plain")
    with pytest.raises(RuntimeError, match="'k' of queue 'default' kept changing hands"):
        enqueue(conn, "x", unique_key="k")
    assert looks == [{}] * db.UNIQUE_KEY_TRIES
    assert conn.info.transaction_status == IN_TRANSACTION
    conn.commit()
    assert sql.value("SELECT kind FROM job_queue WHERE id = %s", (plain,)) == "plain"


# -- what lands in the row ---------------------------------------------------------


def database_clock(conn):
    with conn.cursor() as cur:
        cur.execute("SELECT clock_timestamp()")
        return cur.fetchone()[0]


def test_delay_run_at_priority_and_max_attempts_land_in_the_row(conn, sql):
    database_clock(conn)  # the transaction begins here: a delay counts from the call
    before = database_clock(conn)
    delayed = enqueue(conn, "x", delay=60.5, priority=-5, max_attempts=3)
    after = database_clock(conn)
    at = datetime.datetime(2031, 1, 2, 3, 4, 5,
                           tzinfo=datetime.timezone(datetime.timedelta(hours=2)))
    scheduled, soon = enqueue_many(conn, [
        {"kind": "y", "run_at": at, "priority": 7},
        {"kind": "z", "delay": 0}])
    conn.commit()
    row = dict(zip(["run_at", "priority", "max_attempts"], sql.rows(
        "SELECT run_at, priority, max_attempts FROM job_queue WHERE id = %s", (delayed,))[0]))
    offset = datetime.timedelta(seconds=60.5)
    assert before + offset <= row["run_at"] <= after + offset
    assert (row["priority"], row["max_attempts"]) == (-5, 3)
    assert sql.rows("SELECT run_at, priority FROM job_queue WHERE id = %s", (scheduled,)) == [
        (at, 7)]
    assert after <= sql.value("SELECT run_at FROM job_queue WHERE id = %s", (soon,))


def test_a_concurrency_key_lands_in_the_row_and_routes_it_by_its_kinds_limits(conn, sql, store):
    store.sync_limits({"per_key": db.Limits(max_running_per_key=1)})
    one = enqueue(conn, "per_key", concurrency_key="account:1")
    keyless, other = enqueue_many(conn, [{"kind": "per_key"},
                                         {"kind": "plain", "concurrency_key": "account:1"}])
    conn.commit()
    assert sql.rows("SELECT id, concurrency_key, limited FROM job_queue ORDER BY id") == [
        (one, "account:1", True), (keyless, None, False), (other, "account:1", False)]


def test_a_job_without_max_attempts_gets_the_columns_default_whatever_it_is(conn, sql):
    sql.rows("ALTER TABLE job_queue ALTER COLUMN max_attempts SET DEFAULT 9")
    one = enqueue(conn, "x")
    many = enqueue_many(conn, [{"kind": "y"}, {"kind": "z", "max_attempts": 2}, {"kind": "w"}])
    conn.commit()
    assert sql.rows("SELECT id, max_attempts FROM job_queue ORDER BY id") == [
        (one, 9), (many[0], 9), (many[1], 2), (many[2], 9)]


# -- errors ------------------------------------------------------------------------

NAIVE = datetime.datetime(2031, 1, 1, 12, 0)
AWARE = NAIVE.replace(tzinfo=datetime.timezone.utc)


@pytest.mark.parametrize("arguments, error, message", [
    ({"delay": 5, "run_at": AWARE}, ValueError, "give delay or run_at, not both"),
    ({"run_at": NAIVE}, ValueError, "run_at must be an aware datetime"),
    ({"run_at": "tomorrow"}, TypeError, "run_at must be a datetime"),
    ({"delay": -1}, ValueError, "delay must be a finite number of seconds >= 0"),
    ({"delay": float("inf")}, ValueError, "delay must be a finite number of seconds >= 0"),
    ({"delay": datetime.timedelta(seconds=5)}, TypeError, "delay must be a number of seconds"),
    ({"queue": None}, TypeError, "queue must be a str"),
    ({"priority": "high"}, TypeError, "priority must be an int"),
    ({"concurrency_key": 42}, TypeError, "concurrency_key must be a str or None"),
    ({"concurrency_key": ""}, ValueError, "concurrency_key must not be empty"),
    ({"payload": {"at": NAIVE}}, TypeError,
     "payload cannot be stored as JSON: Object of type datetime is not JSON serializable"),
    ({"payload": {"ratio": float("nan")}}, ValueError, "payload cannot be stored as JSON"),
    ({"payload": ["a\x00b"]}, ValueError, "jsonb cannot hold the character U+0000"),
    ({"payload": {"key\x00": 1}}, ValueError, "jsonb cannot hold the character U+0000"),
    ({"payload": "\\\x00"}, ValueError, "jsonb cannot hold the character U+0000"),
])
def test_a_bad_argument_is_refused_before_anything_is_sent(conn, sql, arguments, error, message):
    kept = enqueue(conn, "kept")
    with pytest.raises(error, match=re.escape(message)):
        enqueue(conn, "x", **arguments)
    with pytest.raises(error, match=r"^jobs\[1\]: .*" + re.escape(message)):
        enqueue_many(conn, [{"kind": "not_sent"}, {"kind": "x", **arguments}])
    # Nothing reached the server: the transaction goes on, without the jobs
    # of the calls that raised.
    assert conn.info.transaction_status == IN_TRANSACTION
    enqueue(conn, "after")
    conn.commit()
    assert [(row[0], row[1]) for row in rows_of(sql)] == [(kept, "kept"), (kept + 1, "after")]


def test_a_payload_with_a_backslash_before_u0000_is_text_and_is_stored(conn, sql):
    payload = {"one": "C:\\u0000", "two": "\\\\u0000"}
    job_id = enqueue(conn, "x", payload)
    conn.commit()
    assert sql.value("SELECT payload FROM job_queue WHERE id = %s", (job_id,)) == payload


@pytest.mark.parametrize("jobs, message", [
    ([{"kind": "x"}, {"kind": "y", "delay_seconds": 3}],
     r"jobs\[1\]: enqueue takes no argument 'delay_seconds'"),
    ([("x", {})], r"jobs\[0\]: a job is a dict of enqueue's arguments, not tuple"),
    ([{"payload": {}}], r"jobs\[0\]: a job needs a kind"),
])
def test_a_job_of_enqueue_many_that_is_not_enqueues_arguments_is_named(conn, jobs, message):
    with pytest.raises(TypeError, match=message):
        enqueue_many(conn, jobs)
    assert conn.info.transaction_status == IDLE


def test_something_other_than_a_psycopg2_connection_is_refused(conn):
    with conn.cursor() as cur, pytest.raises(TypeError, match="must be a psycopg2 connection"):
        enqueue(cur, "x")


def test_a_value_the_schema_refuses_aborts_the_transaction_for_the_caller_to_roll_back(
        conn, sql):
    enqueue(conn, "lost")
    with pytest.raises(psycopg2.errors.CheckViolation):
        enqueue(conn, "x", max_attempts=0)
    # The statement failed in the server, and with it the transaction: like
    # any failed statement, it is the caller's to roll back.
    assert conn.info.transaction_status == psycopg2.extensions.TRANSACTION_STATUS_INERROR
    conn.rollback()
    job_id = enqueue(conn, "x", max_attempts=1)
    conn.commit()
    assert [row[0] for row in rows_of(sql)] == [job_id]
