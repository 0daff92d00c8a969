"""Guild STM settings, categories and per-user privacy settings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import BigInteger, any_, case, delete, func, literal, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from bot.db.models import GuildSettings, StmCategory, UserSettings
from bot.vocabulary import Category, GuildAccess, GuildConfig

SETTABLE = {
    "short_term_memory_enabled",
    "refresh_cadence",
    "render_mode",
    "crude_message_count",
    "tool_description_override",
    "nudge_override",
    "always_on_channel_ids",
    "allowed_role_ids",
    "blocked_role_ids",
    "allowed_user_ids",
    "blocked_user_ids",
    "persona",
    "model",
}
# Lists of ids a change may add one id to, or remove one from (see update_guild_settings).
ID_LISTS = {
    "always_on_channel_ids",
    "allowed_role_ids",
    "blocked_role_ids",
    "allowed_user_ids",
    "blocked_user_ids",
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
        access=GuildAccess(
            allowed_roles=frozenset(row.allowed_role_ids or ()),
            blocked_roles=frozenset(row.blocked_role_ids or ()),
            allowed_users=frozenset(row.allowed_user_ids or ()),
            blocked_users=frozenset(row.blocked_user_ids or ()),
        ),
        persona=row.persona,
        model=row.model,
    )


async def update_guild_settings(
    session: AsyncSession,
    guild_id: int,
    defaults: GuildConfig,
    changes: dict[str, Any],
    *,
    always_on: tuple[int, bool] | None = None,
    id_changes: Mapping[str, tuple[int, bool]] | None = None,
) -> None:
    """Create the guild's row from the defaults if needed, then apply ``changes``.
    ``id_changes`` adds one id to a list of :data:`ID_LISTS` (``True``) or removes it,
    in the statement itself, against the row as committed: two changes of different ids
    at once (any processes) both stay. ``always_on`` is such a change of the always-on
    channels."""
    lists = dict(id_changes or {})
    if always_on is not None:
        lists["always_on_channel_ids"] = always_on
    unknown = (set(changes) - SETTABLE) | (set(lists) - ID_LISTS)
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
    for name, (item_id, add) in lists.items():
        stored = getattr(GuildSettings, name)
        item = literal(item_id, BigInteger)
        # ON CONFLICT DO UPDATE locks the row and computes from its latest version.
        updates[name] = (
            case((item == any_(stored), stored), else_=func.array_append(stored, item))
            if add
            else func.array_remove(stored, item)
        )
        inserted[name] = [item_id] if add else []
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
