"""bin/bench's workflows section: jobs that wait for other jobs.

Every workflow goes in through ``job_queue_workflow``, the one call a
producer in any language makes, before the fleet (``--workers 4``) starts;
the runs take turns, round after round:

- a chain of 1,000 no-op steps, each waiting for the one before: seconds
  from the first step's start (its handler's stamp of the server's clock)
  to the last step's end (the commit of the transaction that ended it), the
  mean hop (a step's handler start to the next one's), and each hop's
  claim-to-claim time, with the part from the commit of the parent's end to
  the child's claim;
- one parent, 10,000 children of it and one step waiting for all of them:
  the fan-in step's handler start after the latest end of the 10,000, and
  the whole run, from the supervisor's start to an empty queue, beside
  10,000 independent no-op jobs run by the same fleet; and where the
  workflow's run spends what the independent jobs do not: the parent's
  run, from its claim to the commit that ends it and releases the
  children, and the children's, from the first one's claim to the last
  one's end, beside the independent jobs' from first claim to last end.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import NamedTuple, Sequence

from benchmarks.latency import percentile
from benchmarks.support import FLEET_WORKERS, Bench
from benchmarks.waiting_app import STARTS_TABLE

APP = "benchmarks.workflow_app"
ROUNDS = 2
#: Every table a workflow writes, emptied together before each run.
TABLES = ("job_queue, job_queue_edges, job_queue_waits, job_queue_workflows,"
          " job_queue_batches, bench_starts")

# Built in the server, one statement for the whole workflow. The first and
# the last steps stamp their start; the ones between do nothing.
INSERT_CHAIN = """
SELECT count(*) FROM job_queue_workflow('bench_chain', (
    SELECT jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
               'ref', 's' || g,
               'kind', CASE WHEN g IN (1, %(steps)s) THEN 'stamped_step' ELSE 'step' END,
               'after', CASE WHEN g > 1 THEN jsonb_build_array('s' || (g - 1)) END))
           ORDER BY g)
    FROM generate_series(1, %(steps)s) AS g))
"""
INSERT_FAN_OUT = """
SELECT count(*) FROM job_queue_workflow('bench_fan_out', (
    SELECT jsonb_build_array(jsonb_build_object('ref', 'parent', 'kind', 'step'))
           || jsonb_agg(jsonb_build_object('ref', 'c' || g, 'kind', 'step',
                                           'after', jsonb_build_array('parent')) ORDER BY g)
           || jsonb_build_array(jsonb_build_object('ref', 'fan_in', 'kind', 'stamped_step',
                                                   'after', jsonb_agg('c' || g ORDER BY g)))
    FROM generate_series(1, %(children)s) AS g))
"""
# A job ends when the transaction that writes its end commits (its
# finished_at is that transaction's start, before the write and what the
# write's triggers do); bin/bench's server keeps commit timestamps, and a
# finished row's last writer (xmin) is the transaction that ended it.
# Each step of the chain in order, with its claim and its end.
CHAIN_STEPS = """
SELECT j.started_at, pg_xact_commit_timestamp(j.xmin), s.started_at AS stamped_at
FROM job_queue AS j
LEFT JOIN bench_starts AS s ON s.job_id = j.id
WHERE j.workflow_id IS NOT NULL
ORDER BY substr(j.step, 2)::int
"""
# The parent's claim to the commit that ended it (and released the
# children), and the children's first claim to their last end, in seconds.
FAN_OUT_PARTS = """
SELECT (SELECT extract(epoch FROM pg_xact_commit_timestamp(xmin) - started_at)
        FROM job_queue WHERE step = 'parent'),
       (SELECT extract(epoch FROM max(pg_xact_commit_timestamp(xmin)) - min(started_at))
        FROM job_queue WHERE step <> 'parent' AND step <> 'fan_in')
"""
INDEPENDENT_SPAN = """
SELECT extract(epoch FROM max(pg_xact_commit_timestamp(xmin)) - min(started_at)) FROM job_queue
"""
FAN_IN = """
SELECT extract(epoch FROM s.started_at - c.ended) * 1000,
       extract(epoch FROM f.started_at - c.ended) * 1000,
       extract(epoch FROM s.started_at - c.written) * 1000
FROM job_queue AS f
JOIN bench_starts AS s ON s.job_id = f.id
CROSS JOIN (SELECT max(pg_xact_commit_timestamp(xmin)) AS ended, max(finished_at) AS written
            FROM job_queue WHERE step <> 'fan_in' AND step <> 'parent') AS c
WHERE f.step = 'fan_in'
"""


@dataclasses.dataclass(frozen=True)
class WorkflowRun:
    workers: int
    chain_steps: int
    #: Each round's chain, from the first step's handler start to the last
    #: step's end (the commit that ended it).
    chain_seconds: tuple[float, ...]
    #: Each round's mean hop: a step's handler start to the next step's.
    chain_hop_ms: tuple[float, ...]
    #: Every hop of every round, a step's claim to the next step's claim.
    hop_p50_ms: float
    hop_p95_ms: float
    hop_max_ms: float
    #: Of a hop, the median from the commit of the parent's end to the child's claim.
    release_p50_ms: float
    fan_out_children: int
    #: Each round's fan-in step: its handler start, and its claim, after the
    #: latest commit that ended one of the children it waited for; and its
    #: handler start after the latest finished_at of them, which counts the
    #: last write of the children's ends as well (the start of its transaction).
    fan_in_start_ms: tuple[float, ...]
    fan_in_claim_ms: tuple[float, ...]
    fan_in_after_write_ms: tuple[float, ...]
    #: Each round's whole run, supervisor start to empty queue: the
    #: workflow, and as many independent no-op jobs as it has children.
    fan_out_seconds: tuple[float, ...]
    independent_seconds: tuple[float, ...]
    #: The means of the two, one over the other.
    fan_out_ratio: float
    #: Each round's parent, from its claim to the commit that ended it and
    #: released its children; the children, from the first one's claim to
    #: the last one's end; the independent jobs, the same.
    parent_seconds: tuple[float, ...]
    children_seconds: tuple[float, ...]
    independent_span_seconds: tuple[float, ...]
    #: Each round's job_queue_workflow call, for the chain and the fan-out.
    chain_insert_seconds: tuple[float, ...]
    fan_out_insert_seconds: tuple[float, ...]


class ChainRound(NamedTuple):
    seconds: float
    mean_hop_ms: float
    insert_seconds: float


class FanOutRound(NamedTuple):
    seconds: float
    parent_seconds: float
    children_seconds: float
    fan_in_start_ms: float
    fan_in_claim_ms: float
    fan_in_after_write_ms: float
    insert_seconds: float


def _prepare(bench: Bench, insert: str, params: dict[str, int]) -> float:
    """Empty tables, then one insert; the seconds it took. The tables are
    then vacuumed and checkpointed as before every timed run."""
    bench.sql.rows(f"TRUNCATE {TABLES}")
    started = time.monotonic()
    bench.sql.rows(insert, params)
    seconds = time.monotonic() - started
    bench.sql.rows(f"VACUUM ANALYZE {TABLES}")
    bench.sql.rows("CHECKPOINT")
    return seconds


def _run_to_empty(bench: Bench, label: str, jobs: int) -> float:
    with bench.start_fleet(label, "--workers", str(FLEET_WORKERS), app=APP) as fleet:
        seconds = bench.wait_for_empty_queue(fleet, jobs)
    bench.ensure_all_succeeded(jobs)
    return seconds


def _chain(bench: Bench, hops: list[float], releases: list[float]) -> ChainRound:
    """One chain; each hop's claim-to-claim and end-to-claim (ms) go to
    ``hops`` and ``releases``."""
    steps = bench.settings.chain_steps
    inserted = _prepare(bench, INSERT_CHAIN, {"steps": steps})
    _run_to_empty(bench, "workflows-chain", steps)
    rows = bench.sql.rows(CHAIN_STEPS)
    first, last = rows[0], rows[-1]
    for (claimed, ended, _), (next_claimed, _, _) in zip(rows, rows[1:]):
        hops.append((next_claimed - claimed).total_seconds() * 1000)
        releases.append((next_claimed - ended).total_seconds() * 1000)
    mean_hop = (last[2] - first[2]).total_seconds() * 1000 / max(1, steps - 1)
    return ChainRound((last[1] - first[2]).total_seconds(), mean_hop, inserted)


def _fan_out(bench: Bench) -> FanOutRound:
    children = bench.settings.fan_out_children
    inserted = _prepare(bench, INSERT_FAN_OUT, {"children": children})
    seconds = _run_to_empty(bench, "workflows-fan-out", children + 2)
    start_ms, claim_ms, after_write_ms = bench.sql.rows(FAN_IN)[0]
    parent, children = bench.sql.rows(FAN_OUT_PARTS)[0]
    return FanOutRound(seconds, float(parent), float(children), float(start_ms), float(claim_ms),
                       float(after_write_ms), inserted)


def _independent(bench: Bench) -> tuple[float, float]:
    """The run's seconds, and its first claim to its last end."""
    jobs = bench.settings.fan_out_children
    _prepare(bench, "INSERT INTO job_queue (kind) SELECT 'step' FROM generate_series(1, %(jobs)s)",
             {"jobs": jobs})
    seconds = _run_to_empty(bench, "workflows-independent", jobs)
    return seconds, float(bench.sql.value(INDEPENDENT_SPAN))


def measure_workflows(bench: Bench) -> WorkflowRun:
    bench.sql.rows(STARTS_TABLE)
    steps, children = bench.settings.chain_steps, bench.settings.fan_out_children
    hops: list[float] = []
    releases: list[float] = []
    chains: list[ChainRound] = []
    fan_outs: list[FanOutRound] = []
    independents: list[tuple[float, float]] = []
    for number in range(ROUNDS):
        bench.progress(f"workflows, round {number + 1} of {ROUNDS}: a chain of {steps} steps,"
                       f" a fan-out and fan-in of {children} and {children} independent jobs,"
                       f" --workers {FLEET_WORKERS}")
        chains.append(_chain(bench, hops, releases))
        fan_outs.append(_fan_out(bench))
        independents.append(_independent(bench))
    ordered = sorted(hops)
    fan_out_seconds = [run.seconds for run in fan_outs]
    independent_seconds = [seconds for seconds, _ in independents]
    return WorkflowRun(
        workers=FLEET_WORKERS, chain_steps=steps,
        chain_seconds=tuple(round(run.seconds, 3) for run in chains),
        chain_hop_ms=tuple(round(run.mean_hop_ms, 2) for run in chains),
        hop_p50_ms=round(percentile(ordered, 0.5), 2),
        hop_p95_ms=round(percentile(ordered, 0.95), 2), hop_max_ms=round(ordered[-1], 2),
        release_p50_ms=round(statistics.median(releases), 2),
        fan_out_children=children,
        fan_in_start_ms=tuple(round(run.fan_in_start_ms, 2) for run in fan_outs),
        fan_in_claim_ms=tuple(round(run.fan_in_claim_ms, 2) for run in fan_outs),
        fan_in_after_write_ms=tuple(round(run.fan_in_after_write_ms, 2) for run in fan_outs),
        fan_out_seconds=tuple(round(s, 3) for s in fan_out_seconds),
        independent_seconds=tuple(round(s, 3) for s in independent_seconds),
        fan_out_ratio=round(statistics.mean(fan_out_seconds) / statistics.mean(independent_seconds),
                            3),
        parent_seconds=tuple(round(run.parent_seconds, 3) for run in fan_outs),
        children_seconds=tuple(round(run.children_seconds, 3) for run in fan_outs),
        independent_span_seconds=tuple(round(span, 3) for _, span in independents),
        chain_insert_seconds=tuple(round(run.insert_seconds, 3) for run in chains),
        fan_out_insert_seconds=tuple(round(run.insert_seconds, 3) for run in fan_outs))


def _row(name: str, value: float, unit: str, each: Sequence[float] = ()) -> str:
    runs = f"  ({', '.join(f'{v:,.2f}' for v in each)})" if each else ""
    return f"  {name:<60} {value:>9,.2f} {unit:<3}{runs}".rstrip()


def format_workflows(run: WorkflowRun) -> list[str]:
    children = f"{run.fan_out_children:,}"
    return [
        f"workflows: each inserted by one job_queue_workflow call before the fleet starts,"
        f" --workers {run.workers}, {ROUNDS} runs each in turns",
        f"  {'run':<60} {'mean':>9} {'':<3}  (each run)",
        _row(f"chain of {run.chain_steps:,} no-op steps, first start to last end",
             statistics.mean(run.chain_seconds), "s", run.chain_seconds),
        _row("  per hop, a step's handler start to the next one's",
             statistics.mean(run.chain_hop_ms), "ms", run.chain_hop_ms),
        _row("  per hop, claim to the next claim, p50", run.hop_p50_ms, "ms"),
        _row("  per hop, claim to the next claim, p95", run.hop_p95_ms, "ms"),
        _row("  per hop, claim to the next claim, max", run.hop_max_ms, "ms"),
        _row("  per hop, parent's end committed to the child's claim, p50",
             run.release_p50_ms, "ms"),
        f"  one parent, {children} children of it, one step waiting for all {children}:",
        _row("  fan-in step's handler start after the last child's end",
             statistics.mean(run.fan_in_start_ms), "ms", run.fan_in_start_ms),
        _row("  fan-in step's claim after the last child's end",
             statistics.mean(run.fan_in_claim_ms), "ms", run.fan_in_claim_ms),
        _row("  fan-in step's handler start after the last write's start",
             statistics.mean(run.fan_in_after_write_ms), "ms", run.fan_in_after_write_ms),
        _row("  whole run, supervisor start to an empty queue",
             statistics.mean(run.fan_out_seconds), "s", run.fan_out_seconds),
        _row(f"  {children} independent no-op jobs, the same fleet",
             statistics.mean(run.independent_seconds), "s", run.independent_seconds),
        _row("  the workflow's run over the independent jobs'", run.fan_out_ratio, "×"),
        _row("  the parent, claim to the end that released its children",
             statistics.mean(run.parent_seconds), "s", run.parent_seconds),
        _row(f"  the {children} children, first claim to last end",
             statistics.mean(run.children_seconds), "s", run.children_seconds),
        _row(f"  the {children} independent jobs, first claim to last end",
             statistics.mean(run.independent_span_seconds), "s", run.independent_span_seconds),
        _row("job_queue_workflow inserting the chain", statistics.mean(run.chain_insert_seconds),
             "s", run.chain_insert_seconds),
        _row("job_queue_workflow inserting the fan-out",
             statistics.mean(run.fan_out_insert_seconds), "s", run.fan_out_insert_seconds),
    ]
