"""What the tests of every level share: waiting for conditions, reading and
writing job_queue, the table the handlers of tests/apps record their runs
in, wake-up notifications, forked racers and metrics text. The waiting, the
connection and the table are the test bed's (testbed/), shared with the
benchmarks and the demo."""

from __future__ import annotations

import multiprocessing
import os
import random
import select
import time
from pathlib import Path
from typing import Any, Callable

import psycopg2

from motir_supervisor import db
# The test bed's waiting, connection and table: the tests import them from here too.
from testbed.polling import wait_until
from testbed.sql import EXECUTIONS_TABLE, Sql  # noqa: F401

#: The checkout: the working directory of the processes the tests start.
ROOT = Path(__file__).resolve().parent.parent


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie, exited but not yet reaped, does not,
    nor one its parent reaped, between a look and a read too."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


# -- job_queue -------------------------------------------------------------------

def state_of(sql: Sql, job_id: int) -> str | None:
    """The job's state, or None once its row is gone."""
    return sql.value("SELECT state FROM job_queue WHERE id = %s", (job_id,))


def enqueue(sql: Sql, kind: str, payload: str = "{}", count: int = 1, **columns: Any) -> list[int]:
    """Insert ``count`` jobs of ``kind`` with a plain INSERT, as any producer
    may; ``columns`` sets others (``max_attempts=1``, ``queue="mail"``).
    The ids, in the order inserted."""
    names = ["kind", "payload", *columns]
    values = [kind, payload, *columns.values()]
    return [r[0] for r in sql.rows(
        f"INSERT INTO job_queue ({', '.join(names)}) SELECT {', '.join(['%s'] * len(values))}"
        f" FROM generate_series(1, {count}) RETURNING id", values)]


# -- test_executions: every run of the handlers in tests/apps --------------------

#: The end of the lane's read in claim_limited_jobs.
_HEAD_READ = ("        LIMIT least(lanes.slots, %(limit)s) * CASE WHEN lanes.per_key IS NULL"
              " THEN 1 ELSE 2 END + 1\n    ) AS due")
#: claim_limited_jobs with each row of the lane locked as it is read (FOR
#: UPDATE SKIP LOCKED, as the claim of a queue without limits reads), for
#: the negative controls that also take its lock away: two such claims at
#: once read past each other's rows where the real claim's meet on the
#: same ones, and their counts, taken before either commits, let both
#: start what only one may.
LOCKING_AS_READ = db.QUERIES["claim_limited_jobs"].replace(
    _HEAD_READ, _HEAD_READ.replace("\n    ) AS due",
                                   "\n        FOR UPDATE SKIP LOCKED\n    ) AS due"))
assert LOCKING_AS_READ != db.QUERIES["claim_limited_jobs"]


def running_job(sql: Sql, job_id: int) -> tuple | None:
    """(pid, started_at) of the execution in progress, once it has started."""
    rows = sql.rows("SELECT pid, started_at FROM test_executions WHERE job_id = %s"
                    " AND finished_at IS NULL ORDER BY execution_id DESC LIMIT 1", (job_id,))
    return rows[0] if rows else None


def executions_per_job(sql: Sql) -> dict[int, int]:
    """{job id: how many times it ran} for every row of job_queue."""
    return dict(sql.rows("SELECT j.id, count(e.execution_id) FROM job_queue j"
                         " LEFT JOIN test_executions e ON e.job_id = j.id GROUP BY j.id"))


#: Every change of a job_queue row into or out of `running`, as the
#: database saw it: the limits count those spans.
TRANSITIONS_TABLE = """
CREATE TABLE test_transitions (
    job_id  bigint NOT NULL,
    kind    text NOT NULL,
    running boolean NOT NULL,
    at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION test_record_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO test_transitions (job_id, kind, running)
    VALUES (NEW.id, NEW.kind, NEW.state = 'running');
    RETURN NULL;
END;
$$;
CREATE TRIGGER test_record_transition AFTER UPDATE OF state ON job_queue FOR EACH ROW
    WHEN ((OLD.state = 'running') <> (NEW.state = 'running'))
    EXECUTE FUNCTION test_record_transition();
"""


def wait_for_limits(sql: Sql, *kinds: str, timeout: float = 10) -> None:
    """Wait until a fleet's worker has written the limits of ``kinds`` (it
    writes its registry's when it starts). A row inserted before then takes
    the regular lane and may start beside the limit, which counts it only
    once written; so a test that asserts a limit at every instant enqueues
    after this."""
    wait_until(lambda: sql.value("SELECT count(*) FROM job_queue_limits WHERE kind = ANY(%s)",
                                 (list(kinds),)) == len(kinds),
               timeout, message=f"the limits of {', '.join(kinds)}")


def running_spans(sql: Sql, kind: str) -> list[tuple[Any, Any, int]]:
    """(start, end, job id) of every time a job of ``kind`` was `running` in the
    database (TRANSITIONS_TABLE). A claim that takes a slot another run
    freed starts after that run's end was committed, so its start is
    recorded after that end."""
    spans, started = [], {}
    for job_id, running, at in sql.rows(
            "SELECT job_id, running, at FROM test_transitions WHERE kind = %s ORDER BY at",
            (kind,)):
        if running:
            started[job_id] = at
        else:
            spans.append((started.pop(job_id), at, job_id))
    assert not started, f"jobs of {kind} still running: {sorted(started)}"
    return spans


def most_at_once(spans) -> int:
    """The largest number of (start, end) spans open at one instant."""
    events = sorted([(end, -1) for _, end in spans] + [(start, 1) for start, _ in spans])
    most = running = 0
    for _, change in events:
        running += change
        most = max(most, running)
    return most


# -- wake-ups ------------------------------------------------------------------

def wakeup_listener(url: str):
    """A connection listening on the channel the insert trigger notifies."""
    conn = psycopg2.connect(url)
    conn.autocommit = True
    conn.cursor().execute(f"LISTEN {db.WAKEUP_CHANNEL}")
    return conn


def notifications(conn, settle: float = 0.2) -> list[str]:
    """The payloads ``conn`` received within ``settle`` seconds, consumed."""
    select.select([conn], [], [], settle)
    conn.poll()
    got = [n.payload for n in conn.notifies]
    conn.notifies.clear()
    return got


def most_at_once_per_key(spans) -> int:
    """The largest number of (key, start, end) spans of one key open at one instant."""
    events = sorted([(end, -1, key) for key, _, end in spans]
                    + [(start, 1, key) for key, start, _ in spans])
    running: dict[Any, int] = {}
    most = 0
    for _, change, key in events:
        running[key] = running.get(key, 0) + change
        most = max(most, running[key])
    return most


def most_in_a_window(times, seconds: float) -> int:
    """The most of ``times`` (sorted) in any window of ``seconds``."""
    return max(sum(1 for t in times[i:] if t < first + seconds)
               for i, first in enumerate(times))


# -- races -----------------------------------------------------------------------

def race(target, processes, url, naive):
    """Fork ``processes`` copies of ``target(url, naive, barrier)``, released
    together once each has its warm connection; wait for all of them."""
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(processes)
    procs = [ctx.Process(target=target, args=(url, naive, barrier))
             for _ in range(processes)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0


def hold_limited_claims(url: str, barrier: Any, rows: int, hold: tuple[float, float],
                        hand_on: Callable[..., list] | None = None) -> None:
    """Claim limited jobs, ``rows`` at a time, until none is pending, as a
    worker would: each run recorded in test_executions strictly inside the
    time its row was running (with its key and the start its claim stamped),
    held for a random time within ``hold``, then its success written.
    With ``hand_on(store, claimant, ids)``, the successes are written by it,
    and the jobs it returns run next, the same way, before the next claim."""
    claimant = f"racer-{os.getpid()}"
    store = db.JobStore(url, prepare=False)
    log = psycopg2.connect(url)
    log.autocommit = True
    cur = log.cursor()
    store.conn
    barrier.wait()
    jobs: list = []
    while True:
        if not jobs:
            jobs, _ = store.claim_limited_jobs(claimant, rows, 30, None)
        if not jobs:
            cur.execute("SELECT count(*) FROM job_queue WHERE state = 'pending'")
            if cur.fetchone()[0] == 0:
                break
            time.sleep(0.001)
            continue
        cur.execute("INSERT INTO test_executions (job_id, attempt, pid, checkpoint)"
                    " SELECT id, attempts, %s, jsonb_build_object('key', concurrency_key,"
                    " 'claimed_at', extract(epoch FROM started_at)) FROM job_queue"
                    " WHERE id = ANY(%s) RETURNING execution_id",
                    (os.getpid(), [j.id for j in jobs]))
        executions = [row[0] for row in cur.fetchall()]
        time.sleep(random.uniform(*hold))
        cur.execute("UPDATE test_executions SET finished_at = clock_timestamp()"
                    " WHERE execution_id = ANY(%s)", (executions,))
        if hand_on is None:
            store.record_outcomes(claimant, [db.Outcome(j.id) for j in jobs])
            jobs = []
        else:
            jobs = hand_on(store, claimant, [j.id for j in jobs])
    store.close()
    log.close()


# -- metrics -------------------------------------------------------------------

def metric(text, name, **labels):
    """The value of one sample in Prometheus' text format, or None."""
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    prefix = f"{name}{{{wanted}}} " if labels else f"{name} "
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.split()[-1])
    return None
