"""Kinds for the tests of j.transaction(): each writes an effect row in the
transaction that completes its job. The payload's "do" says what else
happens: "raise" inside the block, "lose_claim" (another claimant takes the
job over inside the block, as a reaper does once a lease lapsed),
"raise_after" (after the commit), or "hang_after" (after the commit, the
worker's pid is written to the file named "marker" and the handler sleeps
until it is killed)."""

import os
import time

import psycopg2

from motir_supervisor import job


def _effect(j, conn):
    with conn.cursor() as cur:
        cur.execute("INSERT INTO test_effects (job_id, attempt) VALUES (%s, %s)",
                    (j.id, j.attempt))


@job("transactional")
def transactional(j):
    do = j.payload.get("do")
    with j.transaction() as conn:
        _effect(j, conn)
        if do == "raise":
            raise ValueError("raised inside the transaction")
        if do == "lose_claim":
            other = psycopg2.connect(os.environ["DATABASE_URL"])
            with other, other.cursor() as cur:
                cur.execute("UPDATE job_queue SET locked_by = 'someone-else' WHERE id = %s",
                            (j.id,))
            other.close()
    if do == "raise_after":
        raise ValueError("raised after the transaction committed")
    if do == "hang_after":
        with open(j.payload["marker"], "w") as marker:
            marker.write(str(os.getpid()))
        time.sleep(120)
    return "not stored: completed in its transaction"


@job("transactional_async")
async def transactional_async(j):
    with j.transaction() as conn:
        _effect(j, conn)
