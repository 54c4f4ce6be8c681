"""``with j.transaction() as conn:``: a handler's own writes and its job's
success committed together, fenced on the worker's claim.

The block gets a psycopg2 connection in an open transaction (READ
COMMITTED). When it exits cleanly, the job's row is set succeeded in that
same transaction, if the claim is still this worker's (its claimant and a
lease, as record_successes fences it), and the transaction commits: the
handler's writes and the job's success are one commit. If the claim was
taken over meanwhile, everything rolls back and ClaimLost is raised, so the
run ends as lost; if the block raises, everything rolls back and the run
fails as any run does.

Connections are opened the first time a handler asks for one, and kept for
the next: a run holds one only inside its block, so a worker holds at most
``--concurrency`` of them, and one whose handlers never ask holds none. A
kept one is reset (DISCARD ALL) before its next block, which also finds one
the server dropped meanwhile, so each block starts on a connection as new.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Iterator, Protocol

import psycopg2
import psycopg2.extensions

from .. import db

log = logging.getLogger(__name__)


class Completing(Protocol):
    """What a transaction completes: a worker's Run, or testing.drain's run."""

    claimed: db.ClaimedJob
    #: Set once the transaction committed the job's success.
    completed: bool


class ClaimLost(Exception):
    """The job was no longer this worker's when its transaction was to
    commit (its lease was taken over): nothing of the block was committed."""


class Transactions:
    def __init__(self, dsn: str, claimant: str, application_name: str,
                 timeout_seconds: float):
        self.dsn = dsn
        self.claimant = claimant
        self.application_name = application_name
        self.timeout_seconds = timeout_seconds
        #: Connections no block holds, most recently used last.
        self._idle: list[psycopg2.extensions.connection] = []
        #: The jobs whose block is open: one block per run, never nested.
        self._open: set[int] = set()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def around(self, run: Completing) -> Iterator[psycopg2.extensions.connection]:
        job = run.claimed
        with self._lock:
            if run.completed or job.id in self._open:
                raise RuntimeError(f"job {job.id} has had its j.transaction() block: one block"
                                   " per run, never one inside another")
            self._open.add(job.id)
        try:
            conn = self._take()
            try:
                yield conn
                if conn.autocommit:
                    # The block turned autocommit on: its writes are in
                    # already, and the success at least stays atomic.
                    log.warning("job %d %s turned autocommit on inside j.transaction(): its"
                                " writes were not committed with its success", job.id,
                                job.kind)
                    conn.autocommit = False
                if not db.record_success_in_transaction(conn, job.id, self.claimant):
                    raise ClaimLost(f"job {job.id} is no longer claimed by this worker;"
                                    " its transaction was rolled back")
                conn.commit()
            except BaseException:
                _roll_back(conn)
                raise
            finally:
                self._give_back(conn)
            run.completed = True
        finally:
            with self._lock:
                self._open.discard(job.id)

    def _take(self) -> psycopg2.extensions.connection:
        """A connection as new: an idle one, reset (what a block before set
        for its session is gone) and so found alive, or a new one."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                break
            try:
                conn.autocommit = True
                db.reset_session(conn)
                _read_committed(conn)
                return conn
            except psycopg2.Error:
                _close(conn)  # the server dropped it while it waited: the next, or a new one
        conn = db.connect(self.dsn, f"{self.application_name} transaction",
                          self.timeout_seconds)
        _read_committed(conn)
        return conn

    def _give_back(self, conn: psycopg2.extensions.connection) -> None:
        if conn.closed or conn.get_transaction_status() != \
                psycopg2.extensions.TRANSACTION_STATUS_IDLE:
            _close(conn)
            return
        with self._lock:
            self._idle.append(conn)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            _close(conn)


def _read_committed(conn: psycopg2.extensions.connection) -> None:
    conn.set_session(isolation_level=psycopg2.extensions.ISOLATION_LEVEL_READ_COMMITTED,
                     autocommit=False)


def _roll_back(conn: psycopg2.extensions.connection) -> None:
    try:
        conn.rollback()
    except psycopg2.Error:
        _close(conn)


def _close(conn: psycopg2.extensions.connection) -> None:
    try:
        conn.close()
    except psycopg2.Error:
        pass
