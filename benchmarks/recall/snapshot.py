"""Kioku's stored memory, copied after ingesting and put back after each question.

Every Kioku table is read whole (a benchmark's database is small); putting it back
deletes every row and inserts the copy in one transaction, then moves each identity
sequence past the highest id so later inserts do not collide. Generated columns are
left to the database.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table, delete, insert, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.db.models import Base


def _stored_columns(table: Table) -> list[str]:
    return [column.name for column in table.columns if column.computed is None]


@dataclass(frozen=True)
class Snapshot:
    rows: dict[str, list[dict[str, Any]]]

    @property
    def row_count(self) -> int:
        return sum(len(rows) for rows in self.rows.values())


async def take_snapshot(engine: AsyncEngine) -> Snapshot:
    rows: dict[str, list[dict[str, Any]]] = {}
    async with engine.connect() as connection:
        for table in Base.metadata.sorted_tables:
            columns = [table.c[name] for name in _stored_columns(table)]
            result = await connection.execute(select(*columns))
            rows[table.name] = [dict(row._mapping) for row in result]
    return Snapshot(rows)


async def restore_snapshot(engine: AsyncEngine, snapshot: Snapshot) -> None:
    tables = Base.metadata.sorted_tables
    async with engine.begin() as connection:
        for table in reversed(tables):  # children before parents
            await connection.execute(delete(table))
        for table in tables:
            rows = snapshot.rows.get(table.name, [])
            if rows:
                await connection.execute(insert(table), rows)
            if "id" in table.c and table.c.id.identity is not None:
                await connection.execute(
                    text(
                        f"SELECT setval(pg_get_serial_sequence('{table.name}', 'id'), "
                        f"COALESCE((SELECT MAX(id) FROM {table.name}), 0) + 1, false)"
                    )
                )
