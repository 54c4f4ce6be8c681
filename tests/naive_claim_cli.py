"""motir-supervisor with a deliberately naive claim, for negative controls.

The claim reads due ids in a subquery and updates them without FOR UPDATE
SKIP LOCKED and without re-checking the state, so concurrent workers can
claim, and run, the same row. Tests start this instead of the real command
to prove that their assertions detect double execution.
"""

from motir_supervisor import cli, db

db.QUERIES["claim_due_jobs"] = """
UPDATE job_queue AS j
SET state = 'running', locked_by = %(claimant)s, attempts = j.attempts + 1,
    lease_expires_at = now() + make_interval(secs => %(lease_seconds)s), started_at = now()
WHERE j.id IN (SELECT id FROM job_queue
               WHERE state = 'pending' AND run_at <= now()
                 AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
               ORDER BY run_at, id LIMIT %(limit)s)
RETURNING j.id, j.queue, j.kind, j.payload::text AS payload, j.attempts, j.max_attempts,
          j.checkpoint, j.priority, false AS more_due, 0.0::float8 AS waited, j.trace_context,
          NULL::bigint AS generation
"""

if __name__ == "__main__":
    cli.main()
