"""The parent process: it forks the workers and outlives them.

- :mod:`.arbiter` — :class:`Supervisor`: the loop, signals dispatched to
  named methods, spawning, reaping and replacing workers, the drain.
- :mod:`.forking` — a fork that hands the child nothing it must not have.
- :mod:`.rescuer` — a dead worker's jobs, read from its ledger: outcomes
  written, claims released.
- :mod:`.metrics_server` — the process that serves ``--metrics-port``.

It runs no job. Its periodic database work is :mod:`..maintenance.reaper`.
"""
