"""Workflows and batches from Python against a real server, on psycopg2 in
the caller's transaction (every driver is in test_drivers.py): a graph the
builder refuses inserts nothing and leaves the transaction usable; a batch
of one, and one opened and added to over time, release their callbacks; a
handler reads its parents' outputs and its batch's counts with one query
each; the rows show the new columns, and `status` counts the waiting jobs.
The jobs run through testing.drain, which claims and ends them as a
worker does."""

import psycopg2
import psycopg2.errors
import psycopg2.extensions
import psycopg2.extras
import pytest
from click.testing import CliRunner

from motir_supervisor import (Batch, JobState, batch, cli, db, enqueue, get_job, open_batch,
                              registry, testing, workflow)
from motir_supervisor.worker.upstream import Upstream
from tests.apps import workflow_steps  # noqa: F401 - registers the kinds

IDLE = psycopg2.extensions.TRANSACTION_STATUS_IDLE


@pytest.fixture
def conn(database_url):
    """A connection as a web request holds it: not in autocommit."""
    connection = psycopg2.connect(database_url)
    yield connection
    connection.close()


def counts(sql):
    return sql.rows("SELECT (SELECT count(*) FROM job_queue),"
                    " (SELECT count(*) FROM job_queue_workflows)")[0]


def outputs(sql, kind):
    return [row[0] for row in sql.rows(
        "SELECT output FROM job_queue WHERE kind = %s ORDER BY id", (kind,))]


# -- workflows -----------------------------------------------------------------------


@pytest.mark.parametrize("after, message", [
    (["nope"], "workflow 'w': step 'last' is after 'nope', which is no step of it"),
    (["last"], "workflow 'w': its steps wait for one another in a cycle: 'last' after 'last'"),
])
def test_a_bad_graph_raises_one_line_and_inserts_nothing(conn, sql, after, message):
    enqueue(conn, "wf_step")  # the caller's own work, in the same transaction
    with pytest.raises(ValueError) as raised:
        with workflow(conn, "w") as wf:
            first = wf.add("wf_step")
            wf.add("wf_step", ref="last", after=[first, *after])
    assert str(raised.value) == message
    conn.commit()  # the transaction was left usable
    assert counts(sql) == (1, 0)


def test_a_graph_the_database_refuses_fails_the_statement_and_inserts_nothing(conn, sql):
    with pytest.raises(psycopg2.Error) as raised:
        with workflow(conn, "w") as wf:
            wf.add("wf_step", depends_on=[424242])
    assert "424242" in db.one_line(raised.value, "")
    conn.rollback()
    assert counts(sql) == (0, 0)


def test_a_diamond_runs_in_order_and_each_step_reads_its_parents_outputs(
        conn, sql, database_url):
    with workflow(conn, "diamond") as wf:
        top = wf.add("wf_step", {"output": "top"}, ref="top")
        left = wf.add("wf_step", {"output": "left"}, ref="left", after=[top])
        right = wf.add("wf_step", {"output": "right"}, ref="right", after=["top"])
        bottom = wf.add("wf_reads_upstream", ref="bottom", after=[left, right])
    conn.commit()
    assert [step.id for step in (top, left, right)] == sorted([top.id, left.id, right.id])
    rows = {row.id: row for row in [get_job(conn, s.id) for s in (top, left, right, bottom)]}
    assert [rows[s.id].state for s in (top, left, right, bottom)] == [
        JobState.PENDING, JobState.WAITING, JobState.WAITING, JobState.WAITING]
    assert {(r.workflow_id, r.step) for r in rows.values()} == {
        (wf.id, "top"), (wf.id, "left"), (wf.id, "right"), (wf.id, "bottom")}
    testing.drain(database_url)
    assert sql.value("SELECT output FROM job_queue WHERE id = %s", (bottom.id,)) == {
        "parents": [[left.id, "left", "wf_step", "succeeded", "left"],
                    [right.id, "right", "wf_step", "succeeded", "right"]],
        "batch": None}


def test_a_step_may_be_added_before_the_steps_it_waits_for(conn, sql, database_url):
    with workflow(conn, "backwards") as wf:
        last = wf.add("wf_reads_upstream", ref="last", after=["middle"])
        middle = wf.add("wf_step", {"output": "m"}, ref="middle", after=["first"])
        first = wf.add("wf_step", {"output": "f"}, ref="first")
    conn.commit()
    assert first.id < middle.id < last.id  # a parent's id comes before its child's
    testing.drain(database_url)
    assert sql.value("SELECT output FROM job_queue WHERE id = %s", (last.id,))["parents"] == [
        [middle.id, "middle", "wf_step", "succeeded", "m"]]


# -- j.parents and j.batch -------------------------------------------------------------


class StatementLog:
    """Every statement a connection sends (psycopg2's LoggingConnection)."""

    def __init__(self):
        self.sent = []

    def write(self, statement):
        self.sent.append(statement)


def counted_upstream(database_url):
    """An Upstream as a worker makes it, whose connection logs what it sends."""
    log = StatementLog()
    store = db.JobStore(database_url)
    logged = psycopg2.connect(database_url, connection_factory=psycopg2.extras.LoggingConnection)
    logged.initialize(log)
    logged.autocommit = True
    store.session._conn = logged
    return Upstream(store), store, log


def handle(job_id, upstream):
    return registry.Job(id=job_id, kind="wf_reads_upstream", queue="default", payload={},
                        attempt=1, max_attempts=1, checkpoint_data=None, stopping=None,
                        save_checkpoint=lambda data: True, upstream=upstream)


def test_j_parents_is_one_query_when_first_read_and_none_after(conn, sql, database_url):
    parents = [enqueue(conn, "wf_step", {"output": {"n": n}}) for n in range(3)]
    child = enqueue(conn, "wf_step", depends_on=parents)
    conn.commit()
    testing.drain(database_url, max_jobs=3)
    upstream, store, log = counted_upstream(database_url)
    j = handle(child, upstream)
    assert log.sent == []  # nothing read before the handler asks
    read = j.parents
    assert [(p.id, p.step, p.kind, p.state, p.output) for p in read] == [
        (parents[n], None, "wf_step", JobState.SUCCEEDED, {"n": n}) for n in range(3)]
    assert j.parents is read
    assert len(log.sent) == 1
    assert j.batch is None  # no callback: one query, and None kept
    assert j.batch is None
    assert len(log.sent) == 2
    store.close()


def test_a_batch_of_one_releases_both_callbacks_and_the_callback_reads_the_counts(
        conn, sql, database_url):
    with batch(conn, "one", on_success="wf_reads_upstream",
               on_complete=("wf_reads_upstream", {"n": 1})) as b:
        member = b.add("wf_step", {"output": "done"})
    conn.commit()
    assert member.id is not None and b.id is not None
    assert sql.rows("SELECT state FROM job_queue WHERE batch_id = %s", (b.id,)) == [("pending",)]
    testing.drain(database_url)
    wanted = {"parents": [[member.id, None, "wf_step", "succeeded", "done"]],
              "batch": {"id": b.id, "name": "one", "counts": {"succeeded": 1}}}
    assert outputs(sql, "wf_reads_upstream") == [wanted, wanted]


def test_a_failed_member_cancels_on_success_and_still_completes(conn, sql, database_url):
    with batch(conn, on_success="wf_step", on_complete="wf_reads_upstream") as b:
        b.add("wf_step", {"output": 1})
        b.add("wf_step", {"fail": True})
    conn.commit()
    testing.drain(database_url)
    [(success_state,)] = sql.rows("SELECT j.state FROM job_queue_batches AS b JOIN job_queue AS j"
                                  " ON j.id = b.on_success WHERE b.id = %s", (b.id,))
    assert success_state == "cancelled"
    [done] = outputs(sql, "wf_reads_upstream")
    assert done["batch"] == {"id": b.id, "name": None,
                             "counts": {"succeeded": 1, "failed": 1}}


def test_an_open_batch_takes_members_over_time_until_sealed(conn, sql, database_url):
    opened = open_batch(conn, "over time", on_complete="wf_reads_upstream")
    first = opened.add("wf_step", {"output": 1})
    conn.commit()
    testing.drain(database_url)  # its only member ends: not sealed, nothing released
    assert outputs(sql, "wf_reads_upstream") == [None]
    assert sql.value("SELECT state FROM job_queue WHERE kind = 'wf_reads_upstream'") == "waiting"
    later = psycopg2.connect(database_url)
    again = Batch(later, opened.id)
    more = again.add_many([{"kind": "wf_step", "payload": {"output": n}} for n in (2, 3)])
    again.seal()
    later.commit()
    with pytest.raises(psycopg2.Error):
        again.add("wf_step")  # sealed
    later.rollback()
    later.close()
    testing.drain(database_url)
    [done] = [o for o in outputs(sql, "wf_reads_upstream") if o]
    assert [p[0] for p in done["parents"]] == [first, *more]
    assert done["batch"]["counts"] == {"succeeded": 3}


def test_a_sealed_batch_without_members_completes(conn, sql, database_url):
    with batch(conn, "empty", on_success="wf_reads_upstream",
               on_complete="wf_reads_upstream") as b:
        pass
    conn.commit()
    testing.drain(database_url)
    empty = {"parents": [], "batch": {"id": b.id, "name": "empty", "counts": {}}}
    assert outputs(sql, "wf_reads_upstream") == [empty, empty]


# -- the row and the command line ---------------------------------------------------------


def test_status_counts_the_waiting_jobs(conn, database_url):
    parent = enqueue(conn, "wf_step")
    enqueue(conn, "wf_step", depends_on=[parent])
    enqueue(conn, "wf_step", depends_on=[parent], queue="other")
    conn.commit()
    result = CliRunner().invoke(cli.main, ["status", "--database-url", database_url])
    assert result.exit_code == 0, result.output
    assert "waiting for other jobs: 2" in result.output
    assert [line.split() for line in result.output.splitlines() if "waiting " in line][:2] == [
        ["default", "waiting", "1"], ["other", "waiting", "1"]]


def test_the_command_line_enqueues_a_job_that_waits(conn, database_url):
    parent = enqueue(conn, "wf_step")
    conn.commit()
    result = CliRunner().invoke(cli.main, [
        "enqueue", "wf_step", "--depends-on", str(parent), "--depends-on", str(parent),
        "--on-parent-failure", "run", "--database-url", database_url])
    assert result.exit_code == 0, result.output
    child = get_job(conn, int(result.output))
    assert (child.state, child.depends_on, child.on_parent_failure) == (
        JobState.WAITING, (parent, parent), "run")
    missing = CliRunner().invoke(cli.main, ["enqueue", "wf_step", "--depends-on", "424242",
                                            "--database-url", database_url])
    assert missing.exit_code != 0
    assert len(missing.output.strip().splitlines()) == 1 and "424242" in missing.output
