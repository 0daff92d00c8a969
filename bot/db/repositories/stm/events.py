"""The short-term memory audit log, ``stm_events``: what happened, never the memory text."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import or_, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

import bot.db.driver as driver
from bot.db.driver import DriverStatement
from bot.db.models import StmEvent
from bot.vocabulary import AuditEvent, ScopeKey


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One ``stm_events`` row to add."""

    event: str
    key: ScopeKey | None = None
    origin: str | None = None
    actor_user_id: int | None = None
    message_id: int | None = None
    chars_before: int | None = None
    chars_after: int | None = None
    guild_id: int | None = None
    channel_id: int | None = None


_EVENT_COLUMNS = tuple(
    c.name for c in StmEvent.__table__.columns if c.name not in ("id", "created_at")
)
# Inline: no RETURNING of the new ids, which nothing reads.
_ADD_EVENT = DriverStatement.compile(insert(StmEvent).inline(), _EVENT_COLUMNS)


async def add_events(session: AsyncSession, events: Sequence[EventRecord]) -> None:
    rows = []
    for record in events:
        key = record.key
        rows.append(
            {
                "event": record.event,
                "scope_kind": key.kind if key else None,
                "guild_id": key.guild_id if key else record.guild_id,
                "user_id": key.user_id if key else None,
                "channel_id": key.channel_id if key else record.channel_id,
                "origin": record.origin,
                "actor_user_id": record.actor_user_id,
                "message_id": record.message_id,
                "chars_before": record.chars_before,
                "chars_after": record.chars_after,
            }
        )
    await driver.execute_each(session, _ADD_EVENT, rows)


async def anonymize_events_of_user(session: AsyncSession, user_id: int) -> int:
    """Take the user (and their message) out of every event naming them; return how many."""
    # The log stays append-only: what happened stays, not who it was.
    result = await session.execute(
        update(StmEvent)
        .where(or_(StmEvent.user_id == user_id, StmEvent.actor_user_id == user_id))
        .values(user_id=None, actor_user_id=None, message_id=None)
        .returning(StmEvent.id)
    )
    return len(result.all())


async def recent_events(session: AsyncSession, guild_id: int, limit: int = 20) -> list[AuditEvent]:
    rows = await session.scalars(
        select(StmEvent)
        .where(StmEvent.guild_id == guild_id)
        .order_by(StmEvent.id.desc())
        .limit(limit)
    )
    return [
        AuditEvent(
            event=row.event,
            created_at=row.created_at,
            scope_kind=row.scope_kind,
            user_id=row.user_id,
            channel_id=row.channel_id,
            origin=row.origin,
            actor_user_id=row.actor_user_id,
            message_id=row.message_id,
            chars_before=row.chars_before,
            chars_after=row.chars_after,
        )
        for row in rows
    ]
