"""outcomes: the retry delay's growth, jitter and cap, the failure text
stored for an exception, and exceptions that cannot be read."""

import random

import pytest

from motir_supervisor import outcomes, registry
from motir_supervisor.ipc import ledger


def test_retry_delay_grows_exponentially_with_jitter_and_a_cap():
    random.seed(7)
    for attempt in range(1, 8):
        full = min(3600, 5 * 2 ** (attempt - 1))
        for _ in range(50):
            assert full / 2 <= outcomes.retry_delay(attempt, 5, 3600) <= full
    assert outcomes.retry_delay(40, 5, 3600) <= 3600
    assert outcomes.retry_delay(5000, 5, 3600) <= 3600  # no overflow on huge attempt counts
    assert len({outcomes.retry_delay(3, 5, 3600) for _ in range(20)}) > 1


def test_failure_text_names_the_exception_and_is_bounded():
    try:
        raise KeyError("x" * 10_000)
    except KeyError as exc:
        text = outcomes.describe_failure(exc)
    assert text.startswith("KeyError: ")
    assert len(text) <= outcomes.MAX_ERROR_CHARS
    assert "raise KeyError" in text  # the tail of the traceback survives


class _Unprintable(Exception):
    def __str__(self):
        raise TypeError("__str__ broke")


class _NoName(type):
    @property
    def __name__(cls):
        raise RuntimeError("no name")


class _BrokenSnooze(registry.Snooze):
    @property
    def seconds(self):
        raise RuntimeError("no seconds")

    @seconds.setter
    def seconds(self, value):
        pass


def _raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


@pytest.mark.parametrize("error, says", [
    (_Unprintable(), "_Unprintable: (its text could not be rendered: TypeError)"),
    (_NoName("_", (Exception,), {})(), "an exception: "),
    (_BrokenSnooze(5), "_BrokenSnooze: the handler's exception could not be read"),
])
def test_an_exception_that_cannot_be_read_fails_its_run_all_the_same(error, says):
    """Whatever a handler's exception does when it is read, deciding its run
    never raises: the attempt fails, saying what could be said."""
    decision = outcomes.decide(_raised(error), 1, 5, False, 1, 10)
    assert decision.state == ledger.FAILED
    assert decision.error.startswith(says), decision.error
    assert decision.summary.startswith(says)
    assert decision.retry_in_seconds > 0


def test_an_unpicklable_or_huge_exception_fails_its_run_with_a_bounded_error():
    import threading
    unpicklable = RuntimeError("holds a lock")
    unpicklable.lock = threading.Lock()
    huge = ValueError("x" * 10_000_000)
    for error in (unpicklable, huge):
        decision = outcomes.decide(_raised(error), 1, 5, False, 1, 10)
        assert decision.state == ledger.FAILED
        assert decision.error.startswith(type(error).__name__)
        assert len(decision.error) <= outcomes.MAX_ERROR_CHARS
        assert len(decision.summary) <= outcomes.MAX_ERROR_CHARS


def test_a_traceback_that_cannot_be_rendered_keeps_the_exception_s_own_text():
    class NoSource:
        """A module loader whose get_source raises: rendering a frame of its
        module reads the line through it."""

        def get_source(self, name):
            raise RuntimeError("no source")

    module = {"__name__": "module_without_source", "__loader__": NoSource(), "__spec__": None}
    exec(compile("def fail():\n    raise ValueError('the real failure')\n",
                 "/nowhere/module_without_source.py", "exec"), module)
    try:
        module["fail"]()
    except ValueError as error:
        decision = outcomes.decide(error, 1, 5, False, 1, 10)
    assert decision.state == ledger.FAILED
    assert decision.error.startswith("ValueError: the real failure\n"), decision.error
    assert "its traceback could not be rendered: RuntimeError" in decision.error
