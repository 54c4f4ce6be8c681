"""Interleavings of the release (migrations/0019) forced statement by
statement, which tests/e2e/test_workflow_races.py cannot force with real
processes: a dependency written while its parent is deleted, and two writes
ending parents whose children cross."""

import random
import threading

import psycopg2
import pytest

from testbed.polling import wait_until
from tests.dependencies import ENDED, insert


def waiting_on_a_lock(sql):
    return sql.value("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                     " AND query LIKE 'INSERT INTO job_queue%%'")


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


def test_two_writes_ending_parents_whose_children_cross_do_not_deadlock(database_url, sql):
    # 200 children of 2 random parents each among 100; two writes end 50
    # parents each in one statement, as a worker's outcome statement ends
    # its runs, and commit at the same instant. Ending parents one by one,
    # each locking its children's counts as it goes, deadlocked in 28 of 30
    # such rounds; the commit's one pass locking every count in job order
    # cannot.
    rng = random.Random(7)
    failures = []
    for _ in range(5):
        parents = [insert(sql) for _ in range(100)]
        children = [insert(sql, depends_on=sorted(rng.sample(parents, 2))) for _ in range(200)]
        halves = [sorted(parents[0::2]), sorted(parents[1::2])]
        connections = [psycopg2.connect(database_url) for _ in halves]
        start = threading.Barrier(len(connections))

        def end_and_commit(conn, half):
            start.wait()
            try:
                conn.cursor().execute(f"UPDATE job_queue SET {ENDED} WHERE id = ANY(%s)",
                                      ("succeeded", half))
                conn.commit()
            except psycopg2.Error as error:
                failures.append(error.pgcode)

        threads = [threading.Thread(target=end_and_commit, args=pair)
                   for pair in zip(connections, halves)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        for conn in connections:
            conn.close()
        assert failures == []
        assert sql.value("SELECT count(*) FROM job_queue WHERE id = ANY(%s) AND state <> 'pending'",
                         (children,)) == 0
