"""The fleet-wide limits of a kind, as job_queue_limits holds them, and
writing a registry's limits there (see lock_limits_sync and
lock_job_queue_for_routing in sql/queries.sql)."""

from __future__ import annotations

from typing import NamedTuple

import psycopg2.extensions

from .rows import Rows, result_of
from .statements import text_of


class Limits(NamedTuple):
    """What the claim of a kind's jobs keeps to; None for no such limit."""

    #: Jobs of the kind running at once.
    max_running: int | None = None
    #: Jobs of the kind with one concurrency_key running at once.
    max_running_per_key: int | None = None
    #: Starts of the kind in any window of rate_seconds.
    rate_limit: int | None = None
    rate_seconds: float | None = None

    def lanes(self) -> tuple[bool, bool]:
        """Which of the kind's rows the limited claim takes: all of them, or
        those with a key. A change of either moves rows between lanes."""
        return (self.max_running is not None or self.rate_limit is not None,
                self.max_running_per_key is not None)

    def __str__(self) -> str:
        said = []
        if self.max_running is not None:
            said.append(f"at most {self.max_running} running")
        if self.max_running_per_key is not None:
            said.append(f"at most {self.max_running_per_key} running per key")
        if self.rate_limit is not None:
            said.append(f"at most {self.rate_limit} starts per {self.rate_seconds:g}s")
        return ", ".join(said) or "no limit"


_LIMITS = Rows(Limits)


def read_limits(cur: psycopg2.extensions.cursor) -> dict[str, Limits]:
    cur.execute(text_of("limits"))
    result = result_of(cur)
    return dict(zip(result.column("kind"), _LIMITS.of(result)))


def sync_limits(conn: psycopg2.extensions.connection,
                wanted: dict[str, Limits | None]) -> list[str] | None:
    """Make job_queue_limits say what ``wanted`` says of its kinds (None: no
    limit); kinds not in it are left alone. Returns what changed, as lines
    for the log; nothing is written when nothing differs. None when another
    session is at it: look again later. LockNotAvailable when job_queue
    stayed locked (see lock_job_queue_for_routing)."""
    def changes(current: dict[str, Limits]) -> dict[str, Limits | None]:
        return {kind: limits for kind, limits in wanted.items() if current.get(kind) != limits}
    with conn.cursor() as cur:
        if not changes(read_limits(cur)):
            return []
    conn.autocommit = False
    try:
        with conn, conn.cursor() as cur:
            cur.execute(text_of("lock_limits_sync"))
            if not result_of(cur).value("locked"):
                return None
            current = read_limits(cur)
            todo = changes(current)
            # Rows change lanes when a kind's limits start or stop applying
            # to all its rows, or to those with a key.
            none = Limits().lanes()
            rerouted = [kind for kind, limits in todo.items()
                        if (limits.lanes() if limits else none)
                        != (current[kind].lanes() if kind in current else none)]
            if rerouted:
                cur.execute(text_of("lock_job_queue_for_routing"))
            done = []
            for kind, limits in sorted(todo.items()):
                if limits is None:
                    cur.execute(text_of("drop_limit"), {"kind": kind})
                else:
                    cur.execute(text_of("set_limit"), {"kind": kind, **limits._asdict()})
                done.append(f"{kind}: {limits or Limits()}")
                if kind in rerouted:
                    cur.execute(text_of("route_kind"), {"kind": kind})
            cur.execute(text_of("analyze_limits"))
            return done
    finally:
        if not conn.closed:
            conn.autocommit = True
