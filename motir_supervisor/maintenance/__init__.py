"""Periodic work on the database that any process of any machine may do at
once, each statement deciding alone what is its to do.

- :mod:`.reaper` — expired leases back to claimable jobs, and retention
  (run by the supervisor).
- :mod:`.scheduler` — each instant of a periodic job enqueued once (run by
  the one worker holding the scheduler's token).
- :mod:`.limits` — the registry's ``max_running`` limits written to
  ``job_queue_limits`` (run by each worker at its start).

Each is a service of its process's loop, in the one shape of
:mod:`.services`.
"""
