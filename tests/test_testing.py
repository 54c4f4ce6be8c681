"""motir_supervisor.testing: handlers run in-process, and a test database
drained through the real claims. The run_job tests need no database; the
drain tests use the suite's throwaway PostgreSQL."""

import pytest

import tests.apps.handlers_under_test as app
from motir_supervisor import testing
from motir_supervisor.registry import Interrupted, PermanentFailure, Snooze


@pytest.fixture(autouse=True)
def fresh_runs():
    app.RUNS.clear()


def test_success_passes_the_payload_and_the_job_values():
    outcome = testing.run_job("helper_ok", {"a": 1}, attempt=2, job_id=7)
    assert (outcome.outcome, outcome.error, outcome.exception) == ("succeeded", None, None)
    assert app.RUNS == [("helper_ok", 7, 2)]


def test_a_failure_before_the_last_attempt_is_a_retry_with_its_error_and_delay():
    outcome = testing.run_job("helper_flaky", {"succeed_on_attempt": 3}, attempt=1,
                              retry_base_seconds=10, retry_max_seconds=100)
    assert outcome.outcome == "retry"
    assert outcome.error.startswith("RuntimeError: flaky on attempt 1\nTraceback")
    assert isinstance(outcome.exception, RuntimeError)
    # Jittered over the upper half of the first delay, as the worker's.
    assert 5 <= outcome.seconds <= 10


def test_the_last_attempt_fails_and_a_permanent_failure_fails_at_once():
    last = testing.run_job("helper_flaky", {"succeed_on_attempt": 9}, attempt=3, max_attempts=3)
    assert last.outcome == "failed" and not last.decision.permanent
    permanent = testing.run_job("helper_permanent", attempt=1)
    assert permanent.outcome == "failed" and permanent.decision.permanent
    assert isinstance(permanent.exception, PermanentFailure)
    assert permanent.error.startswith("PermanentFailure: bad input")


def test_snooze_gives_its_seconds():
    outcome = testing.run_job("helper_snooze", {"seconds": 42})
    assert (outcome.outcome, outcome.seconds, outcome.error) == ("snoozed", 42.0, None)
    assert isinstance(outcome.exception, Snooze)


def test_checkpoints_are_kept_and_a_stopping_handler_is_interrupted():
    whole = testing.run_job("helper_steps", {"steps": 3})
    assert whole.outcome == "succeeded"
    assert whole.checkpoints == ({"step": 1}, {"step": 2}, {"step": 3})
    stopped = testing.run_job("helper_steps", {"steps": 3}, checkpoint_data={"step": 1},
                              stopping=True)
    assert stopped.outcome == "interrupted" and isinstance(stopped.exception, Interrupted)
    assert stopped.checkpoint == {"step": 2}


def test_interrupted_without_a_stop_request_counts_as_a_failed_attempt():
    # The package's own rule (outcomes.decide), not one of the helper's.
    outcome = testing.run_job("helper_interrupt_anyway", attempt=1)
    assert outcome.outcome == "retry"
    assert "although the worker was not stopping" in outcome.error


def test_an_async_handler_runs_to_its_outcome():
    assert testing.run_job("helper_async", {}).outcome == "succeeded"
    failed = testing.run_job("helper_async", {"fail": True}, attempt=5, max_attempts=5)
    assert failed.outcome == "failed" and failed.error.startswith("ValueError: async boom")
    assert app.RUNS == [("helper_async", 1, 1), ("helper_async", 1, 5)]


def test_an_unknown_kind_is_named():
    with pytest.raises(testing.UnknownKind, match="'no_such_kind'.*helper_ok"):
        testing.run_job("no_such_kind")


def test_the_plugin_fixtures_return_the_functions(motir_run_job, motir_drain):
    # tests/conftest.py loads the plugin as the pytest11 entry point does
    # once the package is installed.
    assert motir_run_job is testing.run_job
    assert motir_drain is testing.drain
    assert motir_run_job("helper_ok").outcome == "succeeded"


def _row(sql, job_id):
    return sql.rows("SELECT state, attempts, run_at > now(), last_error IS NOT NULL, checkpoint"
                    " FROM job_queue WHERE id = %s", (job_id,))[0]


@pytest.mark.integration
def test_drain_runs_the_due_jobs_and_leaves_the_rows_as_a_worker_would(store, sql):
    ok, _ = store.enqueue("helper_ok", {"n": 1})
    steps, _ = store.enqueue("helper_steps", {"steps": 2})
    flaky, _ = store.enqueue("helper_flaky", {"succeed_on_attempt": 2})
    permanent, _ = store.enqueue("helper_permanent")
    later, _ = store.enqueue("helper_ok", {"n": 2}, delay_seconds=3600)
    outcomes = testing.drain(store)
    assert sorted((o.job_id, o.outcome) for o in outcomes) == sorted(
        [(ok, "succeeded"), (steps, "succeeded"), (flaky, "retry"), (permanent, "failed")])
    assert _row(sql, ok) == ("succeeded", 1, False, False, None)
    assert _row(sql, steps) == ("succeeded", 1, False, False, {"step": 2})
    # The worker's retry delay: pending, its attempt spent, due later.
    assert _row(sql, flaky) == ("pending", 1, True, True, None)
    assert _row(sql, permanent) == ("failed", 1, False, True, None)
    assert _row(sql, later) == ("pending", 0, True, False, None)
    assert testing.drain(store) == []


@pytest.mark.integration
def test_drain_with_no_retry_delay_runs_a_retry_again_until_it_succeeds(database_url, sql, store):
    flaky, _ = store.enqueue("helper_flaky", {"succeed_on_attempt": 3})
    snoozed, _ = store.enqueue("helper_snooze", {"seconds": 600}, queue="other")
    outcomes = testing.drain(database_url, queues=["default"], retry_base_seconds=0)
    assert [(o.job_id, o.outcome) for o in outcomes] == [
        (flaky, "retry"), (flaky, "retry"), (flaky, "succeeded")]
    assert app.RUNS == [("helper_flaky", flaky, 1), ("helper_flaky", flaky, 2),
                        ("helper_flaky", flaky, 3)]
    assert _row(sql, flaky) == ("succeeded", 3, False, False, None)  # success clears it
    assert _row(sql, snoozed)[:2] == ("pending", 0)
    # The snooze hands its attempt back and is due in 600 s: one run only.
    assert [o.outcome for o in testing.drain(store, queues=["other"])] == ["snoozed"]
    assert _row(sql, snoozed)[:3] == ("pending", 0, True)


@pytest.mark.integration
def test_drain_stops_at_max_jobs_and_refuses_unknown_kinds(store, sql):
    for n in range(3):
        store.enqueue("helper_ok", {"n": n})
    assert len(testing.drain(store, max_jobs=2)) == 2
    assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'pending'") == 1
    unknown, _ = store.enqueue("not_registered_anywhere")
    with pytest.raises(testing.UnknownKind, match="not_registered_anywhere"):
        testing.drain(store)
    assert _row(sql, unknown)[:2] == ("pending", 0)


@pytest.mark.integration
def test_drain_claims_limited_kinds_within_their_limit(store, sql):
    store.sync_limits({"helper_limited": 1})
    ids = [store.enqueue("helper_limited", {"n": n})[0] for n in range(2)]
    assert sql.value("SELECT bool_and(limited) FROM job_queue") is True
    outcomes = testing.drain(store)
    assert [(o.job_id, o.outcome) for o in outcomes] == [(i, "succeeded") for i in ids]
    assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'succeeded'") == 2
