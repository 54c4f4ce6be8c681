"""The error history against PostgreSQL: every way an attempt fails (a
handler's failure, a dead worker, a timeout, a lapsed lease) appends an
entry to the row's errors, which keeps the first and the latest ones; a
snooze, a success and a retry add none and keep what is there."""

import pytest

import tests.apps.handlers_under_test as app
from motir_supervisor import db, outcomes, testing
from motir_supervisor.ipc import ledger
from motir_supervisor.maintenance.reaper import Reaper
from motir_supervisor.supervisor.rescuer import Rescuer

#: The list's bound, as migrations/0017 keeps it: the first and the latest 19.
KEPT = 20


def _errors(sql, job_id):
    return sql.value("SELECT errors FROM job_queue WHERE id = %s", (job_id,))


def _failure(message):
    def deep(n):
        if n == 0:
            raise ValueError(message)
        deep(n - 1)
    try:
        deep(3)
    except ValueError as exc:
        return outcomes.describe_failure(exc)


def _fail_once(sql, store, job_id, error, **outcome):
    store.claim_due_jobs("w", 10, 30, None)
    written = store.record_outcomes("w", [db.Outcome(job_id, error, **outcome)])
    sql.rows("UPDATE job_queue SET run_at = now() WHERE id = %s AND state = 'pending'",
             (job_id,))
    return written[job_id]


def test_each_failed_attempt_adds_its_error_line_and_traceback(sql, store):
    job_id = sql.value("INSERT INTO job_queue (kind, max_attempts) VALUES ('x', 2) RETURNING id")
    assert _errors(sql, job_id) is None
    first, second = _failure("partner answered 503"), _failure("partner\nanswered 500")
    assert _fail_once(sql, store, job_id, first) == "pending"
    assert _fail_once(sql, store, job_id, second) == "failed"
    history = _errors(sql, job_id)
    assert [(e["attempt"], e["error"]) for e in history] == [
        (1, "ValueError: partner answered 503"), (2, "ValueError: partner\nanswered 500")]
    for entry, text in zip(history, (first, second)):
        assert entry["traceback"].startswith('  File "')
        assert "in deep" in entry["traceback"]
        assert f"{entry['error']}\nTraceback (innermost last):\n{entry['traceback']}" == text
    assert history[0]["at"] <= history[1]["at"]
    # last_error is the latest whole text, as before.
    assert sql.value("SELECT last_error FROM job_queue WHERE id = %s", (job_id,)) == second


def test_a_snooze_adds_nothing_and_a_success_keeps_the_history(sql, store):
    job_id = sql.value("INSERT INTO job_queue (kind) VALUES ('x') RETURNING id")
    _fail_once(sql, store, job_id, "RuntimeError: no")
    assert _fail_once(sql, store, job_id, None, retry_in_seconds=0, snoozed=True) == "pending"
    assert [e["attempt"] for e in _errors(sql, job_id)] == [1]
    store.claim_due_jobs("w", 10, 30, None)
    assert store.record_successes("w", [job_id]) == {job_id}
    row = sql.rows("SELECT state, last_error, errors FROM job_queue WHERE id = %s", (job_id,))[0]
    assert row[:2] == ("succeeded", None)
    assert [(e["attempt"], e["error"], e["traceback"]) for e in row[2]] == [
        (1, "RuntimeError: no", None)]


def test_the_list_keeps_the_first_error_and_the_latest_ones(sql, store):
    job_id = sql.value("INSERT INTO job_queue (kind, max_attempts) VALUES ('x', 100)"
                       " RETURNING id")
    for attempt in range(1, KEPT + 6):
        _fail_once(sql, store, job_id, f"RuntimeError: attempt {attempt}")
    kept = [e["attempt"] for e in _errors(sql, job_id)]
    assert kept == [1, *range(7, KEPT + 6)]
    assert len(kept) == KEPT


def test_a_retried_job_keeps_its_history(sql, store):
    job_id = sql.value("INSERT INTO job_queue (kind, max_attempts) VALUES ('x', 1) RETURNING id")
    assert _fail_once(sql, store, job_id, "RuntimeError: first") == "failed"
    assert store.retry_job(job_id).changed
    assert _fail_once(sql, store, job_id, "RuntimeError: after the retry") == "failed"
    assert [(e["attempt"], e["error"]) for e in _errors(sql, job_id)] == [
        (1, "RuntimeError: first"), (1, "RuntimeError: after the retry")]


def test_a_failure_while_cancelling_is_kept_too(sql, store):
    job_id = sql.value("INSERT INTO job_queue (kind) VALUES ('x') RETURNING id")
    store.claim_due_jobs("w", 1, 30, None)
    store.cancel_job(job_id)
    assert store.record_outcomes("w", [db.Outcome(job_id, "RuntimeError: stopped")]) == {
        job_id: "cancelled"}
    assert [e["error"] for e in _errors(sql, job_id)] == ["RuntimeError: stopped"]


def test_a_dead_workers_run_and_a_timed_out_one_add_their_errors(sql, store):
    killed, timed_out, untouched = (
        sql.value("INSERT INTO job_queue (kind) VALUES ('x') RETURNING id") for _ in range(3))
    store.claim_due_jobs("dead:1", 3, 30, None)
    entries = ledger.Ledger(4)
    entries.mark(entries.claim(killed), ledger.RUNNING)
    entries.mark(entries.claim(timed_out), ledger.TIMED_OUT)
    entries.claim(untouched)  # claimed, never started: back as it was
    settler = Rescuer(store, "")
    settler.queue("dead:1", "worker dead:1 was killed by signal 9", tuple(entries.entries()))
    settler.settle_due()
    assert [(e["attempt"], e["error"], e["traceback"]) for e in _errors(sql, killed)] == [
        (1, "worker dead:1 was killed by signal 9", None)]
    [entry] = _errors(sql, timed_out)
    assert entry["error"].startswith("TimeoutError: the job ran past the timeout")
    assert _errors(sql, untouched) is None


def test_a_lapsed_lease_adds_its_error(sql, store):
    job_id = sql.value("INSERT INTO job_queue (kind) VALUES ('x') RETURNING id")
    store.claim_due_jobs("gone:1", 1, 30, None)
    sql.rows("UPDATE job_queue SET lease_expires_at = now() - interval '1 s'")
    assert Reaper(store, 60, 0).run_once().expired == 1
    [entry] = _errors(sql, job_id)
    assert entry["attempt"] == 1
    assert entry["error"].startswith("lease of gone:1 expired at ")
    assert entry["traceback"] is None


@pytest.mark.usefixtures("handler_runs")
def test_a_handlers_exception_is_kept_with_its_frames(store, sql):
    flaky, _ = store.enqueue("helper_flaky", {"succeed_on_attempt": 3})
    testing.drain(store, retry_base_seconds=0)
    assert [r[2] for r in app.RUNS] == [1, 2, 3]
    history = _errors(sql, flaky)
    assert [e["attempt"] for e in history] == [1, 2]
    assert all("handlers_under_test.py" in e["traceback"] for e in history)
    assert sql.value("SELECT state FROM job_queue WHERE id = %s", (flaky,)) == "succeeded"


@pytest.mark.parametrize("name, params", [
    ("record_outcomes", {"claimant": "c", "ids": [1], "errors": ["e"], "retry_in_seconds": [1.0],
                         "permanent": [False], "snoozed": [False]}),
    ("fail_claims_of_dead", {"claimants": ["c"], "ids": [1], "error": "e"}),
    ("expire_stale_leases", {"limit": 10}),
])
def test_the_history_is_written_into_the_statements_that_append_to_it(sql, name, params):
    # A function the planner cannot inline is called row by row, each call
    # planned and run apart: the failures of a batch would pay for it.
    def plan():
        sql.rows("DEALLOCATE ALL")
        prepare, execute = db.prepared_form(name)
        sql.rows(prepare)
        return "\n".join(r[0] for r in sql.rows("EXPLAIN VERBOSE " + execute, params))

    assert "job_queue_errors_with(" in db.QUERIES[name]
    assert "job_queue_errors_with" not in plan()
    # The negative control: a STRICT one is not written in.
    sql.rows("ALTER FUNCTION job_queue_errors_with STRICT")
    assert "job_queue_errors_with(" in plan()


def test_the_history_is_compressed_with_lz4_where_the_server_has_it(sql):
    # A long history is rewritten whole at each failure; pglz made a batch
    # of failures several times slower (see migrations/0017).
    assert sql.value("SELECT attcompression FROM pg_attribute"
                     " WHERE attrelid = 'job_queue'::regclass AND attname = 'errors'") == "l"


@pytest.mark.parametrize("history", ["null", '{"note": "set by hand"}', '"text"'])
def test_a_history_that_is_not_a_list_does_not_stop_a_failure_being_written(
        sql, store, history):
    # A client's UPDATE (a JSON null from an ORM, an object) must not make
    # every write of a failure fail with it: the batch it is in would stay
    # running, and the reaper would meet the row in every batch it takes.
    job_id, other = (sql.value("INSERT INTO job_queue (kind, max_attempts) VALUES ('x', 5)"
                               " RETURNING id") for _ in range(2))
    sql.rows("UPDATE job_queue SET errors = %s::jsonb", (history,))
    store.claim_due_jobs("w", 10, 30, None)
    assert store.record_outcomes("w", [db.Outcome(job_id, "RuntimeError: no"),
                                       db.Outcome(other, "RuntimeError: no")]) == {
        job_id: "pending", other: "pending"}
    assert [e["error"] for e in _errors(sql, job_id)] == ["RuntimeError: no"]
    sql.rows("UPDATE job_queue SET run_at = now(), errors = %s::jsonb", (history,))
    store.claim_due_jobs("gone:1", 10, 30, None)
    sql.rows("UPDATE job_queue SET lease_expires_at = now() - interval '1 s'")
    assert Reaper(store, 60, 0).run_once().expired == 2
    assert [e["attempt"] for e in _errors(sql, other)] == [2]
