"""What a supervisor writes for a worker that died, against PostgreSQL:
a snooze its ledger held, and each run counted once in the fleet's metrics
whether the worker had written its outcome or not."""

import subprocess
import sys

from tests.helpers import ROOT, metric, state_of


def test_a_dead_workers_snooze_is_written_by_its_supervisor(sql, store):
    from motir_supervisor.ipc import ledger
    from motir_supervisor.supervisor.rescuer import Rescuer

    job_id = sql.value("INSERT INTO job_queue (kind, last_error) VALUES ('x', 'earlier')"
                       " RETURNING id")
    store.claim_due_jobs("dead:1", 1, 30, None)
    entries = ledger.Ledger(4)
    entry = entries.claim(job_id)
    entries.decide(entry, ledger.SNOOZED, 0.01, retry_in_seconds=60)
    settler = Rescuer(store, "")
    settler.queue("dead:1", "killed", tuple(entries.entries()))
    settler.settle_due()
    state, attempts, wait, error = sql.rows(
        "SELECT state, attempts, extract(epoch FROM run_at - now()), last_error"
        " FROM job_queue WHERE id = %s", (job_id,))[0]
    assert (state, attempts, error) == ("pending", 0, "earlier")
    assert 50 < wait <= 60


def test_a_dead_workers_success_is_written_with_its_output(sql, store):
    from motir_supervisor.ipc import ledger
    from motir_supervisor.supervisor.rescuer import Rescuer

    ids = [sql.value("INSERT INTO job_queue (kind) VALUES ('x') RETURNING id") for _ in range(2)]
    store.claim_due_jobs("dead:1", 2, 30, None)
    entries = ledger.Ledger(4)
    entries.decide(entries.claim(ids[0]), ledger.SUCCEEDED, 0.01, output='{"rows": 3}')
    entries.decide(entries.claim(ids[1]), ledger.SUCCEEDED, 0.01)
    settler = Rescuer(store, "")
    settler.queue("dead:1", "killed", tuple(entries.entries()))
    settler.settle_due()
    assert sql.rows("SELECT id, state, output FROM job_queue ORDER BY id") == [
        (ids[0], "succeeded", {"rows": 3}), (ids[1], "succeeded", None)]


#: Settles what a SIGKILLed worker left in its ledger, with the fleet's
#: metrics on, and prints them: jobs given as id=state, the ledger's state.
SETTLE_A_DEAD_WORKER = """
import sys, tempfile
from prometheus_client import CollectorRegistry, generate_latest, multiprocess
from motir_supervisor import db, metrics
from motir_supervisor.ipc import ledger
from motir_supervisor.supervisor import rescuer as settling

url, claimant, jobs = sys.argv[1], sys.argv[2], sys.argv[3:]
directory = tempfile.mkdtemp()
metrics.enable(directory)
entries = ledger.Ledger(len(jobs))
for job in jobs:
    job_id, state = job.split("=")
    entry = entries.claim(int(job_id))
    entries.mark(entry, ledger.RUNNING)
    entries.decide(entry, getattr(ledger, state), 0.01, error="ValueError: no")
settler = settling.Rescuer(db.JobStore(url), url)
settler.queue(claimant, "killed", tuple(entries.entries()))
settler.settle_due(final=True)
registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry, path=directory)
print(generate_latest(registry).decode())
"""


def test_runs_a_killed_worker_wrote_but_had_not_counted_are_counted_once(database_url, sql):
    """SIGKILL can land between a worker's outcome write and its count (in
    the commit's round trip, say): the supervisor counts those runs from the
    rows, and the ones it writes itself, each once."""
    claimant = "vm:1:feed/w1:2"
    unwritten, written, retried = (sql.value(
        "INSERT INTO job_queue (kind, state, attempts, locked_by, lease_expires_at)"
        " VALUES ('x', 'running', 1, %s, now() + interval '1 minute') RETURNING id",
        (claimant,)) for _ in range(3))
    # What the worker's own write left before the kill.
    sql.rows("UPDATE job_queue SET state = 'succeeded', locked_by = NULL, finished_at = now()"
             " WHERE id = %s", (written,))
    sql.rows("UPDATE job_queue SET state = 'pending', locked_by = NULL WHERE id = %s",
             (retried,))
    result = subprocess.run(
        [sys.executable, "-c", SETTLE_A_DEAD_WORKER, database_url, claimant,
         f"{unwritten}=SUCCEEDED", f"{written}=SUCCEEDED", f"{retried}=FAILED"],
        capture_output=True, text=True, cwd=ROOT, timeout=30)
    assert result.returncode == 0, result.stderr
    assert state_of(sql, unwritten) == "succeeded"
    text = result.stdout
    assert metric(text, "motir_jobs_finished_total", kind="x", outcome="succeeded") == 2, text
    assert metric(text, "motir_jobs_finished_total", kind="x", outcome="retried") == 1, text
    assert metric(text, "motir_job_duration_seconds_count", kind="x") == 3, text
