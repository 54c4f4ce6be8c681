"""The worker process: a forked child that claims jobs and runs them.

- :mod:`.process` — :class:`Worker`: its life, its signals and its loop,
  which composes the roles below and owns the database connection.
- :mod:`.producer` — claims jobs: how many, from which lane, and what
  goes back before it starts; :mod:`.batching` holds its numbers.
- :mod:`.executor` — runs the claimed jobs on handler threads, and
  :mod:`.event_loop` the ``async def`` ones.
- :mod:`.running` — one run, from its handler's call to its decided
  outcome; testing ends runs through it too.
- :mod:`.completer` — writes what the runs ended with, several to a
  statement.
- :mod:`.leases` — renews the claims' leases, and has the kernel end the
  process before one could lapse.
- :mod:`.poller` — waits: LISTEN/NOTIFY, kicks, the poll timer, the
  listener's token.
- :mod:`.timeouts` — sync runs past their kind's timeout.
- :mod:`.checkpoints` — a handler's ``j.checkpoint(data)`` saved.
- :mod:`.claims` — the values they share: a claim and its runs.
- :mod:`.recycling`, :mod:`.title` — when a worker makes way for a fresh
  one, and its process title.

Nothing here forks; the supervisor (:mod:`..supervisor`) does.
"""
