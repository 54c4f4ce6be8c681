"""The claim under genuine concurrency: several processes with warm
connections claim from thousands of rows at once. No row may be claimed
twice. The negative control runs the same race with a naive read-then-write
claim and must see double claims, which proves the race is real."""

import multiprocessing

import psycopg2.errors

from motir_supervisor import db

ROWS = 4000
PROCESSES = 4
BATCH = 3

# Reads due rows, then writes the claim: without FOR UPDATE SKIP LOCKED two
# claimers read the same rows and both "win" them.
NAIVE_CLAIM = """
UPDATE job_queue
SET state = 'running', locked_by = %(claimant)s, attempts = attempts + 1,
    lease_expires_at = now() + make_interval(secs => %(lease_seconds)s)
WHERE id IN (SELECT id FROM job_queue WHERE state = 'pending' AND run_at <= now()
             ORDER BY run_at, id LIMIT %(limit)s)
RETURNING id
"""


def _claim_until_empty(url, claimant, naive, barrier, results):
    # The connection is opened after the fork and warmed before the race.
    store = db.JobStore(url, application_name=claimant)
    store.conn.cursor().execute("SELECT 1")
    claimed = []
    barrier.wait()
    while True:
        if naive:
            try:
                with store.conn.cursor() as cur:
                    cur.execute(NAIVE_CLAIM, {"claimant": claimant, "limit": BATCH,
                                              "lease_seconds": 30})
                    ids = [r[0] for r in cur.fetchall()]
            except psycopg2.errors.DeadlockDetected:
                continue  # the naive claim also locks rows in no fixed order

        else:
            ids = [j.id for j in store.claim_due_jobs(claimant, BATCH, 30, None)[0]]
        if not ids:
            break
        claimed.extend(ids)
    store.close()
    results.put((claimant, claimed))


def race(url, naive):
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(PROCESSES)
    results = ctx.Queue()
    procs = [ctx.Process(target=_claim_until_empty,
                         args=(url, f"racer-{i}", naive, barrier, results))
             for i in range(PROCESSES)]
    for p in procs:
        p.start()
    per_claimant = dict(results.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(30)
    return per_claimant


def _seed(sql):
    sql.rows("INSERT INTO job_queue (kind) SELECT 'x' FROM generate_series(1, %s)", (ROWS,))


def test_no_row_is_ever_claimed_twice(sql, database_url):
    _seed(sql)
    per_claimant = race(database_url, naive=False)
    claims = [job_id for ids in per_claimant.values() for job_id in ids]
    assert len(claims) == len(set(claims)) == ROWS
    # Every claimer took part: the race was a race, not one process alone.
    assert all(len(ids) > 0 for ids in per_claimant.values())
    assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'running'"
                     " AND attempts = 1") == ROWS
    owners = dict(sql.rows("SELECT locked_by, count(*) FROM job_queue GROUP BY locked_by"))
    assert owners == {c: len(ids) for c, ids in per_claimant.items()}


def test_negative_control_a_naive_claim_is_caught(sql, database_url):
    _seed(sql)
    per_claimant = race(database_url, naive=True)
    claims = [job_id for ids in per_claimant.values() for job_id in ids]
    double = len(claims) - len(set(claims))
    assert double > 0, "the race never produced a double claim: the test cannot detect one"
    assert sql.value("SELECT count(*) FROM job_queue WHERE attempts > 1") > 0
