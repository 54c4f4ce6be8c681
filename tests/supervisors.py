"""Starting real motir-supervisor processes (the console script) for the
end-to-end tests: supervisors with their workers, and single commands."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.helpers import ROOT, wait_until

CLI = [sys.executable, "-m", "motir_supervisor"]
#: Negative controls: the command with a claim that can run a job twice,
#: and with a limited claim that counts without its lock.
NAIVE_CLAIM_CLI = [sys.executable, str(ROOT / "tests" / "naive_claim_cli.py")]
NAIVE_LIMIT_CLI = [sys.executable, str(ROOT / "tests" / "naive_limit_cli.py")]


def cli(database_url, *args):
    """One `motir-supervisor` command run to its end, its output captured."""
    return subprocess.run([*CLI, *args], env={**os.environ, "DATABASE_URL": database_url},
                          capture_output=True, text=True, cwd=ROOT, timeout=30)


def title_of(pid: int) -> str:
    """A process's title as setproctitle left it ('' once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except (FileNotFoundError, ProcessLookupError):
        return ""


class RunningSupervisor:
    def __init__(self, database_url: str, *args: str, entry: list[str] | None = None,
                 env: dict[str, str] | None = None):
        self.log = tempfile.NamedTemporaryFile(prefix="motir-sup-", suffix=".log", delete=False)
        command = entry or CLI
        full_env = {**os.environ, "DATABASE_URL": database_url, "PYTHONPATH": str(ROOT),
                    **(env or {})}
        self.process = subprocess.Popen(
            [*command, "--log-level", "debug", "run", "--app", "tests.apps.sample", *args],
            env=full_env, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def worker_pids(self) -> list[int]:
        """The live worker children of this supervisor, from /proc."""
        children = Path(f"/proc/{self.pid}/task/{self.pid}/children")
        try:
            pids = [int(p) for p in children.read_text().split()]
        except FileNotFoundError:
            return []
        return [pid for pid in pids if "metrics on" not in title_of(pid)]

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGQUIT)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for pid in self.worker_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.unlink(self.log.name)

    def kill(self) -> None:
        """SIGKILL the supervisor, then its workers: for one cut off from the
        database once a test is done with it, whose stop would release
        nothing and only wait out its grace period."""
        workers = self.worker_pids()
        self.process.kill()
        self.process.wait()
        for pid in workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait_for_workers(self, count: int, timeout: float = 10) -> list[int]:
        return wait_until(lambda: len(self.worker_pids()) == count and self.worker_pids(),
                          timeout, message=f"{count} workers")


def assert_sigterm_releases_at_the_deadline(supervisor, sql, job_id):
    """SIGTERM to a supervisor run with --drain-seconds 1 while ``job_id`` runs
    long: the run is given back at the deadline, its attempt unspent."""
    started = time.monotonic()
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(15) == 0
    assert time.monotonic() - started < 5
    assert sql.rows("SELECT state, attempts, locked_by FROM job_queue WHERE id = %s",
                    (job_id,)) == [("pending", 0, None)]
