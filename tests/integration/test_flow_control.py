"""Per-key limits (`max_running_per_key`) and rate limits (`rate_limit`)
against PostgreSQL: the lanes rows take, the limited claim by key and by
window, parked rows, what an idle worker waits for, the claim's cost with
many keys, and forked claimants racing, with a negative control for each
limit that a naive claim overshoots."""

import datetime
import threading
import time

import psycopg2
import pytest

from motir_supervisor import db
from tests.helpers import (LOCKING_AS_READ, hold_limited_claims, most_at_once_per_key,
                           notifications, race, wait_until, wakeup_listener)

PER_KEY = db.Limits(max_running_per_key=1)


def _insert(sql, kind, keys, **columns):
    """One row of ``kind`` for each key given (None: no key), in that order."""
    names = ", ".join(columns)
    extra = "".join(f", %({name})s" for name in columns)
    return [row[0] for row in sql.rows(
        f"INSERT INTO job_queue (kind, concurrency_key{', ' + names if names else ''})"
        f" SELECT %(kind)s, key{extra} FROM unnest(%(keys)s::text[]) WITH ORDINALITY AS k(key, n)"
        " ORDER BY n RETURNING id", {"kind": kind, "keys": list(keys), **columns})]


def _keys_of(sql, jobs):
    return sorted(sql.value("SELECT array_agg(concurrency_key) FROM job_queue WHERE id = ANY(%s)",
                            ([j.id for j in jobs],)) or [])


def _finish(store, claimant, jobs):
    store.record_outcomes(claimant, [db.Outcome(j.id) for j in jobs])


# -- lanes -------------------------------------------------------------------------


def test_only_rows_with_a_key_of_a_kind_limited_per_key_take_the_limited_lane(sql, store):
    store.sync_limits({"a": PER_KEY, "b": db.Limits(max_running=2, max_running_per_key=1)})
    _insert(sql, "a", ["k", None])
    _insert(sql, "b", ["k", None])
    lanes = sql.rows("SELECT kind, concurrency_key, limited FROM job_queue ORDER BY id")
    # A key-less row of a kind limited per key only runs at the regular
    # claim's speed; a kind limited as a whole keeps all its rows together.
    assert lanes == [("a", "k", True), ("a", None, False), ("b", "k", True), ("b", None, True)]
    # A key set later moves the row to the limited lane; its limit gone, back.
    sql.rows("UPDATE job_queue SET concurrency_key = 'j'"
             " WHERE kind = 'a' AND concurrency_key IS NULL")
    assert sql.value("SELECT bool_and(limited) FROM job_queue WHERE kind = 'a'")
    assert store.sync_limits({"a": None}) == ["a: no limit"]
    assert not sql.value("SELECT bool_or(limited) FROM job_queue WHERE kind = 'a'")


def test_an_empty_key_is_refused_by_the_database(sql, store):
    with pytest.raises(psycopg2.errors.CheckViolation):
        sql.rows("INSERT INTO job_queue (kind, concurrency_key) VALUES ('a', '')")


# -- per key ------------------------------------------------------------------------


def test_the_claim_takes_one_job_per_key_and_idle_workers_wait_for_a_key(sql, store):
    store.sync_limits({"a": PER_KEY})
    _insert(sql, "a", ["x", "x", "y", "x", "z", "y"])
    jobs, more = store.claim_limited_jobs("c", 10, 30, None)
    assert _keys_of(sql, jobs) == ["x", "y", "z"] and not more
    # The rows left wait for their keys: an idle worker waits for a slot's
    # notification rather than look again.
    assert store.seconds_until_next_due(None) == (None, True)
    # A claim that finds nothing to take says so, and sets nothing aside:
    # the rows of full keys stay in the lane, for the keys' next runs.
    assert store.claim_limited_jobs("c", 10, 30, None) == ([], False)
    assert sql.value("SELECT count(*) FROM job_queue WHERE parked") == 0
    # x's slot frees (which notifies): the next claim finds x by its key.
    _finish(store, "c", [j for j in jobs if _keys_of(sql, [j]) == ["x"]])
    again, _ = store.claim_limited_jobs("c", 10, 30, None)
    assert _keys_of(sql, again) == ["x"] and again[0].id == 2  # the key's oldest


def test_a_deep_key_is_parked_and_found_by_key_when_it_has_room(sql, store):
    store.sync_limits({"a": PER_KEY})
    _insert(sql, "a", ["x"] * 40 + ["y"])
    jobs, more = store.claim_limited_jobs("c", 10, 30, None)
    # x's rows filled what the claim read: they are parked, and the claim
    # says to look again, which finds y behind them.
    assert _keys_of(sql, jobs) == ["x"] and more
    assert sql.value("SELECT count(*) FROM job_queue WHERE parked") == 39
    later, more = store.claim_limited_jobs("c", 10, 30, None)
    assert _keys_of(sql, later) == ["y"] and not more
    assert store.claim_limited_jobs("c", 10, 30, None) == ([], False)
    assert store.seconds_until_next_due(None) == (None, True)
    # x's slot frees (which notifies): the next claim finds x by its key.
    _finish(store, "c", jobs)
    again, _ = store.claim_limited_jobs("c", 10, 30, None)
    assert [j.id for j in again] == [2]
    assert not sql.value("SELECT parked FROM job_queue WHERE id = 2")


def test_a_claim_holds_only_the_rows_it_takes(sql, store, database_url):
    store.sync_limits({"a": PER_KEY})
    _insert(sql, "a", ["x", "y"])
    assert len(store.claim_limited_jobs("c", 2, 30, None)[0]) == 2
    passed = _insert(sql, "a", ["x", "y"])
    (late,) = _insert(sql, "a", ["z"])
    # A claim reads x's and y's next rows (their keys are full) and takes
    # z's; until it commits, the rows it read past stay free for the runs
    # of x and y to hand their slots on to.
    claiming = psycopg2.connect(database_url)
    try:
        with claiming.cursor() as cur:
            cur.execute(db.QUERIES["lock_limited_claims"] + db.QUERIES["claim_limited_jobs"],
                        {"claimant": "d", "limit": 1, "free": 1, "lease_seconds": 30,
                         "queues": None})
            assert [row[0] for row in cur.fetchall()] == [late]
            free = [row[0] for row in sql.rows(
                "SELECT id FROM job_queue WHERE state = 'pending' ORDER BY id"
                " FOR UPDATE SKIP LOCKED")]
            assert free == passed
    finally:
        claiming.close()


def test_the_limited_claim_and_the_hand_on_run_their_generic_plans_from_the_first(sql, store):
    store.sync_limits({"a": PER_KEY})
    _insert(sql, "a", ["x", "x"])
    jobs, _ = store.claim_limited_jobs("c", 2, 30, None)
    store.record_successes_handing_on("c", [j.id for j in jobs], 1, 30, None)
    with store.conn.cursor() as cur:
        cur.execute("SELECT name, generic_plans, custom_plans FROM pg_prepared_statements"
                    " WHERE name IN ('motir_claim_limited_jobs',"
                    " 'motir_record_successes_handing_on') ORDER BY name")
        # The claim's plan is made by an EXPLAIN before its first run, out of
        # the claims' lock, and that run uses it: two uses, none custom.
        assert cur.fetchall() == [("motir_claim_limited_jobs", 2, 0),
                                  ("motir_record_successes_handing_on", 1, 0)]


def test_a_key_with_room_takes_up_to_its_limit_in_one_claim(sql, store):
    store.sync_limits({"a": db.Limits(max_running_per_key=2)})
    _insert(sql, "a", ["x"] * 5 + ["y"])
    jobs, more = store.claim_limited_jobs("c", 10, 30, None)
    assert _keys_of(sql, jobs) == ["x", "x", "y"]
    _finish(store, "c", jobs[:1])
    assert len(store.claim_limited_jobs("c", 10, 30, None)[0]) == 1


def test_a_kind_with_both_limits_keeps_both(sql, store):
    store.sync_limits({"a": db.Limits(max_running=2, max_running_per_key=1)})
    _insert(sql, "a", ["x", "x", "y", "z", None])
    jobs, _ = store.claim_limited_jobs("c", 10, 30, None)
    assert len(jobs) == 2 and len(set(_keys_of(sql, jobs))) == 2


def test_keyless_rows_of_a_kind_limited_per_key_run_in_the_regular_lane(sql, store):
    store.sync_limits({"a": PER_KEY})
    _insert(sql, "a", [None, None, None])
    assert len(store.claim_due_jobs("c", 10, 30, None)[0]) == 3


def test_the_reserve_takes_per_key_jobs_but_never_kind_wide_ones(sql, store):
    store.sync_limits({"a": PER_KEY, "b": db.Limits(max_running=10)})
    _insert(sql, "a", ["1", "2", "3"])
    _insert(sql, "b", [None, None, None])
    # No free slot, room for three in the reserve: only per-key jobs.
    jobs, more = store.claim_limited_jobs("c", 3, 30, None, free=0)
    assert {j.kind for j in jobs} == {"a"} and len(jobs) == 3 and more
    jobs, _ = store.claim_limited_jobs("c", 3, 30, None, free=2)
    assert [j.kind for j in jobs] == ["b", "b"]


def test_a_hot_key_delays_no_other_key(sql, store):
    store.sync_limits({"a": PER_KEY})
    _insert(sql, "a", ["hot", "hot", "cold"])
    jobs, _ = store.claim_limited_jobs("c", 64, 30, None)
    assert _keys_of(sql, jobs) == ["cold", "hot"]
    _insert(sql, "a", ["warm"])
    sql.rows("ANALYZE job_queue")
    shallow = _claim_buffers(sql)
    # While hot runs, 50,000 more of it arrive, then a job of another key.
    sql.rows("INSERT INTO job_queue (kind, concurrency_key)"
             " SELECT 'a', 'hot' FROM generate_series(1, 50000)")
    _insert(sql, "a", ["late"])
    claims: list[list[str]] = []
    while "late" not in sum(claims, []) and len(claims) < 20:
        claims.append(_keys_of(sql, store.claim_limited_jobs("c", 64, 30, None)[0]))
    # The claims found the late key past hot's rows at once, and go on
    # setting hot's backlog aside, 10,000 rows a claim, while they say more
    # is due.
    assert sum(claims, []) == ["warm", "late"] and len(claims) <= 3, claims
    settling = 0
    while store.claim_limited_jobs("c", 64, 30, None)[1]:
        settling += 1
        assert settling <= 6
    # A few of hot's rows may stay in the lane: too few to set aside.
    assert sql.value("SELECT count(*) FROM job_queue WHERE NOT parked AND state = 'pending'") < 20
    sql.rows("ANALYZE job_queue")
    _insert(sql, "a", ["later"])
    # Now a claim reads what it read with hot's backlog a single job deep,
    # once vacuum has cleared the entries the parking left in the lane's index.
    sql.rows("VACUUM job_queue")
    deep = _claim_buffers(sql)
    assert deep < shallow * 2 + 50, (shallow, deep)


def _claim_buffers(sql):
    """The pages one limited claim touches, claiming as the workers do."""
    prepare, execute = db.prepared_form("claim_limited_jobs")
    sql.rows("DEALLOCATE ALL")
    sql.rows("BEGIN")
    try:
        sql.rows(db.QUERIES["lock_limited_claims"])
        sql.rows(prepare)
        plan = "\n".join(r[0] for r in sql.rows(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT TEXT) " + execute,
            {"claimant": "probe", "limit": 64, "free": 64, "lease_seconds": 30, "queues": None}))
    finally:
        sql.rows("ROLLBACK")
    first = plan.splitlines()[0:6]
    hits = [int(n) for line in plan.splitlines() if "Buffers:" in line
            for n in __import__("re").findall(r"(?:hit|read|dirtied|written)=(\d+)", line)]
    assert hits, first
    return max(hits)


def test_a_key_with_a_deep_backlog_not_due_yet_costs_no_walk_more(sql, store):
    store.sync_limits({"a": PER_KEY})
    keys = [f"k{n}" for n in range(10)]
    _insert(sql, "a", keys)
    assert len(store.claim_limited_jobs("c", 10, 30, None)[0]) == 10
    _insert(sql, "a", keys * 3)  # a head of full keys: the walk takes the lane's keys
    sql.rows("INSERT INTO job_queue (kind, concurrency_key, run_at)"
             " SELECT 'a', 'later', now() + interval '1 hour' FROM generate_series(1, 1000)")
    sql.rows("VACUUM ANALYZE job_queue")
    shallow = _claim_buffers(sql)
    sql.rows("INSERT INTO job_queue (kind, concurrency_key, run_at)"
             " SELECT 'a', 'later', now() + interval '1 hour' FROM generate_series(1, 100000)")
    sql.rows("VACUUM ANALYZE job_queue")
    # The walk looks at the first rows of a key with room, not through its
    # whole backlog.
    deep = _claim_buffers(sql)
    assert deep < shallow * 2 + 50, (shallow, deep)


def test_a_claims_cost_stays_flat_with_many_keys(sql, store):
    store.sync_limits({"a": PER_KEY})
    sql.rows("INSERT INTO job_queue (kind, concurrency_key)"
             " SELECT 'a', 'k' || g FROM generate_series(1, 1000) g")
    sql.rows("ANALYZE job_queue")
    few = _claim_buffers(sql)
    sql.rows("INSERT INTO job_queue (kind, concurrency_key)"
             " SELECT 'a', 'k' || g FROM generate_series(1001, 100000) g")
    sql.rows("ANALYZE job_queue")
    many = _claim_buffers(sql)
    assert many < few * 1.5 + 20, (few, many)


def test_a_full_key_the_walk_passes_costs_a_few_probes(sql, store):
    store.sync_limits({"a": PER_KEY})
    keys = [f"k{n:03}" for n in range(300)]
    _insert(sql, "a", keys)
    while store.claim_limited_jobs("c", 128, 30, None)[0]:
        pass
    _insert(sql, "a", keys * 2)  # a head of full keys: the walk takes the lane's keys
    sql.rows("VACUUM ANALYZE job_queue")
    # Each key passed: the next key in each index, and its running rows
    # counted, once each (a plan that inlined the next key into every place
    # that names it would look it up again for each).
    assert _claim_buffers(sql) < 12 * len(keys)


def test_the_walk_of_parked_keys_gives_every_key_its_turn(sql, store):
    store.sync_limits({"a": PER_KEY})
    keys = [f"k{n:03}" for n in range(60)]
    _insert(sql, "a", keys)
    sql.rows("UPDATE job_queue SET parked = true")  # as a clogged lane leaves them
    seen: list[str] = []
    claims = 0
    while len(seen) < 60 and claims < 20:
        jobs, _ = store.claim_limited_jobs("c", 4, 30, None)
        claims += 1
        seen += _keys_of(sql, jobs)
        _finish(store, "c", jobs)
    # At most four at a time, each claim going on where the last one
    # stopped: every key once before any key twice.
    assert sorted(seen) == keys and claims <= 16, (claims, seen)


def test_a_row_parked_then_cancelled_and_retried_still_runs(sql, store):
    store.sync_limits({"a": PER_KEY})
    (parked,) = _insert(sql, "a", ["x"])
    sql.rows("UPDATE job_queue SET parked = true")
    store.cancel_job(parked)
    store.retry_job(parked)
    assert [j.id for j in store.claim_limited_jobs("c", 10, 30, None)[0]] == [parked]


def test_a_parked_key_with_room_is_found_whatever_the_lane_holds(sql, store):
    store.sync_limits({"a": PER_KEY})
    (parked,) = _insert(sql, "a", ["x"])
    sql.rows("UPDATE job_queue SET parked = true")
    _insert(sql, "a", [f"k{n}" for n in range(20)])
    jobs, _ = store.claim_limited_jobs("c", 4, 30, None)
    assert parked in [j.id for j in jobs]


def test_a_key_with_room_behind_full_keys_is_reached_and_nobody_spins(sql, store):
    store.sync_limits({"a": PER_KEY})
    keys = [f"k{n}" for n in range(9)]
    _insert(sql, "a", keys)
    running, _ = store.claim_limited_jobs("c", 64, 30, None)
    assert len(running) == 9
    _insert(sql, "a", keys * 15 + ["z"])  # 135 rows of full keys, then z
    claims = []
    while not claims or claims[-1][1]:
        jobs, more = store.claim_limited_jobs("c", 4, 30, None)
        claims.append((_keys_of(sql, jobs), more))
    # A claim walked past the full keys to z.
    assert ["z"] in [keys for keys, _ in claims] and len(claims) <= 3, claims
    assert store.claim_limited_jobs("c", 4, 30, None) == ([], False)
    # An idle worker looks again once the full keys' runs have gone on for
    # a second, when a claim would set their rows aside; not before.
    assert 0.5 < store.seconds_until_next_due(None)[0] <= 1


def test_an_idle_worker_waits_past_a_lane_head_of_full_keys(sql, store):
    store.sync_limits({"a": PER_KEY})
    keys = [f"k{n:02}" for n in range(70)]
    _insert(sql, "a", keys)
    assert len(store.claim_limited_jobs("c", 70, 30, None)[0]) == 70
    _insert(sql, "a", keys + ["z"])
    # 70 due rows of full keys at the head, and a key with room behind
    # them: a claim walks past the full keys to it, and sets none aside.
    assert _keys_of(sql, store.claim_limited_jobs("c", 8, 30, None)[0]) == ["z"]
    assert sql.value("SELECT count(*) FROM job_queue WHERE parked") == 0
    # Nothing else can start: until the full keys' runs have gone on for a
    # second, the worker waits for a slot's notification.
    assert 0.5 < store.seconds_until_next_due(None)[0] <= 1
    assert store.claim_limited_jobs("c", 8, 30, None) == ([], False)
    # Runs that have gone on that long hold their keys for a while: a claim
    # is due, and sets those keys' rows aside, so that the claims after it
    # read none of them; the worker then waits.
    sql.rows("UPDATE job_queue SET started_at = started_at - interval '2 seconds'"
             " WHERE state = 'running'")
    assert store.seconds_until_next_due(None)[0] <= 0
    assert store.claim_limited_jobs("c", 8, 30, None) == ([], True)
    while store.claim_limited_jobs("c", 8, 30, None)[1]:
        pass
    assert sql.value("SELECT count(*) FROM job_queue WHERE parked") == 70
    assert store.seconds_until_next_due(None) == (None, True)


def test_parked_keys_a_worker_cannot_take_end_its_walk(sql, store):
    store.sync_limits({"a": PER_KEY})
    _insert(sql, "a", ["b", "c", "d"], queue="mail")
    sql.rows("UPDATE job_queue SET parked = true")
    store.pause_queue("mail")
    # Paused, or of a queue it does not serve: no claim says to look again.
    assert store.claim_limited_jobs("c", 1, 30, None) == ([], False)
    store.resume_queue("mail")
    assert store.claim_limited_jobs("c", 1, 30, ["default"]) == ([], False)
    jobs, _ = store.claim_limited_jobs("c", 1, 30, ["mail"])
    assert _keys_of(sql, jobs) == ["b"]


def test_the_walk_visits_each_key_once_whatever_its_cursor(sql, store):
    store.sync_limits({"a": db.Limits(max_running_per_key=2)})
    _insert(sql, "a", ["b", "b", "c", "c"])
    sql.rows("UPDATE job_queue SET parked = true")
    # A cursor on a key that is gone, before every key left.
    sql.rows("UPDATE job_queue_limits SET key_cursor = 'a'")
    jobs, more = store.claim_limited_jobs("c", 10, 30, None)
    assert _keys_of(sql, jobs) == ["b", "b", "c", "c"] and not more


# -- rate limits ----------------------------------------------------------------------


@pytest.mark.parametrize("case", ["not due yet", "paused", "not served"])
def test_keys_with_nothing_to_take_do_not_keep_claims_coming(sql, store, case):
    store.sync_limits({"a": PER_KEY})
    sql.rows("INSERT INTO job_queue (kind, concurrency_key, queue, run_at)"
             " SELECT 'a', 'k' || g, 'mail',"
             " now() + CASE WHEN %s THEN interval '1 hour' ELSE interval '0' END"
             " FROM generate_series(1, 300) g", (case == "not due yet",))
    queues = ["default"] if case == "not served" else None
    if case == "paused":
        store.pause_queue("mail")
    # 300 keys with room and nothing this worker may take: each claim walks
    # some of them, and none says more is due (a worker would spin).
    claims = [store.claim_limited_jobs("c", 10, 30, queues) for _ in range(5)]
    assert claims == [([], False)] * 5


def test_a_row_held_by_another_transaction_does_not_keep_claims_coming(
        sql, store, database_url):
    store.sync_limits({"a": PER_KEY})
    (held,) = _insert(sql, "a", ["x"])
    holder = psycopg2.connect(database_url)
    try:
        with holder.cursor() as cur:
            cur.execute("SELECT FROM job_queue WHERE id = %s FOR UPDATE", (held,))
            claims = [store.claim_limited_jobs("c", 10, 30, None) for _ in range(3)]
        # A rollback lets go of the row before it returns; a close alone
        # leaves the lock to the server's backend, ending after it.
        holder.rollback()
    finally:
        holder.close()
    # Chosen, not locked, and not looked for again at once: the next wake-up
    # (or the worker's backstop) does.
    assert claims == [([], False)] * 3
    assert [j.id for j in store.claim_limited_jobs("c", 10, 30, None)[0]] == [held]


def test_a_key_with_room_behind_full_keys_passed_over_is_looked_for_at_once(sql, store):
    store.sync_limits({"a": PER_KEY})
    full = [f"k{n:02}" for n in range(70)]
    _insert(sql, "a", full)
    assert len(store.claim_limited_jobs("c", 70, 30, None)[0]) == 70
    (first,) = _insert(sql, "a", ["y"])
    _insert(sql, "a", full)
    (behind,) = _insert(sql, "a", ["z"])
    # The claim takes y from the head and passes over rows of full keys: it
    # says more is due, and the next one walks past them to z.
    jobs, more = store.claim_limited_jobs("c", 8, 30, None)
    assert [j.id for j in jobs] == [first] and more
    assert [j.id for j in store.claim_limited_jobs("c", 8, 30, None)[0]] == [behind]


def test_a_walk_past_the_lane_goes_on_past_parked_keys_it_cannot_take(sql, store):
    store.sync_limits({"a": PER_KEY})
    full = [f"k{n}" for n in range(5)]
    _insert(sql, "a", full)
    assert len(store.claim_limited_jobs("c", 5, 30, None)[0]) == 5
    _insert(sql, "a", full)  # a head of full keys: the walk takes the lane's keys
    # Parked keys with room whose rows wait in a paused queue, and behind
    # them one whose row may run.
    sql.rows("INSERT INTO job_queue (kind, concurrency_key, queue)"
             " SELECT 'a', 'p' || lpad(g::text, 3, '0'), 'paused'"
             " FROM generate_series(1, 300) g")
    (last,) = _insert(sql, "a", ["zz"])
    sql.rows("UPDATE job_queue SET parked = true WHERE queue = 'paused' OR id = %s", (last,))
    store.pause_queue("paused")
    claims = []
    while not claims or (claims[-1][1] and len(claims) < 5):
        jobs, more = store.claim_limited_jobs("c", 4, 30, None)
        claims.append(([j.id for j in jobs], more))
    # The first walk stopped among the paused keys and said more was due.
    assert [last] in [ids for ids, _ in claims], claims


def _slow_paused_queues(sql, seconds):
    """The claim reads job_queue_paused while it reads the lane, after its
    snapshot and before it locks its rows: a view that sleeps there widens
    that window, and nothing else of the claim changes."""
    sql.rows("ALTER TABLE job_queue_paused RENAME TO job_queue_paused_rows")
    sql.rows("CREATE VIEW job_queue_paused AS SELECT queue, paused_at FROM job_queue_paused_rows"
             f" WHERE (SELECT count(*) FROM pg_sleep({seconds})) = 1")


@pytest.mark.parametrize("change", ["key", "run_at"])
def test_a_row_changed_between_the_claims_read_and_its_lock_is_left_alone(
        sql, store, database_url, change):
    store.sync_limits({"a": PER_KEY})
    (running,) = _insert(sql, "a", ["full"])
    assert [j.id for j in store.claim_limited_jobs("c", 1, 30, None)[0]] == [running]
    (row,) = _insert(sql, "a", ["free"])
    claimer = db.JobStore(database_url)
    claimer.claim_limited_jobs("d", 4, 30, ["elsewhere"])  # connected and prepared
    _slow_paused_queues(sql, 0.3)
    claimed = {}
    claiming = threading.Thread(target=lambda: claimed.update(
        jobs=claimer.claim_limited_jobs("d", 4, 30, None)[0]))
    claiming.start()
    time.sleep(0.15)  # the claim has read the row, and not locked it yet
    if change == "key":
        # Its key is now one that has no room.
        sql.rows("UPDATE job_queue SET concurrency_key = 'full' WHERE id = %s", (row,))
    else:
        sql.rows("UPDATE job_queue SET run_at = now() + interval '1 hour' WHERE id = %s", (row,))
    assert claiming.is_alive()
    claiming.join()
    claimer.close()
    assert claimed["jobs"] == []
    assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'running'") == 1


def test_a_rate_limited_kind_starts_at_most_n_per_window_and_says_when_the_next_comes(sql, store):
    store.sync_limits({"r": db.Limits(rate_limit=3, rate_seconds=1.0)})
    _insert(sql, "r", [None] * 10)
    jobs, more = store.claim_limited_jobs("c", 10, 30, None)
    assert len(jobs) == 3 and not more
    _finish(store, "c", jobs)
    assert store.claim_limited_jobs("c", 10, 30, None) == ([], False)
    # An idle worker sleeps until the oldest start leaves the window.
    wait, _ = store.seconds_until_next_due(None)
    assert 0.5 < wait <= 1.0
    time.sleep(wait + 0.01)
    assert len(store.claim_limited_jobs("c", 10, 30, None)[0]) == 3
    # The starts of past windows are forgotten by the claims.
    assert sql.value("SELECT count(*) FROM job_queue_starts") == 3


def test_parked_rows_of_a_kind_out_of_allowance_are_waited_for(sql, store):
    store.sync_limits({"r": db.Limits(max_running_per_key=1, rate_limit=2, rate_seconds=1.0)})
    _insert(sql, "r", ["x", "y"])
    _finish(store, "c", store.claim_limited_jobs("c", 10, 30, None)[0])
    (parked,) = _insert(sql, "r", ["z"])
    sql.rows("UPDATE job_queue SET parked = true WHERE id = %s", (parked,))
    assert store.claim_limited_jobs("c", 10, 30, None)[0] == []
    wait, _ = store.seconds_until_next_due(None)
    assert 0.5 < wait <= 1.0
    time.sleep(wait + 0.01)
    assert [j.id for j in store.claim_limited_jobs("c", 10, 30, None)[0]] == [parked]


def test_a_retry_is_a_start(sql, store):
    store.sync_limits({"r": db.Limits(rate_limit=2, rate_seconds=60.0)})
    _insert(sql, "r", [None, None])
    (first, second), _ = store.claim_limited_jobs("c", 10, 30, None)
    store.record_outcomes("c", [db.Outcome(first.id, error="boom", retry_in_seconds=0)])
    _finish(store, "c", [second])
    assert store.claim_limited_jobs("c", 10, 30, None) == ([], False)


# -- hand-on -----------------------------------------------------------------------


def _hand_on(store, claimant, jobs, room=10, queues=None):
    """As a worker writes these runs' successes: with the generations their
    claims gave them."""
    return store.record_successes_handing_on(claimant, [j.id for j in jobs], room, 30, queues,
                                             generations=db.generations_of(jobs))


@pytest.mark.parametrize("change", ["another column", "brought back from the parked rows"])
def test_a_next_row_changed_after_the_hand_ons_read_is_still_handed_on(
        sql, store, database_url, change):
    store.sync_limits({"a": PER_KEY})
    (run,) = _insert(sql, "a", ["x"])
    jobs, _ = store.claim_limited_jobs("c", 1, 30, None)
    (following,) = _insert(sql, "a", ["x"])
    if change != "another column":
        sql.rows("UPDATE job_queue SET parked = true WHERE id = %s", (following,))
    writer = db.JobStore(database_url)
    _hand_on(writer, "c", [])  # connected and prepared
    _slow_paused_queues(sql, 0.5)
    result = {}
    writing = threading.Thread(target=lambda: result.update(out=_hand_on(writer, "c", jobs)))
    writing.start()
    # The hand-on has read the next row (its snapshot is taken) and sleeps
    # before it locks it.
    wait_until(lambda: sql.value("SELECT count(*) FROM pg_stat_activity"
                                 " WHERE wait_event = 'PgSleep'"), 5, 0.005)
    if change == "another column":
        sql.rows("UPDATE job_queue SET priority = priority WHERE id = %s", (following,))
    else:  # as another key's freed slot does
        sql.rows("UPDATE job_queue SET parked = false WHERE id = %s", (following,))
    writing.join(10)
    writer.close()
    # Its latest version is still pending, due and of the key: it runs.
    assert [j.id for j in result["out"][1]] == [following]
    assert sql.value("SELECT state FROM job_queue WHERE id = %s", (following,)) == "running"


def test_a_success_hands_its_keys_slot_to_the_keys_next_job(sql, store, database_url):
    store.sync_limits({"a": PER_KEY})
    k1, _, k2, k1_last = _insert(sql, "a", ["x", "x", "y", "x"])
    k1_next = k1 + 1
    jobs, _ = store.claim_limited_jobs("c", 10, 30, None)
    assert sorted(j.id for j in jobs) == [k1, k2]
    listener = wakeup_listener(database_url)
    written, handed = _hand_on(store, "c", jobs)
    # x's next job is this worker's, in the same write; y has none, and its
    # slot frees with nothing of y's waiting: nobody is woken for it.
    assert written == {k1, k2} and [j.id for j in handed] == [k1_next]
    assert sql.rows("SELECT state, locked_by, attempts FROM job_queue WHERE id = %s",
                    (k1_next,)) == [("running", "c", 1)]
    assert notifications(listener) == []
    # Every slot handed on: nothing freed.
    written, handed = _hand_on(store, "c", handed)
    assert written == {k1_next} and [j.id for j in handed] == [k1_last]
    assert notifications(listener) == []
    assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'running'") == 1
    written, handed = _hand_on(store, "c", handed)
    assert written == {k1_last} and handed == [] and notifications(listener) == []
    listener.close()


@pytest.mark.parametrize("waiting", ["not due yet", "left out by the room", "parked"])
def test_a_slot_a_hand_on_frees_wakes_the_workers_for_a_job_of_its_key(
        sql, store, database_url, waiting):
    store.sync_limits({"a": PER_KEY})
    x, y, x_next, y_next = _insert(sql, "a", ["x", "y", "x", "y"])
    jobs, _ = store.claim_limited_jobs("c", 10, 30, None)
    if waiting == "not due yet":
        sql.rows("UPDATE job_queue SET run_at = now() + interval '1 hour' WHERE id = %s",
                 (y_next,))
    if waiting == "parked":
        # y's slot also went to no one (the room), and its row was set aside.
        sql.rows("UPDATE job_queue SET parked = true WHERE id = %s", (y_next,))
    listener = wakeup_listener(database_url)
    room = 10 if waiting == "not due yet" else 1
    written, handed = _hand_on(store, "c", jobs, room=room)
    assert written == {x, y} and [j.id for j in handed] == [x_next]
    # y's slot frees, and its job waits: the workers are woken for it, and a
    # parked one is back in the lane, where the next claim finds it.
    assert "*" in notifications(listener)
    assert not sql.value("SELECT parked FROM job_queue WHERE id = %s", (y_next,))
    listener.close()
    if waiting != "not due yet":
        sql.rows("UPDATE job_queue_limits SET key_cursor = 'y'")
        assert [j.id for j in store.claim_limited_jobs("c", 10, 30, None)[0]] == [y_next]


@pytest.mark.parametrize("waiting", [False, True])
def test_a_key_s_slot_that_frees_wakes_the_workers_only_for_a_job_of_its_key(
        sql, store, database_url, waiting):
    # Any run's end, as a failure, a lease taken over or a plain success
    # frees it (the trigger of migrations/0014).
    store.sync_limits({"a": PER_KEY})
    [x] = _insert(sql, "a", ["x"])
    jobs, _ = store.claim_limited_jobs("c", 10, 30, None)
    if waiting:
        _insert(sql, "a", ["x"], run_at=datetime.datetime(2100, 1, 1, tzinfo=datetime.timezone.utc))
    listener = wakeup_listener(database_url)
    _finish(store, "c", jobs)
    assert sql.value("SELECT state FROM job_queue WHERE id = %s", (x,)) == "succeeded"
    assert notifications(listener) == (["*"] if waiting else [])
    listener.close()


def test_a_key_hands_on_only_as_many_of_its_ended_runs_as_it_has_next_jobs(
        sql, store, database_url):
    store.sync_limits({"a": db.Limits(max_running_per_key=2)})
    first, second, last = _insert(sql, "a", ["x", "x", "x"])
    jobs, _ = store.claim_limited_jobs("c", 10, 30, None)
    assert sorted(j.id for j in jobs) == [first, second]
    written, handed = _hand_on(store, "c", jobs)
    # Two runs ended and one job is left: one slot goes to it, the other
    # frees, which the next job of the key then takes at once.
    assert written == {first, second} and [j.id for j in handed] == [last]
    [later] = _insert(sql, "a", ["x"])
    assert [j.id for j in store.claim_limited_jobs("c", 10, 30, None)[0]] == [later]


def test_a_hand_on_takes_parked_rows_and_the_room_it_is_given(sql, store):
    store.sync_limits({"a": PER_KEY})
    ids = _insert(sql, "a", ["x", "y", "z", "x", "y", "z"])
    jobs, _ = store.claim_limited_jobs("c", 10, 30, None)
    sql.rows("UPDATE job_queue SET parked = true WHERE id = %s", (ids[3],))
    written, handed = _hand_on(store, "c", jobs, room=2)
    assert len(written) == 3 and [j.id for j in handed] == ids[3:5]
    # z's slot went to no one: its next job is the limited claim's.
    again, _ = store.claim_limited_jobs("c", 10, 30, None)
    assert [j.id for j in again] == [ids[5]]


def test_a_hand_on_writes_the_values_the_runs_returned(sql, store):
    store.sync_limits({"a": PER_KEY})
    x, y, x_next, y_next = _insert(sql, "a", ["x", "y", "x", "y"])
    jobs, _ = store.claim_limited_jobs("c", 10, 30, None)
    written, handed = store.record_successes_handing_on(
        "c", [x, y], 10, 30, None, ['{"rows": 3}', None])
    assert written == {x, y} and sorted(j.id for j in handed) == [x_next, y_next]
    assert sql.rows("SELECT id, output, limited FROM job_queue WHERE id IN (%s, %s)"
                    " ORDER BY id", (x, y)) == [(x, {"rows": 3}, False), (y, None, False)]


def test_a_value_the_database_refuses_fails_the_whole_hand_on(sql, store):
    store.sync_limits({"a": PER_KEY})
    x, y, x_next, _ = _insert(sql, "a", ["x", "y", "x", "y"])
    jobs, _ = store.claim_limited_jobs("c", 10, 30, None)
    deep = "[" * 100_000 + "]" * 100_000  # past the server's stack
    with pytest.raises(psycopg2.Error) as refused:
        store.record_successes_handing_on("c", [x, y], 10, 30, None, [deep, '{"ok": 1}'])
    assert refused.value.pgcode[:2] in ("22", "54")
    assert sql.rows("SELECT state, output FROM job_queue WHERE id IN (%s, %s, %s)"
                    " ORDER BY id", (x, y, x_next)) == [
        ("running", None), ("running", None), ("pending", None)]


def test_a_hand_on_leaves_a_lowered_limit_to_be_reached(sql, store):
    store.sync_limits({"a": db.Limits(max_running_per_key=2)})
    _insert(sql, "a", ["x"] * 6)
    first, _ = store.claim_limited_jobs("c1", 1, 30, None)
    second, _ = store.claim_limited_jobs("c2", 1, 30, None)
    store.sync_limits({"a": db.Limits(max_running_per_key=1)})
    # Two run where one may: the first to end hands nothing on.
    assert _hand_on(store, "c1", first)[1] == []
    assert len(_hand_on(store, "c2", second)[1]) == 1
    assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'running'") == 1


def _generation(sql, kind="a"):
    return sql.value("SELECT generation FROM job_queue_limits WHERE kind = %s", (kind,))


def test_a_job_comes_with_the_generation_of_its_kinds_limits(sql, store):
    store.sync_limits({"a": PER_KEY})
    _insert(sql, "a", ["x", "x", None])
    first = _generation(sql)
    jobs, _ = store.claim_limited_jobs("c", 10, 30, None)
    assert [j.generation for j in jobs] == [first]
    keyless, _ = store.claim_due_jobs("c", 10, 30, None)
    assert [j.generation for j in keyless] == [None]
    assert [j.generation for j in _hand_on(store, "c", jobs)[1]] == [first]
    # Writing the same limits, or moving the walk's cursor, leaves it.
    store.sync_limits({"a": PER_KEY})
    sql.rows("UPDATE job_queue_limits SET key_cursor = 'x', updated_at = now()")
    assert _generation(sql) == first
    # Any change of a limit, from a worker's registry or from SQL, starts
    # another, never one used before.
    store.sync_limits({"a": db.Limits(max_running_per_key=2)})
    second = _generation(sql)
    sql.rows("UPDATE job_queue_limits SET max_running_per_key = 1")
    third = _generation(sql)
    sql.rows("DELETE FROM job_queue_limits")
    sql.rows("INSERT INTO job_queue_limits (kind, max_running_per_key) VALUES ('a', 1)")
    assert len({first, second, third, _generation(sql)}) == 4


def _run_nobody_counted(sql, key):
    """A running row of ``key`` written by hand: no claim counted it."""
    sql.rows("INSERT INTO job_queue (kind, concurrency_key, state, locked_by, lease_expires_at,"
             " attempts, started_at) VALUES ('a', %s, 'running', 'elsewhere',"
             " now() + interval '1 minute', 1, now())", (key,))


@pytest.mark.parametrize("given", ["the claim's", "none"])
def test_a_hand_on_counts_a_keys_runs_unless_its_runs_generation_is_in_force(
        sql, store, given):
    store.sync_limits({"a": PER_KEY})
    _insert(sql, "a", ["x", "x"])
    jobs, _ = store.claim_limited_jobs("c", 10, 30, None)
    _run_nobody_counted(sql, "x")
    generations = db.generations_of(jobs) if given == "the claim's" else None
    _, handed = store.record_successes_handing_on("c", [j.id for j in jobs], 10, 30, None,
                                                  generations=generations)
    # Counted, the key is full (the run no claim counted); uncounted, the
    # generation vouches for it.
    assert len(handed) == (1 if given == "the claim's" else 0)


@pytest.mark.parametrize("control", [False, True])
def test_a_hand_on_after_the_limit_was_lowered_counts_the_keys_runs(sql, store, control):
    store.sync_limits({"a": db.Limits(max_running_per_key=2)})
    _insert(sql, "a", ["x"] * 4)
    jobs, _ = store.claim_limited_jobs("c", 10, 30, None)
    assert len(jobs) == 2
    if control:
        # The naive form: a generation that outlives a change of the limit.
        sql.rows("ALTER TABLE job_queue_limits DISABLE TRIGGER job_queue_limits_changed")
    sql.rows("UPDATE job_queue_limits SET max_running_per_key = 1")
    # Two run where one may: the runs that end hand on only what brings
    # the key back within its limit.
    _hand_on(store, "c", jobs)
    running = sql.value("SELECT count(*) FROM job_queue WHERE state = 'running'")
    assert running == (2 if control else 1)


def test_a_kind_with_a_run_no_limited_claim_started_is_counted_at_every_hand_on(
        sql, store, database_url):
    # A producer's REPEATABLE READ transaction takes its snapshot before the
    # per-key limit appears and inserts after: its row is routed by the
    # limits it sees, to the regular lane, whose claim runs it uncounted.
    producer = psycopg2.connect(database_url)
    producer.set_session(isolation_level="REPEATABLE READ")
    with producer.cursor() as cur:
        cur.execute("SELECT FROM job_queue LIMIT 1")
    store.sync_limits({"a": PER_KEY})
    [(stray, _)] = db.enqueue_jobs(producer, [db.NewJob("a", "{}", concurrency_key="x")])
    producer.commit()
    producer.close()
    _insert(sql, "a", ["x"] * 3)
    jobs, _ = store.claim_limited_jobs("c", 10, 30, None)
    assert [j.id for j in store.claim_due_jobs("c", 10, 30, None)[0]] == [stray]
    assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'running'") == 2
    # The key runs two where one may, under the generation its limited run
    # started in: its hand-on counts, and brings it back within its limit.
    assert _hand_on(store, "c", jobs)[1] == []
    assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'running'") == 1


@pytest.mark.parametrize("case", ["kind-wide limit", "rate limit", "paused", "other queue",
                                  "not due", "lost claim"])
def test_what_a_success_does_not_hand_on(sql, store, case):
    limits = {"kind-wide limit": db.Limits(max_running=5, max_running_per_key=1),
              "rate limit": db.Limits(max_running_per_key=1, rate_limit=100, rate_seconds=1.0)}
    store.sync_limits({"a": limits.get(case, PER_KEY)})
    first, following = _insert(sql, "a", ["x", "x"])
    jobs, _ = store.claim_limited_jobs("c", 10, 30, None)
    if case == "paused":
        store.pause_queue("default")
    if case == "not due":
        sql.rows("UPDATE job_queue SET run_at = now() + interval '1 hour' WHERE id = %s",
                 (following,))
    if case == "lost claim":
        sql.rows("UPDATE job_queue SET locked_by = 'reaper' WHERE id = %s", (first,))
    queues = ["other"] if case == "other queue" else None
    written, handed = _hand_on(store, "c", jobs, queues=queues)
    assert handed == []
    assert written == (set() if case == "lost claim" else {first})
    assert sql.value("SELECT state FROM job_queue WHERE id = %s", (following,)) == "pending"


def test_a_slot_freed_under_repeatable_read_wakes_the_workers_whatever_it_sees(
        sql, store, database_url):
    # SQL of one's own that ends a run, in a transaction whose snapshot
    # predates the key's next job: its look would miss that job.
    store.sync_limits({"a": PER_KEY})
    [x] = _insert(sql, "a", ["x"])
    jobs, _ = store.claim_limited_jobs("c", 10, 30, None)
    own = psycopg2.connect(database_url)
    own.set_session(isolation_level="REPEATABLE READ")
    with own.cursor() as cur:
        cur.execute("SELECT count(*) FROM job_queue")  # its snapshot
        [following] = _insert(sql, "a", ["x"])
        # The claim that job's insert woke finds x full.
        assert store.claim_limited_jobs("w", 10, 30, None)[0] == []
        listener = wakeup_listener(database_url)
        cur.execute("UPDATE job_queue SET state = 'failed', locked_by = NULL,"
                    " lease_expires_at = NULL, finished_at = now() WHERE id = %s", (x,))
    own.commit()
    own.close()
    assert "*" in notifications(listener)
    listener.close()
    assert [j.id for j in store.claim_limited_jobs("w", 10, 30, None)[0]] == [following]


def test_a_pending_row_given_a_key_wakes_the_workers_of_its_queue(sql, store, database_url):
    store.sync_limits({"a": PER_KEY})
    [row] = _insert(sql, "a", [None], queue="mail")
    listener = wakeup_listener(database_url)
    sql.rows("UPDATE job_queue SET concurrency_key = 'x' WHERE id = %s", (row,))
    assert notifications(listener) == ["mail"]
    # A change of anything else wakes nobody.
    sql.rows("UPDATE job_queue SET priority = 5 WHERE id = %s", (row,))
    assert notifications(listener) == []
    listener.close()


def test_a_freed_key_brings_its_first_parked_row_back_to_the_lane(sql, store):
    store.sync_limits({"a": PER_KEY})
    ids = _insert(sql, "a", ["x"] * 4)
    jobs, _ = store.claim_limited_jobs("c", 10, 30, None)
    sql.rows("UPDATE job_queue SET parked = true WHERE id <> %s", (ids[0],))
    _finish(store, "c", jobs)
    assert sql.rows("SELECT id FROM job_queue WHERE parked ORDER BY id") == [(i,) for i in ids[2:]]
    # Found in the lane, no walk needed.
    sql.rows("UPDATE job_queue_limits SET key_cursor = 'x'")
    assert [j.id for j in store.claim_limited_jobs("c", 10, 30, None)[0]] == [ids[1]]


def test_a_resumed_queue_brings_back_the_first_parked_row_of_each_key_with_room(sql, store):
    store.sync_limits({"a": PER_KEY})
    full = [f"k{n:04}" for n in range(1000)]
    # Keys whose runs go on, each with a backlog set aside, as claims leave
    # them once their runs have gone on for a second.
    _insert(sql, "a", full)
    sql.rows("UPDATE job_queue SET state = 'running', locked_by = 'other', started_at = now(),"
             " lease_expires_at = now() + interval '1 hour'")
    _insert(sql, "a", full * 2)
    sql.rows("UPDATE job_queue SET parked = true WHERE state = 'pending'")
    # z's run ends while its queue is paused: its slot frees, and its rows,
    # all of that queue, stay set aside.
    [z] = _insert(sql, "a", ["z"], queue="p")
    z_rows = _insert(sql, "a", ["z", "z"], queue="p")
    jobs, _ = store.claim_limited_jobs("c", 10, 30, None)
    assert [j.id for j in jobs] == [z]
    sql.rows("UPDATE job_queue SET parked = true WHERE id = ANY(%s)", (z_rows,))
    store.pause_queue("p")
    _finish(store, "c", jobs)
    sql.rows("VACUUM ANALYZE job_queue")
    store.resume_queue("p")
    # The next claim takes z's first row; the full keys' rows stay aside.
    assert [j.id for j in store.claim_limited_jobs("c", 10, 30, None)[0]] == z_rows[:1]
    assert sql.value("SELECT count(*) FROM job_queue WHERE NOT parked AND state = 'pending'") == 0


def test_a_paused_queue_holds_only_its_own_rows_of_a_key(sql, store):
    store.sync_limits({"a": PER_KEY})
    [first] = _insert(sql, "a", ["x"], queue="p")
    jobs, _ = store.claim_limited_jobs("c", 1, 30, None)
    assert [j.id for j in jobs] == [first]
    # x's backlog, mostly of queue p, set aside as a claim leaves a deep one;
    # its last row is of another queue.
    backlog = _insert(sql, "a", ["x"] * 20, queue="p")
    [other] = _insert(sql, "a", ["x"], queue="q")
    sql.rows("UPDATE job_queue SET parked = true WHERE id = ANY(%s)", (backlog + [other],))
    _finish(store, "c", jobs)  # x's slot frees: p's first row comes back to the lane
    store.pause_queue("p")
    # The row of queue q is the key's one row a claim may take: it runs.
    assert [j.id for j in store.claim_limited_jobs("c", 10, 30, None)[0]] == [other]


def test_a_running_jobs_kind_and_key_cannot_change(sql, store):
    store.sync_limits({"a": PER_KEY})
    running, waiting = _insert(sql, "a", ["x", "x"])
    _insert(sql, "a", ["y"])
    store.claim_limited_jobs("c", 10, 30, None)
    for column, value in (("concurrency_key", "y"), ("kind", "b")):
        with pytest.raises(psycopg2.errors.ObjectNotInPrerequisiteState,
                           match=f"job {running} is running"):
            sql.rows(f"UPDATE job_queue SET {column} = %s WHERE id = %s", (value, running))
    # A waiting job's key may change, and the job is routed by it.
    sql.rows("UPDATE job_queue SET concurrency_key = 'z' WHERE id = %s", (waiting,))
    assert [j.id for j in store.claim_limited_jobs("c", 10, 30, None)[0]] == [waiting]
    assert sql.rows("SELECT concurrency_key, count(*) FROM job_queue WHERE state = 'running'"
                    " GROUP BY 1 ORDER BY 1") == [("x", 1), ("y", 1), ("z", 1)]


def test_a_key_crowded_out_of_a_claim_stays_in_the_lane(sql, store):
    store.sync_limits({"a": PER_KEY})
    ahead = [f"k{n:02}" for n in range(17)]
    _insert(sql, "a", ahead + ["z"] * 30)
    # The claim reads 35 rows, 18 of them z's, which has room but comes
    # after what the claim may take: its rows are not parked out of reach.
    jobs, more = store.claim_limited_jobs("c", 17, 30, None)
    assert _keys_of(sql, jobs) == ahead and more
    assert sql.value("SELECT count(*) FROM job_queue WHERE parked") == 0
    assert _keys_of(sql, store.claim_limited_jobs("c", 17, 30, None)[0]) == ["z"]


def test_a_run_taken_over_still_counts_against_a_lowered_limit(sql, store):
    store.sync_limits({"a": db.Limits(max_running_per_key=2)})
    _insert(sql, "a", ["x"] * 6)
    jobs, _ = store.claim_limited_jobs("c1", 2, 30, None)
    sql.rows("UPDATE job_queue SET locked_by = 'c2' WHERE id = %s", (jobs[0].id,))
    store.sync_limits({"a": PER_KEY})
    assert _hand_on(store, "c1", jobs) == ({jobs[1].id}, [])
    assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'running'") == 1


def test_a_freed_key_sees_what_a_claim_parked_meanwhile_whatever_the_default_isolation(
        sql, database_url):
    sql.rows("ALTER DATABASE " + database_url.rsplit("/", 1)[1]
             + " SET default_transaction_isolation = 'repeatable read'")
    store = db.JobStore(database_url)
    store.sync_limits({"a": PER_KEY})
    ids = _insert(sql, "a", ["x"] * 3)
    jobs, _ = store.claim_limited_jobs("c", 1, 30, None)
    claim = psycopg2.connect(database_url)
    cur = claim.cursor()
    # A claim holds the lock; the run ends meanwhile, and its trigger waits.
    cur.execute(db.QUERIES["lock_limited_claims"])
    ended = threading.Thread(target=_finish, args=(store, "c", jobs))
    ended.start()
    deadline = time.monotonic() + 10
    while not sql.value("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                        " AND NOT granted"):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    # The claim parks x's rows, as it would seeing x's run still going.
    cur.execute("UPDATE job_queue SET parked = true WHERE id <> %s", (ids[0],))
    claim.commit()
    ended.join(10)
    assert sql.rows("SELECT id FROM job_queue WHERE parked ORDER BY id") == [(ids[2],)]
    claim.close()
    store.close()


def _wait_for_lock_waiters(sql, count):
    deadline = time.monotonic() + 10
    while sql.value("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                    " AND NOT granted") < count:
        assert time.monotonic() < deadline
        time.sleep(0.01)


@pytest.mark.parametrize("verb", ["pause", "resume"])
def test_a_pause_or_resume_sees_what_a_claim_took_meanwhile_whatever_the_default_isolation(
        sql, database_url, verb):
    sql.rows("ALTER DATABASE " + database_url.rsplit("/", 1)[1]
             + " SET default_transaction_isolation = 'repeatable read'")
    store = db.JobStore(database_url)
    store.sync_limits({"a": PER_KEY})
    # Key x: a row of queue p, and a parked row of queue q.
    [later] = _insert(sql, "a", ["x"], queue="p")
    sql.rows("UPDATE job_queue SET run_at = now() + interval '1 hour' WHERE id = %s", (later,))
    [parked] = _insert(sql, "a", ["x"], queue="q")
    if verb == "resume":
        store.pause_queue("p")
    sql.rows("UPDATE job_queue SET parked = true WHERE id = %s", (parked,))
    claim = psycopg2.connect(database_url)
    cur = claim.cursor()
    # A claim holds the lock; the pause (or resume) waits for it, then the
    # claim takes the parked row.
    cur.execute(db.QUERIES["lock_limited_claims"])
    done = {}
    changing = threading.Thread(target=lambda: done.update(
        changed=getattr(store, f"{verb}_queue")("p")))
    changing.start()
    _wait_for_lock_waiters(sql, 1)
    cur.execute("UPDATE job_queue SET state = 'running', parked = false, locked_by = 'c',"
                " lease_expires_at = now() + interval '30 seconds' WHERE id = %s", (parked,))
    claim.commit()
    changing.join(10)
    # Done, and the row the claim took left to it.
    assert done == {"changed": True}
    assert sql.value("SELECT count(*) FROM job_queue_paused") == (1 if verb == "pause" else 0)
    assert sql.value("SELECT state FROM job_queue WHERE id = %s", (parked,)) == "running"
    claim.close()
    store.close()


def test_two_transactions_pausing_the_same_queue_do_not_deadlock(sql, store, database_url):
    store.sync_limits({"a": PER_KEY})
    _insert(sql, "a", ["x"], queue="p1")
    _insert(sql, "a", ["y"], queue="p2")
    # One transaction pauses p1, then p2; another pauses p2 meanwhile.
    first = psycopg2.connect(database_url)
    cur = first.cursor()
    cur.execute("INSERT INTO job_queue_paused (queue) VALUES ('p1')")
    done = {}
    other = db.JobStore(database_url)
    pausing = threading.Thread(target=lambda: done.update(paused=other.pause_queue("p2")))
    pausing.start()
    _wait_for_lock_waiters(sql, 1)
    cur.execute("INSERT INTO job_queue_paused (queue) VALUES ('p2') ON CONFLICT DO NOTHING")
    first.commit()
    pausing.join(10)
    assert done == {"paused": False}  # paused already, by the first
    assert sql.rows("SELECT queue FROM job_queue_paused ORDER BY 1") == [("p1",), ("p2",)]
    first.close()
    other.close()


# -- races ------------------------------------------------------------------------------

RACERS = 6
KEYS = 6
PER_KEY_JOBS = 72
RATE = (4, 0.25)
RATE_JOBS = 40
#: Naive per-key claims: the limit taken for the room of every key, whatever
#: of it runs already.
NO_KEY_CHECK = db.QUERIES["claim_limited_jobs"].replace(
    "WHERE key_room IS NULL OR key_place <= key_room", "WHERE key_place <= 1").replace(
    "per_key - (SELECT count(*)", "per_key + 0 * (SELECT count(*)").replace(
    "per_key - running.count", "per_key + 0 * running.count")
assert NO_KEY_CHECK.count("per_key + 0 * (SELECT count(*)") == 1
assert NO_KEY_CHECK.count("per_key + 0 * running.count") == 1


#: A naive hand-on: the successes written, then each key's next job taken in
#: a statement of its own, whatever runs by then.
NAIVE_NEXT = """
UPDATE job_queue
SET state = 'running', parked = false, locked_by = %(claimant)s,
    lease_expires_at = clock_timestamp() + interval '30 seconds', attempts = attempts + 1,
    started_at = clock_timestamp()
WHERE id = ANY(ARRAY(SELECT min(q.id) FROM job_queue AS q
                     JOIN job_queue AS e USING (kind, concurrency_key)
                     WHERE q.state = 'pending' AND e.id = ANY(%(ids)s)
                     GROUP BY q.kind, q.concurrency_key))
  AND state = 'pending'
RETURNING id, queue, kind, payload::text, attempts, max_attempts, checkpoint, priority, 0.0,
          trace_context
"""


def _hand_on_in_one(store, claimant, ids):
    return store.record_successes_handing_on(claimant, ids, len(ids), 30, None)[1]


def _hand_on_in_two(store, claimant, ids):
    store.record_outcomes(claimant, [db.Outcome(i) for i in ids])
    # Whatever the worker does between the two (a round trip to a server
    # elsewhere, its other writes): meanwhile the slot is free.
    time.sleep(0.01)
    with store.conn.cursor() as cur:
        cur.execute(NAIVE_NEXT, {"claimant": claimant, "ids": ids})
        return [db.ClaimedJob(*row) for row in cur.fetchall()]


def _claim_and_hold(url, variant, barrier):
    if variant == "no lock":
        db.QUERIES["lock_limited_claims"] = "SELECT 1;"
        db.QUERIES["claim_limited_jobs"] = LOCKING_AS_READ
    if variant == "no key check":
        db.QUERIES["claim_limited_jobs"] = NO_KEY_CHECK
    hand_on = {"hand-on": _hand_on_in_one, "naive hand-on": _hand_on_in_two}.get(variant)
    hold_limited_claims(url, barrier, 3, (0.02, 0.05), hand_on)


def _most_per_key(sql):
    """The most runs of one key open at one instant."""
    return most_at_once_per_key(sql.rows(
        "SELECT checkpoint->>'key', started_at, finished_at FROM test_executions"))


def _race(sql, url, variant, limits, jobs):
    sql.rows("TRUNCATE test_executions")
    sql.rows("DELETE FROM job_queue")
    sql.rows("DELETE FROM job_queue_starts")
    store = db.JobStore(url)
    store.sync_limits({"a": limits})
    store.close()
    sql.rows("INSERT INTO job_queue (kind, concurrency_key)"
             " SELECT 'a', 'k' || (g %% %s) FROM generate_series(1, %s) g", (KEYS, jobs))
    race(_claim_and_hold, RACERS, url, variant)
    assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'succeeded'") == jobs


def _most_in_a_window(sql, seconds):
    starts = sorted(float(s) for s, in sql.rows(
        "SELECT checkpoint->>'claimed_at' FROM test_executions"))
    return max(sum(1 for t in starts[i:] if t < start + seconds)
               for i, start in enumerate(starts))


@pytest.mark.parametrize("variant", ["real", "hand-on"])
def test_racing_per_key_claims_never_run_a_key_twice_at_once(executions, database_url, variant):
    _race(executions, database_url, variant, PER_KEY, PER_KEY_JOBS)
    assert _most_per_key(executions) == 1
    if variant == "hand-on":
        # Slots were handed on: some jobs started without a claim of theirs.
        assert executions.value("SELECT count(*) FROM job_queue WHERE NOT limited") > 0


@pytest.mark.parametrize("variant", ["no lock", "no key check", "naive hand-on"])
def test_negative_control_per_key_claims_without_the_lock_or_the_key_overshoot(
        executions, database_url, variant):
    for _ in range(5):
        _race(executions, database_url, variant, PER_KEY, PER_KEY_JOBS)
        if _most_per_key(executions) > 1:
            return
    pytest.fail(f"five races with {variant} and no overshoot: the race cannot catch one")


def test_racing_rate_limited_claims_never_start_more_than_n_in_a_window(
        executions, database_url):
    limits = db.Limits(rate_limit=RATE[0], rate_seconds=RATE[1])
    _race(executions, database_url, "real", limits, RATE_JOBS)
    assert _most_in_a_window(executions, RATE[1]) == RATE[0]


def test_negative_control_rate_limited_claims_without_the_lock_overshoot(
        executions, database_url):
    limits = db.Limits(rate_limit=RATE[0], rate_seconds=RATE[1])
    for _ in range(5):
        _race(executions, database_url, "no lock", limits, RATE_JOBS)
        if _most_in_a_window(executions, RATE[1]) > RATE[0]:
            return
    pytest.fail("five races without the lock and no overshoot: the race cannot catch one")
