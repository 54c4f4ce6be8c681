"""Races on the release of waiting jobs (migrations/0019), each forced one
statement at a time: a transaction is left open, or held inside its
commit (where it settles its counts) while a second one commits; then the
first goes on. Each test names the interleaving in its comment."""

import re
import threading
import time
from pathlib import Path

import psycopg2
import psycopg2.errors

from motir_supervisor import db
from testbed.sql import Sql
from tests.dependencies import ENDED, RETRIED, end, insert, state, states, unended

#: The migrations of dependencies, workflows and batches.
WORKFLOWS_MIGRATIONS = [Path(db.__file__).parent / "sql" / "migrations" / name
                        for name in ("0019_workflows.sql", "0020_fixed_parents.sql")]


class Open:
    """A transaction of its own (READ COMMITTED unless told), whose
    statements can run in a thread so that the test sees them wait."""

    def __init__(self, url, isolation=None):
        self.conn = psycopg2.connect(url)
        if isolation is not None:
            self.conn.set_session(isolation_level=isolation)
        self.cur = self.conn.cursor()
        self.cur.execute("SELECT pg_backend_pid()")
        self.pid = self.cur.fetchone()[0]
        self.thread = None
        self.error = None
        self.result = None

    def run(self, statement, params=None):
        self.cur.execute(statement, params)
        return self.cur.fetchall() if self.cur.description else None

    def start(self, statement, params=None):
        def target():
            try:
                self.result = self.run(statement, params)
            except psycopg2.Error as exc:
                self.error = exc
        self.thread = threading.Thread(target=target)
        self.thread.start()

    def start_commit(self):
        """Commit in a thread: the commit settles the transaction's counts."""
        def target():
            try:
                self.conn.commit()
            except psycopg2.Error as exc:
                self.error = exc
        self.thread = threading.Thread(target=target)
        self.thread.start()

    def join(self):
        self.thread.join(30)
        assert not self.thread.is_alive(), "the statement never ended"

    def close(self):
        self.conn.close()


PAUSE_COUNTS = """
CREATE FUNCTION test_pause() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('test.pause', true) = 'on' THEN
        PERFORM pg_advisory_xact_lock_shared(4242);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER test_pause BEFORE UPDATE ON job_queue_waits
FOR EACH ROW EXECUTE FUNCTION test_pause()"""


def paused_commit(sql, database_url, opened):
    """Start opened's commit and hold it inside its settling, at its first
    change of a count (whose lock it then holds; other sessions are not
    held); returns the gate, whose close lets it go on. A test whose open
    transactions write counts creates the pause first (PAUSE_COUNTS): a
    trigger waits for them to end."""
    if not sql.value("SELECT EXISTS (SELECT FROM pg_trigger WHERE tgname = 'test_pause')"):
        sql.rows(PAUSE_COUNTS)
    gate = Sql(database_url)
    gate.rows("SELECT pg_advisory_lock(4242)")
    opened.run("SET LOCAL test.pause = 'on'")
    opened.start_commit()
    wait_until_blocked(sql, opened, lock_type="advisory")
    return gate


def wait_until_blocked(sql, *opened, lock_type=None):
    """Until each of these sessions waits on a lock (of lock_type if given)."""
    deadline = time.monotonic() + 10
    pids = [o.pid for o in opened]
    while time.monotonic() < deadline:
        waiting = sql.value(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)"
            " AND wait_event_type = 'Lock' AND (%s::text IS NULL OR wait_event = %s)",
            (pids, lock_type, lock_type))
        if waiting == len(pids):
            return
        time.sleep(0.01)
    raise AssertionError("the sessions never waited on a lock")


def test_a_retry_leaves_cancelled_a_descendant_a_failure_meanwhile_holds(database_url, sql):
    # c waits for p, g for c and r. p fails: c and g are cancelled by it.
    # Then r fails, and its commit is held inside its settling, holding g's
    # count (r's end finds g already cancelled). p is retried meanwhile: its
    # commit's check for other failed parents of g would see r running, so
    # g would come back waiting for c alone, and run once c succeeds,
    # though r failed. The retry must wait for g's count, then see r
    # failed: g stays cancelled, held by r.
    p, r = insert(sql), insert(sql)
    c = insert(sql, depends_on=[p])
    g = insert(sql, depends_on=[c, r])
    end(sql, p, "failed")
    assert states(sql, [c, g]) == ["cancelled", "cancelled"]
    failing, retrying = Open(database_url), Open(database_url)
    failing.run(f"UPDATE job_queue SET {ENDED} WHERE id = %s", ("failed", r))
    retrying.run(f"UPDATE job_queue SET {RETRIED} WHERE id = %s", (p,))
    gate = paused_commit(sql, database_url, failing)
    retrying.start_commit()
    wait_until_blocked(sql, retrying, lock_type="transactionid")
    gate.close()
    failing.join()
    retrying.join()
    assert failing.error is None and retrying.error is None
    for opened in (failing, retrying):
        opened.close()
    assert states(sql, [c, g]) == ["waiting", "cancelled"]
    end(sql, p)
    end(sql, c)
    assert state(sql, g) == "cancelled"  # r failed: g does not run
    sql.rows(f"UPDATE job_queue SET {RETRIED} WHERE id = %s", (r,))
    assert state(sql, g) == "waiting"
    end(sql, r)
    assert state(sql, g) == "pending"


def test_two_retries_at_once_bring_back_what_both_failures_cancelled(database_url, sql):
    # As above, but both failed parents are retried at once, r's commit held
    # inside its settling: p's retry waits for g's count, then sees r back,
    # and brings g back. g must not be left cancelled for good though
    # neither parent is failed any more.
    p, r = insert(sql), insert(sql)
    c = insert(sql, depends_on=[p])
    g = insert(sql, depends_on=[c, r])
    end(sql, p, "failed")
    end(sql, r, "failed")
    first, second = Open(database_url), Open(database_url)
    first.run(f"UPDATE job_queue SET {RETRIED} WHERE id = %s", (r,))
    second.run(f"UPDATE job_queue SET {RETRIED} WHERE id = %s", (p,))
    gate = paused_commit(sql, database_url, first)
    second.start_commit()
    wait_until_blocked(sql, second, lock_type="transactionid")
    gate.close()
    first.join()
    second.join()
    assert first.error is None and second.error is None
    for opened in (first, second):
        opened.close()
    assert states(sql, [p, r, c, g]) == ["pending", "pending", "waiting", "waiting"]
    assert unended(sql, g) == 2
    end(sql, p)
    end(sql, c)
    end(sql, r)
    assert state(sql, g) == "pending"


def test_a_member_cancelled_as_it_is_added_cancels_on_success(sql):
    # A member that waits for a job that already failed is cancelled by its
    # own insert: the batch has a member that did not succeed, so on_success
    # must never run, and on_complete runs once the batch is sealed.
    batch = sql.value("SELECT job_queue_batch_open('b', '{\"kind\": \"ok\"}',"
                      " '{\"kind\": \"done\"}')")
    on_success, on_complete = sql.rows(
        "SELECT on_success, on_complete FROM job_queue_batches WHERE id = %s", (batch,))[0]
    failed = insert(sql)
    end(sql, failed, "failed")
    member = insert(sql, "m", depends_on=[failed], batch_id=batch)
    other = insert(sql, "m", batch_id=batch)
    end(sql, other)
    assert state(sql, member) == "cancelled"
    sql.rows("SELECT job_queue_batch_seal(%s)", (batch,))
    assert states(sql, [on_success, on_complete]) == ["cancelled", "pending"]
    # The failed job retried brings the member back, and on_success with it.
    sql.rows(f"UPDATE job_queue SET {RETRIED} WHERE id = %s", (failed,))
    assert states(sql, [member, on_success]) == ["waiting", "waiting"]
    end(sql, failed)
    end(sql, member)
    assert state(sql, on_success) == "pending"


def _batch(sql):
    """An open batch with both callbacks: (id, on_success, on_complete)."""
    batch = sql.value("SELECT job_queue_batch_open('b', '{\"kind\": \"ok\"}',"
                      " '{\"kind\": \"done\"}')")
    return (batch, *sql.rows("SELECT on_success, on_complete FROM job_queue_batches"
                             " WHERE id = %s", (batch,))[0])


INSERT_FAILED_MEMBER = ("INSERT INTO job_queue (kind, batch_id, state, finished_at)"
                        " VALUES ('m', %s, 'failed', now()) RETURNING id")


def test_a_member_joining_failed_and_a_member_failing_take_the_counts_in_one_order(
        database_url, sql):
    # One commit ends a member failed: it locks on_success's count, then
    # cancels on_success's row. Another commits a member inserted failed,
    # which cancels on_success too. Both wait on a third session holding
    # the count; let go, they must not each hold what the other needs (the
    # join taking the row first, then the count, deadlocked every time).
    batch, on_success, on_complete = _batch(sql)
    joined = insert(sql, "m", batch_id=batch)
    holder = Open(database_url)
    holder.run("SELECT FROM job_queue_waits WHERE job_id = %s FOR UPDATE", (on_success,))
    ending, joining = Open(database_url), Open(database_url)
    ending.run(f"UPDATE job_queue SET {ENDED} WHERE id = %s", ("failed", joined))
    [(member,)] = joining.run(INSERT_FAILED_MEMBER, (batch,))
    ending.start_commit()
    wait_until_blocked(sql, ending)
    joining.start_commit()
    wait_until_blocked(sql, ending, joining)
    holder.conn.rollback()
    for opened in (ending, joining):
        opened.join()
        assert opened.error is None, opened.error
        opened.close()
    holder.close()
    assert state(sql, on_success) == "cancelled"
    # Each failed member holds it: only both retried and succeeding let it run.
    sql.rows("SELECT job_queue_batch_seal(%s)", (batch,))
    for job_id in (joined, member):
        assert state(sql, on_success) == "cancelled"
        sql.rows(f"UPDATE job_queue SET {RETRIED} WHERE id = %s", (job_id,))
        end(sql, job_id)
    assert states(sql, [on_success, on_complete]) == ["pending", "pending"]


def test_a_member_joining_failed_while_the_holder_is_retried_keeps_on_success_cancelled(
        database_url, sql):
    # m0 failed and cancelled on_success. m0 is retried, its commit held
    # inside its settling (it has taken on_success's count), while a member
    # inserted failed commits. Had the join not waited for the count, it
    # would have found on_success cancelled (nothing to do) and the retry
    # would have found no other failed member (the join's edge not yet
    # committed): on_success back to waiting, and run after m0 succeeds,
    # though a member failed. The join waits, then cancels it again.
    batch, on_success, _ = _batch(sql)
    m0 = insert(sql, "m", batch_id=batch)
    end(sql, m0, "failed")
    retrying, joining = Open(database_url), Open(database_url)
    retrying.run(f"UPDATE job_queue SET {RETRIED} WHERE id = %s", (m0,))
    [(m1,)] = joining.run(INSERT_FAILED_MEMBER, (batch,))
    gate = paused_commit(sql, database_url, retrying)
    joining.start_commit()
    wait_until_blocked(sql, joining, lock_type="transactionid")
    gate.close()
    for opened in (retrying, joining):
        opened.join()
        assert opened.error is None, opened.error
        opened.close()
    assert sql.rows("SELECT j.state, j.last_error, w.cancelled_by FROM job_queue AS j"
                    " JOIN job_queue_waits AS w ON w.job_id = j.id WHERE j.id = %s",
                    (on_success,)) == [("cancelled", f"parent job {m1} ended failed", m1)]
    sql.rows("SELECT job_queue_batch_seal(%s)", (batch,))
    end(sql, m0)
    assert state(sql, on_success) == "cancelled"  # m1 failed: on_success does not run
    sql.rows(f"UPDATE job_queue SET {RETRIED} WHERE id = %s", (m1,))
    end(sql, m1)
    assert state(sql, on_success) == "pending"


def _commit_both(first, second):
    """Both commits' errors, once both ended (None for one that committed)."""
    errors = []
    for opened in (first, second):
        opened.join()
        errors.append(opened.error)
        opened.close()
    return errors


def test_ending_a_member_and_joining_another_batch_cross_without_a_deadlock(database_url, sql):
    # a ends a member of batch 1 and adds one to batch 2; b ends a member of
    # batch 2 and adds one to batch 1. a's commit is held at its first
    # count (batch 1's); b's commit then must not take batch 2's counts and
    # wait for batch 1's holding them (each would wait for the other).
    one, two = _batch(sql), _batch(sql)
    x1, x2 = insert(sql, "m", batch_id=one[0]), insert(sql, "m", batch_id=two[0])
    a, b = Open(database_url), Open(database_url)
    a.run(f"UPDATE job_queue SET {ENDED} WHERE id = %s", ("succeeded", x1))
    a.run("INSERT INTO job_queue (kind, batch_id) VALUES ('m', %s)", (two[0],))
    b.run(f"UPDATE job_queue SET {ENDED} WHERE id = %s", ("succeeded", x2))
    b.run("INSERT INTO job_queue (kind, batch_id) VALUES ('m', %s)", (one[0],))
    gate = paused_commit(sql, database_url, a)
    b.start_commit()
    wait_until_blocked(sql, b, lock_type="transactionid")
    gate.close()
    assert _commit_both(a, b) == [None, None]
    for batch, on_success, on_complete in (one, two):
        assert unended(sql, on_success) == unended(sql, on_complete) == 2  # a member, the seal


def test_a_commit_ending_a_job_and_inserting_a_child_of_another_ending_one(database_url, sql):
    # c waits for p and x. a ends p. b ends x and inserts a job waiting for
    # p: its commit must take p's row (a's, until a commits) before c's
    # count, which a's commit takes.
    p, x = insert(sql), insert(sql)
    c = insert(sql, depends_on=[p, x])
    a, b = Open(database_url), Open(database_url)
    a.run(f"UPDATE job_queue SET {ENDED} WHERE id = %s", ("succeeded", p))
    b.run(f"UPDATE job_queue SET {ENDED} WHERE id = %s", ("succeeded", x))
    [(late,)] = b.run("INSERT INTO job_queue (kind, depends_on) VALUES ('k', %s) RETURNING id",
                      ([p],))
    b.start_commit()
    wait_until_blocked(sql, b, lock_type="transactionid")
    a.start_commit()
    assert _commit_both(a, b) == [None, None]
    assert states(sql, [c, late]) == ["pending", "pending"]


def test_a_commit_releasing_a_child_and_one_inserting_its_child_cross_without_a_deadlock(
        database_url, sql):
    # j waits for p and q. b ends q and inserts k waiting for j: its commit
    # takes j's row (k's parent) and j's count. a ends p and releases j: its
    # commit takes j's count and j's row. A third session holds j's row
    # until both commits wait; then b must not get j's row while a holds
    # j's count (each would wait for the other): a takes j's row first too.
    p, q = insert(sql), insert(sql)
    j = insert(sql, depends_on=[p, q])
    a, b, holder = Open(database_url), Open(database_url), Open(database_url)
    b.run(f"UPDATE job_queue SET {ENDED} WHERE id = %s", ("succeeded", q))
    [(k,)] = b.run("INSERT INTO job_queue (kind, depends_on) VALUES ('k', %s) RETURNING id",
                   ([j],))
    a.run(f"UPDATE job_queue SET {ENDED} WHERE id = %s", ("succeeded", p))
    holder.run("SELECT FROM job_queue WHERE id = %s FOR NO KEY UPDATE", (j,))
    b.start_commit()
    wait_until_blocked(sql, b)
    a.start_commit()
    wait_until_blocked(sql, a, b)
    holder.conn.rollback()
    holder.close()
    assert _commit_both(a, b) == [None, None]
    assert states(sql, [j, k]) == ["pending", "waiting"]
    end(sql, j)
    assert state(sql, k) == "pending"


def test_a_seal_and_a_member_joining_with_an_end_cross_without_a_deadlock(database_url, sql):
    # a seals batch 1 (holding its row from then on). b ends a member of
    # batch 2 and adds one to batch 1: its commit waits for batch 1's row.
    # a then seals batch 2 and commits, taking both batches' counts: b
    # must not be holding batch 2's meanwhile. b is then refused, batch 1
    # being sealed.
    one, two = _batch(sql), _batch(sql)
    x2 = insert(sql, "m", batch_id=two[0])
    a, b = Open(database_url), Open(database_url)
    a.run("SELECT job_queue_batch_seal(%s)", (one[0],))
    b.run(f"UPDATE job_queue SET {ENDED} WHERE id = %s", ("succeeded", x2))
    b.run("INSERT INTO job_queue (kind, batch_id) VALUES ('m', %s)", (one[0],))
    b.start_commit()
    wait_until_blocked(sql, b, lock_type="transactionid")
    a.run("SELECT job_queue_batch_seal(%s)", (two[0],))
    a.start_commit()
    sealed, joined = _commit_both(a, b)
    assert sealed is None
    assert "is sealed: no member can be added to it" in str(joined).splitlines()[0]
    # Batch 1, sealed empty, completed; batch 2 waits for its member, whose
    # end was b's and went with it.
    assert states(sql, [*one[1:], *two[1:], x2]) == ["pending", "pending", "waiting",
                                                     "waiting", "pending"]


def test_a_failure_reaching_a_grandchild_and_a_worker_s_end_cross_without_a_deadlock(
        database_url, sql):
    # c waits for p; g for c and q; d for p and q (g's id below d's). p
    # fails: its commit takes c's and d's rows, and its walk cancels g too.
    # A worker ends q: its commit takes g's row, then d's. Held after its
    # locks, the failing commit must have taken g's already.
    p, q = insert(sql), insert(sql)
    c = insert(sql, depends_on=[p])
    g = insert(sql, depends_on=[c, q])
    d = insert(sql, depends_on=[p, q])
    failing, worker = Open(database_url), Open(database_url)
    failing.run(f"UPDATE job_queue SET {ENDED} WHERE id = %s", ("failed", p))
    worker.run(f"UPDATE job_queue SET {ENDED} WHERE id = %s", ("succeeded", q))
    gate = paused_commit(sql, database_url, failing)
    worker.start_commit()
    wait_until_blocked(sql, worker, lock_type="transactionid")
    gate.close()
    assert _commit_both(failing, worker) == [None, None]
    assert states(sql, [c, g, d]) == ["cancelled", "cancelled", "cancelled"]


def test_a_job_cancelled_by_hand_while_a_failure_walks_is_not_brought_back(database_url, sql):
    # p -> c -> g. An operator cancels g, the transaction open, while p
    # fails. The failure's commit waits for g's row, then finds g cancelled
    # by hand: not the failure's to bring back when p is retried.
    p = insert(sql)
    c = insert(sql, depends_on=[p])
    g = insert(sql, depends_on=[c])
    by_hand, failing = Open(database_url), Open(database_url)
    by_hand.run(f"UPDATE job_queue SET {ENDED} WHERE id = %s", ("cancelled", g))
    failing.run(f"UPDATE job_queue SET {ENDED} WHERE id = %s", ("failed", p))
    failing.start_commit()
    wait_until_blocked(sql, failing, lock_type="transactionid")
    by_hand.conn.commit()
    by_hand.close()
    failing.join()
    assert failing.error is None
    failing.close()
    sql.rows(f"UPDATE job_queue SET {RETRIED} WHERE id = %s", (p,))
    assert states(sql, [c, g]) == ["waiting", "cancelled"]


def test_retention_keeps_a_cancelled_parent_a_retry_would_bring_back(sql, store):
    # a -> b -> c -> d, d also waiting for y and running whatever c does. a
    # fails: b and c are cancelled, d still waits (for y). Retention keeps
    # c (d has not ended) and a (failed jobs are kept longer), but took b,
    # whose only child had ended. Then a is retried: c comes back waiting
    # for b, which is gone and will never end, and d waits for c for ever.
    a, y = insert(sql), insert(sql)
    b = insert(sql, depends_on=[a])
    c = insert(sql, depends_on=[b])
    d = insert(sql, depends_on=[c, y], on_parent_failure="run")
    end(sql, a, "failed")
    assert states(sql, [b, c, d]) == ["cancelled", "cancelled", "waiting"]
    sql.rows("UPDATE job_queue SET finished_at = now() - interval '2 days'"
             " WHERE finished_at IS NOT NULL")
    store.prune_finished(["succeeded", "cancelled"], 3600)
    sql.rows(f"UPDATE job_queue SET {RETRIED} WHERE id = %s", (a,))
    end(sql, a)
    present = [job for job in (b, c) if state(sql, job) is not None]
    assert state(sql, c) != "waiting" or unended(sql, c) > 0, (
        f"c waits for {unended(sql, c)} parents; of b and c, {present} are left")
    if state(sql, b) is not None:
        end(sql, b)
        end(sql, c)
        end(sql, y)
        assert state(sql, d) == "pending"


def test_a_retry_leaves_cancelled_a_descendant_whose_cancelled_parent_was_deleted(sql):
    # a -> b -> c. a fails: b and c are cancelled. b is deleted (by hand, or
    # by retention once nothing would bring c back). Retrying a must not
    # bring c back waiting for b, which will never end: a deleted parent
    # counts as cancelled, so c stays cancelled.
    a = insert(sql)
    b = insert(sql, depends_on=[a])
    c = insert(sql, depends_on=[b])
    end(sql, a, "failed")
    sql.rows("DELETE FROM job_queue WHERE id = %s", (b,))
    sql.rows(f"UPDATE job_queue SET {RETRIED} WHERE id = %s", (a,))
    assert state(sql, c) == "cancelled", f"c waits for {unended(sql, c)} parents"


# The completer ends a worker's runs in one UPDATE ... WHERE id = ANY(...),
# and so do the reaper and a dead worker's supervisor. Each ended parent
# counts for its children, row by row in id order, and holds each child's
# count to its commit: two such writes whose parents share children the
# other way round wait for each other. A stop (a trigger on the counts,
# this test's own) holds each write just after it counted its first child,
# so that both are there at once.
STOP_AFTER_A_COUNT = """
CREATE FUNCTION test_stop() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(4242);
    RETURN NULL;
END;
$$;
CREATE TRIGGER test_stop AFTER UPDATE ON job_queue_waits
FOR EACH ROW EXECUTE FUNCTION test_stop();
"""


def test_rows_without_dependencies_call_no_function_of_dependencies(database_url, sql):
    # Every trigger the dependencies added is skipped by its WHEN clause for
    # a row that names no job and no batch: inserted one by one and many at
    # once, ended, retried, rewritten whole, deleted, no function the
    # dependencies' migrations create is called.
    created = [name for migration in WORKFLOWS_MIGRATIONS
               for name in re.findall(r"^CREATE FUNCTION (\w+)", migration.read_text(),
                                      re.MULTILINE)]
    conn = Sql(database_url)
    conn.rows("BEGIN")
    conn.rows("SET LOCAL track_functions = 'pl'")
    ids = [insert(conn) for _ in range(3)]
    conn.rows("INSERT INTO job_queue (kind) SELECT 'k' FROM generate_series(1, 3)")
    for job_id in ids:
        end(conn, job_id, "failed")
    conn.rows(f"UPDATE job_queue SET {RETRIED} WHERE id = ANY(%s)", (ids,))
    # As an ORM that writes every column does.
    conn.rows("UPDATE job_queue SET depends_on = depends_on, batch_id = batch_id, priority = 1")
    conn.rows("DELETE FROM job_queue")
    called = conn.rows("SELECT funcname, calls FROM pg_stat_xact_user_functions"
                       " WHERE funcname = ANY(%s) ORDER BY funcname", (created,))
    conn.rows("COMMIT")
    conn.close()
    assert {"job_queue_parent_changed", "job_queue_refuse_rewiring"} <= set(created)
    assert called == []


def test_a_failure_down_a_chain_reads_no_table_whole_beside_a_fan_out(database_url, sql):
    # A fan-out of thousands of waiting children dominates the statistics:
    # the end of a parent planned for no particular parent takes it for one
    # with thousands of children, and read every edge and every waiting row
    # (a hash join), once for the failure and once more for each step of
    # the chain it cancels. Counted in the failing transaction itself, its
    # settling run before its commit (SET CONSTRAINTS ... IMMEDIATE).
    root = insert(sql)
    sql.rows("INSERT INTO job_queue (kind, depends_on)"
             " SELECT 'k', ARRAY[%s::bigint] FROM generate_series(1, 5000)", (root,))
    sql.rows("ANALYZE job_queue")
    sql.rows("ANALYZE job_queue_edges")
    ids = [row[0] for row in sql.rows(
        "SELECT job_id FROM job_queue_workflow('chain', (SELECT jsonb_agg(jsonb_build_object("
        "'ref', 's' || n, 'kind', 'k', 'after', CASE WHEN n > 1 THEN jsonb_build_array("
        "'s' || (n - 1)) ELSE '[]' END) ORDER BY n) FROM generate_series(1, 30) AS n))")]
    failing = Open(database_url)
    failing.run(f"UPDATE job_queue SET {ENDED} WHERE id = %s", ("failed", ids[0]))
    failing.run("SET CONSTRAINTS job_queue_settle IMMEDIATE")
    scans = failing.run("SELECT relname, seq_scan FROM pg_stat_xact_user_tables"
                        " WHERE relname IN ('job_queue', 'job_queue_edges') AND seq_scan > 0")
    failing.conn.commit()
    failing.close()
    assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'cancelled'") == 29
    assert scans == []
