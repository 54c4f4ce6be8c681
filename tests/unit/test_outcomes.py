"""outcomes: the retry delay's growth, jitter and cap, and the failure text
stored for an exception."""

import random

from motir_supervisor import outcomes


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
