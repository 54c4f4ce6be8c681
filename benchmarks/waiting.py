"""bin/bench's measurements of jobs that wait: pick-up latency to the handler's
start beside the machine's floor, and IO-bound throughput by job slots.

They run on the Bench of benchmarks/bench.py (its server, its database, its
way of starting a fleet) with the handlers of benchmarks/waiting_app.py.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from benchmarks.peers import Runtimes
from benchmarks.peers import io_configurations as peer_configurations
from benchmarks.peers import measure as measure_peer
from benchmarks.peers.timing import EMPTY_QUEUE_CHECK_SECONDS
from benchmarks.waiting_app import STARTS_TABLE, WAIT_SECONDS
from testbed.polling import wait_until

if TYPE_CHECKING:
    from benchmarks.bench import Bench, Fleet

WAITING_APP = "benchmarks.waiting_app"
#: The latency runs poll this seldom, so only the wake-up can make them fast.
LATENCY_POLL_SECONDS = 30.0
#: Fleets whose latency is measured beside the floor: the goals' fleet of 4
#: (bench.FLEET_WORKERS), and a lone worker.
LATENCY_FLEETS = (4, 1)
#: Stamp jobs inserted at once to warm a fleet up: more than its job slots.
WARM_UP_BURST = 100
#: An IO-bound run samples its database connections at each check for an
#: empty queue, every EMPTY_QUEUE_CHECK_SECONDS as for the peers,
#: and its memory this seldom: reading smaps of 128 processes costs CPU.
MEMORY_EVERY_SECONDS = 1.0


@dataclasses.dataclass(frozen=True)
class Latency:
    #: "floor" for the bare loop, else the fleet's options.
    runner: str
    samples: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float


@dataclasses.dataclass(frozen=True)
class HandlerLatency:
    interval_ms: float
    poll_seconds: float
    floor: Latency
    fleets: tuple[Latency, ...]


@dataclasses.dataclass(frozen=True)
class IoRun:
    #: Jobs that may run at once, over the whole fleet.
    slots: int
    workers: int
    concurrency: int
    #: "sleep" (a handler thread) or "async_sleep" (the event loop).
    kind: str
    jobs: int
    seconds: float
    jobs_per_second: float
    #: jobs/s over the ideal, slots / WAIT_SECONDS.
    efficiency: float
    #: Peak proportional set size of the supervisor and its workers.
    peak_pss_mib: float
    pss_per_slot_mib: float
    peak_connections: int


@dataclasses.dataclass(frozen=True)
class PeerIoRun:
    peer: str
    #: How it ran, in the report's words.
    configuration: str
    version: str | None
    slots: int
    jobs: int
    seconds: float | None
    jobs_per_second: float | None
    efficiency: float | None
    #: Of its worker processes (not of the driver that times them).
    peak_pss_mib: float | None
    pss_per_slot_mib: float | None
    #: Its workers' connections: the driver's own one is not counted.
    peak_connections: int | None
    #: Why there is no figure, in one line; None when measured.
    failure: str | None = None


# -- pick-up latency to the handler ------------------------------------------------


def percentile(ordered: Sequence[float], fraction: float) -> float:
    """Linear between the closest ranks, as PostgreSQL's percentile_cont."""
    at = fraction * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def insert_stamped(bench: "Bench", count: int, interval_ms: float, priority: int = 0,
                   queue: str = "default") -> dict[int, object]:
    """Insert ``count`` stamp jobs one statement at a time at a steady rate;
    each id with the server's clock as its insert ran."""
    enqueued = {}
    start = time.monotonic()
    for i in range(count):
        # Deliberate pacing on a fixed schedule, so a slow insert shifts no later one.
        time.sleep(max(0.0, start + i * interval_ms / 1000 - time.monotonic()))
        job_id, at = bench.sql.rows("INSERT INTO job_queue (kind, priority, queue)"
                                    " VALUES ('stamp', %s, %s) RETURNING id, clock_timestamp()",
                                    (priority, queue))[0]
        enqueued[job_id] = at
    return enqueued


def summarise(runner: str, milliseconds: list[float]) -> Latency:
    ordered = sorted(milliseconds)
    return Latency(runner=runner, samples=len(ordered),
                   p50_ms=round(percentile(ordered, 0.5), 2),
                   p95_ms=round(percentile(ordered, 0.95), 2),
                   p99_ms=round(percentile(ordered, 0.99), 2), max_ms=round(ordered[-1], 2))


def latencies(bench: "Bench", runner: str, enqueued: dict[int, object]) -> list[float]:
    """Milliseconds from each insert to its handler's first statement."""
    started = dict(bench.sql.rows("SELECT job_id, started_at FROM bench_starts"
                                  " WHERE job_id = ANY(%s)", (list(enqueued),)))
    if len(started) != len(enqueued):
        raise bench.error(f"{runner}: {len(started)} of {len(enqueued)} stamp jobs started")
    return [(started[i] - enqueued[i]).total_seconds() * 1000 for i in enqueued]


def wait_for_stamps(bench: "Bench", ids: Sequence[int], alive) -> None:
    def all_started() -> bool:
        alive()
        return bench.sql.value("SELECT count(*) FROM bench_starts WHERE job_id = ANY(%s)",
                               (list(ids),)) == len(ids)
    wait_until(all_started, 60, interval=0.05, message=f"{len(ids)} stamp jobs to start")


def measure_floor(bench: "Bench", samples: int, interval_ms: float, warm_up: int = 5,
                  urgent_queue: str | None = None) -> list[float]:
    """The bare loop's latencies on an empty table; or, with ``urgent_queue``,
    on urgent jobs of that queue only, beside whatever else the table and
    the machine are busy with (see benchmarks/floor.py)."""
    priority, queue = (0, "default") if urgent_queue is None else (-1, urgent_queue)
    if urgent_queue is None:
        bench.prepare_queue(0)
    command = [sys.executable, "-m", "benchmarks.floor", bench.url, str(warm_up + samples),
               *filter(None, [urgent_queue])]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True,
                          cwd=Path(__file__).resolve().parent.parent) as floor:
        try:
            if floor.stdout.readline().strip() != "listening":
                raise bench.error("the floor's loop did not start")

            def alive() -> None:
                if floor.poll() not in (None, 0):
                    raise bench.error(f"the floor's loop exited with {floor.returncode}")
            wait_for_stamps(bench, list(insert_stamped(bench, warm_up, interval_ms, priority,
                                                       queue)), alive)
            enqueued = insert_stamped(bench, samples, interval_ms, priority, queue)
            wait_for_stamps(bench, list(enqueued), alive)
            floor.wait(10)
        finally:
            if floor.poll() is None:
                floor.kill()
    return latencies(bench, "floor", enqueued)


def measure_fleet(bench: "Bench", workers: int, samples: int, interval_ms: float) -> list[float]:
    bench.prepare_queue(0)
    options = ("--workers", str(workers), "--poll-seconds", f"{LATENCY_POLL_SECONDS:g}")
    with bench.start_fleet(f"latency-w{workers}", *options, app=WAITING_APP) as fleet:
        bench.wait_for_idle_workers(fleet, workers)
        warm_up_fleet(bench, fleet, interval_ms)
        enqueued = insert_stamped(bench, samples, interval_ms)
        wait_for_stamps(bench, list(enqueued), fleet.ensure_running)
    return latencies(bench, f"--workers {workers}", enqueued)


def warm_up_fleet(bench: "Bench", fleet: "Fleet", interval_ms: float) -> None:
    """A burst that reaches every worker, then a few paced jobs: each worker's
    connection for the stamps is open and its first plans are made before
    anything is measured. (Paced jobs alone would warm only the worker that
    listens: it takes every job it has room for.)"""
    burst = bench.sql.rows("INSERT INTO job_queue (kind) SELECT 'stamp'"
                           " FROM generate_series(1, %s) RETURNING id", (WARM_UP_BURST,))
    wait_for_stamps(bench, [job_id for job_id, in burst], fleet.ensure_running)
    wait_for_stamps(bench, list(insert_stamped(bench, 5, interval_ms)), fleet.ensure_running)
    bench.wait_for_empty_queue(fleet, 0)


def measure_handler_latency(bench: "Bench") -> HandlerLatency:
    """The floor and each fleet take turns, a share of the samples at a time,
    so that a noisy minute of the machine falls on all of them alike."""
    samples, interval = bench.settings.latency_samples, bench.settings.latency_interval_ms
    bench.sql.rows(STARTS_TABLE)
    rounds = min(bench.settings.latency_rounds, samples)
    found: dict[str, list[float]] = {"floor": []}
    for number in range(rounds):
        share = samples // rounds + (number < samples % rounds)
        bench.progress(f"pick-up latency to the handler, round {number + 1} of {rounds}:"
                       f" {share} jobs every {interval:g} ms to the floor's bare loop and to"
                       f" --workers {', '.join(map(str, LATENCY_FLEETS))}")
        found["floor"] += measure_floor(bench, share, interval)
        for workers in LATENCY_FLEETS:
            found.setdefault(f"--workers {workers}", []).extend(
                measure_fleet(bench, workers, share, interval))
    floor, *fleets = (summarise(runner, ms) for runner, ms in found.items())
    return HandlerLatency(interval_ms=interval, poll_seconds=LATENCY_POLL_SECONDS,
                          floor=floor, fleets=tuple(fleets))


# -- IO-bound throughput -----------------------------------------------------------


def tree_pss_kib(pids: Sequence[int]) -> int:
    total = 0
    for pid in pids:
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        for line in rollup.splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1])
                break
    return total


def io_configurations(slots: int) -> list[tuple[int, int, str]]:
    """(workers, concurrency, kind) of each run at ``slots`` job slots."""
    runs = []
    if slots % 4 == 0:
        runs += [(4, slots // 4, "sleep"), (4, slots // 4, "async_sleep")]
    if (slots, 1) not in [(w * c, c) for w, c, _ in runs]:
        runs.append((slots, 1, "sleep"))
    return runs


def measure_io_run(bench: "Bench", workers: int, concurrency: int, kind: str) -> IoRun:
    jobs, slots = bench.settings.io_jobs, workers * concurrency
    bench.prepare_queue(jobs, kind=kind)
    bench.progress(f"IO-bound, {jobs} jobs of {kind} {WAIT_SECONDS:g}s,"
                   f" --workers {workers} --concurrency {concurrency}")
    own_backend = bench.sql.value("SELECT pg_backend_pid()")
    peak_pss = peak_connections = 0
    next_memory = 0.0
    with bench.start_fleet(f"io-{kind}-w{workers}-c{concurrency}", "--workers", str(workers),
                           "--concurrency", str(concurrency), app=WAITING_APP) as fleet:
        def drained() -> bool:
            nonlocal peak_pss, peak_connections, next_memory
            fleet.ensure_running()
            if time.monotonic() >= next_memory:
                next_memory = time.monotonic() + MEMORY_EVERY_SECONDS
                peak_pss = max(peak_pss, tree_pss_kib([fleet.process.pid, *fleet.worker_pids()]))
            peak_connections = max(peak_connections, bench.observer.value(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> %s",
                (bench.database, own_backend)))
            return not bench.queue_has_work()
        wait_until(drained, max(120, jobs / slots * WAIT_SECONDS * 5),
                   interval=EMPTY_QUEUE_CHECK_SECONDS, message=f"{jobs} {kind} jobs to finish")
        seconds = time.monotonic() - fleet.started_at
    bench.ensure_all_succeeded(jobs)
    rate = jobs / seconds
    return IoRun(slots=slots, workers=workers, concurrency=concurrency, kind=kind, jobs=jobs,
                 seconds=round(seconds, 3), jobs_per_second=round(rate, 1),
                 efficiency=round(rate / (slots / WAIT_SECONDS), 3),
                 peak_pss_mib=round(peak_pss / 1024, 1),
                 pss_per_slot_mib=round(peak_pss / 1024 / slots, 2),
                 peak_connections=peak_connections)


def measure_io_bound(bench: "Bench") -> tuple[IoRun, ...]:
    return tuple(measure_io_run(bench, workers, concurrency, kind)
                 for slots in bench.settings.io_slots
                 for workers, concurrency, kind in io_configurations(slots))


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, children first."""
    found, pending = [], [pid]
    while pending:
        parent = pending.pop()
        try:
            children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        found += [int(child) for child in children]
        pending += [int(child) for child in children]
    return found


class PeerWatch:
    """What a peer driver's workers use at their peak: memory and connections.

    Called by benchmarks.peers.run_driver with the driver's pid; it looks only
    while the driver has workers, so the driver's own setup (its schema, its
    inserts) is not counted, and it leaves out the one connection the driver
    keeps to watch the queue."""

    def __init__(self, bench: "Bench", database: str):
        self.bench = bench
        self.database = database
        self.peak_pss_kib = 0
        self.peak_connections = 0
        self._next_memory = 0.0

    def __call__(self, driver_pid: int) -> None:
        workers = descendants(driver_pid)
        if not workers:
            return
        if time.monotonic() >= self._next_memory:
            self._next_memory = time.monotonic() + MEMORY_EVERY_SECONDS
            self.peak_pss_kib = max(self.peak_pss_kib, tree_pss_kib(workers))
        connections = self.bench.observer.value(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (self.database,))
        self.peak_connections = max(self.peak_connections, connections - 1)


def measure_io_peers(bench: "Bench") -> tuple[PeerIoRun, ...]:
    """Each peer on the IO-bound jobs at each slot count, in its own database."""
    runtimes, runs = Runtimes(), []
    jobs = bench.settings.io_jobs
    for slots in bench.settings.io_slots:
        for number, config in enumerate(peer_configurations(slots), start=1):
            database = f"io{slots}_{number}_{config.peer.replace('-', '_')}"
            bench.progress(f"IO-bound, peer {config.peer}, {jobs} jobs of"
                           f" {WAIT_SECONDS:g}s, {config.configuration}")
            url = bench.pg.create_database(database)
            watch = PeerWatch(bench, database)
            try:
                run = measure_peer(config, runtimes, url, jobs, bench.logs / f"{database}.log",
                                   wait_ms=WAIT_SECONDS * 1000, sample=watch)
            finally:
                bench.pg.drop_database(database)
            if run.failure:
                bench.progress(f"peer {config.peer} failed: {run.failure}")
            rate = run.jobs_per_second
            pss = watch.peak_pss_kib / 1024 if rate else None
            runs.append(PeerIoRun(
                peer=run.peer, configuration=run.configuration, version=run.version,
                slots=slots, jobs=jobs, seconds=run.seconds, jobs_per_second=rate,
                efficiency=round(rate / (slots / WAIT_SECONDS), 3) if rate else None,
                peak_pss_mib=round(pss, 1) if pss is not None else None,
                pss_per_slot_mib=round(pss / slots, 2) if pss is not None else None,
                peak_connections=watch.peak_connections if rate else None,
                failure=run.failure))
    return tuple(runs)


# -- the report --------------------------------------------------------------------


def format_latency(latency: HandlerLatency) -> list[str]:
    floor = latency.floor
    lines = [f"pick-up latency to the handler's first statement: {floor.samples} jobs inserted"
             f" every {latency.interval_ms:g} ms into an idle runner (--poll-seconds"
             f" {latency.poll_seconds:g}); floor = one LISTEN connection, a one-row"
             " SKIP LOCKED claim, the stamp on a second connection",
             f"  {'runner':<14} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} {'max ms':>7}"
             f" {'p50 × floor':>12} {'p99 × floor':>12}"]
    for run in (floor, *latency.fleets):
        lines.append(f"  {run.runner:<14} {run.p50_ms:>7.2f} {run.p95_ms:>7.2f}"
                     f" {run.p99_ms:>7.2f} {run.max_ms:>7.2f}"
                     f" {run.p50_ms / floor.p50_ms:>12.2f} {run.p99_ms / floor.p99_ms:>12.2f}")
    return lines


def format_io(runs: Sequence[IoRun], peers: Sequence[PeerIoRun] = ()) -> list[str]:
    if not runs and not peers:
        return []
    jobs = (runs or peers)[0].jobs
    rows: list[tuple[int, str, IoRun | PeerIoRun]] = []
    for run in runs:
        handler = "async def" if run.kind == "async_sleep" else "def"
        rows.append((run.slots, f"--workers {run.workers} --concurrency {run.concurrency},"
                                f" {handler}", run))
    for peer in peers:
        name = f"{peer.peer} {peer.version or ''}".strip() + f", {peer.configuration}"
        rows.append((peer.slots, name, peer))
    width = max(40, *(len(name) for _, name, _ in rows))
    lines = [f"IO-bound: {jobs:,} jobs each waiting {WAIT_SECONDS:g} s without CPU,"
             " from the runner's start to an empty queue; ideal = slots / "
             f"{WAIT_SECONDS:g} s",
             f"  {'slots':>5} {'run':<{width}} {'jobs/s':>7} {'of ideal':>9} {'PSS MiB':>8}"
             f" {'MiB/slot':>9} {'DB conns':>9}"]
    # Sorted by slots, ours first at each (a stable sort keeps that order).
    for slots, name, run in sorted(rows, key=lambda row: row[0]):
        if run.jobs_per_second is None:
            lines.append(f"  {slots:>5} {name:<{width}} failed: {run.failure}")
            continue
        lines.append(f"  {slots:>5} {name:<{width}} {run.jobs_per_second:>7,.0f}"
                     f" {run.efficiency:>9.0%} {run.peak_pss_mib:>8.1f}"
                     f" {run.pss_per_slot_mib:>9.2f} {run.peak_connections:>9}")
    if peers:
        lines.append("  (a peer's memory and connections are its workers', without the"
                     " driver that times them)")
    return lines
