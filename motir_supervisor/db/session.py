"""A process's own connection, opened again after a loss, and the named
statements run on it as their blocks in sql/*.sql declare them (see
:mod:`.statements`): prepared or not, what is sent before them in the same
query string, their plan made when they are prepared. Nothing else is
added to what a block says.

Shared by the store of the workers and operators (:mod:`.store`,
:mod:`.operations`) and the dashboard's reads; it knows none of their verbs.
"""

from __future__ import annotations

from typing import Any, Sequence

import psycopg2
import psycopg2.extensions

from .connections import connect
from .rows import Result, result_of
from .statements import DECLARED, QUERIES, prepared_form, sent_with, text_of

#: Filled on first use, so that a statement replaced at start-up (as the
#: tests' negative control replaces the claim) is the one prepared.
_PREPARED_FORMS: dict[str, tuple[str, str]] = {}


class Session:
    """One connection at a time, and the statements run on it by name."""

    def __init__(self, dsn: str, application_name: str = "motir-supervisor", *,
                 listen: bool = False, timeout_seconds: float = 20.0, prepare: bool = True,
                 opening: Sequence[tuple[str, dict[str, Any] | None]] = ()):
        self.dsn = dsn
        self.application_name = application_name
        #: LISTEN on every connection opened here, reconnects included, so
        #: that no reconnect can leave a worker deaf to wake-ups.
        self.listen = listen
        self.timeout_seconds = timeout_seconds
        #: Prepare the statements declared ``prepared`` on each connection.
        self.prepare = prepare
        #: Statements (and their parameters) run on every connection opened.
        self.opening = tuple(opening)
        self._conn: psycopg2.extensions.connection | None = None
        #: What the current connection has prepared; a new one starts empty.
        self._prepared: set[str] = set()

    @property
    def conn(self) -> psycopg2.extensions.connection:
        if self._conn is None or self._conn.closed:
            self.open()
        assert self._conn is not None  # open() connected, or raised
        return self._conn

    def open(self) -> None:
        """Connect now (reconnecting if need be), so that an outage shows here."""
        self.close()
        self._conn = connect(self.dsn, self.application_name, self.timeout_seconds)
        self._prepared = set()
        if self.prepare:
            # No JIT for statements that take a millisecond: compiling one
            # on a misestimate (a small table whose statistics are stale, as
            # analyze_limits explains) costs far more than running it. Not
            # with --no-listen: a pooler in transaction mode would leave the
            # setting on whichever server connection it landed.
            self.run("no_jit")
        if self.listen:
            self.run("listen")
        for name, params in self.opening:
            self.run(name, params)

    def start_listening(self) -> None:
        """LISTEN from now on, on this connection and every later one."""
        self.listen = True
        if self.connected:
            self.run("listen")

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.closed

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg2.Error:
                pass
            self._conn = None

    def fileno(self) -> int:
        return self.conn.fileno()

    def take_notifications(self) -> list[str]:
        """Read what arrived on the socket; return the payloads notified."""
        conn = self.conn
        conn.poll()
        payloads = [n.payload for n in conn.notifies]
        conn.notifies.clear()
        return payloads

    def run(self, name: str, params: dict[str, Any] | None = None) -> Result:
        """Run the block ``name`` as it declares, in one round trip."""
        with self.conn.cursor() as cur:
            if self.prepare and DECLARED[name].prepared:
                forms = _PREPARED_FORMS.get(name)
                if forms is None:
                    forms = _PREPARED_FORMS[name] = prepared_form(name)
                prepare, statement = forms
                if name not in self._prepared:
                    cur.execute(prepare)
                    self._prepared.add(name)
                    plan = DECLARED[name].plan
                    if plan is not None:
                        cur.execute(f"{QUERIES[plan]}\nEXPLAIN {statement}", params)
            else:
                statement = QUERIES[name]
            cur.execute(sent_with(name, statement), params)
            return result_of(cur)

    def count(self, name: str, params: dict[str, Any] | None = None) -> int:
        """Run the block ``name``; the number of rows it changed."""
        with self.conn.cursor() as cur:
            cur.execute(text_of(name), params)
            return cur.rowcount
