"""testing.drain against PostgreSQL: a test database's due jobs run through
the real claims, their rows left as a worker leaves them. The handlers are
those of tests/apps/handlers_under_test.py."""

import pytest

import tests.apps.handlers_under_test as app
from motir_supervisor import db, testing

pytestmark = pytest.mark.usefixtures("handler_runs")


def _row(sql, job_id):
    return sql.rows("SELECT state, attempts, run_at > now(), last_error IS NOT NULL, checkpoint"
                    " FROM job_queue WHERE id = %s", (job_id,))[0]


def test_drain_runs_the_due_jobs_and_leaves_the_rows_as_a_worker_would(store, sql):
    ok, _ = store.enqueue("helper_ok", {"n": 1})
    steps, _ = store.enqueue("helper_steps", {"steps": 2})
    flaky, _ = store.enqueue("helper_flaky", {"succeed_on_attempt": 2})
    permanent, _ = store.enqueue("helper_permanent")
    later, _ = store.enqueue("helper_ok", {"n": 2}, delay_seconds=3600)
    outcomes = testing.drain(store)
    assert sorted((o.job_id, o.outcome) for o in outcomes) == sorted(
        [(ok, "succeeded"), (steps, "succeeded"), (flaky, "retry"), (permanent, "failed")])
    assert _row(sql, ok) == ("succeeded", 1, False, False, None)
    assert _row(sql, steps) == ("succeeded", 1, False, False, {"step": 2})
    # The worker's retry delay: pending, its attempt spent, due later.
    assert _row(sql, flaky) == ("pending", 1, True, True, None)
    assert _row(sql, permanent) == ("failed", 1, False, True, None)
    assert _row(sql, later) == ("pending", 0, True, False, None)
    assert testing.drain(store) == []
    # What a handler returned is the row's output, as a worker stores it.
    assert sql.rows("SELECT id, output FROM job_queue WHERE output IS NOT NULL") == [
        (ok, {"n": 1})]


def test_drain_with_no_retry_delay_runs_a_retry_again_until_it_succeeds(database_url, sql, store):
    flaky, _ = store.enqueue("helper_flaky", {"succeed_on_attempt": 3})
    snoozed, _ = store.enqueue("helper_snooze", {"seconds": 600}, queue="other")
    outcomes = testing.drain(database_url, queues=["default"], retry_base_seconds=0)
    assert [(o.job_id, o.outcome) for o in outcomes] == [
        (flaky, "retry"), (flaky, "retry"), (flaky, "succeeded")]
    assert app.RUNS == [("helper_flaky", flaky, 1), ("helper_flaky", flaky, 2),
                        ("helper_flaky", flaky, 3)]
    assert _row(sql, flaky) == ("succeeded", 3, False, False, None)  # success clears it
    assert _row(sql, snoozed)[:2] == ("pending", 0)
    # The snooze hands its attempt back and is due in 600 s: one run only.
    assert [o.outcome for o in testing.drain(store, queues=["other"])] == ["snoozed"]
    assert _row(sql, snoozed)[:3] == ("pending", 0, True)


def test_drain_stops_at_max_jobs_and_refuses_unknown_kinds(store, sql):
    for n in range(3):
        store.enqueue("helper_ok", {"n": n})
    assert len(testing.drain(store, max_jobs=2)) == 2
    assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'pending'") == 1
    unknown, _ = store.enqueue("not_registered_anywhere")
    with pytest.raises(testing.UnknownKind, match="not_registered_anywhere"):
        testing.drain(store)
    assert _row(sql, unknown)[:2] == ("pending", 0)


def test_drain_claims_limited_kinds_within_their_limit(store, sql):
    store.sync_limits({"helper_limited": db.Limits(1)})
    ids = [store.enqueue("helper_limited", {"n": n})[0] for n in range(2)]
    assert sql.value("SELECT bool_and(limited) FROM job_queue") is True
    outcomes = testing.drain(store)
    assert [(o.job_id, o.outcome) for o in outcomes] == [(i, "succeeded") for i in ids]
    assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'succeeded'") == 2


def test_drain_completes_a_job_in_its_handler_s_transaction(store, sql):
    from tests.apps import transactional  # noqa: F401 - registers the kind

    sql.rows("CREATE TABLE test_effects (job_id bigint NOT NULL, attempt int NOT NULL)")
    job_id, _ = store.enqueue("transactional", {})
    [outcome] = testing.drain(store)
    assert outcome.outcome == "succeeded"
    [(job_xmin, effect_xmin)] = sql.rows(
        "SELECT j.xmin::text, e.xmin::text FROM job_queue j JOIN test_effects e"
        " ON e.job_id = j.id WHERE j.id = %s", (job_id,))
    assert job_xmin == effect_xmin
    assert sql.rows("SELECT state, locked_by FROM job_queue") == [("succeeded", None)]
