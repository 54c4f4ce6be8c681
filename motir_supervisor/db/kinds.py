"""Each kind's policy as job_queue_kinds holds it (migrations/0016), and
writing a registry's policies there: the trigger that fills in what a row
left unset reads it, and so do the rescuer's and the reaper's delays."""

from __future__ import annotations

from typing import NamedTuple

import psycopg2.extensions

from .rows import Rows, result_of
from .statements import text_of


class KindPolicy(NamedTuple):
    """What job_queue_kinds says of a kind; None: the fleet's."""

    max_attempts: int | None
    queue: str | None
    priority: int | None
    #: The delay after each failed attempt, in seconds before jitter.
    retry_delays: tuple[float, ...]
    retry_jitter: float

    def __str__(self) -> str:
        said = [f"{name} {value}" for name, value in (
            ("max_attempts", self.max_attempts), ("queue", self.queue),
            ("priority", self.priority)) if value is not None]
        shown = ", ".join(f"{d:g}" for d in self.retry_delays[:4])
        said.append(f"retry delays {shown}{', ...' if len(self.retry_delays) > 4 else ''}s")
        return ", ".join(said)


_POLICIES = Rows(KindPolicy)


def read_kind_policies(cur: psycopg2.extensions.cursor) -> dict[str, KindPolicy]:
    cur.execute(text_of("kind_policies"))
    result = result_of(cur)
    return {kind: policy._replace(retry_delays=tuple(policy.retry_delays))
            for kind, policy in zip(result.column("kind"), _POLICIES.of(result))}


def sync_kind_policies(conn: psycopg2.extensions.connection,
                       wanted: dict[str, KindPolicy | None]) -> list[str]:
    """Make job_queue_kinds say what ``wanted`` says of its kinds (None: no
    row, the fleet's policy); kinds not in it are left alone. Returns what
    changed, as lines for the log; nothing is written when nothing differs.
    Two workers at it at once write the same rows, in the same order."""
    with conn.cursor() as cur:
        current = read_kind_policies(cur)
    todo = {kind: policy for kind, policy in sorted(wanted.items())
            if current.get(kind) != policy}
    if not todo:
        return []
    conn.autocommit = False
    try:
        with conn, conn.cursor() as cur:
            for kind, policy in todo.items():
                if policy is None:
                    cur.execute(text_of("drop_kind_policy"), {"kind": kind})
                else:
                    cur.execute(text_of("set_kind_policy"), {
                        "kind": kind, **policy._asdict(),
                        "retry_delays": list(policy.retry_delays)})
        return [f"{kind}: {policy or 'none'}" for kind, policy in todo.items()]
    finally:
        if not conn.closed:
            conn.autocommit = True
