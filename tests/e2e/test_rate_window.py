"""A rate limit where a partner counts it: at the handlers' starts, each
recorded by the handler's own first statement with the database's clock.
Two fleets of 4 workers work through a backlog at the limit's full pace; no
span of S seconds less the tolerance docs/job-model.md states holds more
than N starts. The negative control measures the same starts over the whole
S, the window the claims keep: the last handlers of one window and the
first of the next meet there, more than N."""

import pytest

from tests.apps.partner import RATE
from tests.helpers import most_in_a_window, wait_for_limits, wait_until

FLEET = ("--workers", "4", "--concurrency", "4", "--app", "tests.apps.partner")
#: docs/job-model.md: a handler begins within this long of its claim's stamp,
#: so no span of S minus it holds more than N handler starts.
TOLERANCE = 0.1
#: Windows' worth of backlog: each boundary between two is a chance for the
#: late handlers of one window to meet the early ones of the next.
WINDOWS = 4


def _start_fleets(sql, start_supervisor):
    for _ in range(2):
        start_supervisor(*FLEET).wait_for_workers(4)
    # Rows enqueued before the limit is written would run beside it.
    wait_for_limits(sql, "partner_api")


def _work_through_a_backlog(sql):
    """Enqueue WINDOWS windows' worth of jobs at once and wait for them;
    (stamp, handler start) of each run, in epoch seconds."""
    sql.rows("TRUNCATE test_executions")
    sql.rows("DELETE FROM job_queue")
    sql.rows("INSERT INTO job_queue (kind) SELECT 'partner_api' FROM generate_series(1, %s)",
             (RATE[0] * WINDOWS,))
    wait_until(lambda: sql.value("SELECT count(*) FILTER (WHERE state <> 'succeeded') = 0"
                                 " FROM job_queue"), 30, message="every job")
    rows = sql.rows("SELECT (checkpoint->>'claimed_at')::float8,"
                    " extract(epoch FROM started_at)::float8, job_id FROM test_executions")
    assert sorted(job for _, _, job in rows) == sorted(
        job for job, in sql.rows("SELECT id FROM job_queue")), "each job ran once"
    return [(stamp, start) for stamp, start, _ in rows]


def test_no_span_of_the_window_less_the_tolerance_holds_more_than_n_handler_starts(
        executions, start_supervisor):
    sql = executions
    _start_fleets(sql, start_supervisor)
    runs = _work_through_a_backlog(sql)
    # The claims used the whole allowance: the handlers ran at the limit's
    # full pace, where an overshoot would show.
    assert most_in_a_window(sorted(stamp for stamp, _ in runs), RATE[1]) == RATE[0]
    starts = sorted(start for _, start in runs)
    assert most_in_a_window(starts, RATE[1] - TOLERANCE) <= RATE[0], (
        "seconds from stamp to start: %s" % sorted(start - stamp for stamp, start in runs))


def test_negative_control_over_the_whole_window_handler_starts_exceed_n(
        executions, start_supervisor):
    sql = executions
    _start_fleets(sql, start_supervisor)
    for _ in range(3):
        runs = _work_through_a_backlog(sql)
        assert most_in_a_window(sorted(stamp for stamp, _ in runs), RATE[1]) == RATE[0]
        if most_in_a_window(sorted(start for _, start in runs), RATE[1]) > RATE[0]:
            return
    pytest.fail(f"three backlogs: no window of {RATE[1]:g}s held more than {RATE[0]}"
                " handler starts")
