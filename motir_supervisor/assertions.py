"""What a piece of code enqueued, checked in a test: :func:`assert_enqueued`,
:func:`refute_enqueued` and :func:`all_enqueued` (re-exported by
:mod:`.testing`, where users find them).

They read the pending jobs on the test's own psycopg2 connection, in
whatever transaction it has open, so a test that never commits sees what
its code enqueued; they never commit, roll back or write. A job matches by
kind, by a payload that holds the expected one (see :func:`payload_holds`)
and by the options given; a failed assertion lists the pending jobs it
found instead, each with what kept it from matching. Reads go through
:func:`.jobs.find_jobs`: nothing here holds SQL.
"""

from __future__ import annotations

import datetime
import json
from typing import Any, Mapping

import psycopg2.extensions

from .jobs import JobRow, JobState, find_jobs

#: The most pending jobs read at once: a test's enqueues, with room to spare.
MAX_JOBS_READ = 10_000
#: How far a job's run_at may be from the run_at expected, by default.
RUN_AT_WITHIN_SECONDS = 1.0
#: A failed assertion lists this many pending jobs at most.
JOBS_LISTED = 20


class _AnyValue:
    """The default of an option a caller did not give: any value matches."""

    def __repr__(self) -> str:
        return "any"


_ANY: Any = _AnyValue()


def all_enqueued(conn: psycopg2.extensions.connection, kind: str | None = None,
                 payload: Any = None, *, queue: str = _ANY, priority: int = _ANY,
                 run_at: datetime.datetime = _ANY,
                 within: float | datetime.timedelta = RUN_AT_WITHIN_SECONDS,
                 max_attempts: int = _ANY, unique_key: str | None = _ANY,
                 concurrency_key: str | None = _ANY) -> list[JobRow]:
    """The pending jobs that match, oldest first.

    ``kind`` None matches every kind and ``payload`` None every payload; an
    option left out matches any value (``unique_key=None`` matches the jobs
    without a key). ``run_at`` matches a job due within ``within`` seconds
    of it, either way.
    """
    expected = _expected(kind, payload, queue=queue, priority=priority, run_at=run_at,
                         within=within, max_attempts=max_attempts, unique_key=unique_key,
                         concurrency_key=concurrency_key)
    return [job for job in _pending(conn) if not _mismatches(job, expected)]


def assert_enqueued(conn: psycopg2.extensions.connection, kind: str, payload: Any = None, *,
                    count: int | None = None, queue: str = _ANY, priority: int = _ANY,
                    run_at: datetime.datetime = _ANY,
                    within: float | datetime.timedelta = RUN_AT_WITHIN_SECONDS,
                    max_attempts: int = _ANY, unique_key: str | None = _ANY,
                    concurrency_key: str | None = _ANY) -> JobRow:
    """Assert that a pending job of ``kind`` matches (``count`` given: exactly
    that many do); return the oldest that does.

    Matching is :func:`all_enqueued`'s. An AssertionError says what was
    expected and lists the pending jobs found, each with what differs.
    """
    if count is not None and (not isinstance(count, int) or isinstance(count, bool)
                              or count < 1):
        raise ValueError(f"count must be an int of at least 1 (refute_enqueued checks for"
                         f" none), not {count!r}")
    expected = _expected(kind, payload, queue=queue, priority=priority, run_at=run_at,
                         within=within, max_attempts=max_attempts, unique_key=unique_key,
                         concurrency_key=concurrency_key)
    pending = _pending(conn)
    matching = [job for job in pending if not _mismatches(job, expected)]
    if matching and (count is None or len(matching) == count):
        return matching[0]
    wanted = "a pending job" if count is None else f"{count} pending job{'s' * (count > 1)}"
    found = f"{len(matching)} matched" if matching else "none matched"
    raise AssertionError(f"expected {wanted} {_describe(expected)}; {found}\n"
                         + _listing(pending, expected))


def refute_enqueued(conn: psycopg2.extensions.connection, kind: str | None = None,
                    payload: Any = None, *, queue: str = _ANY, priority: int = _ANY,
                    run_at: datetime.datetime = _ANY,
                    within: float | datetime.timedelta = RUN_AT_WITHIN_SECONDS,
                    max_attempts: int = _ANY, unique_key: str | None = _ANY,
                    concurrency_key: str | None = _ANY) -> None:
    """Assert that no pending job matches (:func:`all_enqueued`'s matching;
    with no argument but ``conn``, that nothing is pending). An
    AssertionError lists the jobs that matched."""
    expected = _expected(kind, payload, queue=queue, priority=priority, run_at=run_at,
                         within=within, max_attempts=max_attempts, unique_key=unique_key,
                         concurrency_key=concurrency_key)
    matching = [job for job in _pending(conn) if not _mismatches(job, expected)]
    if matching:
        raise AssertionError(f"expected no pending job {_describe(expected)};"
                             f" {len(matching)} matched\n" + _listing(matching, expected))


def payload_holds(payload: Any, expected: Any) -> bool:
    """Whether ``payload`` holds ``expected``: a dict holds each key of the
    expected dict with a value that holds the expected value, at any depth;
    anything else (a list, a number, a string) must be equal."""
    if isinstance(expected, dict):
        return isinstance(payload, dict) and all(
            key in payload and payload_holds(payload[key], value)
            for key, value in expected.items())
    return bool(payload == expected)


def _expected(kind: str | None, payload: Any, *, within: float | datetime.timedelta,
              **options: Any) -> dict[str, Any]:
    """What a job must be, by field (kind and payload included), the fields
    left to any value out; run_at's tolerance under ``within``."""
    if kind is not None and not isinstance(kind, str):
        raise TypeError(f"kind must be a str, not {kind!r}")
    expected: dict[str, Any] = {"kind": kind}
    if payload is not None:
        try:
            # As the row holds it: tuples are lists, keys are strings.
            expected["payload"] = json.loads(json.dumps(payload))
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"payload cannot be compared as JSON: {exc}") from exc
    expected.update(options)
    run_at = options["run_at"]
    if run_at is not _ANY:
        if not isinstance(run_at, datetime.datetime) or run_at.utcoffset() is None:
            raise TypeError(f"run_at must be an aware datetime, not {run_at!r}")
        expected["within"] = (within if isinstance(within, datetime.timedelta)
                              else datetime.timedelta(seconds=within))
    return {name: value for name, value in expected.items()
            if value is not _ANY and not (name == "kind" and value is None)}


def _mismatches(job: JobRow, expected: Mapping[str, Any]) -> list[str]:
    """What keeps ``job`` from matching, one phrase each; empty if it matches."""
    differ = []
    for name, value in expected.items():
        if name == "within":
            continue
        have = getattr(job, name)
        if name == "payload":
            if not payload_holds(have, value):
                differ.append("payload differs")
        elif name == "run_at":
            if abs(have - value) > expected["within"]:
                differ.append(f"run_at {have.isoformat()}")
        elif have != value:
            differ.append(f"{name} {have!r}")
    return differ


def _describe(expected: Mapping[str, Any]) -> str:
    parts = [f"of kind {expected['kind']!r}" if "kind" in expected else "of any kind"]
    if "payload" in expected:
        parts.append(f"with a payload holding {expected['payload']!r}")
    for name, value in expected.items():
        if name == "run_at":
            parts.append(f"run_at {value.isoformat()} (within {expected['within']})")
        elif name not in ("kind", "payload", "within"):
            parts.append(f"{name} {value!r}")
    return ", ".join(parts)


def _listing(jobs: list[JobRow], expected: Mapping[str, Any]) -> str:
    if not jobs:
        return "No job is pending."
    lines = [f"Pending jobs ({len(jobs)}{'+' * (len(jobs) >= MAX_JOBS_READ)}), oldest first:"]
    for job in jobs[:JOBS_LISTED]:
        differ = _mismatches(job, expected)
        lines.append(f"  job {job.id} {job.kind!r} payload={job.payload!r} queue={job.queue!r}"
                     f" priority={job.priority} run_at={job.run_at.isoformat()}"
                     f" max_attempts={job.max_attempts} unique_key={job.unique_key!r}"
                     f" concurrency_key={job.concurrency_key!r}"
                     + (f"  <- {'; '.join(differ)}" if differ else ""))
    if len(jobs) > JOBS_LISTED:
        lines.append(f"  ... and {len(jobs) - JOBS_LISTED} more")
    return "\n".join(lines)


def _pending(conn: psycopg2.extensions.connection) -> list[JobRow]:
    return find_jobs(conn, state=JobState.PENDING, limit=MAX_JOBS_READ, order="oldest")
