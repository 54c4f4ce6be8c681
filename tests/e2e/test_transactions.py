"""j.transaction() in a real supervisor: the handler's writes and its job's
success in one commit; a failure inside, or a claim lost, rolls both back;
a worker killed after the commit leaves nothing to run again."""

import json
import os
import signal

import pytest

from tests.helpers import enqueue, state_of, wait_until

EFFECTS = "CREATE TABLE test_effects (job_id bigint NOT NULL, attempt int NOT NULL)"


@pytest.fixture
def effects(sql):
    sql.rows(EFFECTS)
    return sql


def start(start_supervisor, *args):
    return start_supervisor("--app", "tests.apps.transactional", "--workers", "1",
                            "--concurrency", "2", "--retry-base-seconds", "3600", *args)


def test_the_effect_and_the_success_are_one_commit(effects, start_supervisor):
    ids = enqueue(effects, "transactional", count=5) + enqueue(effects, "transactional_async",
                                                               count=5)
    start(start_supervisor)
    wait_until(lambda: effects.value("SELECT count(*) FROM job_queue WHERE state = 'succeeded'")
               == len(ids), 15, message="every job to succeed")
    for job_id in ids:
        # The same transaction wrote both rows: the same xmin.
        [(job_xmin, effect_xmin, attempt)] = effects.rows(
            "SELECT j.xmin::text, e.xmin::text, e.attempt FROM job_queue j"
            " JOIN test_effects e ON e.job_id = j.id WHERE j.id = %s", (job_id,))
        assert job_xmin == effect_xmin and attempt == 1
    # The return value of a run that completed in its transaction is not stored.
    assert effects.value("SELECT count(*) FROM job_queue WHERE output IS NOT NULL") == 0
    # A worker holds no more transaction connections than its runs at once.
    assert effects.value("SELECT count(*) FROM pg_stat_activity WHERE application_name ="
                         " 'motir-supervisor worker 1 transaction'") <= 2


def test_a_failure_inside_rolls_the_effect_back_and_the_job_fails_as_usual(
        effects, start_supervisor):
    [job_id] = enqueue(effects, "transactional", json.dumps({"do": "raise"}), max_attempts=1)
    start(start_supervisor)
    wait_until(lambda: state_of(effects, job_id) == "failed", 15)
    assert effects.value("SELECT count(*) FROM test_effects") == 0
    assert effects.value("SELECT last_error FROM job_queue WHERE id = %s",
                         (job_id,)).startswith("ValueError: raised inside the transaction")


def test_a_claim_lost_inside_rolls_everything_back_and_the_run_is_lost(effects,
                                                                       start_supervisor):
    [job_id] = enqueue(effects, "transactional", json.dumps({"do": "lose_claim"}))
    supervisor = start(start_supervisor)
    wait_until(lambda: "the claim was no longer this worker's" in supervisor.output(), 15,
               message="the run to end as lost")
    assert effects.value("SELECT count(*) FROM test_effects") == 0
    # Left as the one who took it over has it.
    assert effects.rows("SELECT state, locked_by FROM job_queue WHERE id = %s",
                        (job_id,)) == [("running", "someone-else")]


def test_a_worker_killed_after_the_commit_leaves_nothing_to_run_again(effects, start_supervisor,
                                                                      tmp_path):
    marker = tmp_path / "committed"
    [job_id] = enqueue(effects, "transactional",
                       json.dumps({"do": "hang_after", "marker": str(marker)}))
    supervisor = start(start_supervisor)
    wait_until(lambda: marker.exists() and marker.read_text(), 15,
               message="the transaction to commit")
    worker = int(marker.read_text())
    assert state_of(effects, job_id) == "succeeded"
    os.kill(worker, signal.SIGKILL)
    # The supervisor settles what the dead worker held and forks another;
    # a job enqueued after runs there, and the first has not run again.
    wait_until(lambda: supervisor.worker_pids() and supervisor.worker_pids() != [worker], 15,
               message="a replacement worker")
    [after] = enqueue(effects, "transactional")
    wait_until(lambda: state_of(effects, after) == "succeeded", 15)
    assert effects.rows("SELECT attempt FROM test_effects WHERE job_id = %s", (job_id,)) == [(1,)]
    assert effects.rows("SELECT state, attempts FROM job_queue WHERE id = %s",
                        (job_id,)) == [("succeeded", 1)]
