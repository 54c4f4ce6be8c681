"""bin/bench's flow-control section: per-key limits and rate limits.

- No-op throughput of 20,000 jobs spread over 1,000 keys of a kind with
  ``max_running_per_key=1``, beside the same jobs without a key (which run
  in the regular lane), run after run in turns.
- IO-bound jobs (100 ms without CPU) over 1,000 keys with
  ``max_running_per_key=1``, ``--workers 4 --concurrency 32``: jobs/s and
  the share of the ideal (slots / 0.1 s).
- A backlog of a rate-limited kind: how many of its allowance each full
  window used, from the first start on.
"""

from __future__ import annotations

import dataclasses
import statistics

from benchmarks.flow_app import RATE
from benchmarks.support import Bench
from benchmarks.waiting_app import WAIT_SECONDS

APP = "benchmarks.flow_app"
WORKERS = 4
ROUNDS = 2
KEYS = 1000
IO = (4, 32)
#: The limits of flow_app's kinds, written before the jobs go in so that
#: they take their lanes as they are inserted (the fleet writes the same).
LIMITS = f"""
INSERT INTO job_queue_limits (kind, max_running_per_key, rate_limit, rate_seconds)
VALUES ('noop_per_key', 1, NULL, NULL), ('sleep_per_key', 1, NULL, NULL),
       ('noop_rated', NULL, {RATE[0]}, {RATE[1]})
ON CONFLICT (kind) DO NOTHING;
ANALYZE job_queue_limits;
"""


@dataclasses.dataclass(frozen=True)
class FlowRun:
    jobs: int
    #: Each run's jobs/s, in the order run (without and with keys took turns).
    plain_jobs_per_second: tuple[float, ...]
    keyed_jobs_per_second: tuple[float, ...]
    io_jobs: int
    io_jobs_per_second: float
    io_efficiency: float
    #: Starts in each full window of the rate-limited backlog.
    window_starts: tuple[int, ...]


def _run_to_empty(bench: Bench, label: str, jobs: int, *options: str) -> float:
    bench.sql.rows("VACUUM ANALYZE job_queue")
    bench.sql.rows("CHECKPOINT")
    with bench.start_fleet(label, *options, app=APP) as fleet:
        seconds = bench.wait_for_empty_queue(fleet, jobs)
    bench.ensure_all_succeeded(jobs)
    return seconds


def _throughput(bench: Bench, keyed: bool) -> float:
    jobs = bench.settings.jobs
    bench.prepare_queue(0)
    bench.sql.rows("INSERT INTO job_queue (kind, concurrency_key)"
                   " SELECT 'noop_per_key', CASE WHEN %s THEN 'key-' || (g %% %s) END"
                   " FROM generate_series(1, %s) AS g", (keyed, KEYS, jobs))
    label = "keyed" if keyed else "keyless"
    seconds = _run_to_empty(bench, f"flow-{label}", jobs, "--workers", str(WORKERS))
    return round(jobs / seconds, 1)


def _io_bound(bench: Bench) -> tuple[float, float]:
    workers, concurrency = IO
    jobs = bench.settings.io_jobs
    bench.prepare_queue(0)
    bench.sql.rows("INSERT INTO job_queue (kind, concurrency_key)"
                   " SELECT 'sleep_per_key', 'key-' || (g %% %s) FROM generate_series(1, %s) AS g",
                   (KEYS, jobs))
    seconds = _run_to_empty(bench, "flow-io", jobs, "--workers", str(workers),
                            "--concurrency", str(concurrency))
    rate = jobs / seconds
    return round(rate, 1), round(rate / (workers * concurrency / WAIT_SECONDS), 3)


def _rate_windows(bench: Bench) -> tuple[int, ...]:
    windows = bench.settings.rate_windows
    jobs = RATE[0] * windows
    bench.prepare_queue(0)
    bench.sql.rows("DELETE FROM job_queue_starts")
    bench.sql.rows("INSERT INTO job_queue (kind) SELECT 'noop_rated' FROM generate_series(1, %s)",
                   (jobs,))
    _run_to_empty(bench, "flow-rate", jobs, "--workers", str(WORKERS))
    starts = sorted(t for t, in bench.sql.rows(
        "SELECT extract(epoch FROM started_at) FROM job_queue WHERE kind = 'noop_rated'"))
    first, width = float(starts[0]), RATE[1]
    return tuple(sum(1 for t in starts if first + n * width <= float(t) < first + (n + 1) * width)
                 for n in range(windows - 1))


def measure_flow(bench: Bench) -> FlowRun:
    bench.sql.rows(LIMITS)
    plain, keyed = [], []
    for number in range(ROUNDS):
        bench.progress(f"flow control, round {number + 1} of {ROUNDS}: {bench.settings.jobs}"
                       f" no-op jobs over {KEYS} keys, one at a time per key, and without keys,"
                       f" --workers {WORKERS}")
        plain.append(_throughput(bench, keyed=False))
        keyed.append(_throughput(bench, keyed=True))
    bench.progress(f"flow control: {bench.settings.io_jobs} jobs of {WAIT_SECONDS:g}s over"
                   f" {KEYS} keys,"
                   f" --workers {IO[0]} --concurrency {IO[1]}")
    io_rate, io_efficiency = _io_bound(bench)
    bench.progress(f"flow control: a backlog of {RATE[0] * bench.settings.rate_windows} jobs"
                   " limited to"
                   f" {RATE[0]} starts per {RATE[1]:g}s")
    windows = _rate_windows(bench)
    return FlowRun(jobs=bench.settings.jobs, plain_jobs_per_second=tuple(plain),
                   keyed_jobs_per_second=tuple(keyed), io_jobs=bench.settings.io_jobs,
                   io_jobs_per_second=io_rate,
                   io_efficiency=io_efficiency, window_starts=windows)


def format_flow(run: FlowRun) -> list[str]:
    plain = statistics.mean(run.plain_jobs_per_second)
    keyed = statistics.mean(run.keyed_jobs_per_second)

    def each(rates: tuple[float, ...]) -> str:
        return ", ".join(f"{rate:,.0f}" for rate in rates)
    return [
        f"flow control: {run.jobs:,} no-op jobs, --workers {WORKERS}, {ROUNDS} runs each in turns",
        f"  without a key (regular lane)             {plain:>10,.0f} jobs/s"
        f"  ({each(run.plain_jobs_per_second)})",
        f"  over {KEYS:,} keys, max_running_per_key=1    {keyed:>10,.0f} jobs/s"
        f"  ({each(run.keyed_jobs_per_second)})  = {keyed / plain:.2f} × without",
        f"  {run.io_jobs:,} jobs of {WAIT_SECONDS:g}s over {KEYS:,} keys, --workers {IO[0]}"
        f" --concurrency {IO[1]}: {run.io_jobs_per_second:,.0f} jobs/s,"
        f" {run.io_efficiency:.0%} of the ideal",
        f"  rate_limit=({RATE[0]}, {RATE[1]:g}) with a backlog, starts in each full window"
        f" from the first: {', '.join(map(str, run.window_starts))}"
        f" (at least {min(run.window_starts) / RATE[0]:.0%} of the allowance)",
    ]
