"""Hooks and outputs in a real supervisor: around every run of def and async
handlers, for each way a run ends; hooks that raise; the return values a
run stores, and the ones it cannot."""

import json
import signal

import pytest

from tests.helpers import enqueue, state_of, wait_until

KINDS = ["observed", "observed_async"]
#: The values of tests/apps/observed.py's UNSTORABLE (that module is not
#: imported here: it registers hooks in whatever process imports it).
UNSTORABLE = ["object", "nan", "nul", "surrogate", "big"]


def read_notes(path):
    """What the hooks wrote so far, in order."""
    try:
        with open(path) as log:
            return [json.loads(line) for line in log if line.endswith("\n")]
    except FileNotFoundError:
        return []


@pytest.fixture
def notes_path(tmp_path):
    return tmp_path / "hooks.jsonl"


def start_observed(start_supervisor, notes_path, *args):
    return start_supervisor("--app", "tests.apps.observed", "--workers", "1",
                            "--retry-base-seconds", "3600", *args,
                            env={"OBSERVED_LOG": str(notes_path)})


def events_of(notes_path, job_id):
    return [note for note in read_notes(notes_path) if note.get("id") == job_id]


def one(events, name):
    [event] = [e for e in events if e["event"] == name]
    return event


@pytest.mark.parametrize("kind", KINDS)
def test_hooks_wrap_each_outcome_and_see_what_it_returned(sql, start_supervisor, notes_path,
                                                          kind):
    jobs = {
        "value": enqueue(sql, kind, json.dumps({"do": "return", "value": {"sent": 3}}))[0],
        "none": enqueue(sql, kind, json.dumps({"do": "return", "value": None}))[0],
        "retried": enqueue(sql, kind, json.dumps({"do": "raise"}), max_attempts=3)[0],
        "failed": enqueue(sql, kind, json.dumps({"do": "raise"}), max_attempts=1)[0],
        "permanent": enqueue(sql, kind, json.dumps({"do": "permanent"}))[0],
        "snoozed": enqueue(sql, kind, json.dumps({"do": "snooze"}))[0],
    }
    start_observed(start_supervisor, notes_path)
    wait_until(lambda: sql.value("SELECT count(*) FROM job_queue WHERE state <> 'running'"
                                 " AND (state <> 'pending' OR attempts > 0"
                                 "      OR run_at > now() + interval '1 minute')") == len(jobs),
               20, message="every job to end its first run")
    expected = {"value": ("succeeded", "succeeded"), "none": ("succeeded", "succeeded"),
                "retried": ("retried", "pending"), "failed": ("failed", "failed"),
                "permanent": ("failed", "failed"), "snoozed": ("snoozed", "pending")}
    for name, job_id in jobs.items():
        outcome, state = expected[name]
        assert state_of(sql, job_id) == state, name
        # Written before the outcome: the row's state says the hooks ran.
        events = events_of(notes_path, job_id)
        assert [e["event"] for e in events] == ["start", "handler", "end", "around"], name
        # The around hook's context is the handler's.
        assert one(events, "handler")["context"] == f"set around job {job_id}"
        for ended in (one(events, "end"), one(events, "around")):
            assert ended["outcome"] == outcome, name
            assert ended["timed_out"] is False
            assert ended["error"] == {"retried": "ValueError", "failed": "ValueError",
                                      "permanent": "PermanentFailure",
                                      "snoozed": "Snooze"}.get(name), name
        assert one(events, "end")["output"] == ({"sent": 3} if name == "value" else None)
    assert sql.rows("SELECT id, output FROM job_queue WHERE output IS NOT NULL") == [
        (jobs["value"], {"sent": 3})]
    # Each worker said it started.
    assert [n["index"] for n in read_notes(notes_path) if n["event"] == "worker_start"] == [1]


@pytest.mark.parametrize("kind", KINDS)
def test_a_run_past_its_timeout_ends_its_hooks_as_timed_out(sql, start_supervisor, notes_path,
                                                            kind):
    [job_id] = enqueue(sql, kind, json.dumps({"do": "sleep", "seconds": 3}), max_attempts=3)
    start_observed(start_supervisor, notes_path)
    wait_until(lambda: any(e["event"] == "end" for e in events_of(notes_path, job_id)), 15,
               message="the run's end to be told")
    events = events_of(notes_path, job_id)
    assert [e["event"] for e in events[:3]] == ["start", "handler", "end"]
    end = events[2]
    assert (end["outcome"], end["error"], end["timed_out"]) == ("retried", "TimeoutError", True)
    # The attempt is spent with a TimeoutError (the job may be running again).
    wait_until(lambda: sql.value("SELECT last_error LIKE 'TimeoutError: %%' FROM job_queue"
                                 " WHERE id = %s", (job_id,)), 15,
               message="the attempt to fail as a timeout")
    if kind == "observed_async":
        # The cancelled task ran the around hook's end in it.
        around = events[3]
        assert (around["outcome"], around["timed_out"]) == ("retried", True)


def test_a_deploy_interrupts_runs_and_their_hooks_say_so(sql, start_supervisor, notes_path):
    ids = [enqueue(sql, kind, json.dumps({"do": "wait_for_stop"}))[0] for kind in KINDS]
    supervisor = start_observed(start_supervisor, notes_path)
    wait_until(lambda: all(any(e["event"] == "handler" for e in events_of(notes_path, i))
                           for i in ids), 15, message="both runs to start")
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(20) == 0
    for job_id in ids:
        events = events_of(notes_path, job_id)
        assert one(events, "end")["outcome"] == "interrupted"
        assert one(events, "around")["outcome"] == "interrupted"
        assert sql.rows("SELECT state, attempts FROM job_queue WHERE id = %s",
                        (job_id,)) == [("pending", 0)]
    assert [n["index"] for n in read_notes(notes_path) if n["event"] == "worker_exit"] == [1]


def test_a_hook_that_raises_costs_no_outcome_and_no_worker(sql, start_supervisor, notes_path):
    broken = {(where, kind): enqueue(sql, kind, json.dumps({"do": "return", "value": where,
                                                            "break": where}))[0]
              for where in ("before", "after", "end") for kind in KINDS}
    supervisor = start_observed(start_supervisor, notes_path)
    wait_until(lambda: sql.value("SELECT count(*) FROM job_queue WHERE state = 'succeeded'")
               == len(broken), 15, message="every job to succeed")
    [worker] = supervisor.worker_pids()
    for (where, _), job_id in broken.items():
        assert sql.value("SELECT output FROM job_queue WHERE id = %s", (job_id,)) == where
        events = events_of(notes_path, job_id)
        # A hook broken before its yield is left out of that run, and only it.
        assert one(events, "handler")["context"] == (
            None if where == "before" else f"set around job {job_id}")
        assert one(events, "end")["outcome"] == "succeeded"
    output = supervisor.output()
    assert "hook around in job" in output and "raised before the handler" in output
    assert "raised after the handler; the run's outcome stands" in output
    assert "hook ended in job" in output
    # The worker that ran them all is the one still serving.
    [after] = enqueue(sql, "observed", json.dumps({"do": "return", "value": 1}))
    wait_until(lambda: state_of(sql, after) == "succeeded", 10)
    assert supervisor.worker_pids() == [worker]
    assert {e["pid"] for e in read_notes(notes_path) if e["event"] == "handler"} == {worker}


@pytest.mark.parametrize("kind", KINDS)
def test_a_value_output_cannot_hold_is_logged_and_the_job_succeeds(sql, start_supervisor,
                                                                   notes_path, kind):
    # In one write beside values it can hold: one bad value must not cost
    # the others theirs.
    bad = {what: enqueue(sql, kind, json.dumps({"do": "return_unstorable", "what": what}))[0]
           for what in UNSTORABLE}
    good = enqueue(sql, kind, json.dumps({"do": "return", "value": ["ok", 1.5, None]}), count=5)
    supervisor = start_observed(start_supervisor, notes_path)
    wait_until(lambda: sql.value("SELECT count(*) FROM job_queue WHERE state = 'succeeded'")
               == len(bad) + len(good), 15, message="every job to succeed")
    assert sql.value("SELECT count(*) FROM job_queue WHERE output IS NULL") == len(bad)
    assert {row[0] for row in sql.rows(
        "SELECT output::text FROM job_queue WHERE id = ANY(%s)", (good,))} == {
            '["ok", 1.5, null]'}
    output = supervisor.output()
    for what, job_id in bad.items():
        assert f"job {job_id} {kind} returned a value output cannot store" in output, what
    for why in ("JSON cannot hold it", "NUL character", "lone surrogate",
                "more than the 262144 output holds"):
        assert why in output


def test_sentry_hears_of_a_failed_job_not_of_a_retry_that_later_succeeds(
        sql, start_supervisor, tmp_path):
    events_path = tmp_path / "sentry.jsonl"
    [healed] = enqueue(sql, "reported", json.dumps({"succeed_on_attempt": 2}))
    [doomed] = enqueue(sql, "reported", json.dumps({"succeed_on_attempt": 9}), max_attempts=2)
    supervisor = start_supervisor("--app", "tests.apps.reported", "--workers", "1",
                                  "--retry-base-seconds", "0.1",
                                  env={"SENTRY_EVENTS": str(events_path)})
    wait_until(lambda: state_of(sql, healed) == "succeeded" and state_of(sql, doomed) == "failed",
               20, message="one job to heal, the other to fail")
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(20) == 0
    events = read_notes(events_path)
    [event] = [e for e in events if e.get("exception")]
    assert event["tags"] == {"job.kind": "reported", "job.queue": "default"}
    assert event["contexts"]["job"] == {"id": doomed, "kind": "reported", "attempt": 2,
                                        "max_attempts": 2}
    [exception] = event["exception"]["values"]
    assert exception["type"] == "ValueError"
    assert exception["value"] == f"attempt 2 of job {doomed} went wrong"
    # No event for the retries, the healed job's nor the doomed job's first.
    assert len(events) == 1, events


def test_a_value_the_database_refuses_costs_only_its_output(sql, start_supervisor, notes_path):
    # The values written beside it keep theirs; the runs that returned
    # nothing succeed as ever.
    [deep] = enqueue(sql, "observed", json.dumps({"do": "return_deep"}))
    good = enqueue(sql, "observed", json.dumps({"do": "return", "value": 7}), count=3)
    plain = enqueue(sql, "observed", json.dumps({"do": "return", "value": None}), count=3)
    supervisor = start_observed(start_supervisor, notes_path)
    wait_until(lambda: sql.value("SELECT count(*) FROM job_queue WHERE state = 'succeeded'")
               == 7, 15, message="every job to succeed")
    assert sql.rows("SELECT id, output FROM job_queue WHERE output IS NOT NULL ORDER BY id") == [
        (job_id, 7) for job_id in good]
    assert f"the database refused the output of job {deep} observed" in supervisor.output()
    assert sql.value("SELECT count(*) FROM job_queue WHERE id = ANY(%s) AND output IS NULL",
                     (plain,)) == 3
