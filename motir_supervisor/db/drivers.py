"""Running a sequence of statements (an enqueue, see :mod:`.enqueueing`; a
workflow or a batch, see :mod:`.workflows`) on the caller's connection,
whichever driver made it: psycopg2, psycopg 3 and SQLAlchemy's Session or
Connection in :func:`run`; psycopg 3's AsyncConnection and SQLAlchemy's
AsyncSession or AsyncConnection in :func:`run_async`, which awaits every
statement and so never blocks the event loop.

Each driver gets a small executor that sends one :class:`Statement` (the
text of a named block, with ``%(name)s`` parameters) and hands back its
:class:`Result`; what to send next is decided once, by the caller's
generator. Statements go through the connection as the caller holds it, in
its transaction: nothing here begins, commits or rolls back. On SQLAlchemy
they go through ``exec_driver_sql`` of the session's connection, so the
session's events and echo see them, over psycopg2 or psycopg as written and
over asyncpg with the parameters numbered.

psycopg and SQLAlchemy are optional (the ``[psycopg]`` and ``[sqlalchemy]``
extras): a connection is recognized by the modules already imported, so
nothing here imports them, and the worker never loads them. Nothing here
holds SQL text.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Generator, NamedTuple, TypeVar, Union

import psycopg2.extensions

from .rows import Result, result_of
from .statements import numbered

if TYPE_CHECKING:
    import psycopg
    import sqlalchemy.engine
    import sqlalchemy.ext.asyncio
    import sqlalchemy.orm

#: The connections :func:`run` takes. Annotations only: none of these
#: modules is imported at run time unless the caller's code did.
Connection = Union[psycopg2.extensions.connection, "psycopg.Connection[Any]",
                   "sqlalchemy.orm.Session", "sqlalchemy.orm.scoped_session[Any]",
                   "sqlalchemy.engine.Connection"]
#: The connections :func:`run_async` takes.
AsyncConnection = Union["psycopg.AsyncConnection[Any]", "sqlalchemy.ext.asyncio.AsyncSession",
                        "sqlalchemy.ext.asyncio.async_scoped_session[Any]",
                        "sqlalchemy.ext.asyncio.AsyncConnection"]

T = TypeVar("T")

#: SQLAlchemy's drivers whose parameters are ``%(name)s`` and that send a
#: list as an array, as the statements' text expects.
_PYFORMAT_DRIVERS = ("psycopg2", "psycopg")

_SYNC_ACCEPTED = ("a psycopg2 connection, a psycopg Connection, or a SQLAlchemy Session or"
                  " Connection")
_ASYNC_ACCEPTED = "a psycopg AsyncConnection, or a SQLAlchemy AsyncSession or AsyncConnection"


class Statement(NamedTuple):
    """One statement to send: its text, with ``%(name)s`` parameters, and
    their values."""

    text: str
    parameters: dict[str, Any]


#: What a sync call given an async connection says to do instead, and the
#: other way round.
_AWAIT_INSTEAD = "await enqueue_async (or enqueue_many_async) with it"
_CALL_INSTEAD = "call enqueue (or enqueue_many) with it"


def run(conn: Connection, steps: Generator[Statement, Result, T], *,
        instead: str = _AWAIT_INSTEAD) -> T:
    """Send each statement ``steps`` yields over ``conn``, send it back what
    that statement returned, and return what ``steps`` returns. ``instead``
    says what to do with an async connection, given here by mistake."""
    execute = _executor(conn, instead)
    try:
        statement = next(steps)
        while True:
            statement = steps.send(execute(statement))
    except StopIteration as done:
        return done.value


async def run_async(conn: AsyncConnection, steps: Generator[Statement, Result, T], *,
                    instead: str = _CALL_INSTEAD) -> T:
    """:func:`run` on an async connection, each statement awaited."""
    execute = _async_executor(conn, instead)
    try:
        statement = next(steps)
        while True:
            statement = steps.send(await execute(statement))
    except StopIteration as done:
        return done.value


#: (module, classes, driver): a connection of those classes is that driver's.
#: Found in sys.modules, never imported: a connection of a driver the
#: caller's code never imported cannot be at hand.
_DRIVERS = (
    ("psycopg", ("Connection",), "psycopg"),
    ("psycopg", ("AsyncConnection",), "psycopg_async"),
    ("sqlalchemy.orm", ("Session", "scoped_session"), "sqlalchemy_session"),
    ("sqlalchemy.engine", ("Connection",), "sqlalchemy_connection"),
    ("sqlalchemy.ext.asyncio", ("AsyncSession", "async_scoped_session"),
     "sqlalchemy_async_session"),
    ("sqlalchemy.ext.asyncio", ("AsyncConnection",), "sqlalchemy_async_connection"),
)


def _driver_of(conn: Any) -> str | None:
    if isinstance(conn, psycopg2.extensions.connection):
        return "psycopg2"
    for module_name, class_names, driver in _DRIVERS:
        module = sys.modules.get(module_name)
        if module is not None and isinstance(conn, tuple(getattr(module, name)
                                                         for name in class_names)):
            return driver
    return None


def _executor(conn: Any, instead: str) -> Callable[[Statement], Result]:
    driver = _driver_of(conn)
    if driver in _ASYNC_EXECUTORS:
        raise TypeError(f"conn is an async connection ({type(conn).__name__}): {instead}")
    if driver is None:
        raise TypeError(f"conn must be {_SYNC_ACCEPTED}, not {type(conn).__name__}")
    return _SYNC_EXECUTORS[driver](conn)


def _async_executor(conn: Any, instead: str) -> Callable[[Statement], Awaitable[Result]]:
    driver = _driver_of(conn)
    if driver in _SYNC_EXECUTORS:
        raise TypeError(f"conn is not an async connection ({type(conn).__name__}): {instead}")
    if driver is None:
        raise TypeError(f"conn must be {_ASYNC_ACCEPTED}, not {type(conn).__name__}")
    return _ASYNC_EXECUTORS[driver](conn)


def _on_psycopg2(conn: psycopg2.extensions.connection) -> Callable[[Statement], Result]:
    def execute(statement: Statement) -> Result:
        # The caller's connection may make dicts or named tuples of rows.
        with conn.cursor(cursor_factory=psycopg2.extensions.cursor) as cur:
            cur.execute(statement.text, statement.parameters)
            return result_of(cur)
    return execute


def _on_psycopg(conn: psycopg.Connection[Any]) -> Callable[[Statement], Result]:
    from psycopg.rows import tuple_row

    def execute(statement: Statement) -> Result:
        # Tuples whatever row factory the caller's connection has.
        with conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(statement.text, statement.parameters)
            return Result(_names(cur.description), cur.fetchall() if cur.description else [])
    return execute


def _on_psycopg_async(conn: psycopg.AsyncConnection[Any]
                      ) -> Callable[[Statement], Awaitable[Result]]:
    from psycopg.rows import tuple_row

    async def execute(statement: Statement) -> Result:
        async with conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(statement.text, statement.parameters)
            return Result(_names(cur.description),
                          await cur.fetchall() if cur.description else [])
    return execute


def _on_sqlalchemy(conn: sqlalchemy.engine.Connection) -> Callable[[Statement], Result]:
    in_form = _form_of(conn.dialect)

    def execute(statement: Statement) -> Result:
        # exec_driver_sql: SQLAlchemy passes text and parameters to the
        # driver unchanged, in the driver's own parameter style.
        result = conn.exec_driver_sql(*in_form(statement))
        return Result(tuple(result.keys()), [tuple(row) for row in result])
    return execute


def _on_sqlalchemy_async(conn: sqlalchemy.ext.asyncio.AsyncConnection
                         ) -> Callable[[Statement], Awaitable[Result]]:
    in_form = _form_of(conn.dialect)

    async def execute(statement: Statement) -> Result:
        result = await conn.exec_driver_sql(*in_form(statement))
        return Result(tuple(result.keys()), [tuple(row) for row in result])
    return execute


def _on_sqlalchemy_session(session: Any) -> Callable[[Statement], Result]:
    # The session's connection is asked for at each statement, not now: a
    # call with no job to insert leaves the session without a transaction,
    # as it found it.
    return lambda statement: _on_sqlalchemy(session.connection())(statement)


def _on_sqlalchemy_async_session(session: Any) -> Callable[[Statement], Awaitable[Result]]:
    async def execute(statement: Statement) -> Result:
        return await _on_sqlalchemy_async(await session.connection())(statement)
    return execute


_SYNC_EXECUTORS: dict[str, Callable[[Any], Callable[[Statement], Result]]] = {
    "psycopg2": _on_psycopg2, "psycopg": _on_psycopg,
    "sqlalchemy_session": _on_sqlalchemy_session, "sqlalchemy_connection": _on_sqlalchemy,
}
_ASYNC_EXECUTORS: dict[str, Callable[[Any], Callable[[Statement], Awaitable[Result]]]] = {
    "psycopg_async": _on_psycopg_async,
    "sqlalchemy_async_session": _on_sqlalchemy_async_session,
    "sqlalchemy_async_connection": _on_sqlalchemy_async,
}


def _form_of(dialect: Any) -> Callable[[Statement], tuple[str, Any]]:
    """How a statement goes to a SQLAlchemy dialect's driver: as written to
    psycopg2 and psycopg; to asyncpg, whose parameters are $1, $2, ..., with
    them numbered (its codecs, as SQLAlchemy sets them up, take the same
    values: JSON as text, lists as arrays)."""
    if dialect.name == "postgresql" and dialect.driver in _PYFORMAT_DRIVERS:
        return lambda statement: (statement.text, statement.parameters)
    if dialect.name == "postgresql" and dialect.driver == "asyncpg":
        return _numbered
    raise TypeError(f"enqueue on SQLAlchemy needs PostgreSQL through psycopg2, psycopg or"
                    f" asyncpg (postgresql+psycopg2://, postgresql+psycopg:// or"
                    f" postgresql+asyncpg://), not {dialect.name}+{dialect.driver}")


def _numbered(statement: Statement) -> tuple[str, tuple[Any, ...]]:
    text, names = numbered(statement.text)
    return text, tuple(statement.parameters[name] for name in names)


def _names(description: Any) -> tuple[str, ...]:
    return tuple(column.name for column in description) if description else ()
