"""Dependencies released exactly once, whatever interleaves, by real
supervisors against one database.

Two supervisors of four workers with eight slots each run
tests/apps/races.py, which records every run with the server's clock. The
scenario packs the races of the field into one graph: a wide fan-in and
diamonds whose parents end in the same instant (they wait on one gate;
some write their success in their handler's own transaction),
children inserted before their parents end, while they end (a producer
process) and after; parents retried, failed, cancelled pending and
running, deleted, retried by hand, SIGKILLed mid-run with their worker, and
taken over by the reaper once their whole supervisor was SIGKILLed. Every
job is then judged by tests.workflow_races.assert_released_exactly_once.
The negative control runs the same scenario with the release moved into
the workers, after their own commit, and is caught by that assertion.
"""

import os
import signal

import pytest

from motir_supervisor import cancel_job, retry_job
from tests.apps.races import TABLES
from tests.workflow_races import (APP, NAIVE_RELEASE_CLI, Gate, Graph,
                                  assert_released_exactly_once, ended_all, running_all, settle,
                                  start_producer, state_of, states, worker_of)
from tests.helpers import wait_until

FLEET = (*APP, "--workers", "4", "--concurrency", "8", "--lease-seconds", "6",
         "--retry-base-seconds", "0.05", "--queue", "default")
#: The two supervisors: the jobs of the queue "kill" run in the first, whose
#: workers are SIGKILLed with them; those of "lapse" in the second, which is
#: SIGKILLed whole, and which the reaper of the first takes them over from.
KILLING = (*FLEET, "--queue", "kill")
LAPSING = (*FLEET, "--queue", "lapse")
#: The parents of the fan-in (of 40 slots: the gate holds them all at once,
#: beside the diamonds' and the held jobs, within the fleet's 64).
FAN_IN = 40


@pytest.fixture
def races(sql):
    sql.rows(TABLES)
    return sql


@pytest.fixture
def gate(database_url):
    held = Gate(database_url)
    yield held
    held.close()


def build(graph):
    """The jobs inserted before any of them runs, by name (lists for groups)."""
    g = {}
    g["fan_in"] = (graph.add(FAN_IN - 16, gate=Gate.KEY)
                   + graph.add(8, gate=Gate.KEY, fail="first")
                   + graph.add(8, gate=Gate.KEY, in_transaction=True))
    g["fan_in_child"] = graph.one(after=g["fan_in"])
    g["grandchild"] = graph.one(after=[g["fan_in_child"]])
    g["diamond_tops"] = graph.add(4)
    g["diamond_sides"], g["diamond_bottoms"] = [], []
    for top in g["diamond_tops"]:
        sides = graph.add(after=[top], gate=Gate.KEY) + graph.add(
            after=[top], gate=Gate.KEY, in_transaction=True)
        g["diamond_sides"] += sides
        g["diamond_bottoms"] += graph.add(after=sides)
    g["failing"] = graph.one(fail="always", max_attempts=1)
    g["failing_cancel"] = graph.one(after=[g["failing"]])
    g["failing_cancel_below"] = graph.one(after=[g["failing_cancel"]])
    g["failing_run"] = graph.one(after=[g["failing"]], on_parent_failure="run")
    g["fixed_by_hand"] = graph.one(fail="until_flag", flag="fixed", max_attempts=1)
    g["fixed_child"] = graph.one(after=[g["fixed_by_hand"]])
    g["fixed_below"] = graph.one(after=[g["fixed_child"]])
    g["killed_retried"] = graph.one(hold=1, priority=-1, max_attempts=3, queue="kill")
    g["killed_retried_child"] = graph.one(after=[g["killed_retried"]])
    g["killed_failed"] = graph.one(hold=1, priority=-1, max_attempts=1, queue="kill")
    g["killed_failed_cancel"] = graph.one(after=[g["killed_failed"]])
    g["killed_failed_run"] = graph.one(after=[g["killed_failed"]], on_parent_failure="run")
    g["lapsed_retried"] = graph.one(hold=1, priority=-1, max_attempts=3, queue="lapse")
    g["lapsed_retried_child"] = graph.one(after=[g["lapsed_retried"]])
    g["lapsed_failed"] = graph.one(hold=1, priority=-1, max_attempts=1, queue="lapse")
    g["lapsed_failed_run"] = graph.one(after=[g["lapsed_failed"]], on_parent_failure="run")
    g["cancelled_running"] = graph.one(hold=99, priority=-1, max_attempts=1)
    g["cancelled_running_child"] = graph.one(after=[g["cancelled_running"]])
    g["cancelled_pending"] = graph.one(delay_seconds=3600)
    g["cancelled_pending_cancel"] = graph.one(after=[g["cancelled_pending"]])
    g["cancelled_pending_run"] = graph.one(after=[g["cancelled_pending"]],
                                           on_parent_failure="run")
    g["deleted"] = graph.one(delay_seconds=3600)
    g["deleted_cancel"] = graph.one(after=[g["deleted"]])
    g["deleted_run"] = graph.one(after=[g["deleted"]], on_parent_failure="run")
    return g


def kill_workers_running(sql, ids):
    for worker in {worker_of(sql, job_id)[1] for job_id in ids}:
        os.kill(worker, signal.SIGKILL)


def only_these_run(sql, ids):
    """Whether ``ids`` are running, and nothing else is, or is due."""
    return sql.value("SELECT count(*) FILTER (WHERE id <> ALL(%s)) = 0"
                     " AND count(*) FILTER (WHERE id = ANY(%s) AND state = 'running') = %s"
                     " FROM job_queue WHERE state IN ('pending', 'running')",
                     (ids, ids, len(ids)))


def kill_whole(supervisor):
    """SIGKILL a supervisor and its workers, all stopped first so that none
    writes anything after another died: a machine lost."""
    tree = [supervisor.pid, *supervisor.worker_pids()]
    for pid in tree:
        os.kill(pid, signal.SIGSTOP)
    for pid in tree:
        os.kill(pid, signal.SIGKILL)
    supervisor.wait(5)


def run_scenario(sql, database_url, gate, start_supervisor, entry=None):
    """Drive the whole scenario to its end: the graph's jobs by name, and
    how many children the producer inserted."""
    graph = Graph(sql)
    g = build(graph)
    start_supervisor(*KILLING, entry=entry)
    lapsing = start_supervisor(*LAPSING, entry=entry)
    gated = g["fan_in"] + g["diamond_sides"]
    held = [g[name] for name in ("killed_retried", "killed_failed", "lapsed_retried",
                                 "lapsed_failed", "cancelled_running")]
    wait_until(lambda: running_all(sql, gated + held), 30, interval=0.05,
               message="the gated and the held jobs running")
    # Children written while their parents end: some before, some during,
    # some after (the producer goes on until every parent has ended).
    producer, inserted = start_producer(database_url, gated)
    wait_until(lambda: inserted.value >= 20, 10, message="the producer's first children")
    gate.open()
    kill_workers_running(sql, [g["killed_retried"], g["killed_failed"]])
    cancel_job(sql.conn, g["cancelled_running"])
    cancel_job(sql.conn, g["cancelled_pending"])
    sql.rows("DELETE FROM job_queue WHERE id = %s", (g["deleted"],))
    producer.join(30)
    assert producer.exitcode == 0
    # Children of parents that have ended already, each way.
    wait_until(lambda: ended_all(sql, [g["failing"], g["fixed_by_hand"]]), 10,
               message="the failing parents failed")
    g["late"] = (graph.add(3, after=g["fan_in"][:3])
                 + graph.add(after=[g["failing"]])
                 + graph.add(after=[g["failing"], g["fan_in"][5]], on_parent_failure="run")
                 + graph.add(after=[g["cancelled_pending"]]))
    # The step fixed, then retried by hand: what its failure cancelled goes on.
    sql.rows("INSERT INTO race_flags VALUES ('fixed')")
    retry_job(sql.conn, g["fixed_by_hand"])
    # A machine lost: the reaper of the other supervisor takes its jobs over
    # once their leases lapse, and a supervisor started anew serves the
    # queue only the lost one served. It is lost once nothing but its held
    # jobs runs, so that what they are there for is what happens.
    lapsed = [g["lapsed_retried"], g["lapsed_failed"]]
    wait_until(lambda: only_these_run(sql, lapsed), 20, interval=0.05,
               message="nothing but the held jobs running")
    assert worker_of(sql, g["lapsed_retried"])[0] == lapsing.pid
    kill_whole(lapsing)
    start_supervisor(*LAPSING, entry=entry)
    settle(sql, 30)
    return g, inserted.value


def assert_the_scenario_happened(sql, g, children_during):
    """The interleavings the scenario means to cause, each seen."""
    fanned_in = [g["fan_in_child"], g["grandchild"], *g["diamond_bottoms"]]
    assert states(sql, fanned_in) == dict.fromkeys(fanned_in, "succeeded")
    spread = sql.value("SELECT extract(epoch FROM max(finished_at) - min(finished_at))"
                       " FROM race_runs WHERE job_id = ANY(%s) AND attempt = 1",
                       (g["fan_in"],))
    assert spread < 1.0, f"the gated parents ended over {spread} s"
    assert children_during > 20 and sql.value(
        "SELECT count(*) FROM job_queue WHERE payload ? 'during'") == children_during
    expected = {
        "failing": "failed", "failing_cancel": "cancelled", "failing_cancel_below": "cancelled",
        "failing_run": "succeeded", "fixed_by_hand": "succeeded", "fixed_child": "succeeded",
        "fixed_below": "succeeded", "killed_retried": "succeeded",
        "killed_retried_child": "succeeded", "lapsed_retried": "succeeded",
        "lapsed_retried_child": "succeeded", "lapsed_failed": "failed",
        "lapsed_failed_run": "succeeded", "cancelled_running": "cancelled",
        "cancelled_running_child": "cancelled", "cancelled_pending": "cancelled",
        "cancelled_pending_cancel": "cancelled", "cancelled_pending_run": "succeeded",
        "deleted_cancel": "cancelled", "deleted_run": "succeeded"}
    assert {name: state_of(sql, g[name]) for name in expected} == expected
    assert "SIGKILL" in sql.value("SELECT errors::text FROM job_queue WHERE id = %s",
                                  (g["killed_retried"],))
    assert "lease of" in sql.value("SELECT last_error FROM job_queue WHERE id = %s",
                                   (g["lapsed_failed"],))
    assert state_of(sql, g["deleted"]) is None


def test_dependents_are_released_exactly_once_whatever_interleaves(
        races, database_url, gate, start_supervisor):
    g, children_during = run_scenario(races, database_url, gate, start_supervisor)
    assert_released_exactly_once(races)
    assert_the_scenario_happened(races, g, children_during)


def test_a_release_after_the_worker_s_commit_strands_children(
        races, database_url, gate, start_supervisor):
    """Negative control: the workers release dependents themselves, after
    their own commit. What no worker of theirs ends (a parent killed with
    its worker, cancelled, deleted, taken over by the reaper), or what a
    child inserted meanwhile missed, stays waiting for ever."""
    g, _ = run_scenario(races, database_url, gate, start_supervisor, entry=NAIVE_RELEASE_CLI)
    with pytest.raises(AssertionError, match="stranded") as caught:
        assert_released_exactly_once(races)
    stranded = {name for name in ("killed_failed_run", "lapsed_failed_run",
                                  "cancelled_pending_run", "deleted_run")
                if f"job {g[name]} stranded" in str(caught.value)}
    assert stranded == {"killed_failed_run", "lapsed_failed_run", "cancelled_pending_run",
                        "deleted_run"}, caught.value


def test_batch_callbacks_run_exactly_once(races, gate, start_supervisor):
    """Members that end together, retried before they succeed, killed with
    their worker, failed, cancelled, deleted, retried by hand; a batch sealed
    as its last members end, one of one member, one of none, and one whose
    members are added over time: each callback runs once, after every
    member ended, or is cancelled as on_success asks."""
    graph = Graph(races)
    b = {}
    b["together"] = graph.open_batch("together")
    graph.add(14, batch=b["together"], gate=Gate.KEY)
    graph.add(4, batch=b["together"], gate=Gate.KEY, in_transaction=True)
    retried = graph.add(6, batch=b["together"], gate=Gate.KEY, fail="first")
    graph.seal(b["together"])
    b["sealed_as_they_end"] = graph.open_batch("sealed as they end")
    graph.add(8, batch=b["sealed_as_they_end"], gate=Gate.KEY)
    b["killed"] = graph.open_batch("killed")
    graph.add(3, batch=b["killed"])
    [killed] = graph.add(batch=b["killed"], hold=1, priority=-1, max_attempts=3, queue="kill")
    graph.seal(b["killed"])
    failing = {"payload": {"fail": "always"}, "max_attempts": 1}
    b["failed"] = graph.batch("failed", [{}, {}, failing])
    b["by_hand"] = graph.open_batch("by hand", on_complete=False)
    graph.add(batch=b["by_hand"])
    [fixed] = graph.add(batch=b["by_hand"], fail="until_flag", flag="batch", max_attempts=1)
    graph.seal(b["by_hand"])
    b["cancelled"] = graph.open_batch("cancelled and deleted")
    graph.add(2, batch=b["cancelled"])
    cancelled, deleted = graph.add(2, batch=b["cancelled"], delay_seconds=3600)
    graph.seal(b["cancelled"])
    b["one"] = graph.batch("one", [{}])
    b["none"] = graph.batch("none", [])
    b["over_time"] = graph.open_batch("over time")
    start_supervisor(*KILLING)
    start_supervisor(*LAPSING)
    wait_until(lambda: running_all(races, graph.members(b["together"])
                                   + graph.members(b["sealed_as_they_end"]) + [killed]),
               30, interval=0.05, message="the gated members and the held one running")
    gate.open()
    graph.seal(b["sealed_as_they_end"])
    kill_workers_running(races, [killed])
    cancel_job(races.conn, cancelled)
    races.rows("DELETE FROM job_queue WHERE id = %s", (deleted,))
    for _ in range(3):
        member = graph.one(batch=b["over_time"])
        wait_until(lambda: ended_all(races, [member]), 10, message="a member added over time")
    graph.seal(b["over_time"])
    wait_until(lambda: ended_all(races, [fixed]), 10, message="the member to fix failed")
    races.rows("INSERT INTO race_flags VALUES ('batch')")
    retry_job(races.conn, fixed)
    settle(races, 30)
    callbacks = {name: graph.callbacks(batch) for name, batch in b.items()}
    assert_released_exactly_once(races, gone=dict.fromkeys(callbacks["cancelled"], {deleted}))
    cancelled_on_success = {"failed", "cancelled"}
    assert {name: (state_of(races, on_success), on_complete and state_of(races, on_complete))
            for name, (on_success, on_complete) in callbacks.items()} == {
        name: ("cancelled" if name in cancelled_on_success else "succeeded",
               None if name == "by_hand" else "succeeded") for name in b}
    assert races.rows("SELECT DISTINCT attempts FROM job_queue WHERE id = ANY(%s)",
                      (retried + [killed],)) == [(2,)]
