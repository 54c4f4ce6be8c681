"""Kinds for the tests of jobs that wait for others: a step that returns its
payload's "output" (or fails for good when told to)."""

from motir_supervisor import PermanentFailure, job


@job("wf_step")
def step(j):
    if j.payload.get("fail"):
        raise PermanentFailure("told to fail")
    return j.payload.get("output")
