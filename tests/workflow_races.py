"""What the workflow race tests (tests/e2e/test_workflow_races.py) share:
writing jobs with dependencies by plain INSERT, as any producer may, the
gate that lets many runs end in one instant, the producer that inserts
children while their parents end, and the one assertion every scenario and
its negative control are judged by.

The runs are those tests/apps/races.py records in race_runs.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import multiprocessing
import random
import sys
from typing import Any

import psycopg2.extras

from motir_supervisor import enqueue, enqueue_many
from tests.helpers import Sql, wait_until
from tests.supervisors import ROOT

#: The app every fleet of the race tests runs.
APP = ("--app", "tests.apps.races")
#: Negative control: the command whose workers release dependents
#: themselves, after their own commit, the database's release disabled.
NAIVE_RELEASE_CLI = [sys.executable, str(ROOT / "tests" / "naive_release_cli.py")]
#: The states in which a job has ended.
ENDED = ("succeeded", "failed", "cancelled")


class Graph:
    """Jobs of the race kind written by plain INSERT; each call one statement."""

    def __init__(self, sql: Sql):
        self.sql = sql

    def add(self, count: int = 1, *, after: tuple[int, ...] | list[int] = (),
            on_parent_failure: str = "cancel", max_attempts: int = 4, queue: str = "default",
            delay_seconds: float = 0, batch: int | None = None, priority: int = 0,
            **payload: Any) -> list[int]:
        """``count`` jobs waiting for ``after`` (none: pending at once), each
        doing what ``payload`` says (see tests/apps/races.py), members of
        ``batch`` if given; their ids. A job to be held in a slot is claimed
        first with a ``priority`` below 0, before the gated ones fill them."""
        return [row[0] for row in self.sql.rows(
            "INSERT INTO job_queue (kind, payload, queue, max_attempts, run_at, depends_on,"
            " on_parent_failure, batch_id, priority)"
            " SELECT 'race_step', %s, %s, %s, now() + make_interval(secs => %s),"
            " %s::bigint[], %s, %s, %s FROM generate_series(1, %s) RETURNING id",
            (psycopg2.extras.Json(payload), queue, max_attempts, delay_seconds,
             list(after) or None, on_parent_failure, batch, priority, count))]

    def one(self, **kwargs: Any) -> int:
        [job_id] = self.add(**kwargs)
        return job_id

    def open_batch(self, name: str, on_success: bool = True, on_complete: bool = True) -> int:
        """A batch whose callbacks are jobs of the race kind that succeed."""
        callback = psycopg2.extras.Json({"kind": "race_step"})
        return self.sql.value("SELECT job_queue_batch_open(%s, %s, %s)",
                              (name, callback if on_success else None,
                               callback if on_complete else None))

    def batch(self, name: str, members: list[dict[str, Any]]) -> int:
        """A batch of ``members`` (each {"payload": ...}, the race kind's), sealed."""
        callback = psycopg2.extras.Json({"kind": "race_step"})
        return self.sql.value("SELECT job_queue_batch(%s, %s, %s, %s)", (
            name, psycopg2.extras.Json([{"kind": "race_step", **m} for m in members]),
            callback, callback))

    def seal(self, batch: int) -> None:
        self.sql.rows("SELECT job_queue_batch_seal(%s)", (batch,))

    def callbacks(self, batch: int) -> tuple[int | None, int | None]:
        """(on_success, on_complete) of ``batch``: their job ids."""
        [row] = self.sql.rows("SELECT on_success, on_complete FROM job_queue_batches"
                              " WHERE id = %s", (batch,))
        return row

    def members(self, batch: int) -> list[int]:
        return [row[0] for row in self.sql.rows(
            "SELECT id FROM job_queue WHERE batch_id = %s ORDER BY id", (batch,))]


class Gate:
    """An advisory lock the test holds exclusively: every run with
    ``"gate": KEY`` waits on it, and all go on in the same instant once it
    is let go."""

    KEY = 38_0001

    def __init__(self, url: str):
        self.holder = Sql(url)
        self.holder.rows("SELECT pg_advisory_lock(%s)", (self.KEY,))

    def open(self) -> None:
        self.holder.rows("SELECT pg_advisory_unlock(%s)", (self.KEY,))

    def close(self) -> None:
        self.holder.close()


# -- reading what ran ---------------------------------------------------------------

def state_of(sql: Sql, job_id: int) -> str | None:
    return sql.value("SELECT state FROM job_queue WHERE id = %s", (job_id,))


def states(sql: Sql, ids: list[int]) -> dict[int, str]:
    return dict(sql.rows("SELECT id, state FROM job_queue WHERE id = ANY(%s)", (ids,)))


def running_all(sql: Sql, ids: list[int]) -> bool:
    """Whether each of ``ids`` is running, its run in the handler already."""
    return sql.value(
        "SELECT count(DISTINCT r.job_id) FROM race_runs r JOIN job_queue j ON j.id = r.job_id"
        " WHERE r.job_id = ANY(%s) AND j.state = 'running' AND r.attempt = j.attempts"
        " AND r.finished_at IS NULL", (ids,)) == len(ids)


def ended_all(sql: Sql, ids: list[int]) -> bool:
    return sql.value("SELECT count(*) FROM job_queue WHERE id = ANY(%s) AND state = ANY(%s)",
                     (ids, list(ENDED))) == len(ids)


def worker_of(sql: Sql, job_id: int) -> tuple[int, int]:
    """(supervisor pid, worker pid) of the claim running ``job_id``, from its
    locked_by ("host:supervisor pid:nonce/wN:worker pid")."""
    locked_by = sql.value("SELECT locked_by FROM job_queue WHERE id = %s", (job_id,))
    assert locked_by, f"job {job_id} is not running"
    return int(locked_by.split(":")[1]), int(locked_by.rsplit(":", 1)[1])


def settle(sql: Sql, timeout: float) -> None:
    """Wait until no job is pending or running: every job has ended, or
    waits for a parent that never will."""
    wait_until(lambda: sql.value("SELECT count(*) FROM job_queue"
                                 " WHERE state IN ('pending', 'running')") == 0,
               timeout, interval=0.05, message="every job ended or waiting")


# -- the producer that writes children while their parents end -----------------------

def insert_children_while_parents_end(url: str, parents: list[int], inserted: Any) -> None:
    """Insert children of 1 to 3 of ``parents`` each until every parent has
    ended, and a last few after that, each way a producer may: a plain
    INSERT, enqueue, and enqueue_many of three in one statement, each
    committed at once; count them in ``inserted`` (a shared counter)."""
    sql = Sql(url)
    graph = Graph(sql)
    rng = random.Random(38)

    def child() -> dict[str, Any]:
        return {"kind": "race_step", "payload": {"during": True}, "max_attempts": 4,
                "depends_on": rng.sample(parents, rng.randint(1, 3))}

    after_the_end = 0
    for way in itertools.cycle(range(3)):
        if after_the_end >= 20 or inserted.value >= 5000:
            break
        if way == 0:
            graph.add(after=child()["depends_on"], during=True)
            count = 1
        elif way == 1:
            enqueue(sql.conn, **child())
            count = 1
        else:
            count = len(enqueue_many(sql.conn, [child() for _ in range(3)]))
        with inserted.get_lock():
            inserted.value += count
        if after_the_end or ended_all(sql, parents):
            after_the_end += count
    sql.close()


def start_producer(url: str, parents: list[int]) -> tuple[Any, Any]:
    """The producer above in a process of its own: (process, counter)."""
    ctx = multiprocessing.get_context("fork")
    inserted = ctx.Value("i", 0)
    process = ctx.Process(target=insert_children_while_parents_end,
                          args=(url, parents, inserted))
    process.start()
    return process, inserted


# -- the assertion -------------------------------------------------------------------

@dataclasses.dataclass
class Run:
    attempt: int
    started_at: datetime.datetime
    finished_at: datetime.datetime | None
    outcome: str | None


def assert_released_exactly_once(sql: Sql, gone: dict[int, set[int]] | None = None) -> None:
    """Judge every job with parents (named by its depends_on, or a batch's
    members for its callbacks; ``gone`` adds {child: parents deleted} that
    neither names any more) by what ran and where it ended:

    - none is left waiting (stranded), pending or running;
    - a child whose parent ended failed or cancelled, or was deleted, is
      cancelled with last_error naming such a parent and never ran, if its
      on_parent_failure is 'cancel'; any other child ran;
    - no run of a child started before each of its parents had ended (the
      server's clock: after the parent's finished_at and its last run's end);
    - every job succeeded after exactly one run that returned, and nothing
      ran again after it (released twice). A run that returned but whose
      worker was lost before writing its success (its attempt's error says
      so: killed, or its lease expired) does not count: it runs again, as a
      job whose worker dies must."""
    jobs = {row[0]: row[1:] for row in sql.rows(
        "SELECT id, state, on_parent_failure, last_error, finished_at FROM job_queue")}
    lost = set(sql.rows(
        "SELECT j.id, (e ->> 'attempt')::int FROM job_queue AS j,"
        " jsonb_array_elements(j.errors) AS e WHERE jsonb_typeof(j.errors) = 'array'"
        " AND (e ->> 'error' LIKE '%%killed by SIGKILL%%' OR e ->> 'error' LIKE 'lease of %%')"))
    parents: dict[int, set[int]] = {}
    for parent, child in sql.rows(
            "SELECT unnest(depends_on), id FROM job_queue WHERE depends_on IS NOT NULL"
            " UNION SELECT parent_id, child_id FROM job_queue_edges"):
        parents.setdefault(child, set()).add(parent)
    for child, deleted in (gone or {}).items():
        parents.setdefault(child, set()).update(deleted)
    runs: dict[int, list[Run]] = {}
    for job_id, *run in sql.rows("SELECT job_id, attempt, started_at, finished_at, outcome"
                                 " FROM race_runs ORDER BY run_id"):
        runs.setdefault(job_id, []).append(Run(*run))
    problems = []
    for job_id, (state, _, _, _) in sorted(jobs.items()):
        returned = [i for i, run in enumerate(runs.get(job_id, []))
                    if run.outcome == "ok" and (job_id, run.attempt) not in lost]
        if state in ("waiting", "pending", "running"):
            unended = sorted(p for p in parents.get(job_id, ()) if p in jobs
                             and jobs[p][0] not in ENDED)
            word = "stranded" if state == "waiting" and not unended else "left"
            problems.append(f"job {job_id} {word} {state}"
                            f" (parents not ended: {unended or 'none'})")
        elif (state == "succeeded") != (len(returned) == 1):
            problems.append(f"job {job_id} {state} after {len(returned)} runs that returned")
        if returned and returned[0] + 1 < len(runs[job_id]):
            problems.append(f"job {job_id} doubly run: run again after a run that returned")
    for child, of in sorted(parents.items()):
        problems += _policy_problems(child, of, jobs, runs)
    assert not problems, "\n".join(problems)


def _policy_problems(child: int, parents: set[int], jobs: dict[int, tuple],
                     runs: dict[int, list[Run]]) -> list[str]:
    state, policy, last_error, _ = jobs[child]
    if state in ("waiting", "pending", "running"):
        return []  # told already
    failed = sorted(p for p in parents if p not in jobs or jobs[p][0] in ("failed", "cancelled"))
    child_runs = runs.get(child, [])
    if failed and policy == "cancel":
        if state != "cancelled" or child_runs:
            return [f"job {child} {state} after {len(child_runs)} runs, though its parents"
                    f" {failed} failed and its policy is cancel"]
        if not any(str(p) in (last_error or "") for p in failed):
            return [f"job {child} cancelled with last_error {last_error!r},"
                    f" which names none of {failed}"]
        return []
    if not child_runs:
        return [f"job {child} {state} without a run, its parents ended as its policy"
                f" ({policy}) lets it run"]
    problems = []
    first_start = child_runs[0].started_at
    for parent in sorted(p for p in parents if p in jobs):
        parent_end = max([t for t in [jobs[parent][3]] + [r.finished_at for r in
                                                          runs.get(parent, [])] if t],
                         default=None)
        if parent_end is None or first_start <= parent_end:
            problems.append(f"job {child} started at {first_start}, before its parent"
                            f" {parent} ended ({parent_end})")
    return problems
