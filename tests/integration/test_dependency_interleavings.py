"""A dependency written while its parent is deleted (migrations/0019): the
interleaving forced statement by statement, as tests/e2e/test_workflow_races.py
cannot force it with real processes."""

import threading

import psycopg2
import pytest

from testbed.polling import wait_until


def insert(sql, depends_on=None, **columns):
    names = ["kind", "depends_on", *columns]
    return sql.value(f"INSERT INTO job_queue ({', '.join(names)})"
                     f" VALUES ({', '.join(['%s'] * len(names))}) RETURNING id",
                     ("k", depends_on, *columns.values()))


def waiting_on_a_lock(sql):
    return sql.value("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                     " AND query LIKE 'INSERT INTO job_queue%%'")


@pytest.mark.xfail(strict=True, reason="the insert checks that its parents exist before it"
                   " locks them: a parent deleted meanwhile is neither counted nor refused")
@pytest.mark.parametrize("parents", [1, 2])
def test_a_child_inserted_while_its_parent_is_deleted_is_refused_or_cancelled(
        database_url, sql, parents):
    # The DELETE holds the parent's row lock, uncommitted, when the child's
    # insert sees the parent still there and waits for that lock; the
    # DELETE commits; the insert goes on. A deleted unended parent counts
    # as cancelled: the child must be refused (the parent does not exist)
    # or cancelled, never left waiting for ever nor run as if it succeeded.
    deleted = insert(sql, run_at="2100-01-01")
    others = [insert(sql) for _ in range(parents - 1)]
    deleting = psycopg2.connect(database_url)
    deleting.cursor().execute("DELETE FROM job_queue WHERE id = %s", (deleted,))
    outcome = {}

    def insert_child():
        try:
            outcome["child"] = insert(sql, depends_on=[deleted, *others])
        except psycopg2.Error as error:
            outcome["refused"] = error

    inserting = threading.Thread(target=insert_child)
    inserting.start()
    probe = type(sql)(database_url)
    wait_until(lambda: waiting_on_a_lock(probe), 5, message="the insert waiting on the lock")
    deleting.commit()
    inserting.join(5)
    for other in others:
        sql.rows("UPDATE job_queue SET state = 'succeeded', finished_at = now() WHERE id = %s",
                 (other,))
    probe.close()
    deleting.close()
    if "refused" not in outcome:
        assert sql.value("SELECT state FROM job_queue WHERE id = %s",
                         (outcome["child"],)) == "cancelled"
