"""Real ``motir-supervisor run`` processes, started through the command as an
operator starts them: for the end-to-end tests and the crash soak."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from testbed.polling import wait_until

#: The checkout: the working directory of the processes started here.
ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "motir_supervisor"]
#: The test suite's handlers; each records its runs in test_executions
#: (testbed.sql.EXECUTIONS_TABLE).
SAMPLE_APP = "tests.apps.sample"


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
            [*command, "--log-level", "debug", "run", "--app", SAMPLE_APP, *args],
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
