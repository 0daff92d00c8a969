"""Races on one channel: concurrent turns, and clears landing mid-write."""

from __future__ import annotations

import asyncio

from sqlalchemy import func, select

from bot.config import Settings
from bot.db.engine import Database
from bot.db.models import ShortTermMemory, StmEvent
from bot.memory.model import ScopeKey
from bot.memory.service import MemoryService
from tests.helpers.builders import BOB, BOT, CHANNEL, GUILD, ManualClock, make_service

SERVER_KEY = ScopeKey.server(GUILD, CHANNEL)


async def test_fifty_concurrent_turns_write_at_most_once_each_and_cache_equals_database(
    db: Database, settings: Settings
) -> None:
    service = make_service(db.sessions, settings, ManualClock())
    users = [1000 + n for n in range(50)]
    turns = [
        (
            await service.prepare_turn(
                channel_id=CHANNEL, user_id=user, guild_id=GUILD, bot_user_id=BOT
            )
        ).turn
        for user in users
    ]

    async def turn_body(index: int) -> list[str]:
        turn = turns[index]
        # Every turn tries twice, concurrently with all the others.
        first, second = await asyncio.gather(
            service.update_stm(turn, summary=f"from turn {index}"),
            service.update_stm(turn, summary=f"again from turn {index}"),
        )
        return [str(first), str(second)]

    results = await asyncio.gather(*(turn_body(i) for i in range(50)))
    for pair in results:
        assert pair.count("saved") == 1, pair
        (other,) = [r for r in pair if r != "saved"]
        assert other.startswith("rejected: short-term memory was already updated"), pair
    async with db.sessions() as session:
        row = await session.scalar(
            select(ShortTermMemory).where(
                ShortTermMemory.scope_kind == "server", ShortTermMemory.channel_id == CHANNEL
            )
        )
        updates = await session.scalar(
            select(func.count())
            .select_from(StmEvent)
            .where(StmEvent.event == "update", StmEvent.scope_kind == "server")
        )
    assert row is not None and updates == 50
    cached = service.cache.get(SERVER_KEY)
    assert cached is not None
    assert (cached.summary, cached.version) == (row.summary, row.version) == (row.summary, 50)


async def test_clears_interleaved_with_writes_never_leave_a_row_behind(
    db: Database, settings: Settings
) -> None:
    service: MemoryService = make_service(db.sessions, settings, ManualClock())
    for round_ in range(20):
        turn = (
            await service.prepare_turn(
                channel_id=CHANNEL, user_id=BOB, guild_id=GUILD, bot_user_id=BOT
            )
        ).turn
        await asyncio.gather(
            service.update_stm(turn, summary=f"round {round_}"),
            service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB),
        )
        async with db.sessions() as session:
            left = await session.scalar(select(func.count()).select_from(ShortTermMemory))
        assert left == 0, f"round {round_} resurrected a cleared memory"
        assert not (await service.entry(SERVER_KEY)).has_content


async def test_a_stale_write_sharing_a_group_commit_fails_alone(
    db: Database, settings: Settings
) -> None:
    first = make_service(db.sessions, settings, ManualClock())
    second = make_service(db.sessions, settings, ManualClock())
    channels = [CHANNEL, CHANNEL + 1, CHANNEL + 2]
    turns = []
    for channel in channels:
        prepared = await second.prepare_turn(
            channel_id=channel, user_id=BOB, guild_id=GUILD, bot_user_id=BOT
        )
        turns.append(prepared.turn)
    # Another process moves the first channel on after `second` cached it.
    other = (
        await first.prepare_turn(channel_id=CHANNEL, user_id=BOB, guild_id=GUILD, bot_user_id=BOT)
    ).turn
    assert (await first.update_stm(other, summary="newer elsewhere")).ok
    results = await asyncio.gather(
        *(second.update_stm(turn, summary=f"from second {i}") for i, turn in enumerate(turns))
    )
    assert [str(r) for r in results] == [
        "rejected: a newer version of this memory exists; nothing was saved",
        "saved",
        "saved",
    ]
    async with db.sessions() as session:
        summaries = {
            r.channel_id: r.summary
            for r in await session.scalars(
                select(ShortTermMemory).where(ShortTermMemory.scope_kind == "server")
            )
        }
    assert summaries == {
        CHANNEL: "newer elsewhere",
        CHANNEL + 1: "from second 1",
        CHANNEL + 2: "from second 2",
    }
