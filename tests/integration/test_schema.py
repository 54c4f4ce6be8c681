"""The migrated schema against PostgreSQL: the columns and constraints the
code relies on, the plans of its statements, the migrations run at once by
several processes, the trigger that wakes workers, and the README's Prisma
models."""

import multiprocessing
import re

import psycopg2
import pytest

from motir_supervisor import db
from tests.helpers import ROOT, Sql, notifications, wakeup_listener

SPEC_COLUMNS = {
    "id": "bigint", "queue": "text", "kind": "text", "payload": "jsonb", "state": "text",
    "run_at": "timestamp with time zone", "attempts": "integer", "max_attempts": "integer",
    "locked_by": "text", "lease_expires_at": "timestamp with time zone", "last_error": "text",
    "created_at": "timestamp with time zone", "finished_at": "timestamp with time zone",
    "checkpoint": "jsonb", "started_at": "timestamp with time zone",
    "cancel_requested": "boolean", "priority": "smallint", "unique_key": "text",
    "limited": "boolean", "concurrency_key": "text", "parked": "boolean", "output": "jsonb",
    "trace_context": "jsonb", "errors": "jsonb", "depends_on": "ARRAY",
    "on_parent_failure": "text", "workflow_id": "bigint", "step": "text", "batch_id": "bigint",
    "has_dependents": "boolean",
}


def test_job_queue_has_every_column_of_the_spec(sql):
    columns = dict(sql.rows("SELECT column_name, data_type FROM information_schema.columns"
                            " WHERE table_name = 'job_queue'"))
    assert columns == SPEC_COLUMNS


def test_a_plain_insert_gets_the_documented_defaults(sql):
    sql.rows("INSERT INTO job_queue (kind, payload) VALUES ('x', '{}')")
    row = sql.rows("SELECT queue, state, attempts, max_attempts, run_at <= now(), payload"
                   " FROM job_queue")[0]
    assert row == ("default", "pending", 0, 25, True, {})


def test_the_claim_uses_the_partial_index(sql):
    sql.rows("INSERT INTO job_queue (kind, state, finished_at)"
             " SELECT 'x', 'succeeded', now() FROM generate_series(1, 20000)")
    sql.rows("INSERT INTO job_queue (kind) SELECT 'x' FROM generate_series(1, 10)")
    sql.rows("ANALYZE job_queue")
    plan = "\n".join(r[0] for r in sql.rows(
        "EXPLAIN " + db.QUERIES["claim_due_jobs"],
        {"claimant": "c", "limit": 1, "lease_seconds": 30, "queues": None}))
    assert "job_queue_claim" in plan


def test_the_claim_finds_its_rows_through_the_primary_key_not_a_table_scan(sql):
    # On 20,000 pending rows, joining the locked ids to the table made the
    # planner hash the whole table for every batch.
    sql.rows("INSERT INTO job_queue (kind) SELECT 'x' FROM generate_series(1, 20000)")
    sql.rows("ANALYZE job_queue")
    plan = "\n".join(r[0] for r in sql.rows(
        "EXPLAIN " + db.QUERIES["claim_due_jobs"],
        {"claimant": "c", "limit": 512, "lease_seconds": 30, "queues": None}))
    assert "job_queue_pkey" in plan and "Seq Scan on job_queue " not in plan, plan


@pytest.mark.parametrize("name, params, index", [
    ("claim_due_jobs", {"claimant": "c", "limit": 512, "lease_seconds": 30, "queues": None},
     "job_queue_claim"),
    ("claim_due_jobs", {"claimant": "c", "limit": 1, "lease_seconds": 30, "queues": ["q"]},
     "job_queue_claim"),
    ("seconds_until_next_due", {"queues": None}, "job_queue_claim"),
    # The writes find their rows by id, not among all the running rows of
    # job_queue_running: statistics taken while every row was pending put the
    # running ones at one, and a generic plan through that index read every
    # running row of the fleet for each write (see record_successes).
    ("record_successes", {"claimant": "c", "ids": [1, 2]}, "job_queue_pkey"),
    ("renew_leases", {"claimant": "c", "ids": [1, 2], "lease_seconds": 30}, "job_queue_pkey"),
    ("record_outcomes", {"claimant": "c", "ids": [1, 2], "errors": ["e", None],
                         "retry_in_seconds": [1.0, 0.0], "permanent": [False, False],
                         "snoozed": [False, False]}, "job_queue_pkey"),
])
def test_a_prepared_statement_keeps_its_index_under_a_generic_plan(sql, name, params, index):
    # Workers prepare their hot statements; after five runs PostgreSQL may
    # keep one plan for every parameter, and that plan must not scan the table.
    sql.rows("INSERT INTO job_queue (kind) SELECT 'x' FROM generate_series(1, 20000)")
    sql.rows("ANALYZE job_queue")
    prepare, execute = db.prepared_form(name)
    sql.rows("SET plan_cache_mode = force_generic_plan")
    sql.rows(prepare)
    plan = "\n".join(r[0] for r in sql.rows("EXPLAIN " + execute, params))
    # (The table of paused queues is tiny and read once per statement.)
    assert index in plan and "Seq Scan on job_queue " not in plan, plan
    if name.startswith(("record_", "renew_")):
        assert "job_queue_running" not in plan, plan


#: The key reads of migrations/0015, and the statements made of them.
KEY_READS = {
    "claim_limited_jobs": ("job_queue_key_runs", "job_queue_walk_next_key",
                           "job_queue_key_takeable", "job_queue_key_parked_rows",
                           "job_queue_key_lane_rows"),
    "record_successes_handing_on": ("job_queue_key_runs", "job_queue_key_next_rows"),
}
KEY_READ_PARAMS = {
    "claim_limited_jobs": {"claimant": "c", "limit": 64, "free": 64, "lease_seconds": 30,
                           "queues": None},
    "record_successes_handing_on": {"claimant": "c", "ids": [1, 2], "room": 2,
                                    "lease_seconds": 30, "queues": None,
                                    "outputs": [None, None], "kinds": [], "generations": []},
}


def _generic_plan(sql, name):
    prepare, execute = db.prepared_form(name)
    sql.rows("DEALLOCATE ALL")
    sql.rows("SET plan_cache_mode = force_generic_plan")
    sql.rows(prepare)
    return "\n".join(r[0] for r in sql.rows("EXPLAIN " + execute, KEY_READ_PARAMS[name]))


@pytest.mark.parametrize("name", sorted(KEY_READS))
def test_the_key_reads_are_written_into_the_statements_that_call_them(sql, name):
    # An SQL function the planner cannot inline is planned and run apart at
    # every call, key by key (see migrations/0015).
    called = KEY_READS[name]
    assert all(f"{function}(" in db.QUERIES[name] for function in called)
    assert "Function Scan on job_queue_" not in _generic_plan(sql, name)
    # The negative control: one made VOLATILE is called, not written in.
    sql.rows(f"ALTER FUNCTION {called[-1]} VOLATILE")
    assert f"Function Scan on {called[-1]}" in _generic_plan(sql, name)


@pytest.mark.parametrize("key", [None, "limited per key", "of a kind without limits"])
def test_a_running_row_is_in_one_index_beside_the_primary_key(sql, key):
    # Every index a row enters at its start is written at every start: the
    # kind's count, the key's and the reaper share one. A key of a kind
    # without limits is one more (see migrations/0013).
    sql.rows("INSERT INTO job_queue_limits (kind, max_running_per_key) VALUES ('x', 1)")
    sql.rows("INSERT INTO job_queue (kind, concurrency_key, state, locked_by, lease_expires_at)"
             " VALUES (%s, %s, 'running', 'c', now() + interval '1 min')",
             ("y" if key == "of a kind without limits" else "x", key and "k"))
    sql.rows("CREATE EXTENSION IF NOT EXISTS pageinspect")
    # Each index is one page at most yet, its root.
    entries = {name: sql.rows("SELECT CASE WHEN m.root = 0 THEN 0 ELSE"
                              " (SELECT count(*) FROM bt_page_items(%s, m.root)) END"
                              " FROM bt_metap(%s) AS m", (name, name))[0][0]
               for name, in sql.rows("SELECT indexrelid::regclass::text FROM pg_index"
                                     " WHERE indrelid = 'job_queue'::regclass")}
    expected = {"job_queue_pkey", "job_queue_running"}
    if key == "of a kind without limits":
        expected.add("job_queue_running_unlimited")
    assert {name for name, count in entries.items() if count} == expected, entries


def test_a_reaper_batch_reads_the_running_rows_index_as_far_as_its_limit(sql):
    # A fleet lost at once: every batch would otherwise read and sort all
    # the expired rows to take 500 of them.
    sql.rows("INSERT INTO job_queue (kind, state, finished_at)"
             " SELECT 'x', 'succeeded', now() FROM generate_series(1, 20000)")
    sql.rows("INSERT INTO job_queue (kind, concurrency_key, state, locked_by, lease_expires_at)"
             " SELECT 'k' || g % 7, 'key' || g % 300, 'running', 'w' || g % 9,"
             " now() - interval '1 second' FROM generate_series(1, 20000) AS g")
    sql.rows("ANALYZE job_queue")
    plan = "\n".join(r[0] for r in sql.rows(
        "EXPLAIN ANALYZE " + db.QUERIES["expire_stale_leases"], {"limit": 500}))
    assert "job_queue_running" in plan and "Seq Scan on job_queue " not in plan, plan
    assert "Sort" not in plan, plan


def test_a_claim_hands_back_its_jobs_oldest_due_first(sql, store):
    # Later ids due earlier, as retries and delayed jobs are.
    sql.rows("INSERT INTO job_queue (kind, run_at) SELECT 'x', now() - g * interval '1 min'"
             " FROM generate_series(1, 6) AS g")
    due = [row[0] for row in sql.rows("SELECT id FROM job_queue ORDER BY run_at, id")]
    assert [job.id for job in store.claim_due_jobs("c", 6, 30, None)[0]] == due


@pytest.mark.parametrize("prepare", [True, False])
def test_a_success_is_written_only_where_the_claim_is_still_the_writer_s(database_url, sql,
                                                                         prepare):
    store = db.JobStore(database_url, prepare=prepare)
    try:
        sql.rows("INSERT INTO job_queue (kind) SELECT 'x' FROM generate_series(1, 3)")
        kept, taken, reaped = [job.id for job in store.claim_due_jobs("c", 3, 30, None)[0]]
        # Another claimant took one over (its lease had expired); the reaper
        # put another back.
        sql.rows("UPDATE job_queue SET locked_by = 'other' WHERE id = %s", (taken,))
        sql.rows("UPDATE job_queue SET state = 'pending', locked_by = NULL,"
                 " lease_expires_at = NULL WHERE id = %s", (reaped,))
        assert store.record_successes("c", [kept, taken, reaped]) == {kept}
    finally:
        store.close()
    assert sql.rows("SELECT id, state, locked_by FROM job_queue ORDER BY id") == [
        (kept, "succeeded", None), (taken, "running", "other"), (reaped, "pending", None)]


def _pages(sql):
    return dict(sql.rows("SELECT id, (ctid::text::point)[0] FROM job_queue"))


def test_a_claim_keeps_each_row_on_its_page(sql, store):
    # Neither update can be HOT, but one that finds room on the row's page
    # writes less than one that moves it: with the pages full, as the
    # inserts left them before migration 0006, every claim moved its row,
    # with a row lock in the WAL on top. (The outcome's version finds room
    # once the inserted one is pruned, which any older snapshot in the
    # database, an autovacuum's say, may put off: not asserted here.)
    sql.rows("INSERT INTO job_queue (kind) SELECT 'x' FROM generate_series(1, 2000)")
    inserted = _pages(sql)
    claimed = [job.id for job in store.claim_due_jobs("c", 2000, 30, None)[0]]
    assert len(claimed) == 2000
    after_claim = _pages(sql)
    moved = sum(after_claim[i] != inserted[i] for i in claimed)
    assert moved <= 100, moved


def test_no_row_level_trigger_runs_before_an_update_of_job_queue(sql):
    # PostgreSQL locks every row an UPDATE touches before calling such a
    # trigger, whatever its WHEN says: a WAL record per row of every outcome
    # written. Routing a revived row is an AFTER trigger (migration 0006).
    before_update_row = 1 | 2 | 16  # TRIGGER_TYPE_ROW, _BEFORE, _UPDATE
    assert sql.rows(
        "SELECT tgname FROM pg_trigger WHERE tgrelid = 'job_queue'::regclass"
        " AND NOT tgisinternal AND tgtype & %s = %s",
        (before_update_row, before_update_row)) == []


def test_migrate_twice_is_a_no_op(database_url):
    store = db.JobStore(database_url)
    assert store.migrate() == []
    assert store.schema_is_current()
    store.close()


def _migrate(url, barrier):
    barrier.wait()
    store = db.JobStore(url)
    applied = len(store.migrate())
    store.close()
    return applied


def test_concurrent_migrations_apply_each_step_once(pg):
    url = pg.create_database("concurrent_migrate")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(4)
        with ctx.Pool(4) as pool:
            applied = pool.starmap(_migrate, [(url, barrier)] * 4)
    assert sum(applied) == len(db.load_migrations())
    check = Sql(url)
    assert check.value("SELECT count(*) FROM motir_schema_migrations") == len(db.load_migrations())
    check.close()
    pg.drop_database("concurrent_migrate")


def test_one_insert_statement_sends_one_notification_per_queue(sql, database_url):
    listener = wakeup_listener(database_url)
    sql.rows("INSERT INTO job_queue (kind) SELECT 'x' FROM generate_series(1, 10000)")
    assert notifications(listener) == ["default"]
    sql.rows("INSERT INTO job_queue (kind, queue) VALUES ('x', 'mail'), ('x', 'mail'), ('x', 'b')")
    assert sorted(notifications(listener)) == ["b", "mail"]
    listener.close()


def test_a_row_put_back_to_pending_notifies_and_other_updates_do_not(sql, database_url):
    job_id = sql.value("INSERT INTO job_queue (kind) VALUES ('x') RETURNING id")
    listener = wakeup_listener(database_url)
    sql.rows("UPDATE job_queue SET state = 'running', locked_by = 'w', lease_expires_at = now()"
             " WHERE id = %s", (job_id,))
    assert notifications(listener) == []
    sql.rows("UPDATE job_queue SET state = 'pending', locked_by = NULL, lease_expires_at = NULL"
             " WHERE id = %s", (job_id,))
    assert notifications(listener) == ["default"]
    listener.close()


def test_a_running_row_must_name_its_claimant(sql):
    with pytest.raises(psycopg2.errors.CheckViolation):
        sql.rows("INSERT INTO job_queue (kind, state) VALUES ('x', 'running')")


@pytest.mark.parametrize("state", ["pending", "succeeded", "failed", "cancelled"])
def test_only_a_running_row_may_have_a_claimant_and_a_lease(sql, state):
    # The writes' fences (record_successes, record_outcomes, renew_leases)
    # take a claimant and a lease for a running row: this is why they may.
    with pytest.raises(psycopg2.errors.CheckViolation):
        sql.rows("INSERT INTO job_queue (kind, state, locked_by, lease_expires_at)"
                 " VALUES ('x', %s, 'w', now())", (state,))


@pytest.mark.parametrize("prepare", [True, False])
def test_a_store_prepares_its_hot_statements_unless_told_not_to(database_url, prepare):
    # --no-listen (PgBouncer in transaction mode) must not prepare: the next
    # statement may reach a server connection that never saw the PREPARE.
    store = db.JobStore(database_url, prepare=prepare)
    try:
        assert store.claim_due_jobs("c", 1, 30, None) == ([], False)
        assert store.claim_due_jobs("c", 1, 30, None) == ([], False)  # prepared once only
        with store.conn.cursor() as cur:
            cur.execute("SELECT name FROM pg_prepared_statements")
            names = {row[0] for row in cur.fetchall()}
        assert names == ({"motir_claim_due_jobs"} if prepare else set())
        store.open()  # a reconnect starts with nothing prepared
        assert store.claim_due_jobs("c", 1, 30, None) == ([], False)
    finally:
        store.close()


# The Prisma models of docs/job-model.md are what the web app maps the tables with.
PRISMA_TYPES = {"BigInt": "bigint", "String": "text", "Json": "jsonb", "Int": "integer",
                "Boolean": "boolean", "DateTime": "timestamp without time zone",
                "Float": "double precision"}
PRISMA_NATIVE = {"@db.Timestamptz": "timestamp with time zone", "@db.SmallInt": "smallint"}


def documented_prisma_models():
    text = (ROOT / "docs" / "job-model.md").read_text()
    models = {}
    for block in re.findall(r"```prisma\n(.*?)```", text, re.S):
        for body in re.findall(r"model \w+ \{\n(.*?)\n\}", block, re.S):
            table = re.search(r'@@map\("(\w+)"\)', body).group(1)
            columns = {}
            for line in body.splitlines():
                parts = line.split()
                if len(parts) < 2 or parts[0].startswith("@@"):
                    continue
                name, kind = parts[0], parts[1]
                mapped = re.search(r'@map\("(\w+)"\)', line)
                native = [PRISMA_NATIVE[p] for p in parts[2:] if p in PRISMA_NATIVE]
                column = mapped.group(1) if mapped else name
                if kind.endswith("[]"):
                    # A scalar list: never optional in Prisma, a nullable array column.
                    columns[column] = ("ARRAY", True)
                    continue
                column_type = native[0] if native else PRISMA_TYPES[kind.rstrip("?")]
                columns[column] = (column_type, kind.endswith("?"))
            models[table] = columns
    return models


def test_the_documented_prisma_models_match_the_migrated_tables(sql):
    models = documented_prisma_models()
    assert set(models) == {"job_queue", "job_queue_paused", "job_queue_limits"}
    for table, columns in models.items():
        found = {name: (data_type, nullable == "YES") for name, data_type, nullable in sql.rows(
            "SELECT column_name, data_type, is_nullable FROM information_schema.columns"
            " WHERE table_name = %s", (table,))}
        assert columns == found, table
