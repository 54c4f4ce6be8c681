"""A claim in doubt when a worker's connection broke, against PostgreSQL:
the rows it committed are given back in the pass that reconnects, before
that pass claims, so they run at once rather than after another look."""

import os
import signal
import time

from motir_supervisor import db, registry
from motir_supervisor.config import Config
from motir_supervisor.worker.process import Worker
from tests.helpers import enqueue, wait_until


@registry.job("recheck_quick")
def _quick(j):
    return None


def test_a_claim_in_doubt_goes_back_before_the_reconnecting_pass_claims(database_url, sql):
    claimant = "recheck:1"
    [job_id] = enqueue(sql, "recheck_quick")
    # The claim committed, and its answer was lost with the connection.
    other = db.JobStore(database_url)
    try:
        assert [job.id for job in other.claim_due_jobs(claimant, 1, 30.0, None)[0]] == [job_id]
    finally:
        other.close()
    worker = Worker(Config(database_url=database_url, concurrency=1), 1, claimant,
                    os.getppid())
    worker.holdings.claim_sent()
    try:
        worker._talk_to_database(time.monotonic())
        # Given back, then claimed again by the same pass: never left
        # running unknown to its claimant.
        mine = sql.value("SELECT array_agg(id) FROM job_queue WHERE locked_by = %s"
                         " AND state = 'running'", (claimant,)) or []
        assert set(mine) <= set(worker.holdings.job_ids())
        wait_until(lambda: all(run.ended for run in worker.holdings.runs()), 10)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)  # the lease alarm its claims armed
        worker.executor.abandon()
        worker.store.close()
