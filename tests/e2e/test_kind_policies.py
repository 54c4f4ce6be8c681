"""A kind's policy through real workers: a row a plain INSERT wrote without
max_attempts, queue or priority follows its kind's ``@job`` policy; one
that sets them keeps its own; an exception of ``no_retry_for`` fails the
job at once; a job that kills its worker waits its kind's delay before it
runs again."""

from tests.apps.policies import KILLER_DELAY_SECONDS
from tests.helpers import state_of, wait_until

POLICY_APP = ("--app", "tests.apps.policies")


def _wait_for_policies(sql, *kinds):
    """Workers write their kinds' policies as they start; a row inserted
    before then gets the fleet's."""
    wait_until(lambda: sql.value("SELECT count(*) FROM job_queue_kinds WHERE kind = ANY(%s)",
                                 (list(kinds),)) == len(kinds),
               10, message=f"the policies of {', '.join(kinds)}")


def _runs(sql, job_id):
    return sql.value("SELECT count(*) FROM test_executions WHERE job_id = %s", (job_id,))


def test_plain_inserts_follow_their_kind_s_policy_through_a_worker(
        executions, start_supervisor):
    start_supervisor("--workers", "1", *POLICY_APP)
    _wait_for_policies(executions, "policy_flaky", "policy_declined")
    unset = executions.value("INSERT INTO job_queue (kind) VALUES ('policy_flaky') RETURNING id")
    own = executions.value("INSERT INTO job_queue (kind, max_attempts, queue)"
                           " VALUES ('policy_flaky', 3, 'default') RETURNING id")
    declined = executions.value("INSERT INTO job_queue (kind) VALUES ('policy_declined')"
                                " RETURNING id")
    for job_id in (unset, own, declined):
        wait_until(lambda: state_of(executions, job_id) == "failed", 20,
                   message=f"job {job_id} failed")
    assert executions.rows("SELECT attempts, max_attempts, queue, priority FROM job_queue"
                           " WHERE id = %s", (unset,)) == [(2, 2, "billing", -3)]
    assert executions.rows("SELECT attempts, max_attempts, queue, priority FROM job_queue"
                           " WHERE id = %s", (own,)) == [(3, 3, "default", -3)]
    assert (_runs(executions, unset), _runs(executions, own), _runs(executions, declined)) == (
        2, 3, 1)
    assert executions.value("SELECT last_error FROM job_queue WHERE id = %s",
                            (declined,)).startswith("Declined: card declined")


def test_a_job_that_kills_its_worker_waits_its_kind_s_delay_each_time(
        executions, start_supervisor):
    supervisor = start_supervisor("--workers", "2", *POLICY_APP)
    _wait_for_policies(executions, "policy_kills_its_worker")
    job_id = executions.value("INSERT INTO job_queue (kind) VALUES ('policy_kills_its_worker')"
                              " RETURNING id")
    wait_until(lambda: state_of(executions, job_id) == "failed", 30)
    starts = [at for (at,) in executions.rows(
        "SELECT started_at FROM test_executions WHERE job_id = %s ORDER BY execution_id",
        (job_id,))]
    assert len(starts) == 3
    gaps = [(later - earlier).total_seconds() for earlier, later in zip(starts, starts[1:])]
    # Without the delay a replaced worker's job is claimed again within a
    # fraction of a second (its rescue and a poll).
    assert all(gap >= KILLER_DELAY_SECONDS - 0.1 for gap in gaps), gaps
    assert "killed by SIGKILL" in executions.value(
        "SELECT last_error FROM job_queue WHERE id = %s", (job_id,))
    supervisor.wait_for_workers(2)
