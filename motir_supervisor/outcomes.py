"""How a run's end becomes an outcome: the outcomes a run can end with, the
retry delay, the stored error, the log line.

Pure functions and values: no SQL, no threads, no shared memory. A run is
decided with them (see worker.running); the worker and the supervisor write,
count and log it. The ledger's state bytes are mapped to outcomes here and
nowhere else.
"""

from __future__ import annotations

import json
import logging
import re
import traceback
from enum import StrEnum
from typing import Any, NamedTuple

from . import policy, registry
from .ipc import ledger
from .logs import LINES

log = logging.getLogger(__name__)

#: last_error keeps at most this many characters: enough for a message and
#: the innermost frames, small enough to keep rows and status output lean.
MAX_ERROR_CHARS = 4000
#: A return value stored in output takes at most this many bytes of JSON: a
#: result a caller reads, not a blob (return where a blob was put instead).
MAX_OUTPUT_BYTES = 256 * 1024
#: JSON's escape of a NUL, which jsonb refuses: an odd run of backslashes
#: before "u0000" (an even run is an escaped backslash and the plain text).
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


class Outcome(StrEnum):
    """How a run ended. Each is its own word as hooks (RunEnd.outcome),
    metrics labels and log lines give it, so ``outcome == "failed"`` holds."""

    #: The handler returned.
    SUCCEEDED = "succeeded"
    #: It raised, and attempts are left: pending again after the retry delay.
    RETRIED = "retried"
    #: Its last attempt raised, or it raised PermanentFailure.
    FAILED = "failed"
    #: It raised Snooze: pending again, its attempt handed back.
    SNOOZED = "snoozed"
    #: A deploy stopped it at a checkpoint: it runs again without spending
    #: an attempt.
    INTERRUPTED = "interrupted"
    #: It raised while an operator had asked to cancel it.
    CANCELLED = "cancelled"
    #: Its claim went back unwritten (the end of an interrupted run).
    RELEASED = "released"
    #: The claim was no longer its worker's when the outcome was written.
    LOST = "lost"
    #: A plain handler ran past its kind's timeout; its attempt fails.
    TIMED_OUT = "timed out"


#: The ledger state byte a decided outcome is kept in until it is written.
LEDGER_STATES = {Outcome.SUCCEEDED: ledger.SUCCEEDED, Outcome.RETRIED: ledger.FAILED,
                 Outcome.FAILED: ledger.FAILED, Outcome.SNOOZED: ledger.SNOOZED,
                 Outcome.INTERRUPTED: ledger.RELEASE}


class Decision(NamedTuple):
    """What a run's end means for its row."""

    #: SUCCEEDED, RETRIED, FAILED, SNOOZED or INTERRUPTED.
    outcome: Outcome
    error: str | None = None
    retry_in_seconds: float = 0.0
    permanent: bool = False
    #: One line for the log: the error's first line, or why it was released.
    summary: str = ""

    @property
    def state(self) -> int:
        """The ledger state byte that keeps it (see LEDGER_STATES)."""
        return LEDGER_STATES[self.outcome]


SUCCESS = Decision(Outcome.SUCCEEDED)


def output_json(value: Any) -> tuple[str | None, str]:
    """A handler's return value as the JSON text output stores: (the text,
    "") or, for a value that cannot be stored, (None, why not). None stores
    nothing. Whatever the value does, this returns: it is the job's result,
    never its failure."""
    if value is None:
        return None, ""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None, "it holds a lone surrogate, which is not text PostgreSQL can store"
    except BaseException as exc:  # noqa: BLE001 - a handler's object, whatever it does
        return None, f"JSON cannot hold it ({headline(exc)})"
    if size > MAX_OUTPUT_BYTES:
        return None, (f"its JSON takes {size} bytes, more than the {MAX_OUTPUT_BYTES} output"
                      " holds")
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        return None, "it holds a NUL character, which PostgreSQL's jsonb cannot store"
    return text, ""


def retry_delay(attempt: int, base: float, cap: float) -> float:
    """Seconds before retrying after failed attempt ``attempt`` (1-based),
    with the fleet's backoff: exponential, capped, with jitter over the
    upper half, so jobs that failed together (an outage) do not all come
    back in the same instant (see policy.Retry)."""
    return policy.Retry(base, max(cap, base)).delay(attempt)


def decide(error: BaseException | None, attempt: int, max_attempts: int, stopping: bool,
           retry_base: float, retry_cap: float,
           kind_policy: policy.Policy = policy.FLEET) -> Decision:
    """What a run of attempt ``attempt`` of ``max_attempts`` that raised
    ``error`` (None: it returned) comes to; ``stopping``: its worker was
    stopping, so an Interrupted is a checkpoint's, not a failure. The delay
    before a retry is ``kind_policy``'s, or the fleet's (``retry_base``,
    ``retry_cap``) for a kind without one; an exception of its
    ``no_retry_for`` fails the job at once."""
    if error is None:
        return SUCCESS
    try:
        return _decide(error, attempt, max_attempts, stopping, kind_policy,
                       policy.Retry(retry_base, max(retry_cap, retry_base)))
    except BaseException as broken:  # noqa: BLE001 - a handler's object, whatever it does
        # Whatever the exception does when it is read, it fails its own run:
        # a decision that raised would end the thread deciding it.
        text = storable(f"{_name_of(error)}: the handler's exception could not be read"
                        f" ({_name_of(broken)})")
        return Decision(Outcome.FAILED if attempt >= max_attempts else Outcome.RETRIED, text,
                        retry_delay(attempt, retry_base, retry_cap), summary=text)


def _decide(error: BaseException, attempt: int, max_attempts: int, stopping: bool,
            kind_policy: policy.Policy, fleet: policy.Retry) -> Decision:
    if isinstance(error, registry.Snooze):
        return Decision(Outcome.SNOOZED, retry_in_seconds=error.seconds,
                        summary=f"due again in {error.seconds:g}s")
    if isinstance(error, registry.Interrupted):
        if stopping:
            return Decision(Outcome.INTERRUPTED, summary="its handler stopped at a checkpoint")
        error = RuntimeError("the handler raised Interrupted although the worker was not"
                             " stopping; counted as a failed attempt")
    permanent = (isinstance(error, registry.PermanentFailure)
                 or kind_policy.gives_up_on(error))
    # A last attempt keeps its delay too: should an operator have raised the
    # row's max_attempts meanwhile, record_outcomes makes it a retry.
    return Decision(Outcome.FAILED if permanent or attempt >= max_attempts else Outcome.RETRIED,
                    describe_failure(error),
                    0.0 if permanent else kind_policy.delay(attempt, fleet), permanent,
                    first_line(error))


def describe_failure(exc: BaseException) -> str:
    """The exception's type and message first, then the innermost frames.

    Made storable whatever the exception holds: PostgreSQL text takes no NUL
    and no lone surrogate (a file name that was not UTF-8), and one bad
    message must not keep a whole batch's outcomes out of the database.
    """
    head = storable(headline(exc)[: MAX_ERROR_CHARS // 4])[: MAX_ERROR_CHARS // 4]
    try:
        frames = storable("".join(traceback.format_tb(exc.__traceback__)))
    except BaseException as inner:  # noqa: BLE001 - a handler's object, whatever it does
        frames = f"(its traceback could not be rendered: {_name_of(inner)})\n"
    room = MAX_ERROR_CHARS - len(head) - len("\nTraceback (innermost last):\n")
    if len(frames) > room:
        frames = "..." + frames[-(room - 3):]
    return f"{head}\nTraceback (innermost last):\n{frames}" if frames else head


def storable(text: str) -> str:
    return text.replace("\0", "\\0").encode("utf-8", "backslashreplace").decode("utf-8")


def first_line(error: BaseException | None) -> str:
    """The log's word on a failure: the first line of its headline, cut as
    the stored error's head is."""
    if error is None:
        return ""
    line = headline(error)[: MAX_ERROR_CHARS // 4]
    return (line.splitlines() or [""])[0]


def headline(exc: BaseException) -> str:
    """``Type: message``, whatever the exception does when it is rendered: a
    handler's exception whose ``__str__`` raises (a library's bug, one built
    with the wrong arguments) is its own job's failure, never its worker's."""
    try:
        message = str(exc)
        if type(message) is not str:  # a __str__ that returns a str of its own kind
            message = str.__str__(message)
    except BaseException as inner:  # noqa: BLE001 - a handler's object, whatever it does
        message = f"(its text could not be rendered: {_name_of(inner)})"
    return f"{_name_of(exc)}: {message}"


def _name_of(exc: BaseException) -> str:
    try:
        name = type(exc).__name__
        return name if type(name) is str else "an exception"
    except BaseException:  # noqa: BLE001 - a handler's class, whatever it does
        return "an exception"


def outcome_line(job_id: int, kind: str, attempt: int, max_attempts: int, outcome: Outcome,
                 seconds: float, detail: str = "") -> str:
    return (f"job {job_id} {kind} attempt {attempt}/{max_attempts} {outcome}"
            f" in {seconds:.3f}s{': ' + detail if detail else ''}")


#: Outcomes that are the job's normal course, logged at INFO; the others
#: (a retry, a failure, a lost claim) at WARNING.
EXPECTED_OUTCOMES = frozenset({Outcome.SNOOZED})


def outcome_of(state: str | None, snoozed: bool) -> Outcome:
    """A written run's outcome, from the state its row was left in: None or
    'running' when the claim was no longer the writer's (the run was lost)."""
    if state == "pending":
        return Outcome.SNOOZED if snoozed else Outcome.RETRIED
    return Outcome.LOST if state in (None, "running") else Outcome(state)


def written_outcome(state: str | None, entry: ledger.Entry) -> Outcome:
    """outcome_of for a run its ledger entry decided (an exited worker's)."""
    return outcome_of(state, entry.state == ledger.SNOOZED)


def log_outcome(line: str, outcome: Outcome) -> None:
    """One line per run that did not simply succeed."""
    log.log(logging.INFO if outcome in EXPECTED_OUTCOMES else logging.WARNING, "%s", line)


def log_successes(lines: list[str]) -> None:
    """The lines of runs that succeeded, in one log record for all of them
    (see logs.LINES): a busy worker records hundreds at a time."""
    if lines and log.isEnabledFor(logging.INFO):
        log.info("%s", "\n".join(lines), extra={LINES: lines})
