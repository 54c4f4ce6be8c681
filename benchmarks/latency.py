"""bin/bench's latency section: pick-up latency to the handler's start,
beside the machine's floor.

Jobs are inserted one at a time at a steady rate into an idle fleet run with
``--poll-seconds 30``, so only the wake-up can make it fast, and timed from
the insert's clock to the first statement of its handler (a stamp job of
benchmarks/waiting_app.py); beside them, the bare loop of benchmarks/floor.py
doing the least any runner could, in the same run. The job model's section
measures its urgent jobs with the same pieces.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from typing import Sequence

from benchmarks.support import ROOT, Bench, Fleet
from benchmarks.waiting_app import STARTS_TABLE
from testbed.polling import wait_until

WAITING_APP = "benchmarks.waiting_app"
#: The latency runs poll this seldom, so only the wake-up can make them fast.
LATENCY_POLL_SECONDS = 30.0
#: Fleets whose latency is measured beside the floor: the goals' fleet of 4
#: (support.FLEET_WORKERS), and a lone worker.
LATENCY_FLEETS = (4, 1)
#: Stamp jobs inserted at once to warm a fleet up: more than its job slots.
WARM_UP_BURST = 100


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


def percentile(ordered: Sequence[float], fraction: float) -> float:
    """Linear between the closest ranks, as PostgreSQL's percentile_cont."""
    at = fraction * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def insert_stamped(bench: Bench, count: int, interval_ms: float, priority: int = 0,
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


def latencies(bench: Bench, runner: str, enqueued: dict[int, object]) -> list[float]:
    """Milliseconds from each insert to its handler's first statement."""
    started = dict(bench.sql.rows("SELECT job_id, started_at FROM bench_starts"
                                  " WHERE job_id = ANY(%s)", (list(enqueued),)))
    if len(started) != len(enqueued):
        raise bench.error(f"{runner}: {len(started)} of {len(enqueued)} stamp jobs started")
    return [(started[i] - enqueued[i]).total_seconds() * 1000 for i in enqueued]


def wait_for_stamps(bench: Bench, ids: Sequence[int], alive) -> None:
    def all_started() -> bool:
        alive()
        return bench.sql.value("SELECT count(*) FROM bench_starts WHERE job_id = ANY(%s)",
                               (list(ids),)) == len(ids)
    wait_until(all_started, 60, interval=0.05, message=f"{len(ids)} stamp jobs to start")


def measure_floor(bench: Bench, samples: int, interval_ms: float, warm_up: int = 5,
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
                          cwd=ROOT) as floor:
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


def measure_fleet(bench: Bench, workers: int, samples: int, interval_ms: float) -> list[float]:
    bench.prepare_queue(0)
    options = ("--workers", str(workers), "--poll-seconds", f"{LATENCY_POLL_SECONDS:g}")
    with bench.start_fleet(f"latency-w{workers}", *options, app=WAITING_APP) as fleet:
        bench.wait_for_idle_workers(fleet, workers)
        warm_up_fleet(bench, fleet, interval_ms)
        enqueued = insert_stamped(bench, samples, interval_ms)
        wait_for_stamps(bench, list(enqueued), fleet.ensure_running)
    return latencies(bench, f"--workers {workers}", enqueued)


def warm_up_fleet(bench: Bench, fleet: Fleet, interval_ms: float) -> None:
    """A burst that reaches every worker, then a few paced jobs: each worker's
    connection for the stamps is open and its first plans are made before
    anything is measured. (Paced jobs alone would warm only the worker that
    listens: it takes every job it has room for.)"""
    burst = bench.sql.rows("INSERT INTO job_queue (kind) SELECT 'stamp'"
                           " FROM generate_series(1, %s) RETURNING id", (WARM_UP_BURST,))
    wait_for_stamps(bench, [job_id for job_id, in burst], fleet.ensure_running)
    wait_for_stamps(bench, list(insert_stamped(bench, 5, interval_ms)), fleet.ensure_running)
    bench.wait_for_empty_queue(fleet, 0)


def measure_handler_latency(bench: Bench) -> HandlerLatency:
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
