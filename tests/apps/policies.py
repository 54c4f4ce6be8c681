"""Kinds with a policy of their own (``@job(max_attempts=..., retry=...,
no_retry_for=..., queue=..., priority=...)``), for
tests/e2e/test_kind_policies.py. Each records its start in test_executions
(see tests/apps/sample.py)."""

import os
import signal

from motir_supervisor import Retry, job
from tests.apps.sample import _record_start


class Declined(Exception):
    """A partner's answer that no retry changes."""


@job("policy_flaky", max_attempts=2, retry=Retry(base=0.2, cap=0.2), queue="billing",
     priority=-3)
def flaky(j):
    _record_start(j)
    raise RuntimeError("the partner is down")


@job("policy_declined", no_retry_for=(Declined,), retry=Retry(base=0.2, cap=0.2))
def declined(j):
    _record_start(j)
    raise Declined("card declined")


#: The delay after each attempt of policy_kills_its_worker, without jitter.
KILLER_DELAY_SECONDS = 3.0


@job("policy_kills_its_worker", max_attempts=3,
     retry=Retry(base=KILLER_DELAY_SECONDS, cap=KILLER_DELAY_SECONDS, jitter=0))
def kills_its_worker(j):
    """What the kernel's OOM killer does, every time: SIGKILL."""
    _record_start(j)
    os.kill(os.getpid(), signal.SIGKILL)
