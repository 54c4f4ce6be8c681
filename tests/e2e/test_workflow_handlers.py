"""j.parents and j.batch in a real supervisor's handlers, plain and async:
a workflow's last step reads its parents' outputs, a batch's callback its
batch's counts, each through the worker's own connection for such reads."""

import psycopg2

from motir_supervisor import batch, workflow
from tests.apps import workflow_steps  # noqa: F401 - registers the kinds
from tests.helpers import wait_until


def test_handlers_read_their_parents_and_their_batch(sql, database_url, start_supervisor):
    conn = psycopg2.connect(database_url)
    with workflow(conn, "fan-in") as wf:
        fetch = wf.add("wf_step", {"output": "fetched"}, ref="fetch")
        parts = [wf.add("wf_step", {"output": n}, after=[fetch]) for n in range(3)]
        last = wf.add("wf_reads_upstream_async", ref="last", after=parts)
    with batch(conn, "pair", on_complete="wf_reads_upstream") as b:
        members = [b.add("wf_step", {"output": n}) for n in range(2)]
    conn.commit()
    conn.close()
    start_supervisor("--app", "tests.apps.workflow_steps", "--workers", "1",
                     "--concurrency", "4")
    wait_until(lambda: sql.value("SELECT count(*) FROM job_queue WHERE state = 'succeeded'")
               == 8, 15, message="every job to succeed")
    assert sql.value("SELECT output FROM job_queue WHERE id = %s", (last.id,)) == {
        "parents": [[p.id, p.ref, "wf_step", "succeeded", n] for n, p in enumerate(parts)],
        "batch": None}
    assert sql.value("SELECT j.output FROM job_queue_batches AS b JOIN job_queue AS j"
                     " ON j.id = b.on_complete WHERE b.id = %s", (b.id,)) == {
        "parents": [[m.id, None, "wf_step", "succeeded", n] for n, m in enumerate(members)],
        "batch": {"id": b.id, "name": "pair", "counts": {"succeeded": 2}}}
    # One connection of the worker's own for these reads, opened once asked.
    assert sql.value("SELECT count(*) FROM pg_stat_activity WHERE application_name ="
                     " 'motir-supervisor worker 1 upstream'") == 1
