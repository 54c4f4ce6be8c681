"""How much a worker claims at once: the batch size that grows for jobs
that take no time, the reserve kept beside the running jobs, and the short
claims after an urgent job came in ahead of a backlog.

Numbers only: :mod:`producer` claims with them.
"""

from __future__ import annotations

import collections

#: A worker claims what it can start now (its free slots) or, when jobs
#: take no time, what it can run in about FAST_BATCH_SECONDS: a full claim
#: whose jobs all ended sooner grows the next one in proportion, by at most
#: BATCH_GROWTH_MAX times (1, 8, 64, 512, 1000 for jobs that take no time). A
#: claim that came back short or empty (the queue ran dry) sets the next one
#: to a single job. Jobs of a claim still not started after
#: SLOW_BATCH_SECONDS go back to the other workers and the next claim is a
#: single job again, so that jobs never queue for long inside one worker
#: while others could run them.
FAST_BATCH_SECONDS = 0.1
SLOW_BATCH_SECONDS = 0.5
BATCH_GROWTH_MAX = 8
#: A worker keeps claimed beside its running jobs as many as it expects to
#: start within this long: a slot whose run ends then takes the next job at
#: once instead of waiting a claim's round trip. None is kept for long jobs,
#: so a job waits about this long at most while another worker may be free.
RESERVE_SECONDS = 0.01
#: ...or within this many of the worker's round trips to the database (a
#: claim and a write of outcomes, which take turns on its one connection),
#: when its runs end often enough to make room in that time. Runs that start
#: together end together, so slots free up in bursts, not at the average
#: rate: a reserve of a couple of round trips leaves most of a burst's slots
#: waiting for the top-up claim, and each wave of jobs starts late; eight
#: cover a burst. A job kept waits about eight round trips for its slot, no
#: longer than one run of the jobs that make a reserve worth keeping.
RESERVE_ROUND_TRIPS = 8
#: The runs that ended within this long say how fast slots free up.
TURNOVER_WINDOW_SECONDS = 1.0
#: Weight of the newest round trip in the running average of them.
ROUND_TRIP_WEIGHT = 0.2
#: A round trip counts for at most this long, or twice the average.
ROUND_TRIP_CAP_SECONDS = 0.05
#: A claim whose first job has a smaller priority than the last job of the
#: claim before it brought an urgent job in ahead of a backlog, and more are
#: likely to follow. A handler starts only once its claim has committed, and
#: behind a backlog a claim is a top-up of hundreds of rows (up to
#: --batch-size), which takes several times as long as a small one; that
#: claim (with the one in flight when the job came, which saw it too late) is
#: most of an urgent job's wait. So for URGENT_WATCH_SECONDS after such a
#: claim, this worker's claims take at most URGENT_CLAIM_ROWS jobs. A second
#: covers a stream of urgent jobs and costs a lone one no more than a second
#: of small claims. Smaller claims start urgent jobs sooner and slow the
#: backlog more: priorities are there for the urgent jobs to go first, and
#: the backlog pays only while they come. A queue worked through at one
#: priority, or in ascending order, never gets here. Writes keep their size:
#: one only delays this worker's next claim, another worker's may come
#: first, and capping them as well cost throughput for no gain.
URGENT_WATCH_SECONDS = 1.0
URGENT_CLAIM_ROWS = 16


def reserve_size(concurrency: int, run_seconds: float, batch_size: int,
                 endings_per_second: float, round_trip_seconds: float) -> int:
    """How many claimed jobs to keep beside the running ones (see
    RESERVE_SECONDS, RESERVE_ROUND_TRIPS)."""
    # Jobs that take no time: what the slots start within RESERVE_SECONDS,
    # no more than the claims' size, which restarts at one after the queue
    # ran dry, so that a burst after a quiet spell is shared by the workers,
    # not reserved by the first.
    short = min(int(concurrency * RESERVE_SECONDS / max(run_seconds, 1e-6)), batch_size)
    # Jobs that wait: what the runs that ended lately will make room for
    # while a top-up claim is on its way. Ended runs, so that a worker whose
    # slots have just filled keeps none; and no faster than the runs now in
    # the slots can end, so that a worker whose short runs gave way to long
    # ones (run_seconds counts the longest running) keeps none either.
    endings = min(endings_per_second, concurrency / max(run_seconds, 1e-6))
    turnover = min(int(endings * RESERVE_ROUND_TRIPS * round_trip_seconds), concurrency)
    return max(short, turnover)


def next_round_trip(average: float, took: float) -> float:
    """The running average of round trips after one that took ``took`` s.
    One stuck behind a lock for seconds counts as at most twice the average
    (or ROUND_TRIP_CAP_SECONDS): it says nothing of the next claim, and would
    otherwise keep a full reserve for seconds after it."""
    took = min(took, max(2 * average, ROUND_TRIP_CAP_SECONDS))
    return average + ROUND_TRIP_WEIGHT * (took - average)


def next_batch_size(size: int, limit: int, claimed: int, took: float, most: int) -> int:
    """The next batch size after a claim sent with batch size ``size`` that
    asked for ``limit`` rows got ``claimed`` of them, all ended in ``took`` s."""
    if took > SLOW_BATCH_SECONDS:
        return 1
    if claimed < limit:
        # The queue ran dry: the next burst is shared by every worker it
        # wakes, each starting small.
        return 1
    if took >= FAST_BATCH_SECONDS:
        return size
    growth = min(BATCH_GROWTH_MAX, FAST_BATCH_SECONDS / max(took, 1e-6))
    return min(max(int(size * growth), size + 1), most)


class Turnover:
    """How many runs ended within the last TURNOVER_WINDOW_SECONDS, kept as
    a running total: asked before every claim, it must cost the same however
    many runs end, which summing them each time would not."""

    def __init__(self) -> None:
        self._ended: collections.deque[tuple[float, int]] = collections.deque()
        self._total = 0

    def add(self, now: float, count: int) -> None:
        self._ended.append((now, count))
        self._total += count

    def per_second(self, now: float) -> float:
        ended = self._ended
        while ended and ended[0][0] < now - TURNOVER_WINDOW_SECONDS:
            self._total -= ended.popleft()[1]
        return self._total / TURNOVER_WINDOW_SECONDS
