"""bin/bench: how fast motir-supervisor runs jobs, next to PostgreSQL's own limit.

One run starts a throwaway PostgreSQL on this machine at default durability
(fsync and synchronous commit on, as in production), migrates a database and
measures, in this order:

- the server's limit: pgbench looping the one-row claim transaction and the
  completion update with 4 clients; every throughput is also shown as a ratio
  to it, because only ratios measured in one run on one machine compare;
- throughput: pre-inserted no-op jobs run by ``motir-supervisor run
  --workers N`` for each N, timed from the supervisor's start to an empty queue;
- the same with a large history of finished rows in the table;
- pick-up latency to the handler's start: jobs inserted one at a time at a
  steady rate into an idle fleet with ``--poll-seconds 30``, so only the
  wake-up can make it fast, beside a bare loop doing the least any runner
  could (the machine's floor), in the same run (benchmarks/waiting.py);
- IO-bound throughput: jobs that wait 100 ms without CPU, sync and async, by
  job slots, with the fleet's memory and database connections;
- idle cost: CPU and database transactions of a fleet with nothing to do,
  from 3 s after its start and from 3 s after a burst;
- the job model (benchmarks/job_model.py): priorities and unique keys, and
  urgent jobs behind a deep backlog;
- flow control (benchmarks/flow.py): jobs limited per key beside the same
  jobs without, IO-bound jobs limited per key, and a rate-limited backlog;
- the dashboard (benchmarks/dashboard_pages.py): each page's time on a
  table of a million finished jobs;
- with ``--peers``, the peer job runners on the same jobs with the same
  parallelism, each in its own database of the same server (see
  benchmarks/peers: they are installed apart from the project and only called).

The supervisor is driven as an operator drives it, through its command; this
tool runs its own SQL for setting up and observing, and the package never
imports it.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from benchmarks import dashboard_pages, flow, job_model, waiting
from benchmarks.peers import PeerRun, Runtimes, configurations
from benchmarks.peers import measure as measure_peer
from benchmarks.peers.timing import EMPTY_QUEUE_CHECK_SECONDS
from testbed.pgserver import ThrowawayPostgres, find_pg_ctl
from testbed.polling import wait_until
from testbed.sql import Sql

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "motir_supervisor"]
APP = "benchmarks.noop_app"
DATABASE = "motir_bench"
DEFAULT_JSON = Path(".bench/results.json")

#: The fleet the performance goals are stated for, 4 workers on a 2-core
#: machine: the latency, history and idle measurements use it, and pgbench
#: as many clients.
FLEET_WORKERS = 4
PGBENCH_CLIENTS = 4
#: The slowest rate any run is allowed before it counts as hung.
SLOWEST_JOBS_PER_SECOND = 50
#: A supervisor of no-op jobs drains at once; this only bounds a hang.
STOP_TIMEOUT_SECONDS = 60

# One job per iteration, the way a worker that claims and completes one row
# per round trip runs it: the claim is a transaction of its own (a handler
# would run after it commits), the fenced completion is another. pgbench
# counts one script run as one transaction, so its rate is jobs per second.
PGBENCH_ONE_ROW_LOOP = r"""
BEGIN;
SELECT id FROM job_queue
 WHERE state = 'pending' AND run_at <= now()
 ORDER BY run_at, id
 LIMIT 1
 FOR UPDATE SKIP LOCKED \gset
UPDATE job_queue
   SET state = 'running', locked_by = 'pgbench',
       lease_expires_at = now() + interval '30 seconds',
       attempts = attempts + 1, started_at = now()
 WHERE id = :id;
COMMIT;
UPDATE job_queue
   SET state = 'succeeded', finished_at = now(), locked_by = NULL, lease_expires_at = NULL
 WHERE id = :id AND locked_by = 'pgbench' AND state = 'running';
"""

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

#: Enough for --workers 128 of the IO-bound runs, each worker with its
#: connection, beside the supervisors' own.
MAX_CONNECTIONS = 400


SECTIONS = ("throughput", "latency", "io", "idle", "model", "flow", "dashboard")


class BenchError(RuntimeError):
    """A measurement could not be taken; the message says why in one line or a log tail."""


# -- settings and results ------------------------------------------------------


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
    #: Extra options given to every `motir-supervisor run`, to compare settings.
    run_options: tuple[str, ...] = ()
    #: The sections measured (pgbench's loop always is: every ratio needs it).
    only: tuple[str, ...] = SECTIONS
    #: Install and measure the peers too (off by default: it downloads them).
    peers: bool = False


SMOKE = Settings(jobs=300, workers_list=(1, 2), latency_samples=30, latency_rounds=1,
                 bloat_rows=10_000, idle_seconds=0.5, idle_settle_seconds=0.25,
                 idle_burst_jobs=100, io_jobs=40, io_slots=(4,), rate_windows=2)


@dataclasses.dataclass(frozen=True)
class Machine:
    cpus: int
    cpu_model: str
    memory_gib: float
    kernel: str
    python: str
    postgresql: str
    #: The server's durability settings, read back from it, not assumed.
    durability: str


@dataclasses.dataclass(frozen=True)
class PgbenchLoop:
    clients: int
    transactions: int
    seconds: float
    transactions_per_second: float


@dataclasses.dataclass(frozen=True)
class ThroughputRun:
    workers: int
    jobs: int
    #: Finished rows already in the table when the run started.
    finished_rows: int
    #: From starting the supervisor to a queue with nothing pending or running.
    seconds: float
    jobs_per_second: float


@dataclasses.dataclass(frozen=True)
class IdleCost:
    workers: int
    #: "start" or "burst": what the window follows, by idle_settle_seconds.
    after: str
    seconds: float
    #: CPU of the supervisor and its workers, in % of one core.
    cpu_percent_of_core: float
    #: One clock tick over the window: /proc counts CPU in ticks, so less
    #: than this reads as 0.
    cpu_resolution_percent: float
    #: Statements the fleet ran per second, by pg_stat_statements: every
    #: statement of the supervisor runs in a transaction of its own
    #: (autocommit), so this is its transactions per second too.
    db_statements_per_second: float


@dataclasses.dataclass(frozen=True)
class BenchResults:
    measured_at: str
    settings: Settings
    machine: Machine
    pgbench: PgbenchLoop
    throughput: tuple[ThroughputRun, ...]
    #: None (and the other sections empty) when --only left them out.
    bloated: ThroughputRun | None
    latency: waiting.HandlerLatency | None
    io_bound: tuple[waiting.IoRun, ...]
    #: The peers on the same IO-bound jobs; empty unless run with --peers.
    io_peers: tuple[waiting.PeerIoRun, ...]
    idle: tuple[IdleCost, ...]
    #: None unless run with --peers; a failed peer has no figures and says why.
    peers: tuple[PeerRun, ...] | None
    #: The job model: priorities and unique keys, urgent jobs behind a backlog.
    job_model: job_model.JobModelRun | None = None
    flow: flow.FlowRun | None = None
    #: The dashboard's pages on a big table.
    dashboard: dashboard_pages.DashboardRun | None = None

    def as_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        measured = [run for run in data["peers"] or () if run["jobs_per_second"] is not None]
        for run in [*data["throughput"], *filter(None, [data["bloated"]]), *measured]:
            run["ratio_to_pgbench"] = round(
                run["jobs_per_second"] / self.pgbench.transactions_per_second, 3)
        return data


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


# -- the measurements ------------------------------------------------------------


def progress(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


class Bench:
    """The measurements, on one migrated database of one throwaway server."""

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
        # What the idle fleet's statements are counted with (see count_statements).
        self.observer.rows("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")

    def close(self) -> None:
        self.sql.close()
        self.observer.close()

    def start_fleet(self, label: str, *options: str, app: str = APP) -> Fleet:
        return Fleet(self.url, self.logs / f"{label}.log",
                     [*options, *self.settings.run_options], app)

    def describe_machine(self) -> Machine:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
        memory = re.search(r"^MemTotal:\s*(\d+) kB", Path("/proc/meminfo").read_text(),
                           re.MULTILINE)
        durability = {name: self.sql.value(f"SHOW {name}")
                      for name in ("fsync", "synchronous_commit", "full_page_writes")}
        described = " ".join(f"{name}={value}" for name, value in durability.items())
        if set(durability.values()) != {"on"}:
            raise BenchError(f"the server does not run at default durability: {described}")
        return Machine(
            cpus=len(os.sched_getaffinity(0)),
            cpu_model=model[1].strip() if model else platform.processor() or "unknown",
            memory_gib=round(int(memory[1]) / 2**20, 1) if memory else 0.0,
            kernel=f"{platform.system()} {platform.release()}",
            python=platform.python_version(),
            postgresql=self.sql.value("SHOW server_version"),
            durability=described)

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

    def measure_pgbench_loop(self) -> PgbenchLoop:
        per_client = -(-self.settings.jobs // PGBENCH_CLIENTS)
        transactions = per_client * PGBENCH_CLIENTS
        # A few spare rows: \gset fails on an empty result and aborts the client.
        self.prepare_queue(transactions + PGBENCH_CLIENTS)
        progress(f"pgbench one-row loop, {PGBENCH_CLIENTS} clients, {transactions} jobs")
        script = self.pg.base / "one_row_loop.sql"
        script.write_text(PGBENCH_ONE_ROW_LOOP)
        # Next to the real pg_ctl: the one on PATH may be a lone symlink to it.
        pgbench = Path(find_pg_ctl()).resolve().with_name("pgbench")
        # pgbench is only a client: it may run as root and connect over TCP.
        done = subprocess.run(
            [str(pgbench), "--no-vacuum", "--client", str(PGBENCH_CLIENTS),
             "--jobs", str(PGBENCH_CLIENTS), "--transactions", str(per_client),
             "--file", str(script), "--host", "127.0.0.1", "--port", str(self.pg.port),
             "--username", "postgres", DATABASE],
            capture_output=True, text=True)
        tps = re.search(r"^tps = ([\d.]+) \(without initial connection time\)$", done.stdout,
                        re.MULTILINE)
        processed = re.search(r"^number of transactions actually processed: (\d+)/", done.stdout,
                              re.MULTILINE)
        if done.returncode != 0 or not tps or not processed or int(processed[1]) != transactions:
            raise BenchError(f"pgbench failed (exit {done.returncode}):\n"
                             f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
        rate = float(tps[1])
        return PgbenchLoop(clients=PGBENCH_CLIENTS, transactions=transactions,
                           seconds=round(transactions / rate, 3),
                           transactions_per_second=round(rate, 1))

    def measure_throughput(self, workers: int, finished_rows: int = 0) -> ThroughputRun:
        jobs = self.settings.jobs
        self.prepare_queue(jobs, finished_rows)
        history = f", {finished_rows:,} finished rows in the table" if finished_rows else ""
        progress(f"throughput, {jobs} jobs, --workers {workers}{history}")
        label = f"throughput-w{workers}" + (f"-history{finished_rows}" if finished_rows else "")
        with self.start_fleet(label, "--workers", str(workers)) as fleet:
            seconds = self.wait_for_empty_queue(fleet, jobs)
        self.ensure_all_succeeded(jobs + finished_rows)
        return ThroughputRun(workers=workers, jobs=jobs, finished_rows=finished_rows,
                             seconds=round(seconds, 3), jobs_per_second=round(jobs / seconds, 1))

    def count_statements(self) -> int:
        """Statements run so far in the benchmark's database, counted as each
        ends (pg_stat_database would do for transactions, but an idle backend
        publishes its counters up to 10 s late: a window of 10 s misses or
        gains whole bursts)."""
        return self.observer.value(
            "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements"
            " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = %s)", (DATABASE,))

    def measure_idle_cost(self) -> tuple[IdleCost, ...]:
        self.prepare_queue(0)
        with self.start_fleet("idle", "--workers", str(FLEET_WORKERS)) as fleet:
            self.wait_for_idle_workers(fleet, FLEET_WORKERS)
            after_start = self.measure_idle_window(fleet, "start")
            burst = self.settings.idle_burst_jobs
            before_burst = self.count_statements()
            self.sql.rows("INSERT INTO job_queue (kind) SELECT 'noop' FROM generate_series(1, %s)",
                          (burst,))
            self.wait_for_empty_queue(fleet, burst)
            if self.count_statements() == before_burst:
                # The idle figures would read 0 whatever the fleet did.
                raise BenchError("pg_stat_statements counted none of the burst's statements")
            return after_start, self.measure_idle_window(fleet, "burst")

    def measure_idle_window(self, fleet: Fleet, after: str) -> IdleCost:
        settle, window = self.settings.idle_settle_seconds, self.settings.idle_seconds
        progress(f"idle fleet of {FLEET_WORKERS}, {window:g} s from {settle:g} s after its {after}")
        time.sleep(settle)  # deliberate: see Settings.idle_settle_seconds
        ticks_before, statements_before = fleet.cpu_ticks(), self.count_statements()
        started = time.monotonic()
        time.sleep(window)  # deliberate: the idle window itself
        statements_after, ticks_after = self.count_statements(), fleet.cpu_ticks()
        elapsed = time.monotonic() - started
        fleet.ensure_running()
        # The observer's own reads go to another database: they are not counted.
        used = sum(ticks_after[pid] - ticks_before[pid] for pid in ticks_before
                   if pid in ticks_after)
        ticks_per_second = os.sysconf("SC_CLK_TCK")
        return IdleCost(
            workers=FLEET_WORKERS, after=after, seconds=round(elapsed, 2),
            cpu_percent_of_core=round(100 * used / ticks_per_second / elapsed, 2),
            cpu_resolution_percent=round(100 / ticks_per_second / elapsed, 2),
            db_statements_per_second=round(
                (statements_after - statements_before) / elapsed, 2))

    def measure_peers(self) -> tuple[PeerRun, ...] | None:
        """The peers on the throughput runs' jobs, with the fleet's parallelism.

        Each configuration gets a database of its own on this server, so it
        meets the same durability and the same machine; the driver installs
        the peer's schema, enqueues the jobs with the peer's bulk API and
        times its workers as a motir-supervisor fleet is timed. None unless
        asked for with --peers.
        """
        if not self.settings.peers:
            return None
        runtimes, runs = Runtimes(), []
        for number, config in enumerate(configurations(FLEET_WORKERS), start=1):
            database = f"peer{number}_{config.peer.replace('-', '_')}"
            progress(f"peer {config.peer}, {self.settings.jobs} jobs, {config.configuration}")
            url = self.pg.create_database(database)
            try:
                run = measure_peer(config, runtimes, url, self.settings.jobs,
                                   self.logs / f"{database}.log")
            finally:
                # Its rows would only take disk and checkpoint time from the next one.
                self.pg.drop_database(database)
            if run.failure:
                progress(f"peer {config.peer} failed: {run.failure}")
            runs.append(run)
        return tuple(runs)

    def measure_everything(self) -> BenchResults:
        machine = self.describe_machine()
        pgbench = self.measure_pgbench_loop()
        only = self.settings.only
        throughput, bloated, latency, io_bound, io_peers, idle = (), None, None, (), (), ()
        if "throughput" in only:
            throughput = tuple(self.measure_throughput(w) for w in self.settings.workers_list)
            bloated = self.measure_throughput(FLEET_WORKERS, self.settings.bloat_rows)
        if "latency" in only:
            latency = waiting.measure_handler_latency(self)
        if "io" in only:
            io_bound = waiting.measure_io_bound(self)
            if self.settings.peers:
                io_peers = waiting.measure_io_peers(self)
        if "idle" in only:
            idle = self.measure_idle_cost()
        model = job_model.measure_job_model(self) if "model" in only else None
        flow_run = flow.measure_flow(self) if "flow" in only else None
        dashboard = dashboard_pages.measure_dashboard(self) if "dashboard" in only else None
        return BenchResults(
            measured_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            settings=self.settings, machine=machine, pgbench=pgbench, throughput=throughput,
            bloated=bloated, latency=latency, io_bound=io_bound, io_peers=io_peers, idle=idle,
            peers=self.measure_peers() if "throughput" in only else None, job_model=model,
            flow=flow_run,
            dashboard=dashboard)


# -- the report -------------------------------------------------------------------


def format_report(results: BenchResults) -> str:
    m, s, base = results.machine, results.settings, results.pgbench.transactions_per_second
    lines = [
        f"motir-supervisor benchmark, {results.measured_at}",
        f"machine: {m.cpus} CPUs, {m.cpu_model}, {m.memory_gib:g} GiB; {m.kernel};"
        f" Python {m.python}",
        f"server:  PostgreSQL {m.postgresql} on the same machine; {m.durability}",
        "",
        f"throughput: {s.jobs:,} no-op jobs per run, from the supervisor's start"
        " to an empty queue",
    ]
    # (name, seconds, jobs/s), or (name, None, failure) for a peer that failed.
    runs: list[tuple[str, float | None, float | str]] = [
        (f"pgbench one-row loop ({results.pgbench.clients} clients)",
         results.pgbench.seconds, base)]
    for run in results.throughput:
        runs.append((f"motir-supervisor --workers {run.workers}", run.seconds,
                     run.jobs_per_second))
    b = results.bloated
    if b is not None:
        runs.append((f"--workers {b.workers}, {b.finished_rows:,} finished rows in table",
                     b.seconds, b.jobs_per_second))
    for peer in results.peers or ():
        name = f"{peer.peer} {peer.version or ''}".strip() + f", {peer.configuration}"
        runs.append((name, peer.seconds, peer.jobs_per_second or f"failed: {peer.failure}"))
    width = max(48, *(len(name) for name, _, _ in runs))
    lines.append(f"  {'run':<{width}} {'seconds':>8} {'jobs/s':>9} {'× pgbench':>10}")
    for name, seconds, rate in runs:
        if isinstance(rate, str):
            lines.append(f"  {name:<{width}} {rate}")
        else:
            lines.append(f"  {name:<{width}} {seconds:>8.2f} {rate:>9,.0f} {rate / base:>10.2f}")
    if results.latency:
        lines += ["", *waiting.format_latency(results.latency)]
    if results.job_model:
        lines += ["", *job_model.format_job_model(results.job_model)]
    if results.flow:
        lines += ["", *flow.format_flow(results.flow)]
    if results.dashboard:
        lines += ["", *dashboard_pages.format_dashboard(results.dashboard)]
    if results.io_bound or results.io_peers:
        lines += ["", *waiting.format_io(results.io_bound, results.io_peers)]
    if results.idle:
        lines += ["", f"idle fleet: --workers {FLEET_WORKERS}, default settings,"
                  f" from {s.idle_settle_seconds:g} s after its start and after a burst"
                  f" of {s.idle_burst_jobs:,} jobs"]
        for idle in results.idle:
            lines.append(
                f"  after its {idle.after:<5} {idle.seconds:>5.1f} s:"
                f" CPU {idle.cpu_percent_of_core:.2f} % of one core"
                f" (resolution {idle.cpu_resolution_percent:g} %)"
                f"   database {idle.db_statements_per_second:.2f} statements/s")
    if results.peers is None and not results.io_peers:
        lines += ["", "peers: not measured (run with --peers)"]
    else:
        lines += ["", "peers: each in its own database of this server, timed like the"
                      " supervisor; see benchmarks/peers/ for how each runs"]
    return "\n".join(lines)


def write_json(results: BenchResults, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results.as_json(), indent=2) + "\n")


# -- the command ------------------------------------------------------------------


def parse_workers_list(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        counts = ()
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"expected positive counts like 1,2,4,8, got {text!r}")
    return counts


def parse_sections(text: str) -> tuple[str, ...]:
    chosen = tuple(part.strip() for part in text.split(","))
    unknown = set(chosen) - set(SECTIONS)
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown sections {sorted(unknown)};"
                                         f" choose from {','.join(SECTIONS)}")
    return chosen


def parse_arguments(argv: Sequence[str] | None) -> tuple[Settings, Path]:
    parser = argparse.ArgumentParser(prog="bin/bench", description=__doc__.split("\n\n")[0])
    defaults = Settings()
    parser.add_argument("--smoke", action="store_true",
                        help="a tiny run for CI (the options below still override it)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON,
                        help=f"where to write the figures [{DEFAULT_JSON}]")
    parser.add_argument("--jobs", type=int, help=f"jobs per throughput run [{defaults.jobs}]")
    parser.add_argument("--workers-list", type=parse_workers_list,
                        help=f"worker counts of the throughput runs"
                             f" [{','.join(map(str, defaults.workers_list))}]")
    parser.add_argument("--latency-samples", type=int,
                        help=f"jobs of the pick-up latency [{defaults.latency_samples}]")
    parser.add_argument("--latency-interval-ms", type=float,
                        help=f"ms between those jobs [{defaults.latency_interval_ms:g}]")
    parser.add_argument("--latency-rounds", type=int,
                        help=f"turns the runners of the latency take"
                             f" [{defaults.latency_rounds}]")
    parser.add_argument("--bloat-rows", type=int,
                        help=f"finished rows in the table for the history run"
                             f" [{defaults.bloat_rows}]")
    parser.add_argument("--idle-seconds", type=float,
                        help=f"seconds the idle fleet is measured [{defaults.idle_seconds:g}]")
    parser.add_argument("--idle-settle-seconds", type=float,
                        help=f"seconds the idle fleet settles first"
                             f" [{defaults.idle_settle_seconds:g}]")
    parser.add_argument("--idle-burst-jobs", type=int,
                        help=f"jobs of the burst before the second idle window"
                             f" [{defaults.idle_burst_jobs}]")
    parser.add_argument("--io-jobs", type=int,
                        help=f"jobs per IO-bound run [{defaults.io_jobs}]")
    parser.add_argument("--io-slots", type=parse_workers_list,
                        help=f"job slots of the IO-bound runs, none with 0"
                             f" [{','.join(map(str, defaults.io_slots))}]")
    parser.add_argument("--rate-windows", type=int,
                        help=f"windows of the rate-limited backlog [{defaults.rate_windows}]")
    parser.add_argument("--only", type=parse_sections,
                        help=f"measure only these sections [{','.join(SECTIONS)}]")
    parser.add_argument("--run-options", type=shlex.split,
                        help="extra options of every supervisor, e.g. '--batch-size 64'")
    parser.add_argument("--peers", action="store_true", default=None,
                        help="also install (into .bench/) and measure procrastinate and"
                             " pgqueuer, and graphile-worker and pg-boss where node is on PATH")
    args = parser.parse_args(argv)
    if args.run_options is not None:
        args.run_options = tuple(args.run_options)
    chosen = {field.name: getattr(args, field.name) for field in dataclasses.fields(Settings)
              if getattr(args, field.name) is not None}
    settings = dataclasses.replace(SMOKE if args.smoke else defaults, **chosen)
    if (settings.jobs < 1 or settings.latency_samples < 1 or settings.latency_rounds < 1
            or settings.bloat_rows < 0):
        parser.error("--jobs, --latency-samples and --latency-rounds must be positive,"
                     " --bloat-rows not negative")
    return settings, args.json


def main(argv: Sequence[str] | None = None) -> int:
    settings, json_path = parse_arguments(argv)
    progress("starting a throwaway PostgreSQL at default durability")
    try:
        # pytest-postgresql starts the server with -F (fsync off) whatever we
        # pass; a later -c wins, and everything else stays at its default.
        with ThrowawayPostgres(
                postgres_options=f"-c fsync=on -c max_connections={MAX_CONNECTIONS}"
                                 " -c shared_preload_libraries=pg_stat_statements") as pg:
            bench = Bench(pg, settings)
            try:
                results = bench.measure_everything()
            finally:
                bench.close()
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    print(format_report(results))
    write_json(results, json_path)
    progress(f"figures written to {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
