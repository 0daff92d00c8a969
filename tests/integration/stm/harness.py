"""What the STM tests share: the test channel's keys, a prepared turn, the rows stored,
categories defined by label."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from bot.db.engine import Database
from bot.db.models import ShortTermMemory
from bot.memory.service import MemoryService
from bot.memory.turn.types import TurnState
from bot.vocabulary.model import Category, ScopeKey
from tests.helpers.builders import ALICE, CHANNEL, GUILD, make_service, prepare

SERVER_KEY = ScopeKey.server(GUILD, CHANNEL)
ALICE_KEY = ScopeKey.user(ALICE, CHANNEL, GUILD)


async def start_turn(
    service: MemoryService,
    *,
    user: int = ALICE,
    channel: int = CHANNEL,
    guild: int | None = GUILD,
    **options: Any,
) -> TurnState:
    prepared = await prepare(
        service, user, channel=channel, guild=guild, model="test-model", **options
    )
    return prepared.turn


async def rows(db: Database) -> list[ShortTermMemory]:
    async with db.sessions() as session:
        return list(
            await session.scalars(select(ShortTermMemory).order_by(ShortTermMemory.scope_kind))
        )


async def use_categories(service: MemoryService, *labels: str) -> None:
    await service.set_categories(
        GUILD,
        ALICE,
        [Category(i, label.lower(), label, f"{label} so far") for i, label in enumerate(labels)],
    )


def fresh_process(service: MemoryService) -> MemoryService:
    """Another process on ``service``'s database, settings and clock (or the same one,
    restarted): nothing cached."""
    return make_service(service.sessions, service.settings, service.clock)
