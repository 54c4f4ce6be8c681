"""Kinds for the workflow and batch tests: a step that returns its payload's
"output" (or fails for good when told to), and one that returns what it read
of the jobs before it."""

from motir_supervisor import PermanentFailure, job


@job("wf_step")
def step(j):
    if j.payload.get("fail"):
        raise PermanentFailure("told to fail")
    return j.payload.get("output")


@job("wf_reads_upstream")
def reads_upstream(j):
    found = j.batch
    return {"parents": [[p.id, p.step, p.kind, str(p.state), p.output] for p in j.parents],
            "batch": None if found is None else {
                "id": found.id, "name": found.name,
                "counts": {str(state): n for state, n in found.counts.items() if n}}}


@job("wf_reads_upstream_async")
async def reads_upstream_async(j):
    return reads_upstream(j)
