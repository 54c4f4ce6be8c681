"""hooks: what an app registers, in the order it runs, and what a hook that
misbehaves costs (a log line, nothing else). The worker's side, across real
processes, is in tests/e2e/test_hooks.py."""

import json
import logging

import pytest

from motir_supervisor import hooks, testing
from tests.apps import handlers_under_test  # noqa: F401 - registers the kinds run here


@pytest.fixture(autouse=True)
def no_hooks():
    hooks.clear()
    yield
    hooks.clear()


def test_hooks_run_around_the_handler_innermost_last_in_and_first_out():
    seen = []

    @hooks.around_run
    def outer(j):
        seen.append(("outer in", j.kind))
        ended = yield
        seen.append(("outer out", ended.outcome, ended.output))

    @hooks.around_run
    def inner(j):
        seen.append(("inner in", j.kind))
        ended = yield
        seen.append(("inner out", ended.outcome, ended.output))

    @hooks.on_run_start
    def start(j):
        seen.append(("start", j.id))

    @hooks.on_run_end
    def end(j, ended):
        seen.append(("end", ended.outcome, ended.error))

    outcome = testing.run_job("helper_ok", {"n": 1}, job_id=4)
    assert outcome.output == {"n": 1}
    assert seen == [("outer in", "helper_ok"), ("inner in", "helper_ok"), ("start", 4),
                    ("end", "succeeded", None), ("inner out", "succeeded", {"n": 1}),
                    ("outer out", "succeeded", {"n": 1})]


@pytest.mark.parametrize("kind, payload, attempt, outcome", [
    ("helper_flaky", {"succeed_on_attempt": 3}, 1, "retried"),
    ("helper_flaky", {"succeed_on_attempt": 9}, 5, "failed"),
    ("helper_permanent", None, 1, "failed"),
    ("helper_snooze", {"seconds": 5}, 1, "snoozed"),
])
def test_the_end_says_how_the_run_ended(kind, payload, attempt, outcome):
    ended = []
    hooks.on_run_end(lambda j, end: ended.append(end))
    testing.run_job(kind, payload, attempt=attempt)
    [end] = ended
    assert (end.outcome, end.output, end.timed_out) == (outcome, None, False)
    assert end.error is not None


def test_an_around_hook_must_be_a_generator_function():
    with pytest.raises(TypeError, match="generator function"):
        hooks.around_run(lambda j: None)


def test_a_hook_registered_twice_runs_once():
    calls = []

    def start(j):
        calls.append(j.id)
    hooks.on_run_start(start)
    hooks.on_run_start(start)
    testing.run_job("helper_ok", {})
    assert calls == [1]


def test_hooks_that_misbehave_are_logged_and_the_run_is_untouched(caplog):
    after = []

    @hooks.around_run
    def twice(j):
        yield
        yield
        after.append("past the second yield")

    @hooks.around_run
    def never(j):
        return
        yield

    @hooks.on_run_end
    def broken(j, ended):
        raise KeyError("broken")

    with caplog.at_level(logging.ERROR, logger="motir_supervisor.hooks"):
        outcome = testing.run_job("helper_ok", {"n": 2})
    assert (outcome.outcome, outcome.output) == ("succeeded", {"n": 2})
    assert after == []
    messages = [record.getMessage() for record in caplog.records]
    assert any("twice in job 1 helper_ok yielded more than once" in m for m in messages)
    assert any("never in job 1 helper_ok returned without yielding" in m for m in messages)
    assert any("broken in job 1 helper_ok raised" in m for m in messages)


def test_with_no_hook_registered_nothing_is_active():
    assert not hooks.active
    hooks.on_worker_start(lambda index: None)
    assert not hooks.active  # worker hooks cost runs nothing
    hooks.on_run_end(lambda j, ended: None)
    assert hooks.active


def test_outside_a_span_enqueue_stores_no_trace_context():
    from opentelemetry.sdk.trace import TracerProvider

    from motir_supervisor import tracing

    assert tracing.current_trace_context() is None
    with TracerProvider().get_tracer("test").start_as_current_span("request") as span:
        carrier = json.loads(tracing.current_trace_context())
    assert carrier["traceparent"].split("-")[1] == f"{span.get_span_context().trace_id:032x}"
