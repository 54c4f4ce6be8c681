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
- idle pick-up latency: jobs inserted one at a time at a steady rate into an
  idle fleet with ``--poll-seconds 30``, so only the wake-up can make it fast;
- idle cost: CPU and database transactions of a fleet with nothing to do;
- with ``--peers``, the peers of issue 5 on the same jobs with the same
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

from benchmarks.peers import PeerRun, Runtimes, configurations
from benchmarks.peers import measure as measure_peer
from tests.helpers import Sql, wait_until
from tests.pgserver import ThrowawayPostgres, find_pg_ctl

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "motir_supervisor"]
APP = "benchmarks.noop_app"
DATABASE = "motir_bench"
DEFAULT_JSON = Path(".bench/results.json")

#: Issue 5's targets are for a fleet of 4 on a 2-core machine: the latency,
#: history and idle measurements use that fleet, and pgbench as many clients.
FLEET_WORKERS = 4
PGBENCH_CLIENTS = 4
#: The pick-up latency runs with a poll this long, so only the wake-up
#: (LISTEN/NOTIFY) can make it fast.
LATENCY_POLL_SECONDS = 30.0
#: How often a run checks for an empty queue: often enough that the check
#: adds little to the timing, seldom enough that it adds nothing to the load.
EMPTY_QUEUE_CHECK_SECONDS = 0.05
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

# Each half can walk a partial index, so the check stays cheap with a million
# finished rows in the table, where a count(*) would scan all of them 20
# times a second and slow down the very run it times.
QUEUE_HAS_WORK = """
SELECT EXISTS (SELECT FROM job_queue WHERE state = 'pending')
    OR EXISTS (SELECT FROM job_queue WHERE state = 'running')
"""

PICKUP_PERCENTILES = """
SELECT percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ms), max(ms), count(*)
FROM (SELECT extract(epoch FROM started_at - created_at)::float8 * 1000 AS ms
      FROM job_queue WHERE id >= %s) AS pickup
"""


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
    #: Finished rows in the table during the history run.
    bloat_rows: int = 1_000_000
    #: Seconds the idle fleet is measured.
    idle_seconds: float = 10.0
    # Before that the fleet gets time to settle: empty polls back off from
    # 50 ms to the poll interval (10 s by default, about 13 s of ramp), and a
    # backend holds its statistics up to 10 s before publishing them, so the
    # setup's own queries would otherwise land inside the window.
    idle_settle_seconds: float = 15.0
    #: Extra options given to every `motir-supervisor run`, to compare settings.
    run_options: tuple[str, ...] = ()
    #: Install and measure the peers too (off by default: it downloads them).
    peers: bool = False


SMOKE = Settings(jobs=300, workers_list=(1, 2), latency_samples=30, bloat_rows=10_000,
                 idle_seconds=2.0, idle_settle_seconds=1.0)


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
class PickupLatency:
    workers: int
    poll_seconds: float
    samples: int
    interval_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float


@dataclasses.dataclass(frozen=True)
class IdleCost:
    workers: int
    seconds: float
    #: CPU of the supervisor and its workers, in % of one core.
    cpu_percent_of_core: float
    #: One clock tick over the window: /proc counts CPU in ticks, so less
    #: than this reads as 0.
    cpu_resolution_percent: float
    #: Commits and rollbacks in the benchmark's database per second.
    db_transactions_per_second: float


@dataclasses.dataclass(frozen=True)
class BenchResults:
    measured_at: str
    settings: Settings
    machine: Machine
    pgbench: PgbenchLoop
    throughput: tuple[ThroughputRun, ...]
    bloated: ThroughputRun
    latency: PickupLatency
    idle: IdleCost
    #: None unless run with --peers; a failed peer has no figures and says why.
    peers: tuple[PeerRun, ...] | None

    def as_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        measured = [run for run in data["peers"] or () if run["jobs_per_second"] is not None]
        for run in [*data["throughput"], data["bloated"], *measured]:
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


def supervisor_environment(url: str) -> dict[str, str]:
    # The caller's MOTIR_* settings must not change what is measured.
    env = {name: value for name, value in os.environ.items() if not name.startswith("MOTIR_")}
    return {**env, "DATABASE_URL": url, "PYTHONPATH": str(ROOT)}


class Fleet:
    """One ``motir-supervisor run`` process and its workers, started as an operator would."""

    def __init__(self, url: str, log_path: Path, options: Sequence[str]):
        self.log_path = log_path
        self.started_at = time.monotonic()
        with open(log_path, "w") as log:
            self.process = subprocess.Popen(
                [*CLI, "run", "--app", APP, *options], env=supervisor_environment(url),
                stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)

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

    def __init__(self, pg: ThrowawayPostgres, settings: Settings):
        self.pg = pg
        self.settings = settings
        self.url = pg.create_database(DATABASE)
        subprocess.run([*CLI, "migrate"], env=supervisor_environment(self.url), cwd=ROOT,
                       check=True, stdout=subprocess.DEVNULL)
        self.logs = pg.base / "logs"
        self.logs.mkdir()
        self.sql = Sql(self.url)
        # Observing from another database keeps the observer's own
        # transactions out of the benchmark database's counters.
        self.observer = Sql(pg.url("postgres"))

    def close(self) -> None:
        self.sql.close()
        self.observer.close()

    def start_fleet(self, label: str, *options: str) -> Fleet:
        return Fleet(self.url, self.logs / f"{label}.log",
                     [*options, *self.settings.run_options])

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

    def prepare_queue(self, pending: int, finished: int = 0) -> None:
        """An empty table, then ``finished`` old succeeded rows and ``pending`` due no-ops."""
        self.sql.rows("TRUNCATE job_queue")
        if finished:
            self.sql.rows(
                "INSERT INTO job_queue (kind, state, attempts, started_at, finished_at)"
                " SELECT 'noop', 'succeeded', 1, now(), now() FROM generate_series(1, %s)",
                (finished,))
        if pending:
            self.sql.rows("INSERT INTO job_queue (kind) SELECT 'noop' FROM generate_series(1, %s)",
                          (pending,))
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
            return not self.sql.value(QUEUE_HAS_WORK)
        wait_until(drained, max(60, jobs / SLOWEST_JOBS_PER_SECOND),
                   interval=EMPTY_QUEUE_CHECK_SECONDS, message=f"{jobs} jobs to finish")
        return time.monotonic() - fleet.started_at

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

    def measure_pickup_latency(self) -> PickupLatency:
        samples, interval = self.settings.latency_samples, self.settings.latency_interval_ms
        self.prepare_queue(0)
        progress(f"idle pick-up latency, {samples} jobs every {interval:g} ms")
        with self.start_fleet("latency", "--workers", str(FLEET_WORKERS),
                              "--poll-seconds", f"{LATENCY_POLL_SECONDS:g}") as fleet:
            self.wait_for_idle_workers(fleet, FLEET_WORKERS)
            # A warm-up, not measured: the first jobs pay for what happens
            # once per process (first plans, first handler call, first title).
            self.insert_paced(FLEET_WORKERS, interval)
            self.wait_for_empty_queue(fleet, FLEET_WORKERS)
            first_id = self.insert_paced(samples, interval)
            self.wait_for_empty_queue(fleet, samples)
        # created_at is the insert's transaction start and started_at the
        # claim's, both by the server's clock: the delay a producer sees,
        # including its own commit (a WAL flush at default durability).
        (p50, p95, p99), worst, count = self.sql.rows(PICKUP_PERCENTILES, (first_id,))[0]
        if count != samples:
            raise BenchError(f"expected {samples} latency samples, found {count}")
        return PickupLatency(
            workers=FLEET_WORKERS, poll_seconds=LATENCY_POLL_SECONDS, samples=samples,
            interval_ms=interval, p50_ms=round(p50, 2), p95_ms=round(p95, 2),
            p99_ms=round(p99, 2), max_ms=round(worst, 2))

    def insert_paced(self, count: int, interval_ms: float) -> int:
        """Insert ``count`` no-ops one statement at a time at a steady rate; the first id."""
        first_id = None
        start = time.monotonic()
        for i in range(count):
            # Deliberate pacing: a steady rate on a fixed schedule, so a slow
            # insert does not shift every later one.
            time.sleep(max(0.0, start + i * interval_ms / 1000 - time.monotonic()))
            job_id = self.sql.value("INSERT INTO job_queue (kind) VALUES ('noop') RETURNING id")
            first_id = job_id if first_id is None else first_id
        return first_id

    def count_transactions(self) -> int:
        return self.observer.value(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
            (DATABASE,))

    def measure_idle_cost(self) -> IdleCost:
        settle, window = self.settings.idle_settle_seconds, self.settings.idle_seconds
        self.prepare_queue(0)
        progress(f"idle fleet of {FLEET_WORKERS}, {window:g} s after {settle:g} s to settle")
        with self.start_fleet("idle", "--workers", str(FLEET_WORKERS)) as fleet:
            self.wait_for_idle_workers(fleet, FLEET_WORKERS)
            time.sleep(settle)  # deliberate: see Settings.idle_settle_seconds
            ticks_before, transactions_before = fleet.cpu_ticks(), self.count_transactions()
            started = time.monotonic()
            time.sleep(window)  # deliberate: the idle window itself
            transactions_after, ticks_after = self.count_transactions(), fleet.cpu_ticks()
            elapsed = time.monotonic() - started
            fleet.ensure_running()
        # Backends publish their counters at most once a second (and an idle
        # one after up to 10 s), so each end of the window misses what is
        # still held back; in a steady state both ends miss the same on
        # average and the difference stays fair. Only the observer's reads
        # would add to it, and they go to another database.
        used = sum(ticks_after[pid] - ticks_before[pid] for pid in ticks_before
                   if pid in ticks_after)
        ticks_per_second = os.sysconf("SC_CLK_TCK")
        return IdleCost(
            workers=FLEET_WORKERS, seconds=round(elapsed, 2),
            cpu_percent_of_core=round(100 * used / ticks_per_second / elapsed, 2),
            cpu_resolution_percent=round(100 / ticks_per_second / elapsed, 2),
            db_transactions_per_second=round(
                (transactions_after - transactions_before) / elapsed, 2))

    def measure_peers(self) -> tuple[PeerRun, ...] | None:
        """The peers of issue 5 on the throughput runs' jobs, with the fleet's parallelism.

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
        throughput = tuple(self.measure_throughput(w) for w in self.settings.workers_list)
        bloated = self.measure_throughput(FLEET_WORKERS, self.settings.bloat_rows)
        latency = self.measure_pickup_latency()
        idle = self.measure_idle_cost()
        return BenchResults(
            measured_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            settings=self.settings, machine=machine, pgbench=pgbench, throughput=throughput,
            bloated=bloated, latency=latency, idle=idle, peers=self.measure_peers())


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
    lat, idle = results.latency, results.idle
    lines += [
        "",
        f"idle pick-up latency: {lat.samples} jobs inserted every {lat.interval_ms:g} ms,"
        f" --workers {lat.workers} --poll-seconds {lat.poll_seconds:g}",
        f"  p50 {lat.p50_ms:.2f} ms   p95 {lat.p95_ms:.2f} ms   p99 {lat.p99_ms:.2f} ms"
        f"   max {lat.max_ms:.2f} ms",
        "",
        f"idle fleet: --workers {idle.workers}, default settings, measured for {idle.seconds:g} s",
        f"  CPU {idle.cpu_percent_of_core:.2f} % of one core"
        f" (resolution {idle.cpu_resolution_percent:g} %)"
        f"   database {idle.db_transactions_per_second:.2f} transactions/s",
    ]
    if results.peers is None:
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
    parser.add_argument("--bloat-rows", type=int,
                        help=f"finished rows in the table for the history run"
                             f" [{defaults.bloat_rows}]")
    parser.add_argument("--idle-seconds", type=float,
                        help=f"seconds the idle fleet is measured [{defaults.idle_seconds:g}]")
    parser.add_argument("--idle-settle-seconds", type=float,
                        help=f"seconds the idle fleet settles first"
                             f" [{defaults.idle_settle_seconds:g}]")
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
    if settings.jobs < 1 or settings.latency_samples < 1 or settings.bloat_rows < 0:
        parser.error("--jobs and --latency-samples must be positive, --bloat-rows not negative")
    return settings, args.json


def main(argv: Sequence[str] | None = None) -> int:
    settings, json_path = parse_arguments(argv)
    progress("starting a throwaway PostgreSQL at default durability")
    try:
        # pytest-postgresql starts the server with -F (fsync off) whatever we
        # pass; a later -c wins, and everything else stays at its default.
        with ThrowawayPostgres(postgres_options="-c fsync=on") as pg:
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
