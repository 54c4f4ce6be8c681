"""The worker process: a forked child that claims jobs and runs them.

- :mod:`.process` — :class:`Worker`: its life, its signals and its loop,
  which composes the roles below and owns the database connection.
- :mod:`.producer` — claims jobs: how many, which lane, giving back what
  will not start.
- :mod:`.batching` — the numbers the producer claims with.
- :mod:`.executor` — runs the claimed jobs on threads and an event loop.
- :mod:`.completer` — writes what the runs ended with, several to a
  statement.
- :mod:`.leases` — renews the claims' leases and ends the process before
  one could lapse.
- :mod:`.poller` — waits: LISTEN/NOTIFY, kicks, the poll timer, tokens.
- :mod:`.claims` — the values all of them share: a claim and its runs.
- :mod:`.recycling`, :mod:`.title` — when a worker makes way for a fresh
  one, and its process title.

Nothing here forks; the supervisor (:mod:`..supervisor`) does.
"""
