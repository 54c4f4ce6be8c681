"""What every section of bin/bench shares: the settings, the throwaway
server's migrated database, the supervisor fleets started on it as an
operator starts them, and the waits that time them.

The sections (throughput, latency, io_bound, idle, job_model, flow,
dashboard_pages, workflows) import this module; the harness (bench.py) imports them
and this. Nothing here imports a section or the harness.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from benchmarks.peers.timing import EMPTY_QUEUE_CHECK_SECONDS
from testbed.pgserver import ThrowawayPostgres
from testbed.polling import wait_until
from testbed.sql import Sql

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "motir_supervisor"]
APP = "benchmarks.noop_app"
DATABASE = "motir_bench"

#: The fleet the performance goals are stated for, 4 workers on a 2-core
#: machine: the latency, history and idle measurements use it, and pgbench
#: as many clients (benchmarks/throughput.py).
FLEET_WORKERS = 4
#: The slowest rate any run is allowed before it counts as hung.
SLOWEST_JOBS_PER_SECOND = 50
#: A supervisor of no-op jobs drains at once; this only bounds a hang.
STOP_TIMEOUT_SECONDS = 60

# Asked every EMPTY_QUEUE_CHECK_SECONDS while a run is timed, so it must cost
# the machine nothing, a million finished rows in the table or not: each lane
# is read through its own partial index (the ORDER BY of the index's columns
# keeps the planner on it). A count(*), or a plain EXISTS on state =
# 'pending', which is planned as a scan of the table that puts the pending
# rows last, would read the finished rows at every check and slow down the
# very run it times.
QUEUE_HAS_WORK = """
SELECT (SELECT 1 FROM job_queue WHERE state = 'pending' AND NOT limited
        ORDER BY priority, run_at, id LIMIT 1) IS NOT NULL
    OR (SELECT 1 FROM job_queue WHERE state = 'pending' AND limited AND NOT parked
        ORDER BY kind, priority, run_at, id LIMIT 1) IS NOT NULL
    OR (SELECT 1 FROM job_queue WHERE state = 'pending' AND parked
        ORDER BY kind, concurrency_key, priority, run_at, id LIMIT 1) IS NOT NULL
    OR (SELECT 1 FROM job_queue WHERE state = 'running'
        ORDER BY lease_expires_at LIMIT 1) IS NOT NULL
"""
#: The same for a version of the package from before parked rows (see
#: MOTIR_BENCH_SUPERVISOR_ROOT), whose limited lane is one index.
QUEUE_HAS_WORK_WITHOUT_PARKED = """
SELECT (SELECT 1 FROM job_queue WHERE state = 'pending' AND NOT limited
        ORDER BY priority, run_at, id LIMIT 1) IS NOT NULL
    OR (SELECT 1 FROM job_queue WHERE state = 'pending' AND limited
        ORDER BY kind, priority, run_at, id LIMIT 1) IS NOT NULL
    OR (SELECT 1 FROM job_queue WHERE state = 'running'
        ORDER BY lease_expires_at LIMIT 1) IS NOT NULL
"""


SECTIONS = ("throughput", "latency", "io", "idle", "model", "flow", "dashboard", "workflows")


class BenchError(RuntimeError):
    """A measurement could not be taken; the message says why in one line or a log tail."""


# -- settings ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Settings:
    #: No-op jobs per throughput run, and iterations of the pgbench loop.
    jobs: int = 20_000
    #: Worker counts of the throughput runs.
    workers_list: tuple[int, ...] = (1, 2, 4, 8)
    #: Jobs inserted one at a time into the idle fleet for the pick-up latency.
    latency_samples: int = 200
    #: Milliseconds between two of those inserts.
    latency_interval_ms: float = 20.0
    #: Turns the floor and the fleets take at those samples (a share each).
    latency_rounds: int = 4
    #: Finished rows in the table during the history run.
    bloat_rows: int = 1_000_000
    #: Seconds the idle fleet is measured, after its start and after a burst.
    idle_seconds: float = 10.0
    #: An idle fleet's cost counts from 3 s after its start (or a burst): a
    #: worker that waits on LISTEN has no backoff to ramp down.
    idle_settle_seconds: float = 3.0
    #: No-op jobs of the burst before the second idle window.
    idle_burst_jobs: int = 2_000
    #: Jobs per IO-bound run, and the job slots (workers x concurrency) of the runs.
    io_jobs: int = 4_000
    io_slots: tuple[int, ...] = (4, 32, 128)
    #: Windows of the rate-limited backlog (benchmarks/flow.py).
    rate_windows: int = 5
    #: Steps of the workflows section's chain, and children of its fan-out
    #: (benchmarks/workflows.py).
    chain_steps: int = 1_000
    fan_out_children: int = 10_000
    #: Extra options given to every `motir-supervisor run`, to compare settings.
    run_options: tuple[str, ...] = ()
    #: The sections measured (pgbench's loop always is: every ratio needs it).
    only: tuple[str, ...] = SECTIONS
    #: Install and measure the peers too (off by default: it downloads them).
    peers: bool = False


SMOKE = Settings(jobs=300, workers_list=(1, 2), latency_samples=30, latency_rounds=1,
                 bloat_rows=10_000, idle_seconds=0.5, idle_settle_seconds=0.25,
                 idle_burst_jobs=100, io_jobs=40, io_slots=(4,), rate_windows=2,
                 chain_steps=20, fan_out_children=100)


# -- the supervisor under test -------------------------------------------------


def read_cpu_ticks(pid: int) -> int | None:
    """utime + stime of a process in clock ticks; None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces and parentheses; the fields
    # after its closing parenthesis are fixed: utime and stime are 14 and 15.
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])


#: To compare with another version: a folder holding only that version's
#: motir_supervisor package (git archive REV motir_supervisor | tar -x -C DIR).
#: The fleets run it, and its migrations make the schema (``python -m`` finds
#: the package in its working directory first); the jobs' handlers still
#: come from this checkout.
OTHER_VERSION = os.environ.get("MOTIR_BENCH_SUPERVISOR_ROOT")
FLEET_CWD = Path(OTHER_VERSION) if OTHER_VERSION else ROOT


def supervisor_environment(url: str) -> dict[str, str]:
    # The caller's MOTIR_* settings must not change what is measured.
    env = {name: value for name, value in os.environ.items() if not name.startswith("MOTIR_")}
    path = f"{OTHER_VERSION}:{ROOT}" if OTHER_VERSION else str(ROOT)
    return {**env, "DATABASE_URL": url, "PYTHONPATH": path}


class Fleet:
    """One ``motir-supervisor run`` process and its workers, started as an operator would."""

    def __init__(self, url: str, log_path: Path, options: Sequence[str], app: str = APP):
        self.log_path = log_path
        self.started_at = time.monotonic()
        with open(log_path, "w") as log:
            self.process = subprocess.Popen(
                [*CLI, "run", "--app", app, *options], env=supervisor_environment(url),
                stdout=log, stderr=subprocess.STDOUT, cwd=FLEET_CWD)

    def __enter__(self) -> "Fleet":
        return self

    def __exit__(self, exc_type: type | None, *exc: object) -> None:
        if exc_type is None:
            self.stop()
        else:
            self.abandon()

    def ensure_running(self) -> None:
        code = self.process.poll()
        if code is not None:
            raise BenchError(f"the supervisor exited early with code {code}:\n{self.log_tail()}")

    def log_tail(self, lines: int = 15) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join("  " + line for line in text)

    def worker_pids(self) -> list[int]:
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        try:
            return [int(pid) for pid in children.read_text().split()]
        except FileNotFoundError:
            return []

    def cpu_ticks(self) -> dict[int, int]:
        """CPU ticks so far of the supervisor and each of its workers, by pid."""
        ticks = {}
        for pid in [self.process.pid, *self.worker_pids()]:
            used = read_cpu_ticks(pid)
            if used is not None:
                ticks[pid] = used
        return ticks

    def _terminate(self) -> bool:
        """SIGTERM, as a deploy stops it, then wait; False if it had to be killed."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                return False
        return True

    def abandon(self) -> None:
        """Stop it without judging how: a measurement already failed."""
        self._terminate()

    def stop(self) -> None:
        """Stop it; a supervisor that does not exit 0 within the timeout is an error."""
        if not self._terminate():
            raise BenchError(f"the supervisor did not stop within {STOP_TIMEOUT_SECONDS}s"
                             f" of SIGTERM:\n{self.log_tail()}")
        if self.process.returncode != 0:
            raise BenchError(f"the supervisor exited with code {self.process.returncode}:\n"
                             f"{self.log_tail()}")


# -- the database the sections measure on ------------------------------------------


def progress(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


class Bench:
    """One migrated database of one throwaway server, and the fleets started on
    it: what each section measures with. It measures nothing itself."""

    database = DATABASE
    error = BenchError
    progress = staticmethod(progress)

    def __init__(self, pg: ThrowawayPostgres, settings: Settings):
        self.pg = pg
        self.settings = settings
        self.url = pg.create_database(DATABASE)
        subprocess.run([*CLI, "migrate"], env=supervisor_environment(self.url), cwd=FLEET_CWD,
                       check=True, stdout=subprocess.DEVNULL)
        self.logs = pg.base / "logs"
        self.logs.mkdir()
        self.sql = Sql(self.url)
        self.queue_has_work_query = QUEUE_HAS_WORK if self.sql.value(
            "SELECT EXISTS (SELECT FROM information_schema.columns"
            " WHERE table_name = 'job_queue' AND column_name = 'parked')"
        ) else QUEUE_HAS_WORK_WITHOUT_PARKED
        # Observing from another database keeps the observer's own
        # transactions out of the benchmark database's counters.
        self.observer = Sql(pg.url("postgres"))
        # What the idle fleet's statements are counted with (idle.count_statements).
        self.observer.rows("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")

    def close(self) -> None:
        self.sql.close()
        self.observer.close()

    def start_fleet(self, label: str, *options: str, app: str = APP) -> Fleet:
        return Fleet(self.url, self.logs / f"{label}.log",
                     [*options, *self.settings.run_options], app)

    def prepare_queue(self, pending: int, finished: int = 0, kind: str = "noop") -> None:
        """An empty table, then ``finished`` old succeeded rows and ``pending`` due jobs."""
        self.sql.rows("TRUNCATE job_queue")
        if finished:
            self.sql.rows(
                "INSERT INTO job_queue (kind, state, attempts, started_at, finished_at)"
                " SELECT 'noop', 'succeeded', 1, now(), now() FROM generate_series(1, %s)",
                (finished,))
        if pending:
            self.sql.rows("INSERT INTO job_queue (kind) SELECT %s FROM generate_series(1, %s)",
                          (kind, pending))
        # Every run starts from the same state: a table autovacuum has seen
        # (hint bits set, statistics current) and a checkpoint just taken, so
        # no run pays for the previous one's setting hint bits or dirty pages.
        self.sql.rows("VACUUM ANALYZE job_queue")
        self.sql.rows("CHECKPOINT")

    def wait_for_idle_workers(self, fleet: Fleet, count: int) -> None:
        # A worker opens its connection (and LISTENs) after booting; its
        # application_name is the one sign of that visible from outside.
        def connected() -> bool:
            fleet.ensure_running()
            return self.observer.value(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
                " AND application_name LIKE 'motir-supervisor worker%%'", (DATABASE,)) >= count
        wait_until(connected, 30, message=f"{count} workers connected")

    def wait_for_empty_queue(self, fleet: Fleet, jobs: int) -> float:
        """Seconds from the supervisor's start until nothing is pending or running."""
        def drained() -> bool:
            fleet.ensure_running()
            return not self.queue_has_work()
        wait_until(drained, max(60, jobs / SLOWEST_JOBS_PER_SECOND),
                   interval=EMPTY_QUEUE_CHECK_SECONDS, message=f"{jobs} jobs to finish")
        return time.monotonic() - fleet.started_at

    def queue_has_work(self) -> bool:
        return self.sql.value(self.queue_has_work_query)

    def ensure_all_succeeded(self, expected: int) -> None:
        succeeded, total = self.sql.rows(
            "SELECT count(*) FILTER (WHERE state = 'succeeded'), count(*) FROM job_queue")[0]
        if succeeded != total or total != expected:
            raise BenchError(f"expected {expected} succeeded rows, found {succeeded} of {total}")
