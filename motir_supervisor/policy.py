"""A kind's retry policy: how many attempts a job gets, how long it waits
between them, and which failures are not worth another attempt.

``@job("charge", max_attempts=10, retry=Retry(base=30, cap=3600),
no_retry_for=(ValueError,))`` gives a kind its policy (see registry.job);
a kind without one follows the fleet's: DEFAULT_MAX_ATTEMPTS attempts and
the supervisor's ``--retry-base-seconds`` doubling up to an hour.

Pure values: no SQL, no registry. The workers write each kind's policy to
job_queue_kinds (see maintenance/policies.py), where a row inserted without
``max_attempts`` takes it and the supervisor's rescuer and reaper read the
delays of a run whose worker died.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
from typing import Callable, Union

log = logging.getLogger(__name__)

#: Attempts of a job whose row and kind say none. With the fleet's delays
#: (5 s doubling to an hour, see docs/job-model.md) a job keeps trying for
#: 8 to 15 hours: a partner's outage of an afternoon fails nothing. The
#: schema's trigger (migrations/0016) holds the same number.
DEFAULT_MAX_ATTEMPTS = 25
#: The fleet's delays, as the supervisor's options default to them.
DEFAULT_BASE_SECONDS = 5.0
DEFAULT_CAP_SECONDS = 3600.0
#: The share of a delay drawn at random, so that jobs that failed together
#: (an outage) do not all come back in the same instant: a delay of d waits
#: between d * (1 - jitter) and d.
DEFAULT_JITTER = 0.5
#: Delays are written to job_queue_kinds for this many attempts at most; a
#: later attempt waits as the last one written.
MAX_DELAYS_WRITTEN = 100
#: The longest a retry waits, a century: a delay that grows without end
#: (a retry function tenfold an attempt) would put run_at past the end of
#: PostgreSQL's calendar, and fail the write of every outcome beside it.
#: The schema's job_queue_retry_delay (migrations/0016) holds the same.
MAX_DELAY_SECONDS = 100 * 365 * 86400.0


@dataclasses.dataclass(frozen=True)
class Retry:
    """Exponential backoff: ``base`` seconds after the first failed
    attempt, doubling after each next one, never above ``cap``; then up to
    ``jitter`` of it (a share, 0 to 1) taken off at random."""

    base: float = DEFAULT_BASE_SECONDS
    cap: float = DEFAULT_CAP_SECONDS
    jitter: float = DEFAULT_JITTER

    def __post_init__(self) -> None:
        for name in ("base", "cap", "jitter"):
            value = getattr(self, name)
            if (not isinstance(value, (int, float)) or isinstance(value, bool)
                    or not math.isfinite(value) or value < 0):
                raise ValueError(f"Retry's {name} must be a finite number >= 0, got {value!r}")
        if self.cap < self.base:
            raise ValueError(f"Retry's cap ({self.cap:g}) is below its base ({self.base:g})")
        if self.jitter > 1:
            raise ValueError(f"Retry's jitter is a share from 0 to 1, got {self.jitter!r}")

    def nominal(self, attempt: int) -> float:
        """The delay after failed attempt ``attempt`` (1-based), before jitter."""
        return min(self.cap, MAX_DELAY_SECONDS, self.base * 2 ** min(max(attempt - 1, 0), 32))

    def delay(self, attempt: int) -> float:
        nominal = self.nominal(attempt)
        return nominal - random.uniform(0, nominal * self.jitter)


#: ``retry=``: a Retry, or a function of the failed attempt (1-based) that
#: returns the seconds to wait, used as it is (no jitter added).
Backoff = Union[Retry, Callable[[int], float]]


@dataclasses.dataclass(frozen=True)
class Policy:
    """What ``@job`` says of a kind's attempts and defaults; None: the
    fleet's (or, for queue and priority, the schema's)."""

    max_attempts: int | None = None
    retry: Backoff | None = None
    #: Exceptions that end the job failed at once, as PermanentFailure does.
    no_retry_for: tuple[type[BaseException], ...] = ()
    queue: str | None = None
    priority: int | None = None

    def delay(self, attempt: int, fleet: Retry) -> float:
        """Seconds before the attempt after failed attempt ``attempt``."""
        retry = fleet if self.retry is None else self.retry
        if isinstance(retry, Retry):
            return retry.delay(attempt)
        try:
            return _seconds(retry(attempt), attempt)
        except Exception as exc:  # noqa: BLE001 - the app's function, whatever it does
            # Checked at import for the kind's own attempts; a row that
            # allows more may reach one the function refuses.
            log.warning("the retry function %r failed for attempt %d (%s); the fleet's delay"
                        " applies", retry, attempt, exc)
            return fleet.delay(attempt)

    def gives_up_on(self, error: BaseException) -> bool:
        return bool(self.no_retry_for) and isinstance(error, self.no_retry_for)

    def delays_written(self, fleet: Retry) -> tuple[list[float], float]:
        """(the delay after each failed attempt, before jitter; the jitter)
        as job_queue_kinds keeps them for the rescuer and the reaper: the
        kind's, or ``fleet``'s for a kind without its own."""
        attempts = min(self.max_attempts or DEFAULT_MAX_ATTEMPTS, MAX_DELAYS_WRITTEN)
        retry = fleet if self.retry is None else self.retry
        if isinstance(retry, Retry):
            return [retry.nominal(a) for a in range(1, attempts + 1)], retry.jitter
        return [_seconds(retry(a), a) for a in range(1, attempts + 1)], 0.0


def _seconds(seconds: object, attempt: int) -> float:
    if (not isinstance(seconds, (int, float)) or isinstance(seconds, bool)
            or not math.isfinite(seconds) or seconds < 0):
        raise ValueError(f"the retry function returned {seconds!r} for attempt {attempt};"
                         " it must return a finite number of seconds >= 0")
    return min(float(seconds), MAX_DELAY_SECONDS)


#: The policy of a kind that says nothing.
FLEET = Policy()


def check(kind: str, max_attempts: object, retry: object, no_retry_for: object,
          queue: object, priority: object) -> Policy:
    """``@job``'s policy arguments as a Policy; a ValueError naming the kind
    for one that cannot work, raised at import."""
    if max_attempts is not None and (not isinstance(max_attempts, int)
                                     or isinstance(max_attempts, bool) or max_attempts < 1):
        raise ValueError(f"max_attempts of {kind!r} must be a whole number of at least 1,"
                         f" got {max_attempts!r}")
    if retry is not None and not isinstance(retry, Retry) and not callable(retry):
        raise ValueError(f"retry of {kind!r} must be a Retry or a function of the attempt,"
                         f" got {retry!r}")
    if isinstance(no_retry_for, type):
        no_retry_for = (no_retry_for,)
    if not (isinstance(no_retry_for, tuple) and all(
            isinstance(e, type) and issubclass(e, BaseException) for e in no_retry_for)):
        raise ValueError(f"no_retry_for of {kind!r} must be a tuple of exception classes,"
                         f" got {no_retry_for!r}")
    if queue is not None and (not isinstance(queue, str) or not queue):
        raise ValueError(f"queue of {kind!r} must be a non-empty str, got {queue!r}")
    if priority is not None and (not isinstance(priority, int) or isinstance(priority, bool)
                                 or not -32768 <= priority <= 32767):
        raise ValueError(f"priority of {kind!r} must be a whole number that fits a smallint,"
                         f" got {priority!r}")
    policy = Policy(max_attempts, retry, no_retry_for, queue, priority)
    try:
        policy.delays_written(Retry())  # a retry function that fails, fails at import
    except Exception as exc:
        raise ValueError(f"retry of {kind!r}: {exc}") from None
    return policy
