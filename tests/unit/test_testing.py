"""testing.run_job: each outcome of a handler run in-process (success, retry
with its error and delay, failure, snooze, a stopping handler interrupted at
its checkpoint), an async handler, an unknown kind, and the plugin's fixtures.
The handlers are those of tests/apps/handlers_under_test.py."""

import time

import pytest

import tests.apps.handlers_under_test as app
from motir_supervisor import testing
from motir_supervisor.registry import Interrupted, PermanentFailure, Snooze

pytestmark = pytest.mark.usefixtures("handler_runs")


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


@pytest.mark.parametrize("kind, raised", [("helper_exits", SystemExit),
                                          ("helper_exits_async", SystemExit),
                                          ("helper_keyboard_interrupt", KeyboardInterrupt)])
def test_a_handler_raising_system_exit_or_keyboard_interrupt_fails_its_attempt(kind, raised):
    """As in a worker (tests/e2e/test_hostile_handlers.py runs the same
    kinds there): what a handler raises is its run's outcome, never the
    caller's exception."""
    retried = testing.run_job(kind, attempt=1, max_attempts=2)
    assert retried.outcome == "retry" and isinstance(retried.exception, raised)
    failed = testing.run_job(kind, attempt=2, max_attempts=2)
    assert failed.outcome == "failed"
    assert failed.error.startswith(f"{raised.__name__}: ")


def test_a_kind_s_timeout_fails_the_run_as_a_worker_does():
    """An async handler is cancelled at its timeout; a plain one cannot be,
    and fails as a timeout once it returns past it, as a worker writes it."""
    for kind in ("helper_overruns", "helper_overruns_async"):
        started = time.monotonic()
        outcome = testing.run_job(kind, max_attempts=1)
        assert outcome.outcome == "failed" and isinstance(outcome.exception, TimeoutError)
        assert outcome.error.startswith("TimeoutError: ran past the timeout of its kind (0.05s)")
        assert outcome.output is None
    assert time.monotonic() - started < 1  # the async one did not sleep its 5 s


def test_an_unknown_kind_is_named():
    with pytest.raises(testing.UnknownKind, match="'no_such_kind'.*helper_ok"):
        testing.run_job("no_such_kind")


def test_the_plugin_fixtures_return_the_functions(motir_run_job, motir_drain):
    # tests/conftest.py loads the plugin as the pytest11 entry point does
    # once the package is installed.
    assert motir_run_job is testing.run_job
    assert motir_drain is testing.drain
    assert motir_run_job("helper_ok").outcome == "succeeded"


def test_a_plain_handler_that_returns_a_coroutine_fails_saying_to_declare_it_async():
    import warnings
    outcome = testing.run_job("helper_forgot_async", {})
    assert outcome.outcome == "retry"
    assert "declare the handler `async def`" in outcome.error
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import gc
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)]
    assert app.RUNS == []  # the coroutine's body never ran


def test_the_output_is_what_the_handler_returned_def_and_async_alike():
    assert testing.run_job("helper_ok", {"rows": [1, 2]}).output == {"rows": [1, 2]}
    assert testing.run_job("helper_async", {"value": "done"}).output == "done"
    assert testing.run_job("helper_async", {}).output is None
    assert testing.run_job("helper_async", {"fail": True, "value": "x"}).output is None


def test_a_transaction_needs_a_worker_s_claim_and_run_job_says_so():
    from tests.apps import transactional  # noqa: F401 - registers the kind

    outcome = testing.run_job("transactional", {}, max_attempts=1)
    assert outcome.outcome == "failed"
    assert isinstance(outcome.exception, RuntimeError)
    assert "j.transaction() needs a job claimed by a worker" in outcome.error


def test_run_job_hands_the_handler_the_parents_and_batch_it_was_given():
    from motir_supervisor import BatchProgress, JobState, Parent

    alone = testing.run_job("helper_reads_upstream", {})
    assert alone.output == {"parents": [], "batch": None}
    parents = [Parent(3, "fetch", "fetch", JobState.SUCCEEDED, {"files": 2}),
               Parent(4, None, "other", JobState.FAILED, None)]
    counts = {**dict.fromkeys(JobState, 0), JobState.SUCCEEDED: 2, JobState.FAILED: 1}
    outcome = testing.run_job("helper_reads_upstream", {}, parents=parents,
                              batch=BatchProgress(9, "import", counts))
    assert outcome.output == {
        "parents": [[3, "fetch", "fetch", "succeeded", {"files": 2}],
                    [4, None, "other", "failed", None]],
        "batch": [9, "import", 3, 2]}
