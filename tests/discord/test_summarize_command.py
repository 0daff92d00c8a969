"""``/stm summarize`` on the real bot: its answers, its permission, what it stores."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import discord
import pytest
from sqlalchemy import select

from bot.cogs.stm.answers import (
    NOTHING_NEW,
    SUMMARY_BUSY,
    SUMMARY_DISABLED,
    SUMMARY_UNSEEN,
    describe_summary,
)
from bot.conversation.summarizer import Summarizer, SummaryOutcome
from bot.db.models import ShortTermMemory
from bot.llm.tools.loop import UNAVAILABLE_MESSAGE
from bot.memory.stm.window import WindowCache
from bot.vocabulary.model import ScopeKey, message_hash
from tests.helpers.bot import KiokuHarness

SUMMARY = "Alice and Bob planned the launch: Friday, venue booked."


@pytest.fixture(autouse=True)
def summarizer(kioku: KiokuHarness) -> Summarizer:
    """``bot.summarizer``, as the app's setup hook makes it (the turn runner's)."""
    return kioku.bot.summarizer


async def chat(kioku: KiokuHarness, count: int, prefix: str = "message") -> list[discord.Message]:
    """``count`` messages in the channel that do not address the bot (no turn runs)."""
    return [await kioku.env.send(f"{prefix} {i}") for i in range(1, count + 1)]


async def stored(kioku: KiokuHarness, channel_id: int) -> list[ShortTermMemory]:
    async with kioku.database.sessions() as session:
        query = (
            select(ShortTermMemory)
            .where(ShortTermMemory.channel_id == channel_id)
            .order_by(ShortTermMemory.scope_kind)
        )
        return list(await session.scalars(query))


@pytest.mark.parametrize(
    ("count", "counted"), [(1, "1 new message"), (2, "2 new messages"), (0, "0 new messages")]
)
def test_the_answer_counts_new_messages_in_the_singular_and_plural(
    count: int, counted: str
) -> None:
    outcome = SummaryOutcome("updated", new_messages=count, chars=25)
    assert describe_summary(outcome) == f"Summary updated from {counted} (25 chars)."


async def test_summarize_folds_thirty_messages_in_and_moves_the_marker(
    kioku: KiokuHarness, moderator: discord.Member
) -> None:
    sent = await chat(kioku, 30)
    kioku.llm.reply_text("Launch planning, first twenty messages.").reply_text(SUMMARY)

    result = await kioku.interactions.slash("stm summarize", user=moderator)

    assert result.deferred and result.ephemeral
    assert result.texts() == [f"Summary updated from 30 new messages ({len(SUMMARY)} chars)."]
    assert len(kioku.llm.requests) == 2
    first = kioku.llm.messages(0)[1]["content"]
    assert "Please integrate the following new information into the existing summary" in first
    assert f"{kioku.env.member.display_name}: message 1\n" in first
    rows = await stored(kioku, kioku.env.channel.id)
    assert [(r.scope_kind, r.user_id) for r in rows] == [("server", None), ("user", moderator.id)]
    for row in rows:
        assert row.summary == SUMMARY
        assert (row.origin, row.origin_detail) == (
            "summarizer",
            f"{kioku.bot.settings.model}, /stm summarize",
        )
        assert row.covered_through_message_id == sent[-1].id
        assert row.covered_through_hash == message_hash(kioku.env.member.id, "message 30")

    shown = await kioku.interactions.slash("stm show")
    assert SUMMARY in (shown.content or "")
    assert "by the summarizer" in (shown.content or "")

    again = await kioku.interactions.slash("stm summarize", user=moderator)
    assert again.texts() == [NOTHING_NEW]
    assert len(kioku.llm.requests) == 2


async def test_nothing_new_makes_no_model_call(
    kioku: KiokuHarness, moderator: discord.Member
) -> None:
    result = await kioku.interactions.slash("stm summarize", user=moderator)

    assert result.ephemeral
    assert result.texts() == ["Nothing new since the last summary — no model call made."]
    assert kioku.llm.requests == []


async def test_a_failed_model_call_is_reported_and_changes_nothing(
    kioku: KiokuHarness, moderator: discord.Member
) -> None:
    await chat(kioku, 3)
    kioku.llm.reply_error(503)

    result = await kioku.interactions.slash("stm summarize", user=moderator)

    assert result.texts() == [
        f"The summarizer failed: {UNAVAILABLE_MESSAGE.rstrip('.')}. The memory was left unchanged."
    ]
    assert await stored(kioku, kioku.env.channel.id) == []
    entry = await kioku.bot.memory.entry(ScopeKey.server(kioku.env.guild.id, kioku.env.channel.id))
    assert entry.marker is None and not entry.has_content


async def test_an_empty_answer_is_reported(kioku: KiokuHarness, moderator: discord.Member) -> None:
    await chat(kioku, 2)
    kioku.llm.reply_text("  ")

    result = await kioku.interactions.slash("stm summarize", user=moderator)

    assert result.texts() == [
        "The summarizer failed: the model's answer was empty. The memory was left unchanged."
    ]
    assert await stored(kioku, kioku.env.channel.id) == []


async def test_a_cut_off_answer_names_no_setting_to_the_moderator(
    kioku: KiokuHarness, moderator: discord.Member, caplog: pytest.LogCaptureFixture
) -> None:
    # The setting to raise is the operator's business: in the log, not in the answer.
    await chat(kioku, 2)
    kioku.llm.reply_text("Launch on", finish_reason="length")

    with caplog.at_level(logging.WARNING, logger="bot.conversation.summarizer"):
        result = await kioku.interactions.slash("stm summarize", user=moderator)

    assert result.texts() == [
        "The summarizer failed: the model's answer was cut off at its length limit (ask the "
        "bot's operator to allow longer answers). The memory was left unchanged."
    ]
    assert "raise llm.max_reply_tokens" in caplog.text
    assert await stored(kioku, kioku.env.channel.id) == []


async def test_a_second_summarize_while_one_runs_is_busy(
    kioku: KiokuHarness, moderator: discord.Member
) -> None:
    await chat(kioku, 4)
    gate = kioku.llm.hold()
    kioku.llm.reply_text(SUMMARY)
    first = asyncio.create_task(kioku.interactions.slash("stm summarize", user=moderator))
    await kioku.llm.wait_for_requests(1)

    second = await kioku.interactions.slash("stm summarize", user=moderator)
    gate.set()
    done = await first

    assert second.texts() == [SUMMARY_BUSY]
    assert done.texts() == [f"Summary updated from 4 new messages ({len(SUMMARY)} chars)."]
    assert len(kioku.llm.requests) == 1


def test_skipped_messages_are_counted_in_the_singular_and_plural() -> None:
    one = SummaryOutcome("updated", new_messages=3, chars=25, skipped=1)
    two = SummaryOutcome("updated", new_messages=3, chars=25, skipped=2)
    assert "1 older new message did not fit" in describe_summary(one)
    assert "2 older new messages did not fit" in describe_summary(two)


async def test_a_member_without_manage_messages_is_refused(kioku: KiokuHarness) -> None:
    await chat(kioku, 3)

    result = await kioku.interactions.slash("stm summarize", gate=False)

    assert result.ephemeral
    assert result.texts() == [
        "You need the **Manage Messages** permission to use this command "
        "(or ask someone who has it)."
    ]
    assert kioku.llm.requests == []
    assert await stored(kioku, kioku.env.channel.id) == []


async def test_a_channel_the_bot_cannot_see_is_not_called_nothing_new(
    kioku: KiokuHarness, moderator: discord.Member
) -> None:
    # Discord delivers the command from a channel the bot cannot see, but none of its
    # messages: "nothing new since the last summary" would be wrong, and no help.
    hidden = await kioku.env.create_text_channel(
        "staff", private=True, allow=[moderator], include_bot=False
    )

    result = await kioku.interactions.slash("stm summarize", user=moderator, channel=hidden)

    assert result.ephemeral
    assert result.texts() == [SUMMARY_UNSEEN]
    assert kioku.llm.requests == []
    assert await stored(kioku, hidden.id) == []


async def test_memory_turned_off_is_not_summarized(
    kioku: KiokuHarness, moderator: discord.Member
) -> None:
    await kioku.bot.memory.update_guild_settings(
        kioku.env.guild.id, moderator.id, short_term_memory_enabled=False
    )
    await chat(kioku, 3)

    result = await kioku.interactions.slash("stm summarize", user=moderator)

    assert result.texts() == [SUMMARY_DISABLED]
    assert kioku.llm.requests == []


async def test_anyone_may_summarize_their_own_dm(kioku: KiokuHarness) -> None:
    member = kioku.env.member
    dm = kioku.env.dm_channel(member)
    kioku.llm.reply_text("Hello!")  # the bot answers every DM
    await kioku.env.send("hi there", channel=dm)
    kioku.llm.reply_text("Greetings were exchanged.")

    result = await kioku.interactions.slash("stm summarize", dm=True)

    assert result.texts() == ["Summary updated from 2 new messages (25 chars)."]
    rows = await stored(kioku, dm.id)
    assert [(r.scope_kind, r.user_id, r.summary) for r in rows] == [
        ("user", member.id, "Greetings were exchanged.")
    ]
    assert "Hello!" in kioku.llm.messages(1)[1]["content"]


async def test_after_a_restart_the_history_is_read_before_summarizing(
    kioku: KiokuHarness, moderator: discord.Member
) -> None:
    sent = await chat(kioku, 5, prefix="before the restart")
    # A restarted bot has an empty window until the channel's next turn.
    memory = kioku.bot.memory
    memory._state.windows = WindowCache(per_channel=kioku.bot.settings.stm.raw_window)
    kioku.llm.reply_text(SUMMARY)

    result = await kioku.interactions.slash("stm summarize", user=moderator)

    assert result.content is not None and "5 new messages" in result.content, result.content
    prompt = "\n".join(str(m.get("content")) for m in kioku.llm.messages(0))
    assert all(f"before the restart {i}" in prompt for i in range(1, 6))
    (server, _) = await stored(kioku, kioku.env.channel.id)
    assert server.summary == SUMMARY
    assert server.covered_through_message_id == sent[-1].id


async def test_a_refresh_during_the_history_backfill_is_not_summarized_back(
    kioku: KiokuHarness, moderator: discord.Member, monkeypatch: pytest.MonkeyPatch
) -> None:
    await chat(kioku, 5, prefix="secret before the refresh")
    # A restarted bot: the window is cold, so /stm summarize back-fills it first.
    kioku.bot.memory._state.windows = WindowCache(per_channel=kioku.bot.settings.stm.raw_window)

    fetched, release = asyncio.Event(), asyncio.Event()
    real_history = discord.TextChannel.history
    calls = 0

    async def slow_history(self: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        nonlocal calls
        calls += 1
        first = calls == 1
        messages = [m async for m in real_history(self, *args, **kwargs)]
        if first:
            fetched.set()
            await release.wait()  # Discord is slow to answer the history request
        for m in messages:
            yield m

    monkeypatch.setattr(discord.TextChannel, "history", slow_history)
    kioku.llm.reply_text("Summary of the secret messages.")

    summarize = asyncio.create_task(kioku.interactions.slash("stm summarize", user=moderator))
    await asyncio.wait_for(fetched.wait(), 10)
    refreshed = await kioku.interactions.slash("refresh", user=moderator)
    assert refreshed.texts()
    release.set()
    result = await summarize

    rows = await stored(kioku, kioku.env.channel.id)
    prompts = [str(m.get("content")) for r in kioku.llm.requests for m in r["messages"]]
    assert rows == [], (result.content, [r.summary for r in rows])
    assert not any("secret before the refresh" in p for p in prompts)
