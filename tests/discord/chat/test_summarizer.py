"""The automatic summary on the real bot: for providers without tools, for a model that
ignores the nudge, and paused after it failed."""

from __future__ import annotations

from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.db.engine import Database
from tests.helpers.chat_world import KiokuStarter, prompt_text, rows
from tests.helpers.fake_llm import ScriptedLLM


async def test_a_tool_less_provider_still_gets_memory_from_the_summarizer(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with kioku_with(settings={"provider": "novelai", "stm": {"refresh_cadence": 2}}) as kioku:
        llm.reply_text("first answer").reply_text("second answer")
        llm.reply_text("Alice and the bot discussed tea twice.")
        await kioku.env.send("let's talk about tea", mention_bot=True)
        assert kioku.llm.tool_names(0) == []  # no tools offered to a tool-less provider
        await kioku.env.send("more tea talk", mention_bot=True)
        await kioku.bot.turns.drain()
        server, _ = await rows(db)
        assert server.summary == "Alice and the bot discussed tea twice."
        assert server.origin == "summarizer"
        assert server.covered_through_message_id is not None


async def test_a_model_ignoring_the_nudge_gets_the_summarizer_when_opted_in(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    # Cadence 1: every turn after the first is followed by an upkeep call. Two ignored:
    # summarize (and no upkeep call beside the summary).
    async with kioku_with(
        settings={"stm": {"refresh_cadence": 1, "summarize_when_ignored_turns": 2}}
    ) as kioku:
        llm.reply_text("answer 1")
        await kioku.env.send("tea talk 1", mention_bot=True)
        llm.reply_text("answer 2").reply_text("I would rather chat.")  # the upkeep, ignored
        await kioku.env.send("tea talk 2", mention_bot=True)
        await kioku.bot.turns.drain()
        assert len(llm.requests) == 3  # the nudge was ignored once only: no summary yet
        assert "Memory upkeep:" not in prompt_text(llm, 0) + prompt_text(llm, 1)
        assert "Memory upkeep:" in prompt_text(llm, 2)
        assert await rows(db) == []

        llm.reply_text("answer 3").reply_text("Alice and the bot talked about tea.")
        await kioku.env.send("tea talk 3", mention_bot=True)
        await kioku.bot.turns.drain()
        assert all(STM_TOOL_NAME in llm.tool_names(i) for i in (0, 1, 3))  # offered, not used
        assert len(llm.requests) == 5 and llm.unscripted == 0  # the summary's request
        server, user = await rows(db)
        assert server.summary == user.summary == "Alice and the bot talked about tea."
        assert (server.origin, server.origin_detail) == ("summarizer", "test-model, nudge ignored")
        assert server.covered_through_message_id is not None


async def test_a_failed_automatic_summary_is_not_retried_on_every_turn(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with kioku_with(
        settings={"provider": "novelai", "stm": {"refresh_cadence": 1}, "llm": {"max_retries": 0}}
    ) as kioku:
        llm.reply_text("answer 1").reply_error(500, "summarizer down")
        await kioku.env.send("first", mention_bot=True)
        await kioku.bot.turns.drain()
        assert len(llm.requests) == 2  # the turn, then the failed summary

        llm.reply_text("answer 2").reply_text("answer 3")
        await kioku.env.send("second", mention_bot=True)
        await kioku.env.send("third", mention_bot=True)
        await kioku.bot.turns.drain()
        assert len(llm.requests) == 4  # two turns, no summary attempts in between

        kioku.clock.advance(minutes=11)
        llm.reply_text("answer 4").reply_text("The group chatted four times.")
        await kioku.env.send("fourth", mention_bot=True)
        await kioku.bot.turns.drain()
        assert len(llm.requests) == 6  # retried once the pause is over
        server, _ = await rows(db)
        assert server.summary == "The group chatted four times."


async def test_remember_with_a_tool_less_provider_is_told_it_cannot_store_anything(
    llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with kioku_with(settings={"provider": "novelai"}) as kioku:
        llm.reply_text("I can't store long-term memories here.")
        await kioku.env.send("remember that my cat is called Miso", mention_bot=True)
        assert llm.tool_names(0) == []
        assert "long-term memory is not available with this model" in prompt_text(llm, 0)
