"""A real supervisor process runs jobs end to end: outcomes, retries,
wake-ups, batches written and released, queues and timeouts."""

import time

from tests.helpers import enqueue, state_of, wait_until


def test_jobs_succeed_fail_and_retry(executions, start_supervisor):
    [ok] = enqueue(executions, "record")
    [flaky] = enqueue(executions, "record", '{"fail_until_attempt": 2}')
    [doomed] = enqueue(executions, "fail", max_attempts=2)
    [permanent] = enqueue(executions, "permanent")
    [unknown] = enqueue(executions, "nobody_handles_this", max_attempts=1)
    start_supervisor("--workers", "2", "--retry-base-seconds", "0.2")
    wait_until(lambda: executions.value(
        "SELECT count(*) FROM job_queue WHERE state IN ('succeeded', 'failed')") == 5,
        20, message="every job finished")
    assert state_of(executions, ok) == "succeeded"
    assert state_of(executions, flaky) == "succeeded"
    assert executions.rows("SELECT attempt FROM test_executions WHERE job_id = %s ORDER BY 1",
                           (flaky,)) == [(1,), (2,)]
    assert executions.rows("SELECT state, attempts, last_error LIKE 'ValueError: boom%%'"
                           " FROM job_queue WHERE id = %s", (doomed,)) == [("failed", 2, True)]
    assert executions.rows("SELECT state, attempts FROM job_queue WHERE id = %s",
                           (permanent,)) == [("failed", 1)]
    error = executions.value("SELECT last_error FROM job_queue WHERE id = %s", (unknown,))
    assert "nobody_handles_this" in error
    assert executions.value("SELECT count(*) FROM job_queue WHERE finished_at IS NULL"
                            " OR locked_by IS NOT NULL") == 0


def test_a_plain_insert_starts_within_milliseconds_despite_a_long_poll(executions,
                                                                       start_supervisor):
    supervisor = start_supervisor("--workers", "2", "--poll-seconds", "30")
    supervisor.wait_for_workers(2)
    # Let the workers finish their first empty polls and fall asleep.
    time.sleep(0.5)
    latencies = []
    for _ in range(5):
        [job_id] = enqueue(executions, "record")
        wait_until(lambda: state_of(executions, job_id) == "succeeded", 5, interval=0.005)
        latencies.append(executions.value(
            "SELECT extract(epoch FROM e.started_at - j.created_at) FROM test_executions e"
            " JOIN job_queue j ON j.id = e.job_id WHERE j.id = %s", (job_id,)))
    assert max(latencies) < 0.5, latencies


def test_a_delayed_job_starts_at_its_run_at_not_at_the_next_poll(executions, start_supervisor):
    supervisor = start_supervisor("--workers", "1", "--poll-seconds", "30")
    supervisor.wait_for_workers(1)
    job_id = executions.value("INSERT INTO job_queue (kind, run_at) VALUES"
                              " ('record', now() + interval '2 seconds') RETURNING id")
    wait_until(lambda: state_of(executions, job_id) == "succeeded", 10)
    late = executions.value(
        "SELECT extract(epoch FROM e.started_at - j.run_at) FROM test_executions e"
        " JOIN job_queue j ON j.id = e.job_id WHERE j.id = %s", (job_id,))
    assert 0 <= late < 0.5, late


def test_a_run_whose_claim_was_taken_over_is_not_recorded(executions, start_supervisor):
    [taken] = enqueue(executions, "record", '{"sleep": 1.5}', max_attempts=5)
    [kept] = enqueue(executions, "record", '{"sleep": 1.5}', max_attempts=5)
    supervisor = start_supervisor("--workers", "1")
    wait_until(lambda: executions.value("SELECT count(*) FROM test_executions") == 2, 10,
               message="both jobs running")
    # Another supervisor took the claim over, as after a lease that expired.
    executions.rows("UPDATE job_queue SET locked_by = 'another supervisor' WHERE id = %s",
                    (taken,))
    wait_until(lambda: state_of(executions, kept) == "succeeded", 10, message="kept succeeded")
    wait_until(lambda: f"job {taken} record attempt 1/5 lost" in supervisor.output(), 5,
               message="the taken run logged as lost")
    assert executions.rows("SELECT state, locked_by, finished_at FROM job_queue WHERE id = %s",
                           (taken,)) == [("running", "another supervisor", None)]
    assert f"job {taken} record attempt 1/5 succeeded" not in supervisor.output()


def test_a_write_of_successes_and_failures_together_records_each(executions, start_supervisor):
    # One worker claims them in batches, so its writes hold both kinds: the
    # successes go in one statement and the failures in another.
    ids = executions.rows(
        "INSERT INTO job_queue (kind, max_attempts) SELECT"
        " CASE WHEN g % 3 = 0 THEN 'fail' ELSE 'record' END, 1"
        " FROM generate_series(1, 60) AS g RETURNING id, kind")
    supervisor = start_supervisor("--workers", "1")
    wait_until(lambda: executions.value(
        "SELECT count(*) FROM job_queue WHERE state IN ('succeeded', 'failed')") == 60,
        20, message="every job finished")
    states = dict(executions.rows("SELECT id, state FROM job_queue"))
    assert {job_id: states[job_id] for job_id, _ in ids} == {
        job_id: "failed" if kind == "fail" else "succeeded" for job_id, kind in ids}
    # Each ran once: none was written twice or lost and run again.
    assert executions.rows("SELECT count(*), count(DISTINCT job_id) FROM test_executions") == [
        (60, 60)]
    assert " lost" not in supervisor.output()
    wait_until(lambda: supervisor.output().count(" succeeded in ") == 40, 5,
               message="a line per success")


def test_queues_limit_what_a_supervisor_claims(executions, start_supervisor):
    [mail] = enqueue(executions, "record", queue="mail")
    [other] = enqueue(executions, "record", queue="reports")
    start_supervisor("--workers", "1", "--queue", "mail")
    wait_until(lambda: state_of(executions, mail) == "succeeded", 10)
    assert state_of(executions, other) == "pending"


def test_a_timeout_fails_the_attempt_and_the_worker_is_replaced(executions, start_supervisor):
    [job_id] = enqueue(executions, "hang", max_attempts=1)
    supervisor = start_supervisor("--workers", "1")
    wait_until(lambda: state_of(executions, job_id) == "failed", 10)
    assert "timeout" in executions.value("SELECT last_error FROM job_queue WHERE id = %s",
                                         (job_id,))
    supervisor.wait_for_workers(1)
    [follow_up] = enqueue(executions, "record")
    wait_until(lambda: state_of(executions, follow_up) == "succeeded", 10)


def test_an_unstorable_error_message_still_fails_the_job_properly(executions, start_supervisor):
    [bad] = enqueue(executions, "fail_unstorably", max_attempts=2)
    mates = enqueue(executions, "record", count=5)
    start_supervisor("--workers", "1", "--retry-base-seconds", "0.1")
    wait_until(lambda: state_of(executions, bad) == "failed", 15)
    assert executions.value("SELECT attempts FROM job_queue WHERE id = %s", (bad,)) == 2
    assert "lone surrogate" in executions.value("SELECT last_error FROM job_queue WHERE id = %s",
                                                (bad,))
    assert all(state_of(executions, j) == "succeeded" for j in mates)
    assert executions.value("SELECT count(*) FROM test_executions WHERE job_id = ANY(%s)",
                            (mates,)) == 5


def test_a_slow_job_lets_go_of_its_batch_mates(executions, start_supervisor):
    executions.rows("INSERT INTO job_queue (kind) SELECT 'record' FROM generate_series(1, 60)")
    [slow] = enqueue(executions, "record", '{"sleep": 3}')
    executions.rows("INSERT INTO job_queue (kind) SELECT 'record' FROM generate_series(1, 60)")
    start_supervisor("--workers", "2")
    wait_until(lambda: state_of(executions, slow) == "succeeded", 20)
    slow_end = executions.value("SELECT finished_at FROM job_queue WHERE id = %s", (slow,))
    # Every other job was done well before the slow one: none waited behind it.
    assert executions.value("SELECT max(finished_at) FROM job_queue WHERE id <> %s",
                            (slow,)) < slow_end


def test_a_burst_of_slower_jobs_is_shared_by_workers_whose_batches_grew(
        executions, start_supervisor):
    supervisor = start_supervisor("--workers", "4", "--concurrency", "1")
    supervisor.wait_for_workers(4)
    # Instant jobs grow every worker's claims toward --batch-size.
    for _ in range(3):
        executions.rows("INSERT INTO job_queue (kind) SELECT 'record' FROM generate_series(1, 300)")
        wait_until(lambda: executions.value(
            "SELECT count(*) FROM job_queue WHERE state <> 'succeeded'") == 0, 20)
    executions.rows("TRUNCATE test_executions")
    executions.rows("INSERT INTO job_queue (kind, payload)"
                    " SELECT 'record', '{\"sleep\": 0.3}' FROM generate_series(1, 12)")
    wait_until(lambda: executions.value(
        "SELECT count(*) FROM job_queue WHERE state <> 'succeeded'") == 0, 20)
    per_worker = [count for _, count in executions.rows(
        "SELECT pid, count(*) FROM test_executions GROUP BY pid")]
    # One worker taking the whole burst would run all 12 one after the other
    # (3.6 s) while three others sat idle.
    assert sum(per_worker) == 12 and max(per_worker) <= 6, per_worker
    # Nor may it be handed on from one grown worker to the next: the burst
    # starts on several workers at once.
    started_at_once = executions.value(
        "SELECT count(*) FROM (SELECT pid, min(started_at) AS first FROM test_executions"
        " GROUP BY pid) AS w"
        " WHERE first < (SELECT min(started_at) FROM test_executions) + interval '0.25 s'")
    assert started_at_once >= 3, executions.rows(
        "SELECT pid, job_id, started_at::time::text FROM test_executions ORDER BY started_at")


def test_a_release_that_failed_is_tried_again_while_the_batch_runs(
        executions, start_supervisor):
    executions.rows("INSERT INTO job_queue (kind) SELECT 'record' FROM generate_series(1, 60)")
    [slow] = enqueue(executions, "record", '{"sleep": 3}')
    executions.rows("INSERT INTO job_queue (kind) SELECT 'record' FROM generate_series(1, 60)")
    start_supervisor("--workers", "2")
    wait_until(lambda: executions.value(
        "SELECT count(*) FROM test_executions WHERE job_id = %s", (slow,)) == 1, 10)
    # The workers lose their connections while the slow job runs, so the
    # release of its unstarted batch-mates (due at 0.5 s) fails at first.
    executions.rows("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name LIKE 'motir-supervisor worker %%'"
                    " AND application_name NOT LIKE '%%checkpoints'")
    wait_until(lambda: state_of(executions, slow) == "succeeded", 20)
    slow_end = executions.value("SELECT finished_at FROM job_queue WHERE id = %s", (slow,))
    # Tried again once the database answers, not only when the slow job ends.
    assert executions.value("SELECT max(finished_at) FROM job_queue WHERE id <> %s",
                            (slow,)) < slow_end
