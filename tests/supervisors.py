"""Starting real motir-supervisor processes (the console script) for the
end-to-end tests: single commands, and the negative controls' commands.
Supervisors with their workers are testbed.supervisors' RunningSupervisor."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from testbed.supervisors import CLI, ROOT, RunningSupervisor, title_of

# The tests import the supervisors of the test bed from here too.
__all__ = ["CLI", "NAIVE_CLAIM_CLI", "NAIVE_LIMIT_CLI", "RunningSupervisor",
           "assert_sigterm_releases_at_the_deadline", "cli", "title_of"]

#: Negative controls: the command with a claim that can run a job twice,
#: and with a limited claim that counts without its lock.
NAIVE_CLAIM_CLI = [sys.executable, str(ROOT / "tests" / "naive_claim_cli.py")]
NAIVE_LIMIT_CLI = [sys.executable, str(ROOT / "tests" / "naive_limit_cli.py")]


def cli(database_url, *args):
    """One `motir-supervisor` command run to its end, its output captured."""
    return subprocess.run([*CLI, *args], env={**os.environ, "DATABASE_URL": database_url},
                          capture_output=True, text=True, cwd=ROOT, timeout=30)


def assert_sigterm_releases_at_the_deadline(supervisor, sql, job_id):
    """SIGTERM to a supervisor run with --drain-seconds 1 while ``job_id`` runs
    long: the run is given back at the deadline, its attempt unspent."""
    started = time.monotonic()
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(15) == 0
    assert time.monotonic() - started < 5
    assert sql.rows("SELECT state, attempts, locked_by FROM job_queue WHERE id = %s",
                    (job_id,)) == [("pending", 0, None)]
