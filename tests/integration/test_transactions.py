"""worker.transactions against PostgreSQL: each block starts on a connection
as new, whatever the block before it did to its session or the server did
to it meanwhile; one block per run; and testing.drain reports a job that
completed in its block as succeeded, whatever its handler did after."""

import types

import psycopg2
import pytest

from motir_supervisor import ClaimLost, testing
from motir_supervisor.worker.transactions import Transactions

CLAIMANT = "worker-under-test"


@pytest.fixture
def effects(sql):
    sql.rows("CREATE TABLE test_effects (job_id bigint NOT NULL, attempt int NOT NULL)")
    return sql


@pytest.fixture
def transactions(database_url):
    kept = Transactions(database_url, CLAIMANT, "test", 10)
    yield kept
    kept.close()


def claimed(store, count=1):
    for _ in range(count):
        store.enqueue("x", {})
    jobs, _ = store.claim_due_jobs(CLAIMANT, count, 30, None)
    return [types.SimpleNamespace(claimed=job, completed=False) for job in jobs]


def effect(conn, run):
    with conn.cursor() as cur:
        cur.execute("INSERT INTO test_effects VALUES (%s, 1)", (run.claimed.id,))


def take_over(sql, run):
    sql.rows("UPDATE job_queue SET locked_by = 'someone-else' WHERE id = %s", (run.claimed.id,))


def test_autocommit_left_on_by_a_block_does_not_reach_the_next(store, effects, transactions):
    first, second = claimed(store, 2)
    with transactions.around(first) as conn:
        conn.autocommit = True
        effect(conn, first)
    assert first.completed
    with pytest.raises(ClaimLost):
        with transactions.around(second) as conn:
            effect(conn, second)
            take_over(effects, second)
    # The lost claim took its effect with it: the connection was not left in autocommit.
    assert effects.rows("SELECT job_id FROM test_effects") == [(first.claimed.id,)]
    assert not second.completed


def test_what_a_block_set_for_its_session_is_gone_in_the_next(store, effects, transactions):
    effects.rows("CREATE SCHEMA elsewhere; CREATE TABLE elsewhere.test_effects"
                 " (job_id bigint, attempt int)")
    first, second = claimed(store, 2)
    with transactions.around(first) as conn:
        with conn.cursor() as cur:
            cur.execute("SET search_path TO elsewhere")
    with transactions.around(second) as conn:
        effect(conn, second)
    assert effects.rows("SELECT job_id FROM public.test_effects") == [(second.claimed.id,)]


def test_a_kept_connection_the_server_dropped_is_replaced(store, effects, transactions):
    first, second = claimed(store, 2)
    with transactions.around(first) as conn:
        effect(conn, first)
    effects.rows("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                 " WHERE application_name = 'test transaction'")
    with transactions.around(second) as conn:
        effect(conn, second)
    assert effects.value("SELECT count(*) FROM test_effects") == 2
    assert effects.rows("SELECT DISTINCT state FROM job_queue") == [("succeeded",)]


def test_one_block_per_run(store, effects, transactions):
    [run] = claimed(store)
    with transactions.around(run) as conn:
        with pytest.raises(RuntimeError, match="one block per run"):
            with transactions.around(run):
                pass
        effect(conn, run)
    with pytest.raises(RuntimeError, match="one block per run"):
        with transactions.around(run):
            pass
    assert effects.value("SELECT count(*) FROM test_effects") == 1
    assert effects.value("SELECT count(*) FROM pg_stat_activity"
                         " WHERE application_name = 'test transaction'") == 1


def test_drain_says_succeeded_when_the_handler_raised_after_its_block(store, effects):
    from tests.apps import transactional  # noqa: F401 - registers the kind

    job_id, _ = store.enqueue("transactional", {"do": "raise_after"})
    [outcome] = testing.drain(store)
    assert (outcome.outcome, outcome.error) == ("succeeded", None)
    assert effects.rows("SELECT state FROM job_queue WHERE id = %s", (job_id,)) == [
        ("succeeded",)]


def test_a_psycopg2_error_inside_rolls_back_and_the_connection_is_kept_clean(
        store, effects, transactions):
    first, second = claimed(store, 2)
    with pytest.raises(psycopg2.errors.UndefinedTable):
        with transactions.around(first) as conn:
            effect(conn, first)
            with conn.cursor() as cur:
                cur.execute("SELECT * FROM no_such_table")
    with transactions.around(second) as conn:
        effect(conn, second)
    assert effects.rows("SELECT job_id FROM test_effects") == [(second.claimed.id,)]
