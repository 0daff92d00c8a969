"""Capture: memory builds in the background while nobody addresses the bot."""

from __future__ import annotations

import json

from sqlalchemy import select

from bot.conversation.summarizer.capture import QUIET_MIN_MESSAGES
from bot.db.engine import Database
from bot.db.models import LongTermMemory, ShortTermMemory
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


QUIET = {"stm": {"capture_after_messages": 20, "capture_quiet_minutes": 30}}


async def test_a_quiet_spell_folds_in_the_few_new_messages(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with kioku_with(settings=QUIET) as kioku:
        capture = kioku.bot.turns.capture
        await chat(kioku, QUIET_MIN_MESSAGES)
        kioku.bot.memory.clock.advance(minutes=29)
        assert capture.sweep_quiet() == 0  # not quiet long enough yet
        kioku.bot.memory.clock.advance(minutes=2)
        llm.reply_text(SUMMARY)
        assert capture.sweep_quiet() == 1
        await kioku.bot.turns.drain()
        assert len(llm.requests) == 1
        [server, *_] = await rows(db)
        assert server.summary == SUMMARY
        assert capture.sweep_quiet() == 0  # swept: not again until new messages


async def test_a_quiet_spell_after_too_few_messages_runs_nothing(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with kioku_with(settings=QUIET) as kioku:
        await chat(kioku, QUIET_MIN_MESSAGES - 1)
        kioku.bot.memory.clock.advance(minutes=31)
        assert kioku.bot.turns.capture.sweep_quiet() == 0
        await kioku.bot.turns.drain()
        assert llm.requests == []


async def test_forget_me_after_capture_removes_the_summary_and_the_facts(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    settings = {**CAPTURE, "longterm": {"capture_facts": True}}
    async with kioku_with(settings=settings) as kioku:
        llm.reply_text(SUMMARY)
        llm.reply_text(
            '{"facts": [{"fact": "The Osaka flights are on 2027-03-14.", "date": null}]}'
        )
        await chat(kioku, EVERY)
        await kioku.bot.turns.drain()
        assert len(llm.requests) == 2
        # The channel's row and the member's own copy of it.
        assert {row.summary for row in await rows(db)} == {SUMMARY}
        assert [fact.content for fact in await captured(db)] == [
            "The Osaka flights are on 2027-03-14."
        ]

        receipt = await kioku.bot.memory.forget_user(kioku.env.member.id)

        assert receipt.long_term == 1
        assert [row.summary for row in await rows(db) if row.summary] == []
        assert await captured(db) == []


async def captured(db: Database) -> list[LongTermMemory]:
    async with db.sessions() as session:
        query = select(LongTermMemory).where(LongTermMemory.scope == "channel")
        return list(await session.scalars(query))


async def test_a_captured_fact_reaches_a_later_turns_prompt_in_that_channel_only(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    settings = {**CAPTURE, "longterm": {"capture_facts": True}}
    async with kioku_with(settings=settings, channels=2) as kioku:
        fact = "Ren's Osaka flights are on 2027-03-14."
        llm.reply_text(SUMMARY).reply_text(json.dumps({"facts": [{"fact": fact}]}))
        await chat(kioku, EVERY)
        await kioku.bot.turns.drain()
        assert len(llm.requests) == 2
        assert [f.content for f in await captured(db)] == [fact]

        llm.reply_text("March 14!")
        await kioku.env.send("when are the Osaka flights?", mention_bot=True)
        assert fact in prompt_text(llm, 2)

        other = kioku.env.channels[1]
        llm.reply_text("No idea.")
        await kioku.env.send("when are the Osaka flights?", channel=other, mention_bot=True)
        assert fact not in prompt_text(llm, 3)


def prompt_text(llm: ScriptedLLM, i: int) -> str:
    return "\n".join(str(message["content"]) for message in llm.messages(i))
