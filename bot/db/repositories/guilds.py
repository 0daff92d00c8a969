"""Guild STM settings, categories and per-user privacy settings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import BigInteger, any_, case, delete, func, literal, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from bot.db.models import GuildSettings, StmCategory, UserSettings
from bot.vocabulary.model import Category, GuildConfig

SETTABLE = {
    "short_term_memory_enabled",
    "refresh_cadence",
    "render_mode",
    "crude_message_count",
    "tool_description_override",
    "nudge_override",
    "always_on_channel_ids",
}


async def load_guild_config(
    session: AsyncSession, guild_id: int, defaults: GuildConfig
) -> GuildConfig:
    """The guild's configuration; the operator's defaults where it has no row."""
    row = await session.get(GuildSettings, guild_id)
    categories = await session.scalars(
        select(StmCategory).where(StmCategory.guild_id == guild_id).order_by(StmCategory.position)
    )
    cats = tuple(Category(c.position, c.slug, c.label, c.description) for c in categories)
    if row is None:
        return GuildConfig(
            guild_id=guild_id,
            stm_enabled=defaults.stm_enabled,
            refresh_cadence=defaults.refresh_cadence,
            render_mode=defaults.render_mode,
            crude_message_count=defaults.crude_message_count,
            categories=cats,
        )
    return GuildConfig(
        guild_id=guild_id,
        stm_enabled=row.short_term_memory_enabled,
        refresh_cadence=row.refresh_cadence,
        render_mode="supersede" if row.render_mode == "supersede" else "crude_summary",
        crude_message_count=row.crude_message_count,
        tool_description_override=row.tool_description_override,
        nudge_override=row.nudge_override,
        categories=cats,
        always_on_channels=frozenset(row.always_on_channel_ids or ()),
    )


async def update_guild_settings(
    session: AsyncSession,
    guild_id: int,
    defaults: GuildConfig,
    changes: dict[str, Any],
    *,
    always_on: tuple[int, bool] | None = None,
) -> None:
    """Create the guild's row from the defaults if needed, then apply ``changes``.
    ``always_on`` adds one channel to the always-on list (or removes it) in the
    statement itself, against the row as committed: two toggles of different channels
    at once (any processes) both stay."""
    unknown = set(changes) - SETTABLE
    if unknown:
        raise ValueError(f"unknown guild settings: {sorted(unknown)}")
    base = {
        "guild_id": guild_id,
        "short_term_memory_enabled": defaults.stm_enabled,
        "refresh_cadence": defaults.refresh_cadence,
        "render_mode": defaults.render_mode,
        "crude_message_count": defaults.crude_message_count,
    }
    updates: dict[str, Any] = dict(changes)
    inserted: dict[str, Any] = {**base, **changes}
    if always_on is not None:
        channel_id, enabled = always_on
        stored = GuildSettings.always_on_channel_ids
        channel = literal(channel_id, BigInteger)
        # ON CONFLICT DO UPDATE locks the row and computes from its latest version.
        updates["always_on_channel_ids"] = (
            case((channel == any_(stored), stored), else_=func.array_append(stored, channel))
            if enabled
            else func.array_remove(stored, channel)
        )
        inserted["always_on_channel_ids"] = [channel_id] if enabled else []
    statement = insert(GuildSettings).values(**inserted)
    if updates:
        statement = statement.on_conflict_do_update(
            index_elements=[GuildSettings.guild_id], set_=updates
        )
    else:
        statement = statement.on_conflict_do_nothing(index_elements=[GuildSettings.guild_id])
    await session.execute(statement)


async def replace_categories(
    session: AsyncSession, guild_id: int, categories: Sequence[Category]
) -> None:
    await session.execute(delete(StmCategory).where(StmCategory.guild_id == guild_id))
    session.add_all(
        StmCategory(
            guild_id=guild_id,
            position=c.position,
            slug=c.slug,
            label=c.label,
            description=c.description,
        )
        for c in categories
    )
    await session.flush()


async def cross_context_opt_in(session: AsyncSession, user_id: int) -> bool:
    row = await session.get(UserSettings, user_id)
    return bool(row and row.cross_context_memory)


async def set_cross_context_opt_in(session: AsyncSession, user_id: int, enabled: bool) -> None:
    statement = insert(UserSettings).values(user_id=user_id, cross_context_memory=enabled)
    await session.execute(
        statement.on_conflict_do_update(
            index_elements=[UserSettings.user_id], set_={"cross_context_memory": enabled}
        )
    )


async def delete_user_settings(session: AsyncSession, user_id: int) -> int:
    result = await session.execute(
        delete(UserSettings).where(UserSettings.user_id == user_id).returning(UserSettings.user_id)
    )
    return len(result.all())


async def settings_user_ids(session: AsyncSession) -> set[int]:
    """Every user with stored settings."""
    return set(await session.scalars(select(UserSettings.user_id)))
