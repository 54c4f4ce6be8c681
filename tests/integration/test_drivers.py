"""enqueue and enqueue_many on every driver a web app holds, against real
transactions: psycopg2, psycopg 3, SQLAlchemy's Session (over either) and
Connection, and from asyncio psycopg 3's AsyncConnection and SQLAlchemy's
AsyncSession. Each is in the caller's transaction (a commit shows the jobs,
a rollback leaves nothing), returns the holder's id for a taken unique key,
writes the same columns and refuses the same arguments; the async ones
leave the event loop running while they wait."""

import asyncio
import contextvars
import datetime
import re
import threading
import time

import psycopg
import psycopg.rows
import psycopg2
import pytest
import sqlalchemy
import sqlalchemy.exc
import sqlalchemy.ext.asyncio
import sqlalchemy.orm
from opentelemetry.sdk.trace import TracerProvider

from motir_supervisor import (batch, enqueue, enqueue_async, enqueue_many, enqueue_many_async,
                              open_batch, open_batch_async, testing, workflow)
from tests.helpers import notifications, wait_until, wakeup_listener

ASYNC = ("psycopg_async", "sqlalchemy_async_session", "sqlalchemy_async_session_asyncpg")
DRIVERS = ("psycopg2", "psycopg", "sqlalchemy_session", "sqlalchemy_session_psycopg2",
           "sqlalchemy_scoped_session", "sqlalchemy_connection", *ASYNC)


class Producer:
    """One driver's connection as a web request holds it (not in
    autocommit), with the same verbs whatever the driver: an async one's
    calls run on an event loop of its own."""

    def __init__(self, driver, url):
        self.driver = driver
        self.loop = asyncio.Runner() if driver in ASYNC else None
        self.engine = None
        if driver == "psycopg2":
            self.conn = psycopg2.connect(url)
        elif driver == "psycopg":
            self.conn = psycopg.connect(url)
        elif driver == "psycopg_async":
            self.conn = self.loop.run(psycopg.AsyncConnection.connect(url))
        elif driver.startswith("sqlalchemy_async_session"):
            scheme = "postgresql+asyncpg://" if driver.endswith("asyncpg") else \
                "postgresql+psycopg://"
            self.engine = sqlalchemy.ext.asyncio.create_async_engine(
                url.replace("postgresql://", scheme), poolclass=sqlalchemy.pool.NullPool)
            self.conn = sqlalchemy.ext.asyncio.AsyncSession(self.engine)
        else:
            scheme = "postgresql+psycopg2://" if driver.endswith("psycopg2") else \
                "postgresql+psycopg://"
            self.engine = sqlalchemy.create_engine(url.replace("postgresql://", scheme),
                                                   poolclass=sqlalchemy.pool.NullPool)
            self.conn = {
                "sqlalchemy_connection": self.engine.connect,
                # One scope, not one per thread: a test waits in a thread of its own.
                "sqlalchemy_scoped_session": lambda: sqlalchemy.orm.scoped_session(
                    sqlalchemy.orm.sessionmaker(self.engine), scopefunc=lambda: "request"),
            }.get(driver, lambda: sqlalchemy.orm.Session(self.engine))()

    def _call(self, value):
        # In the caller's context, as a task of an app sees the span it runs in.
        return self.loop.run(value, context=contextvars.copy_context()) if self.loop else value

    def enqueue(self, *args, **options):
        if self.loop:
            return self._call(enqueue_async(self.conn, *args, **options))
        return enqueue(self.conn, *args, **options)

    def enqueue_many(self, jobs):
        if self.loop:
            return self._call(enqueue_many_async(self.conn, jobs))
        return enqueue_many(self.conn, jobs)

    def build(self, block, add):
        """``add(block)`` inside ``with block`` (``async with`` on an async
        connection); the block once it ended."""
        if self.loop:
            async def inside():
                async with block:
                    add(block)
            self._call(inside())
        else:
            with block:
                add(block)
        return block

    def open_batch(self, *args, **options):
        """An open batch, and its add_many and seal for this connection."""
        if self.loop:
            opened = self._call(open_batch_async(self.conn, *args, **options))
            return (opened, lambda jobs: self._call(opened.add_many_async(jobs)),
                    lambda: self._call(opened.seal_async()))
        opened = open_batch(self.conn, *args, **options)
        return opened, opened.add_many, opened.seal

    def commit(self):
        self._call(self.conn.commit())

    def rollback(self):
        self._call(self.conn.rollback())

    def close(self):
        self._call(self.conn.close())
        if self.engine is not None:
            self._call(self.engine.dispose())
        if self.loop:
            self.loop.close()


@pytest.fixture(params=DRIVERS)
def producer(request, database_url):
    made = Producer(request.param, database_url)
    yield made
    made.close()


def rows_of(sql):
    return sql.rows("SELECT id, kind, payload, queue, state, unique_key FROM job_queue ORDER BY id")


def sessions_in_transaction(sql):
    """How many connections other than ``sql``'s own have a transaction open."""
    return sql.value("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                     " AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()")


# -- transactions ----------------------------------------------------------------


def test_the_jobs_are_the_callers_to_commit_and_then_another_connection_sees_them(
        producer, sql):
    job_id = producer.enqueue("send_email", {"to": "a@b.c"}, queue="mail")
    [many_id] = producer.enqueue_many([{"kind": "send_sms", "payload": {"to": "+1"}}])
    assert sessions_in_transaction(sql) == 1
    assert rows_of(sql) == []  # not committed by either call
    producer.commit()
    assert rows_of(sql) == [
        (job_id, "send_email", {"to": "a@b.c"}, "mail", "pending", None),
        (many_id, "send_sms", {"to": "+1"}, "default", "pending", None)]


def test_a_rolled_back_transaction_enqueues_nothing_and_wakes_nobody(
        producer, sql, database_url):
    listener = wakeup_listener(database_url)
    producer.enqueue("send_email", {"to": "a@b.c"})
    producer.enqueue_many([{"kind": "x", "unique_key": "k"}, {"kind": "y"}])
    producer.rollback()
    assert rows_of(sql) == []
    assert notifications(listener) == []
    job_id = producer.enqueue("x", unique_key="k")  # the key is free again
    producer.commit()
    assert [row[0] for row in rows_of(sql)] == [job_id]
    listener.close()


def test_enqueue_many_of_no_jobs_sends_nothing(producer, sql):
    assert producer.enqueue_many([]) == []
    assert sessions_in_transaction(sql) == 0  # not even a BEGIN


# -- unique keys -------------------------------------------------------------------


def test_a_taken_key_gives_the_holders_id(producer, sql):
    holder = sql.value("INSERT INTO job_queue (kind, unique_key) VALUES ('x', 'k') RETURNING id")
    assert producer.enqueue("x", unique_key="k") == holder
    first = producer.enqueue("x", {"n": 1}, unique_key="mine")
    ids = producer.enqueue_many([{"kind": "a", "unique_key": "k"}, {"kind": "b"},
                                 {"kind": "c", "unique_key": "mine"},
                                 {"kind": "d", "unique_key": "new"},
                                 {"kind": "e", "unique_key": "new"},
                                 {"kind": "f", "unique_key": "k", "queue": "other"}])
    producer.commit()
    assert ids[0] == holder and ids[2] == first and ids[3] == ids[4]
    assert rows_of(sql) == [
        (holder, "x", {}, "default", "pending", "k"),
        (first, "x", {"n": 1}, "default", "pending", "mine"),
        (ids[1], "b", {}, "default", "pending", None),
        (ids[3], "d", {}, "default", "pending", "new"),
        (ids[5], "f", {}, "other", "pending", "k")]


@pytest.mark.parametrize("ending", ["commit", "rollback"])
def test_a_key_held_by_a_transaction_not_committed_waits_for_its_end(
        producer, database_url, sql, ending):
    holding = psycopg2.connect(database_url)
    holder = enqueue(holding, "x", unique_key="k")
    result = {}

    def enqueue_behind():
        try:
            result["id"] = producer.enqueue("x", unique_key="k")
        except Exception as exc:  # reported below
            result["error"] = exc

    thread = threading.Thread(target=enqueue_behind)
    thread.start()
    wait_until(lambda: sql.value("SELECT count(*) FROM pg_stat_activity"
                                 " WHERE wait_event_type = 'Lock'") == 1,
               10, message="the second enqueue to wait on the first's transaction")
    assert thread.is_alive()
    getattr(holding, ending)()
    thread.join(10)
    assert "error" not in result, result
    producer.commit()
    if ending == "commit":
        assert result["id"] == holder
        assert sql.value("SELECT count(*) FROM job_queue") == 1
    else:
        assert result["id"] != holder
        assert sql.rows("SELECT id FROM job_queue") == [(result["id"],)]
    holding.close()


# -- what lands in the row ---------------------------------------------------------


def test_the_arguments_land_in_the_row(producer, sql):
    sql.rows("ALTER TABLE job_queue ALTER COLUMN max_attempts SET DEFAULT 9")
    at = datetime.datetime(2031, 1, 2, 3, 4, 5,
                           tzinfo=datetime.timezone(datetime.timedelta(hours=2)))
    before = sql.value("SELECT clock_timestamp()")
    delayed = producer.enqueue("x", {"n": [1, "two"]}, delay=60.5, priority=-5, max_attempts=3,
                               concurrency_key="account:1")
    after = sql.value("SELECT clock_timestamp()")
    scheduled, defaulted = producer.enqueue_many([
        {"kind": "y", "run_at": at, "priority": 7, "queue": "reports"}, {"kind": "z"}])
    producer.commit()
    columns = "kind, payload, queue, priority, max_attempts, concurrency_key"
    rows = sql.rows(f"SELECT id, {columns}, run_at FROM job_queue ORDER BY id")
    assert [row[:-1] for row in rows] == [
        (delayed, "x", {"n": [1, "two"]}, "default", -5, 3, "account:1"),
        (scheduled, "y", {}, "reports", 7, 9, None),
        (defaulted, "z", {}, "default", 0, 9, None)]
    offset = datetime.timedelta(seconds=60.5)
    assert before + offset <= rows[0][-1] <= after + offset
    assert rows[1][-1] == at
    assert before <= rows[2][-1]


def test_a_job_enqueued_inside_a_span_carries_its_trace_context(producer, sql):
    tracer = TracerProvider().get_tracer("the web app")
    with tracer.start_as_current_span("POST /invoices") as span:
        job_id = producer.enqueue("x")
    producer.commit()
    traceparent = sql.value("SELECT trace_context->>'traceparent' FROM job_queue WHERE id = %s",
                            (job_id,))
    assert traceparent.split("-")[1] == format(span.get_span_context().trace_id, "032x")


# -- errors ------------------------------------------------------------------------


def test_a_bad_argument_is_refused_before_anything_is_sent(producer, sql):
    kept = producer.enqueue("kept")
    naive = datetime.datetime(2031, 1, 1, 12, 0)
    with pytest.raises(ValueError, match="run_at must be an aware datetime"):
        producer.enqueue("x", run_at=naive)
    with pytest.raises(ValueError, match=re.escape("jobs[1]: payload cannot be stored as JSON")):
        producer.enqueue_many([{"kind": "not_sent"}, {"kind": "x", "payload": float("nan")}])
    # Nothing reached the server: the transaction goes on.
    after = producer.enqueue("after")
    producer.commit()
    assert [(row[0], row[1]) for row in rows_of(sql)] == [(kept, "kept"), (after, "after")]


def test_a_value_the_schema_refuses_aborts_the_transaction_for_the_caller_to_roll_back(
        producer, sql):
    producer.enqueue("lost")
    # The driver's own error, as for any failed statement (SQLAlchemy wraps it).
    with pytest.raises((psycopg2.errors.CheckViolation, psycopg.errors.CheckViolation,
                        sqlalchemy.exc.IntegrityError)):
        producer.enqueue("x", max_attempts=0)
    with pytest.raises(Exception, match="current transaction is aborted|rolled back"):
        producer.enqueue("refused")
    producer.rollback()
    job_id = producer.enqueue("x", max_attempts=1)
    producer.commit()
    assert [row[0] for row in rows_of(sql)] == [job_id]


def test_a_psycopg_connection_that_makes_dict_rows_still_gets_ids(database_url, sql):
    conn = psycopg.connect(database_url, row_factory=psycopg.rows.dict_row)
    job_id = enqueue(conn, "x")
    assert enqueue_many(conn, [{"kind": "y"}]) == [job_id + 1]
    conn.commit()
    conn.close()
    assert sql.value("SELECT count(*) FROM job_queue") == 2


def test_a_connection_given_to_the_wrong_twin_says_which_to_call(database_url):
    sync, cursor = psycopg.connect(database_url), psycopg2.connect(database_url).cursor()

    async def wrong_calls():
        async_conn = await psycopg.AsyncConnection.connect(database_url)
        with pytest.raises(TypeError, match=r"async connection \(AsyncConnection\): await"
                                            r" enqueue_async"):
            enqueue(async_conn, "x")
        with pytest.raises(TypeError, match=r"not an async connection \(Connection\): call"
                                            r" enqueue"):
            await enqueue_async(sync, "x")
        with pytest.raises(TypeError, match="must be a psycopg AsyncConnection, or a SQLAlchemy"
                                            " AsyncSession or AsyncConnection, not cursor"):
            await enqueue_many_async(cursor, [])
        await async_conn.close()

    asyncio.run(wrong_calls())
    with pytest.raises(TypeError, match="must be a psycopg2 connection, a psycopg Connection,"
                                        " or a SQLAlchemy Session or Connection, not cursor"):
        enqueue(cursor, "x")
    sync.close()
    cursor.connection.close()


# -- the event loop ----------------------------------------------------------------


@pytest.mark.parametrize("driver", ASYNC)
def test_an_async_enqueue_waiting_on_the_database_leaves_the_event_loop_running(
        database_url, sql, driver):
    """While enqueue_async waits for a transaction holding its unique key,
    another task keeps ticking; a sync enqueue called in the loop, the
    negative control, stops it for as long as it waits."""
    producer, other = Producer(driver, database_url), Producer("psycopg", database_url)
    holding = psycopg2.connect(database_url)
    holder = enqueue(holding, "x", unique_key="k")

    async def ticks_while(call, ending_in):
        ticks = 0

        async def tick():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        await asyncio.sleep(0.05)  # the ticker is running
        commit = threading.Timer(ending_in, holding.commit)
        commit.start()
        started = time.monotonic()
        job_id = await call()
        waited = time.monotonic() - started
        ticker.cancel()
        commit.join()
        return job_id, ticks, waited

    async def sync_enqueue():
        return enqueue(other.conn, "y", unique_key="k2")

    job_id, ticks, waited = producer.loop.run(
        ticks_while(lambda: enqueue_async(producer.conn, "x", unique_key="k"), 0.5))
    assert job_id == holder and waited >= 0.45
    assert ticks >= 20  # 50 in 0.55 s if nothing held the loop
    producer.rollback()
    # The negative control: the same wait in a sync call holds the loop.
    enqueue(holding, "y", unique_key="k2")
    _, blocked_ticks, waited = asyncio.run(ticks_while(sync_enqueue, 0.5))
    assert waited >= 0.45 and blocked_ticks <= 6  # the ticks of the 0.05 s before it
    for made in (producer, other):
        made.close()
    holding.close()


# -- jobs that wait for others ------------------------------------------------------


def test_a_job_with_depends_on_waits_then_is_released_when_its_parents_end(
        producer, sql, database_url):
    from tests.apps import workflow_steps  # noqa: F401 - registers the kinds

    first = producer.enqueue("wf_step", {"output": 1})
    second = producer.enqueue("wf_step", {"fail": True})
    child = producer.enqueue("wf_step", depends_on=[first, second])
    cleanup, after_first = producer.enqueue_many([
        {"kind": "wf_step", "depends_on": [first, second], "on_parent_failure": "run"},
        {"kind": "wf_step", "depends_on": [first]}])
    producer.commit()
    states = "SELECT id, state, depends_on, on_parent_failure FROM job_queue ORDER BY id"
    assert sql.rows(states) == [
        (first, "pending", None, "cancel"), (second, "pending", None, "cancel"),
        (child, "waiting", [first, second], "cancel"), (cleanup, "waiting", [first, second], "run"),
        (after_first, "waiting", [first], "cancel")]
    ran = testing.drain(database_url)
    assert sorted(outcome.job_id for outcome in ran) == [first, second, cleanup, after_first]
    assert sql.rows("SELECT id, state FROM job_queue ORDER BY id") == [
        (first, "succeeded"), (second, "failed"), (child, "cancelled"), (cleanup, "succeeded"),
        (after_first, "succeeded")]
    assert str(second) in sql.value("SELECT last_error FROM job_queue WHERE id = %s", (child,))


def test_a_workflow_and_a_batch_are_inserted_in_the_callers_transaction(producer, sql):
    def steps(wf):
        fetch = wf.add("fetch", {"repo": 7})
        embeds = [wf.add("embed", {"file": n}, after=[fetch]) for n in range(2)]
        wf.add("publish", after=embeds, on_parent_failure="run")

    wf = producer.build(workflow(producer.conn, "index_repo"), steps)
    group = producer.build(batch(producer.conn, "import", on_complete=("report", {"n": 2})),
                           lambda b: [b.add("row", {"n": n}) for n in range(2)])
    assert sql.value("SELECT count(*) FROM job_queue") == 0  # not committed yet
    producer.commit()
    assert sql.rows("SELECT workflow_id, step, kind, state, on_parent_failure FROM job_queue"
                    " WHERE workflow_id IS NOT NULL ORDER BY id") == [
        (wf.id, "fetch", "fetch", "pending", "cancel"),
        (wf.id, "embed", "embed", "waiting", "cancel"),
        (wf.id, "embed.2", "embed", "waiting", "cancel"),
        (wf.id, "publish", "publish", "waiting", "run")]
    assert sql.rows("SELECT kind, payload, state FROM job_queue WHERE batch_id = %s"
                    " ORDER BY id", (group.id,)) == [
        ("row", {"n": 0}, "pending"), ("row", {"n": 1}, "pending")]
    assert sql.rows("SELECT j.kind, j.payload, j.state FROM job_queue_batches AS b"
                    " JOIN job_queue AS j ON j.id = b.on_complete WHERE b.id = %s",
                    (group.id,)) == [("report", {"n": 2}, "waiting")]


def test_a_workflow_rolled_back_leaves_nothing(producer, sql):
    producer.build(workflow(producer.conn, "w"), lambda wf: wf.add("a"))
    producer.rollback()
    assert sql.value("SELECT count(*) FROM job_queue") == 0
    assert sql.value("SELECT count(*) FROM job_queue_workflows") == 0


def test_an_open_batch_takes_members_until_sealed_on_every_driver(producer, sql):
    opened, add_many, seal = producer.open_batch("over time", on_success="done")
    first = add_many([{"kind": "row", "payload": {"n": 1}}])
    producer.commit()
    more = add_many([{"kind": "row", "payload": {"n": n}, "priority": 3} for n in (2, 3)])
    seal()
    producer.commit()
    assert sql.rows("SELECT id, payload, priority FROM job_queue WHERE batch_id = %s"
                    " ORDER BY id", (opened.id,)) == [
        (first[0], {"n": 1}, 0), (more[0], {"n": 2}, 3), (more[1], {"n": 3}, 3)]
    assert sql.value("SELECT sealed_at IS NOT NULL FROM job_queue_batches WHERE id = %s",
                     (opened.id,))
