"""Jobs that wait for jobs, in the database alone (migrations/0019): the
release in the transaction that ends the last parent, under interleavings
forced one statement at a time, the failure policies, retries, deletes,
workflows and batches from SQL, and retention."""

import threading

import psycopg2
import pytest

from motir_supervisor import db
from testbed.polling import wait_until
from testbed.sql import Sql
from tests.dependencies import ENDED, end, in_transaction, insert, state, states


def test_a_chain_waits_and_each_end_releases_the_next(sql, store):
    a = insert(sql)
    b = insert(sql, depends_on=[a])
    c = insert(sql, depends_on=[b])
    assert states(sql, [a, b, c]) == ["pending", "waiting", "waiting"]
    claimed = [job.id for job in store.claim_due_jobs("w", 10, 30, None)[0]]
    assert claimed == [a]  # a waiting row is never claimed
    end(sql, a)
    assert states(sql, [b, c]) == ["pending", "waiting"]
    end(sql, b)
    assert state(sql, c) == "pending"


def test_a_child_of_ended_parents_is_inserted_released(sql):
    a = insert(sql)
    end(sql, a)
    child = insert(sql, depends_on=[a])
    assert state(sql, child) == "pending"


def _in_thread(call, *args):
    """Run call(*args) on a thread; (thread, done event)."""
    done = threading.Event()

    def run():
        call(*args)
        done.set()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, done


PAUSE_COUNTS = """
CREATE FUNCTION test_pause() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_advisory_xact_lock_shared(4242); RETURN NEW; END $$;
CREATE TRIGGER test_pause BEFORE UPDATE ON job_queue_waits
FOR EACH ROW EXECUTE FUNCTION test_pause()"""


def test_parents_ending_together_release_their_child_once(database_url, sql):
    # Two transactions end the two parents and commit at once. The first
    # commit takes the child's count and is held there (the test's pause);
    # the second's commit waits for the count's row lock, then counts from
    # the first's result, sees zero and releases.
    sql.rows(PAUSE_COUNTS)
    gate = Sql(database_url)
    for _ in range(3):
        a, b = insert(sql), insert(sql)
        child = insert(sql, depends_on=[a, b])
        first, one = in_transaction(database_url)
        second, two = in_transaction(database_url)
        one.execute(f"UPDATE job_queue SET {ENDED} WHERE id = %s", ("succeeded", a))
        two.execute(f"UPDATE job_queue SET {ENDED} WHERE id = %s", ("succeeded", b))
        gate.rows("SELECT pg_advisory_lock(4242)")
        first_thread, first_done = _in_thread(first.commit)
        wait_until(lambda: sql.value(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted") == 1, 10)
        second_thread, second_done = _in_thread(second.commit)
        assert not second_done.wait(0.3), "the second commit did not wait for the first's count"
        gate.rows("SELECT pg_advisory_unlock(4242)")
        for thread in (first_thread, second_thread):
            thread.join(10)
        assert first_done.is_set() and second_done.is_set()
        first.close()
        second.close()
        assert state(sql, child) == "pending"
        assert sql.value("SELECT unended FROM job_queue_waits WHERE job_id = %s", (child,)) == 0
    gate.close()


NAIVE_RELEASE = """
UPDATE job_queue AS c SET state = 'pending'
WHERE c.id = %s AND c.state = 'waiting'
  AND NOT EXISTS (SELECT FROM job_queue AS p WHERE p.id = ANY(c.depends_on)
                  AND p.state NOT IN ('succeeded', 'failed', 'cancelled'))"""


def test_the_naive_release_strands_a_child_the_same_interleaving_releases(database_url, sql):
    # The negative control: each parent's transaction checks its child's
    # other parents itself. Both check before either commits, each sees the
    # other running, and nobody releases the child.
    sql.rows("ALTER TABLE job_queue DISABLE TRIGGER job_queue_parent_changed")
    a, b = insert(sql), insert(sql)
    child = insert(sql, depends_on=[a, b])
    first, one = in_transaction(database_url)
    second, two = in_transaction(database_url)
    one.execute(f"UPDATE job_queue SET {ENDED} WHERE id = %s", ("succeeded", a))
    two.execute(f"UPDATE job_queue SET {ENDED} WHERE id = %s", ("succeeded", b))
    one.execute(NAIVE_RELEASE, (child,))
    two.execute(NAIVE_RELEASE, (child,))
    first.commit()
    second.commit()
    first.close()
    second.close()
    assert states(sql, [a, b]) == ["succeeded", "succeeded"]
    assert state(sql, child) == "waiting"  # stranded for ever


def test_a_child_inserted_while_its_parent_ends_is_released_either_way(database_url, sql):
    # The insert's transaction open: the parent's end does not wait for it
    # (the insert takes its parents at its commit), and the commit sees the
    # parent ended.
    parent = insert(sql)
    inserting, cur = in_transaction(database_url)
    cur.execute("INSERT INTO job_queue (kind, depends_on) VALUES ('k', %s) RETURNING id",
                ([parent],))
    child = cur.fetchone()[0]
    end(sql, parent)  # autocommit: it would hang here if it waited for the insert
    inserting.commit()
    inserting.close()
    assert state(sql, child) == "pending"
    # The end's transaction open: the insert's commit waits for it, then
    # counts the parent ended.
    parent = insert(sql)
    ending, cur = in_transaction(database_url)
    cur.execute(f"UPDATE job_queue SET {ENDED} WHERE id = %s", ("succeeded", parent))
    inserting, insert_cursor = in_transaction(database_url)
    insert_cursor.execute("INSERT INTO job_queue (kind, depends_on) VALUES ('k', %s)"
                          " RETURNING id", ([parent],))
    child = insert_cursor.fetchone()[0]
    thread, done = _in_thread(inserting.commit)
    assert not done.wait(0.3), "the insert's commit did not wait for the end of its parent"
    ending.commit()
    thread.join(10)
    assert done.is_set()
    assert state(sql, child) == "pending"
    for conn in (ending, inserting):
        conn.close()


def test_a_failure_cancels_the_waiting_descendants_and_runs_the_clean_up(sql):
    a = insert(sql)
    b = insert(sql, depends_on=[a])
    c = insert(sql, depends_on=[b])
    clean_up = insert(sql, depends_on=[b], on_parent_failure="run")
    end(sql, a, "failed")
    assert states(sql, [b, c, clean_up]) == ["cancelled", "cancelled", "pending"]
    assert sql.value("SELECT last_error FROM job_queue WHERE id = %s", (b,)) == \
        f"parent job {a} ended failed"
    assert sql.value("SELECT last_error FROM job_queue WHERE id = %s", (c,)) == \
        f"parent job {b} was cancelled: job {a} ended failed"


def test_a_retried_parent_brings_back_what_its_failure_cancelled(sql, store):
    a, other = insert(sql), insert(sql)
    b = insert(sql, depends_on=[a])
    c = insert(sql, depends_on=[b, other])
    end(sql, a, "failed")
    end(sql, other, "failed")
    assert states(sql, [b, c]) == ["cancelled", "cancelled"]
    assert store.retry_job(a).changed
    # c still has a failed parent of its own: it stays cancelled until that
    # one is retried too.
    assert states(sql, [a, b, c]) == ["pending", "waiting", "cancelled"]
    assert sql.value("SELECT last_error FROM job_queue WHERE id = %s", (c,)) == \
        f"parent job {other} ended failed"  # the job whose retry brings it back
    assert store.retry_job(other).changed
    assert states(sql, [b, c]) == ["waiting", "waiting"]
    end(sql, a)
    end(sql, other)
    assert states(sql, [b, c]) == ["pending", "waiting"]
    end(sql, b)
    assert state(sql, c) == "pending"


def test_a_cancelled_child_retried_by_hand_waits_for_its_parent(sql, store):
    a = insert(sql)
    b = insert(sql, depends_on=[a])
    c = insert(sql, depends_on=[b])
    end(sql, b, "cancelled")  # by hand, while a still runs
    assert state(sql, c) == "cancelled"
    assert store.retry_job(b).changed
    assert states(sql, [b, c]) == ["waiting", "waiting"]


def test_a_deep_chain_is_cancelled_and_brought_back_in_one_statement_each(sql, store):
    # However deep the graph, the triggers nest two levels: a 1,000-step
    # chain would overflow the server's stack one level per step.
    ids = [row[0] for row in sql.rows(
        "SELECT job_id FROM job_queue_workflow('chain', (SELECT jsonb_agg(jsonb_build_object("
        "'ref', 's' || n, 'kind', 'k', 'after', CASE WHEN n > 1 THEN jsonb_build_array("
        "'s' || (n - 1)) ELSE '[]' END) ORDER BY n) FROM generate_series(1, 1000) AS n))")]
    end(sql, ids[0], "failed")
    assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'cancelled'") == 999
    assert store.retry_job(ids[0]).changed
    assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'waiting'") == 999


def test_cancelling_or_deleting_an_unended_parent_ends_its_children(sql, store):
    a, b = insert(sql), insert(sql)
    child_a = insert(sql, depends_on=[a])
    child_b = insert(sql, depends_on=[b], on_parent_failure="run")
    assert store.cancel_job(a).changed
    sql.rows("DELETE FROM job_queue WHERE id = %s", (b,))
    assert states(sql, [child_a, child_b]) == ["cancelled", "pending"]
    assert sql.value("SELECT last_error FROM job_queue WHERE id = %s", (child_a,)) == \
        f"parent job {a} ended cancelled"
    assert sql.value("SELECT count(*) FROM job_queue_edges WHERE parent_id = %s", (b,)) == 0


@pytest.mark.parametrize("depends_on, message", [
    ([999999], "depends_on names job 999999, which does not exist"),
    ([None], "which is NULL"),
])
def test_a_bad_dependency_is_one_line_and_inserts_nothing(sql, depends_on, message):
    with pytest.raises(psycopg2.Error) as raised:
        insert(sql, depends_on=depends_on)
    assert message in str(raised.value).splitlines()[0]
    assert sql.value("SELECT count(*) FROM job_queue") == 0


def test_a_waiting_job_cannot_hold_a_unique_key(sql):
    # Two of them could not both be released into the unique index.
    parent = insert(sql)
    message = "cannot have a unique_key"
    with pytest.raises(psycopg2.Error) as raised:
        insert(sql, depends_on=[parent], unique_key="once")
    assert message in str(raised.value).splitlines()[0]
    assert sql.value("SELECT count(*) FROM job_queue") == 1


@pytest.mark.parametrize("change", [
    "depends_on = ARRAY[%(other)s::bigint]",   # a waiting row given another parent
    "depends_on = NULL",                       # ... or none
    "batch_id = %(batch)s",                    # a row moved into a batch
])
def test_a_job_keeps_the_parents_and_batch_it_was_inserted_with(sql, change):
    # Its edges, count and membership were wired at its insert: a change
    # would wire nothing, so it is refused and the row stays as it was.
    parent, other = insert(sql), insert(sql)
    child = insert(sql, depends_on=[parent])
    batch = sql.value("SELECT job_queue_batch_open('b', NULL, NULL)")
    with pytest.raises(psycopg2.Error) as raised:
        sql.rows(f"UPDATE job_queue SET {change} WHERE id = %(child)s",
                 {"other": other, "batch": batch, "child": child})
    column = change.split()[0]
    assert str(raised.value).splitlines()[0] == (
        f"job {child}: {column} is set when a job is inserted and cannot be changed;"
        + (" insert a new job that waits for the others" if column == "depends_on" else
           " insert a new member (job_queue_batch_add, or an INSERT with batch_id)"))
    assert sql.rows("SELECT depends_on, batch_id, state FROM job_queue WHERE id = %s",
                    (child,)) == [([parent], None, "waiting")]
    # Written again unchanged, as an ORM that writes every column does, is no change.
    sql.rows("UPDATE job_queue SET depends_on = depends_on, batch_id = batch_id, priority = 5"
             " WHERE id = %s", (child,))
    end(sql, parent)
    assert state(sql, child) == "pending"


@pytest.mark.parametrize("steps, message", [
    ('[{"ref": "a", "kind": "k", "after": ["b"]}, {"ref": "b", "kind": "k", "after": ["a"]}]',
     'step "a": after names "b", which is not listed before it'),
    ('[{"ref": "a", "kind": "k", "after": ["zz"]}]', 'after names "zz", which is no step of it'),
    ('[{"ref": "a", "kind": "k"}, {"ref": "a", "kind": "k"}]', 'step "a": two steps have this ref'),
    ('[{"ref": "a", "kind": "k", "afer": ["b"]}]', 'step 1: has an unknown field "afer"'),
    ('[{"ref": "a"}]', "step 1: has no kind"),
    ('{"ref": "a"}', "steps must be a JSON array of objects, not object"),
])
def test_a_bad_workflow_is_one_line_and_inserts_nothing(sql, steps, message):
    with pytest.raises(psycopg2.Error) as raised:
        sql.rows("SELECT * FROM job_queue_workflow('w', %s)", (steps,))
    assert message in str(raised.value).splitlines()[0]
    assert sql.value("SELECT count(*) FROM job_queue") == 0
    assert sql.value("SELECT count(*) FROM job_queue_workflows") == 0


def test_a_workflow_from_sql_is_a_diamond_with_named_steps(sql):
    rows = sql.rows(
        "SELECT ref, job_id FROM job_queue_workflow('index_repo', '["
        '{"ref": "fetch", "kind": "fetch", "payload": {"repo": 7}},'
        '{"ref": "left", "kind": "embed", "after": ["fetch"]},'
        '{"ref": "right", "kind": "embed", "after": ["fetch"]},'
        '{"ref": "publish", "kind": "publish", "after": ["left", "right"]}]\')')
    ids = dict(rows)
    assert sql.rows("SELECT step, depends_on, state FROM job_queue ORDER BY id") == [
        ("fetch", None, "pending"), ("left", [ids["fetch"]], "waiting"),
        ("right", [ids["fetch"]], "waiting"), ("publish", [ids["left"], ids["right"]], "waiting")]
    end(sql, ids["fetch"])
    end(sql, ids["left"])
    assert state(sql, ids["publish"]) == "waiting"
    end(sql, ids["right"])
    assert state(sql, ids["publish"]) == "pending"


def callbacks(sql, batch):
    return sql.rows("SELECT on_success, on_complete FROM job_queue_batches WHERE id = %s",
                    (batch,))[0]


def test_a_batch_of_one_and_an_empty_batch_complete(sql):
    batch = sql.value("SELECT job_queue_batch('one', '[{\"kind\": \"m\"}]',"
                      " '{\"kind\": \"ok\"}', '{\"kind\": \"done\"}')")
    on_success, on_complete = callbacks(sql, batch)
    assert states(sql, [on_success, on_complete]) == ["waiting", "waiting"]
    member = sql.value("SELECT id FROM job_queue WHERE batch_id = %s", (batch,))
    end(sql, member)
    assert states(sql, [on_success, on_complete]) == ["pending", "pending"]
    empty = sql.value("SELECT job_queue_batch('none', '[]', '{\"kind\": \"ok\"}', NULL)")
    assert state(sql, callbacks(sql, empty)[0]) == "pending"


def test_a_batch_counts_its_members_until_sealed_and_a_retried_member(sql, store):
    batch = sql.value("SELECT job_queue_batch_open('b', '{\"kind\": \"ok\"}',"
                      " '{\"kind\": \"done\"}')")
    on_success, on_complete = callbacks(sql, batch)
    first = insert(sql, "m", batch_id=batch)
    end(sql, first, "failed")
    second = insert(sql, "m", batch_id=batch)
    end(sql, second)
    assert states(sql, [on_success, on_complete]) == ["cancelled", "waiting"]  # not sealed
    sql.rows("SELECT job_queue_batch_seal(%s)", (batch,))
    assert state(sql, on_complete) == "pending"
    with pytest.raises(psycopg2.Error, match="is sealed: no member can be added"):
        insert(sql, "m", batch_id=batch)
    # The failed member retried, and then succeeding, lets on_success run.
    assert store.retry_job(first).changed
    assert state(sql, on_success) == "waiting"
    end(sql, first)
    assert state(sql, on_success) == "pending"


@pytest.mark.parametrize("how", ["failed", "cancelled", "succeeded"])
def test_a_member_ended_before_it_joined_counts_as_ending_at_its_join(
        database_url, sql, store, how):
    # A member inserted and ended by one transaction (or inserted ended)
    # joins its batch as that transaction commits: its end counts then.
    batch = sql.value("SELECT job_queue_batch_open('b', '{\"kind\": \"ok\"}',"
                      " '{\"kind\": \"done\"}')")
    on_success, on_complete = callbacks(sql, batch)
    producer, cur = in_transaction(database_url)
    cur.execute("INSERT INTO job_queue (kind, batch_id) VALUES ('m', %s) RETURNING id", (batch,))
    [member] = cur.fetchone()
    cur.execute(f"UPDATE job_queue SET {ENDED} WHERE id = %s", (how, member))
    producer.commit()
    producer.close()
    ended = sql.value("INSERT INTO job_queue (kind, batch_id, state, finished_at)"
                      " VALUES ('m', %s, %s, now()) RETURNING id", (batch, how))
    sql.rows("SELECT job_queue_batch_seal(%s)", (batch,))
    assert state(sql, on_complete) == "pending"
    if how == "succeeded":
        assert state(sql, on_success) == "pending"
        return
    assert state(sql, on_success) == "cancelled"
    assert sql.value("SELECT last_error FROM job_queue WHERE id = %s",
                     (on_success,)) == f"parent job {member} ended {how}"
    # Each of them holds it: retried and succeeding, both let it run.
    for job_id in (member, ended):
        assert state(sql, on_success) == "cancelled"
        assert store.retry_job(job_id).changed
        end(sql, job_id)
    assert state(sql, on_success) == "pending"


def test_rows_without_dependencies_fire_none_of_it(database_url, sql):
    conn = Sql(database_url)
    conn.rows("SET track_functions = 'pl'")
    ids = [insert(conn) for _ in range(5)]
    for job_id in ids:
        end(conn, job_id)
    called = conn.value("SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions"
                        " WHERE funcname LIKE 'job_queue_parent%%'"
                        " OR funcname IN ('job_queue_mark_dependent', 'job_queue_release')")
    conn.close()
    assert called == 0
    assert sql.value("SELECT count(*) FROM job_queue WHERE has_dependents") == 0


def test_retention_keeps_what_a_waiting_job_needs_and_a_workflow_whole(sql, store):
    parent = insert(sql)
    child = insert(sql, depends_on=[parent])
    lone = insert(sql)
    wf = dict(sql.rows("SELECT ref, job_id FROM job_queue_workflow('w', '["
                       '{"ref": "a", "kind": "k"}, {"ref": "b", "kind": "k", "after": ["a"]}]\')'))
    for job_id in (parent, lone, wf["a"]):
        end(sql, job_id)
    sql.rows("UPDATE job_queue SET state = 'running', locked_by = 'w',"
             " lease_expires_at = now() + interval '1 minute' WHERE id = %s", (child,))
    sql.rows("UPDATE job_queue SET finished_at = now() - interval '2 days'"
             " WHERE finished_at IS NOT NULL")
    sql.rows("UPDATE job_queue_workflows SET created_at = now() - interval '2 days'")
    assert store.prune_finished(["succeeded", "cancelled"], 3600) == 1  # the lone job only
    assert store.prune_workflows(3600, None) == 0  # its step b has not ended
    end(sql, wf["b"])
    end(sql, child)
    sql.rows("UPDATE job_queue SET finished_at = now() - interval '2 days'")
    assert store.prune_workflows(3600, None) == 2
    assert store.prune_finished(["succeeded", "cancelled"], 3600) == 2
    assert sql.value("SELECT count(*) FROM job_queue") == 0
    assert sql.value("SELECT count(*) FROM job_queue_workflows") == 0
    assert sql.value("SELECT count(*) FROM job_queue_edges") == 0


def test_the_queue_status_counts_waiting_jobs(sql):
    parent = insert(sql)
    insert(sql, depends_on=[parent])
    ops = db.JobStore(sql.conn.dsn)
    try:
        counts = {state: jobs for _queue, state, jobs in ops.queue_status()["counts"]}
    finally:
        ops.close()
    assert counts == {"pending": 1, "waiting": 1}
