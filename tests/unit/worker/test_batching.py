"""worker.batching: how a worker's claims grow and shrink, the reserve it
claims ahead of its slots, its running round trip, and the turnover of its
runs."""

import pytest

from motir_supervisor.worker import batching


def test_batches_grow_with_the_room_left_and_shrink_after_a_slow_one():
    nbs = batching.next_batch_size
    assert nbs(1, 1, 1, 0.0, 512) == 8  # no time at all: the most growth
    assert nbs(64, 64, 64, 0.001, 512) == 512  # capped by --batch-size
    assert nbs(10, 10, 10, 0.05, 512) == 20  # half the target: doubles
    assert nbs(10, 10, 10, 0.099, 512) == 11  # just under: still grows
    assert nbs(10, 10, 10, 0.2, 512) == 10  # between fast and slow: stays
    assert nbs(10, 10, 4, 0.001, 512) == 1  # the queue ran dry: start small again
    assert nbs(512, 512, 0, 0.0, 512) == 1
    assert nbs(512, 512, 512, 0.6, 512) == 1  # slow: one at a time again
    # Free slots asked for 32 jobs of 0.15 s: they do not make the batch grow.
    assert nbs(1, 32, 32, 0.15, 512) == 1
    assert nbs(4, 32, 20, 0.01, 512) == 1  # short of the slots: dry too


def test_the_reserve_covers_the_round_trips_of_runs_that_end_often():
    rs = batching.reserve_size
    # No-ops: what 10 ms of starts need, up to the claims' size.
    assert rs(8, 0.00002, 512, 0.0, 0.004) == 512
    assert rs(8, 0.00002, 1, 0.0, 0.004) == 1  # after the queue ran dry
    # 32 slots of 100 ms jobs ending 320 times a second, round trips of
    # 5 ms: the next 40 ms of endings (eight round trips, since runs end in
    # bursts), whatever the claims' size; never more than the slots.
    assert rs(32, 0.1, 1, 320.0, 0.005) == 12
    assert rs(32, 0.1, 1, 320.0, 0.01) == 25
    assert rs(32, 0.1, 1, 320.0, 0.03) == 32
    # Slots that have just filled: nothing ended lately, so only the
    # claims' size of one, as for jobs that take no time.
    assert rs(32, 0.1, 1, 0.0, 0.03) == 1
    # Never more than the slots.
    assert rs(8, 0.1, 1, 5000.0, 0.05) == 8
    # Long jobs: none.
    assert rs(8, 30.0, 1, 0.2, 0.005) == 0
    # Short runs gave way to long ones (2 s running now): the endings of the
    # short ones say nothing of when these will end.
    assert rs(8, 2.0, 1, 4000.0, 0.005) == 0


def test_a_round_trip_stuck_behind_a_lock_counts_for_little():
    nrt = batching.next_round_trip
    assert nrt(0.005, 0.005) == pytest.approx(0.005)
    assert nrt(0.005, 0.010) == pytest.approx(0.006)
    # Four seconds behind a lock count as 50 ms.
    assert nrt(0.005, 4.0) == pytest.approx(0.005 + 0.2 * 0.045)
    # A slower database is followed, doubling at most per round trip.
    average = 0.005
    for _ in range(30):
        average = nrt(average, 0.2)
    assert average == pytest.approx(0.2, rel=0.05)


def test_turnover_counts_the_runs_that_ended_within_its_window():
    turnover = batching.Turnover()
    assert turnover.per_second(100.0) == 0
    turnover.add(100.0, 30)
    turnover.add(100.5, 10)
    assert turnover.per_second(100.6) == 40 / batching.TURNOVER_WINDOW_SECONDS
    assert turnover.per_second(101.2) == 10 / batching.TURNOVER_WINDOW_SECONDS
    assert turnover.per_second(102.0) == 0
