"""worker.executor: the order in which a worker's slots start the runs
submitted to them."""

import json
import threading
import time

from motir_supervisor import db, registry
from motir_supervisor.ipc import ledger


def test_an_urgent_run_starts_before_the_ready_runs_of_a_batch_claimed_earlier():
    from motir_supervisor.worker.executor import Executor
    from motir_supervisor.worker.claims import Claim, Run

    release, order = threading.Event(), []

    def handler(j):
        if j.payload == "first":
            release.wait(5)
        order.append(j.payload)

    registration = registry.Registration("ordered", handler, None)
    entries = ledger.Ledger(8)
    executor = Executor(1, entries, retry_base=1, retry_cap=1, wake=lambda: None,
                        save_checkpoint=lambda *a: True, title=lambda text: None)

    ids = iter(range(1, 100))

    def runs(names, priority):
        claim = Claim(0.0, 1, len(names))
        return [Run(db.ClaimedJob(job_id, "default", "ordered", json.dumps(name), 1, 5, None,
                                  priority),
                    claim, entries.claim(job_id), registration)
                for job_id, name in zip(ids, names)]

    executor.submit(runs(["first", "batch-2", "batch-3"], 5))
    executor.submit(runs(["urgent"], -1))
    executor.submit(runs(["later"], 5))
    release.set()
    deadline = time.monotonic() + 5
    while len(order) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert order == ["first", "urgent", "batch-2", "batch-3", "later"]
