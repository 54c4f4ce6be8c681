"""A kind's retry policy: its delays, its failures not retried, and how
``@job``, outcomes.decide and testing.run_job apply it."""

import pytest

from motir_supervisor import PermanentFailure, Retry, job, outcomes, registry, testing
from motir_supervisor.outcomes import Outcome
from motir_supervisor.policy import DEFAULT_MAX_ATTEMPTS, FLEET, MAX_DELAY_SECONDS, Policy


class Declined(Exception):
    pass


@job("policy_unit_charge", max_attempts=3, retry=Retry(base=30, cap=100, jitter=0),
     no_retry_for=(Declined,), queue="billing", priority=-1)
def charge(j):
    raise j.payload["raise"]


@job("policy_unit_plain")
def plain(j):
    raise RuntimeError("down")


@job("policy_unit_stepped", retry=lambda attempt: 60 * attempt)
def stepped(j):
    raise RuntimeError("down")


def test_retry_doubles_from_base_to_cap_and_jitters_within_its_share():
    retry = Retry(base=10, cap=50, jitter=0.25)
    assert [retry.nominal(a) for a in (1, 2, 3, 4, 5)] == [10, 20, 40, 50, 50]
    delays = [retry.delay(2) for _ in range(200)]
    assert all(15 <= d <= 20 for d in delays) and len(set(delays)) > 1
    assert Retry(base=7, cap=7, jitter=0).delay(9) == 7
    assert Retry().nominal(10_000) == Retry().cap  # no overflow on huge attempt counts


@pytest.mark.parametrize("arguments, message", [
    ({"base": -1}, "base must be a finite number"), ({"base": 10, "cap": 5}, "below its base"),
    ({"jitter": 2}, "share from 0 to 1"), ({"cap": float("inf")}, "cap must be a finite"),
])
def test_a_retry_that_cannot_work_is_refused(arguments, message):
    with pytest.raises(ValueError, match=message):
        Retry(**arguments)


@pytest.mark.parametrize("arguments, message", [
    ({"max_attempts": 0}, "max_attempts of 'bad' must be a whole number"),
    ({"max_attempts": True}, "max_attempts of 'bad'"),
    ({"retry": 5}, "retry of 'bad' must be a Retry or a function"),
    ({"retry": lambda attempt: -1}, "retry of 'bad': the retry function returned -1"),
    ({"no_retry_for": ("ValueError",)}, "no_retry_for of 'bad' must be a tuple"),
    ({"queue": ""}, "queue of 'bad' must be a non-empty str"),
    ({"priority": 40_000}, "priority of 'bad' must be a whole number that fits"),
])
def test_a_policy_that_cannot_work_fails_at_import_naming_its_kind(arguments, message):
    with pytest.raises(ValueError, match=message):
        job("bad", **arguments)
    assert registry.registration_for("bad") is None


def test_the_registry_keeps_each_kind_s_policy():
    policy = registry.registration_for("policy_unit_charge").policy
    assert (policy.max_attempts, policy.queue, policy.priority, policy.no_retry_for) == (
        3, "billing", -1, (Declined,))
    assert registry.registration_for("policy_unit_plain").policy == FLEET
    assert registry.policies_of_kinds()["policy_unit_charge"] is policy


def test_a_kind_without_a_policy_retries_with_the_fleet_s_delays():
    decision = outcomes.decide(RuntimeError("down"), 2, 5, False, 10, 100)
    assert decision.outcome is Outcome.RETRIED and 10 <= decision.retry_in_seconds <= 20


def test_the_kind_s_delays_and_failures_not_retried_decide_the_run():
    policy = registry.registration_for("policy_unit_charge").policy
    retried = outcomes.decide(RuntimeError("down"), 2, 3, False, 1, 1, policy)
    assert (retried.outcome, retried.retry_in_seconds) == (Outcome.RETRIED, 60)
    declined = outcomes.decide(Declined("no"), 1, 3, False, 1, 1, policy)
    assert (declined.outcome, declined.permanent) == (Outcome.FAILED, True)
    assert declined.error.startswith("Declined: no")
    # The negative control: the same exception, a kind that retries it.
    assert outcomes.decide(Declined("no"), 1, 3, False, 1, 1).outcome is Outcome.RETRIED


def test_a_retry_function_gives_the_delay_as_it_is():
    policy = registry.registration_for("policy_unit_stepped").policy
    assert outcomes.decide(RuntimeError(), 3, 25, False, 1, 1, policy).retry_in_seconds == 180


def test_no_delay_is_longer_than_a_century():
    # now() + a longer one would leave PostgreSQL's calendar.
    steep = Policy(retry=lambda attempt: 60.0 * 10 ** attempt)
    assert steep.delay(30, FLEET.retry or Retry()) == MAX_DELAY_SECONDS
    assert Retry(base=1e13, cap=1e14, jitter=0).delay(3) == MAX_DELAY_SECONDS
    assert max(steep.delays_written(Retry())[0]) == MAX_DELAY_SECONDS


def test_a_retry_function_that_fails_for_an_attempt_falls_back_to_the_fleet_s(caplog):
    policy = Policy(max_attempts=2, retry=lambda attempt: [5, 6][attempt - 1])
    decision = outcomes.decide(RuntimeError(), 3, 9, False, 10, 10, policy)
    assert decision.outcome is Outcome.RETRIED and 5 <= decision.retry_in_seconds <= 10
    assert "the retry function" in caplog.text


def test_run_job_follows_the_kind_s_policy():
    first = testing.run_job("policy_unit_charge", {"raise": RuntimeError("down")})
    assert (first.outcome, first.seconds) == ("retry", 30)
    last = testing.run_job("policy_unit_charge", {"raise": RuntimeError("down")}, attempt=3)
    assert last.outcome == "failed" and not last.decision.permanent
    declined = testing.run_job("policy_unit_charge", {"raise": Declined("no")})
    assert declined.outcome == "failed" and declined.decision.permanent
    # The run's own max_attempts, as a row that sets it.
    assert testing.run_job("policy_unit_charge", {"raise": RuntimeError("down")}, attempt=3,
                           max_attempts=4).outcome == "retry"
    assert testing.run_job("policy_unit_plain", attempt=DEFAULT_MAX_ATTEMPTS - 1).outcome == "retry"
    assert testing.run_job("policy_unit_plain", attempt=DEFAULT_MAX_ATTEMPTS).outcome == "failed"
    assert testing.run_job("policy_unit_charge", {"raise": PermanentFailure("x")}).outcome == (
        "failed")
