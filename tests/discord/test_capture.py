"""Capture: memory builds in the background while nobody addresses the bot."""

from __future__ import annotations

from sqlalchemy import select

from bot.db.engine import Database
from bot.db.models import ShortTermMemory
from tests.helpers.chat_world import KiokuStarter
from tests.helpers.fake_llm import ScriptedLLM

EVERY = 5
SUMMARY = "Ren and Aki planned the Osaka trip: flights booked for March 14."
CAPTURE = {"stm": {"capture_after_messages": EVERY}}


async def rows(db: Database) -> list[ShortTermMemory]:
    async with db.sessions() as session:
        return list(await session.scalars(select(ShortTermMemory)))


async def chat(kioku: object, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        await kioku.env.send(f"the Osaka trip plan, flights on March 14, part {i}")  # type: ignore[attr-defined]


async def test_enough_unaddressed_messages_are_folded_into_the_memory(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with kioku_with(settings=CAPTURE) as kioku:
        await chat(kioku, EVERY - 1)
        await kioku.bot.turns.drain()
        assert llm.requests == []  # not yet: one message short
        llm.reply_text(SUMMARY)
        await chat(kioku, 1, start=EVERY - 1)
        await kioku.bot.turns.drain()
        assert len(llm.requests) == 1
        prompt = llm.messages(0)[-1]["content"]
        # Gathered lines carry their day and time, for dates to be resolved.
        assert kioku.bot.memory.clock.now().strftime("--- %Y-%m-%d (%A) ---") in prompt
        assert "part 4" in prompt
        [server, *_] = await rows(db)
        assert server.summary == SUMMARY
        assert (server.origin, server.origin_detail) == ("summarizer", "test-model, capture")
        assert server.covered_through_message_id is not None


async def test_capture_stops_when_the_servers_daily_tokens_are_spent(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    settings = {"stm": {"capture_after_messages": EVERY, "capture_daily_tokens": 1}}
    async with kioku_with(settings=settings) as kioku:
        llm.reply_text(SUMMARY)
        await chat(kioku, EVERY)
        await kioku.bot.turns.drain()
        assert len(llm.requests) == 1
        spent = kioku.bot.turns.capture.spent(kioku.env.guild.id)
        assert spent > 1  # the run's prompt and answer, estimated
        await chat(kioku, 2 * EVERY, start=EVERY)
        await kioku.bot.turns.drain()
        assert len(llm.requests) == 1 and llm.unscripted == 0


async def test_capture_never_runs_where_memory_is_off(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with kioku_with(settings=CAPTURE) as kioku:
        admin = await kioku.env.create_member("admin", kind="admin")
        await kioku.bot.memory.update_guild_settings(
            kioku.env.guild.id, admin.id, short_term_memory_enabled=False
        )
        await chat(kioku, 2 * EVERY)
        await kioku.bot.turns.drain()
        assert llm.requests == []
        assert await rows(db) == []


async def test_a_refresh_during_capture_stores_nothing(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with kioku_with(settings=CAPTURE) as kioku:
        moderator = await kioku.env.create_member("mod", kind="moderator")
        held = llm.hold()
        llm.reply_text(SUMMARY)
        await chat(kioku, EVERY)
        await llm.wait_for_requests(1)
        await kioku.interactions.slash("refresh", user=moderator)
        held.set()
        await kioku.bot.turns.drain()
        assert [row.summary for row in await rows(db) if row.summary] == []


async def test_a_rejected_summary_covers_nothing(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    # A small model's copy of the transcript, twice: the messages stay uncovered.
    copied = "\n".join(f"the Osaka trip plan, flights on March 14, part {i}" for i in range(5))
    async with kioku_with(settings=CAPTURE) as kioku:
        llm.reply_text(copied).reply_text(copied)
        await chat(kioku, EVERY)
        await kioku.bot.turns.drain()
        assert len(llm.requests) == 2  # asked once more, then given up
        assert "cannot be stored" in llm.messages(1)[-1]["content"]
        assert await rows(db) == []
