"""Interleavings of the release (migrations/0019) forced statement by
statement, which tests/e2e/test_workflow_races.py cannot force with real
processes: a dependency written while its parent is deleted, and two writes
ending parents whose children cross."""

import threading

import psycopg2
import pytest

from testbed.polling import wait_until

ENDED = "state = 'succeeded', finished_at = now(), locked_by = NULL, lease_expires_at = NULL"


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


@pytest.mark.xfail(strict=True, reason="each parent's end locks its children's counts in its"
                   " own order: two writes whose parents' children cross lock them crosswise")
def test_two_writes_ending_parents_whose_children_cross_do_not_deadlock(database_url, sql):
    # Children X of (p1, p4) and Y of (p2, p3). One write ends p1 and p3, as a
    # worker's outcome statement ends its runs, in id order; the other ends
    # p2 and then p4, the rows of its own write on either side of the
    # first's. p1's end locks X's count, p2's Y's; p3's then waits for Y,
    # p4's for X: PostgreSQL aborts one write, and its worker backs off as
    # from a database it cannot reach.
    p1, p2, p3, p4 = (insert(sql) for _ in range(4))
    insert(sql, depends_on=[p1, p4])
    insert(sql, depends_on=[p2, p3])
    second = psycopg2.connect(database_url)
    second.cursor().execute(f"UPDATE job_queue SET {ENDED} WHERE id = %s", (p2,))
    failures = []

    def first_write():
        try:
            sql.rows(f"UPDATE job_queue SET {ENDED} WHERE id = ANY(%s)", ([p1, p3],))
        except psycopg2.Error as error:
            failures.append(error.pgcode)

    first = threading.Thread(target=first_write)
    first.start()
    probe = type(sql)(database_url)
    wait_until(lambda: probe.value("SELECT count(*) FROM pg_stat_activity"
                                   " WHERE wait_event_type = 'Lock'"), 5,
               message="the first write waiting on Y's count")
    try:
        second.cursor().execute(f"UPDATE job_queue SET {ENDED} WHERE id = %s", (p4,))
        second.commit()
    except psycopg2.Error as error:
        failures.append(error.pgcode)
        second.rollback()
    first.join(10)
    probe.close()
    second.close()
    assert failures == []
