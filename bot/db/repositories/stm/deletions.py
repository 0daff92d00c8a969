"""Deleting short-term memory rows, each deletion logged per server channel in ``stm_events``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import (
    ColumnElement,
    Text,
    and_,
    delete,
    false,
    func,
    literal,
    literal_column,
    not_,
    or_,
    select,
    union,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from bot.db.models import ShortTermMemory, StmEvent
from bot.db.repositories.stm.rows import ZERO


def _not_after(not_after: datetime | None) -> list[ColumnElement[bool]]:
    # A replayed deletion reaches only rows written before it was asked for: replaying it
    # twice (a crash between commit and spool rewrite) must not delete a newer write.
    return [] if not_after is None else [ShortTermMemory.updated_at <= not_after]


async def delete_channel(
    session: AsyncSession, channel_id: int, *, not_after: datetime | None = None
) -> int:
    """Delete every scope's row of a channel; return how many."""
    result = await session.execute(
        delete(ShortTermMemory)
        .where(ShortTermMemory.channel_id == channel_id, *_not_after(not_after))
        .returning(ShortTermMemory.id)
    )
    return len(result.all())


@dataclass(frozen=True, slots=True)
class UserRowsDeleted:
    user_rows: int
    contributed_rows: int


# A row's size, as ``StmEntry.chars`` counts it (the summary and every category value).
_ROW_CHARS: ColumnElement[int] = literal_column(
    "char_length(short_term_memories.summary) + (SELECT coalesce(sum(char_length(value)), 0)"
    " FROM jsonb_each_text(short_term_memories.categories))"
)


async def _delete_logged(
    session: AsyncSession,
    event: str,
    where: ColumnElement[bool],
    marked: ColumnElement[bool] | None = None,
) -> tuple[int, int]:
    """Delete the rows ``where`` says, logging ``event`` per server channel; (marked, others)."""
    # The event keeps the size of what went, for that server's /stm history: never the
    # text, nor whose it was (nor a DM's channel, which would say whose).
    gone = (
        delete(ShortTermMemory)
        .where(where)
        .returning(
            ShortTermMemory.guild_id,
            ShortTermMemory.channel_id,
            _ROW_CHARS.label("chars"),
            (marked if marked is not None else false()).label("marked"),
        )
        .cte("gone")
    )
    per_channel = (
        select(
            literal(event, Text),
            gone.c.guild_id,
            gone.c.channel_id,
            func.sum(gone.c.chars),
            ZERO,
        )
        .where(gone.c.guild_id.is_not(None))
        .group_by(gone.c.guild_id, gone.c.channel_id)
    )
    logged = (
        insert(StmEvent)
        .from_select(
            ["event", "guild_id", "channel_id", "chars_before", "chars_after"], per_channel
        )
        .cte("logged")
    )
    counts = (
        await session.execute(
            select(
                func.count().filter(gone.c.marked),
                func.count().filter(not_(gone.c.marked)),
            )
            .select_from(gone)
            .add_cte(logged)
        )
    ).one()
    return int(counts[0]), int(counts[1])


async def delete_user(
    session: AsyncSession, user_id: int, *, not_after: datetime | None = None
) -> UserRowsDeleted:
    """Delete the user's own rows and every row derived from their messages (``forget`` events)."""
    own = and_(ShortTermMemory.scope_kind == "user", ShortTermMemory.user_id == user_id)
    contributed = or_(
        ShortTermMemory.contributor_ids.contains([user_id]),
        ShortTermMemory.actor_user_id == user_id,
    )
    user_rows, contributed_rows = await _delete_logged(
        session, "forget", and_(or_(own, contributed), *_not_after(not_after)), own
    )
    return UserRowsDeleted(user_rows, contributed_rows)


async def delete_older_than(session: AsyncSession, cutoff: datetime) -> int:
    """The janitor's deletion (``expire`` events); return how many rows."""
    _, deleted = await _delete_logged(session, "expire", ShortTermMemory.updated_at < cutoff)
    return deleted


async def user_ids(session: AsyncSession) -> set[int]:
    """Every user id STM rows (owners, contributors, actors) and audit events name."""
    ids = union(
        select(ShortTermMemory.user_id),
        select(func.unnest(ShortTermMemory.contributor_ids)),
        select(ShortTermMemory.actor_user_id),
        select(StmEvent.user_id),
        select(StmEvent.actor_user_id),
    )
    return {user_id for user_id in await session.scalars(ids) if user_id is not None}
