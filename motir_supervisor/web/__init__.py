"""``motir-supervisor web``: the HTTP face of the queue.

- :mod:`.server` — ``/healthz``, ``/metrics`` and the routing to the
  dashboard.
- :mod:`.dashboard` — the dashboard: login, pages, actions.
"""
