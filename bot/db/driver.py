"""The STM write path's statements, compiled once and run on the session's asyncpg connection.

Through SQLAlchemy's execution path each cost about three times asyncpg's own, most of
the bot's CPU per update (docs/scaling.md); transactions and pooling stay SQLAlchemy's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import asyncpg
from sqlalchemy import event
from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

_DIALECT = PGDialect_asyncpg()  # type: ignore[no-untyped-call]


@dataclass(frozen=True, slots=True)
class DriverStatement:
    """A statement compiled for asyncpg: its SQL (``$n`` parameters), the parameter
    names in order, and the values the construct fixed itself (a literal ``- 1``)."""

    sql: str
    names: tuple[str, ...]
    fixed: Mapping[str, Any]

    @classmethod
    def compile(
        cls, statement: ClauseElement, column_keys: Sequence[str] | None = None
    ) -> DriverStatement:
        """Compile ``statement``; an INSERT names the columns it sets in ``column_keys``."""
        compiled = statement.compile(
            dialect=_DIALECT, column_keys=list(column_keys) if column_keys else None
        )
        assert isinstance(compiled, SQLCompiler)
        fixed = {
            name: bind.effective_value
            for name, bind in compiled.binds.items()
            if not bind.required and (bind.value is not None or bind.callable is not None)
        }
        return cls(compiled.string, tuple(compiled.positiontup or ()), fixed)

    def args(self, values: Mapping[str, Any]) -> list[Any]:
        """The positional arguments for ``values`` (by parameter name)."""
        return [values[name] if name in values else self.fixed[name] for name in self.names]


async def driver_of(session: AsyncSession) -> asyncpg.Connection:
    """The asyncpg connection of ``session``'s transaction, with the transaction begun in
    the database: SQLAlchemy begins it with its first statement, and a statement sent on
    the connection before that would commit on its own."""
    connection = await session.connection()
    driver: asyncpg.Connection = (await connection.get_raw_connection()).driver_connection
    if not driver.is_in_transaction():
        await connection.exec_driver_sql("SELECT 1")
        if not driver.is_in_transaction():  # autocommit: these statements need a transaction
            raise RuntimeError("the session's connection is not in a transaction")
    return driver


async def fetch(
    session: AsyncSession, statement: DriverStatement, values: Mapping[str, Any]
) -> list[asyncpg.Record]:
    driver = await driver_of(session)
    rows: list[asyncpg.Record] = await driver.fetch(statement.sql, *statement.args(values))
    return rows


async def fetch_each(
    session: AsyncSession, statement: DriverStatement, rows: Sequence[Mapping[str, Any]]
) -> list[asyncpg.Record]:
    """Run ``statement`` once per row in one pipelined round trip; every row's results."""
    if not rows:
        return []
    driver = await driver_of(session)
    records: list[asyncpg.Record] = await driver.fetchmany(
        statement.sql, [statement.args(row) for row in rows]
    )
    return records


async def execute_each(
    session: AsyncSession, statement: DriverStatement, rows: Sequence[Mapping[str, Any]]
) -> None:
    """Run ``statement`` once per row in one pipelined round trip."""
    if not rows:
        return
    driver = await driver_of(session)
    await driver.executemany(statement.sql, [statement.args(row) for row in rows])


@contextmanager
def statements_sent(engine: AsyncEngine, record: Callable[[str], None]) -> Iterator[None]:
    """Call ``record`` with every statement ``engine``'s connections send meanwhile,
    through SQLAlchemy or asyncpg itself (to prove a warm path sends none)."""
    watched: list[asyncpg.Connection] = []

    def on_statement(*args: Any) -> None:
        record(str(args[2]))

    def on_query(query: Any) -> None:
        record(str(query.query))

    def on_checkout(dbapi_connection: Any, *_: Any) -> None:
        driver = dbapi_connection.driver_connection
        driver.add_query_logger(on_query)
        watched.append(driver)

    sync_engine = engine.sync_engine
    event.listen(sync_engine, "before_cursor_execute", on_statement)
    event.listen(sync_engine.pool, "checkout", on_checkout)
    try:
        yield
    finally:
        event.remove(sync_engine, "before_cursor_execute", on_statement)
        event.remove(sync_engine.pool, "checkout", on_checkout)
        for driver in watched:
            driver.remove_query_logger(on_query)
