"""Access lists in ``guild_settings`` (the memory facade, embedded PostgreSQL): changes
of two processes at once both stay, and an id sits on one list at most."""

from __future__ import annotations

import asyncio

from sqlalchemy import select

from bot.config import Settings
from bot.db.engine import Database
from bot.db.models import GuildSettings
from bot.memory.service import MemoryService
from tests.helpers.builders import make_service

GUILD, ADMIN, OTHER_ADMIN = 500, 1, 2
ROLE, OTHER_ROLE, USER = 600, 601, 700


def allow(role_id: int) -> dict[str, tuple[int, bool]]:
    return {"allowed_role_ids": (role_id, True), "blocked_role_ids": (role_id, False)}


def block(role_id: int) -> dict[str, tuple[int, bool]]:
    return {"allowed_role_ids": (role_id, False), "blocked_role_ids": (role_id, True)}


async def lists(db: Database) -> tuple[list[int], list[int]]:
    async with db.sessions() as session:
        row = (await session.scalars(select(GuildSettings))).one()
        return sorted(row.allowed_role_ids), sorted(row.blocked_role_ids)


async def test_two_processes_allowing_at_once_keep_both_roles(
    db: Database, settings: Settings
) -> None:
    a = make_service(db.sessions, settings)
    b = make_service(db.sessions, settings)
    # Both have the empty lists cached: computed there and written whole, one would be lost.
    await a.guild_config(GUILD)
    await b.guild_config(GUILD)
    await asyncio.gather(
        a.update_guild_settings(GUILD, ADMIN, id_changes=allow(ROLE)),
        b.update_guild_settings(GUILD, OTHER_ADMIN, id_changes=allow(OTHER_ROLE)),
    )
    assert await lists(db) == ([ROLE, OTHER_ROLE], [])
    fresh = make_service(db.sessions, settings)
    assert (await fresh.guild_config(GUILD)).access.allowed_roles == {ROLE, OTHER_ROLE}


async def test_an_id_is_on_one_list_at_most(db: Database, settings: Settings) -> None:
    service: MemoryService = make_service(db.sessions, settings)
    await service.update_guild_settings(GUILD, ADMIN, id_changes=allow(ROLE))
    await service.update_guild_settings(GUILD, ADMIN, id_changes=allow(ROLE))  # not doubled
    assert await lists(db) == ([ROLE], [])
    config = await service.update_guild_settings(GUILD, ADMIN, id_changes=block(ROLE))
    assert await lists(db) == ([], [ROLE])
    assert config.access.blocked_roles == {ROLE} and not config.access.restricted
