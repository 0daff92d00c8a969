"""New messages are folded into the memory in batches and the marker moves to the last one read;
the summarizer runs on its own when a tool-less provider's cadence comes due or nudges go
ignored."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from bot.config import Settings
from bot.conversation.summarizer import (
    MAX_BATCHES,
    Summarizer,
    auto_summarize_reason,
    ignored_nudges,
    should_auto_summarize,
)
from bot.conversation.turn import TurnRequest, TurnRunner
from bot.db.engine import Database
from bot.memory import dated_lines
from bot.memory.service import MemoryService
from bot.vocabulary.model import Marker, message_hash
from bot.vocabulary.providers import capabilities
from tests.helpers.builders import (
    ALICE,
    BOB,
    BOT,
    CHANNEL,
    GUILD,
    make_longterm,
    make_service,
    message,
)
from tests.helpers.database import make_test_settings
from tests.helpers.fake_llm import ScriptedLLM, openai_client
from tests.integration.summarizer.harness import (
    EXISTING,
    SERVER_KEY,
    events,
    post,
    rows,
    seed_summary,
    summarize,
    summarizing,
    user_prompt,
)

# ------------------------------------------------------------------ the must-show


async def test_thirty_new_messages_are_folded_in_and_the_marker_lands_on_the_thirtieth(
    db: Database,
    service: MemoryService,
    summarizer: Summarizer,
    llm: ScriptedLLM,
    caplog: pytest.LogCaptureFixture,
) -> None:
    old = post(service, 5, "old")
    await seed_summary(service, covered=old[-1])
    new = post(service, 30, "new")
    llm.reply_text("Launch party planned; Alice and Bob discussed messages 1-20.")
    llm.reply_text("Launch party on Friday, venue booked, snacks by Bob.")

    with caplog.at_level(logging.DEBUG):
        outcome = await summarize(summarizer)

    final = "Launch party on Friday, venue booked, snacks by Bob."
    assert outcome.status == "updated"
    assert (outcome.new_messages, outcome.chars, outcome.calls, outcome.skipped) == (
        30,
        len(final),
        2,
        0,
    )
    # Batches of max_turns_to_pull (20): the first integrates into the existing summary,
    # the second into what the first produced.
    first, second = user_prompt(llm, 0), user_prompt(llm, 1)
    assert first.startswith("Please integrate the following new information into the existing")
    assert "[LATEST_MEMORIES]" not in first + second
    assert "[CHAT_SUMMARY]" not in first + second
    assert EXISTING in first
    # Each batch's lines carry their time, below the day's header.
    assert "\n".join(dated_lines(new[:20])) in first
    assert "Alice: new 21" not in first
    assert "old" not in first
    assert "Launch party planned; Alice and Bob discussed messages 1-20." in second
    assert "\n".join(dated_lines(new[20:])) in second
    assert EXISTING not in second
    assert "maintain a compact running summary" in llm.messages(0)[0]["content"]
    assert all("tools" not in request for request in llm.requests)

    stored = await rows(db)
    assert [r.scope_kind for r in stored] == ["server", "user"]
    for row in stored:
        assert row.summary == final
        assert row.origin == "summarizer"
        assert row.covered_through_message_id == new[-1].message_id
        assert row.covered_through_hash == message_hash(new[-1].author_id, new[-1].content)
        assert row.turns_since_refresh == 0
        assert {ALICE, BOB} <= set(row.contributor_ids)
    entry = await service.entry(SERVER_KEY)
    assert entry.marker == Marker.of(new[-1])
    assert entry.provenance is not None and entry.provenance.origin == "summarizer"
    updates = [e for e in await events(db) if e.origin == "summarizer"]
    assert [(e.event, e.chars_before, e.chars_after) for e in updates] == [
        ("update", len(EXISTING), len(final))
    ] * 2
    # Logs name counts and ids, never memory or message text.
    assert "summarizer (test)" in caplog.text
    for text in (EXISTING, final, "new 7", "Launch party planned"):
        assert text not in caplog.text

    # Everything is covered now: the next run finds nothing and calls no model.
    again = await summarize(summarizer)
    assert again.status == "nothing_new"
    assert len(llm.requests) == 2


async def test_nothing_new_calls_no_model(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    empty = await summarize(summarizer)
    assert empty.status == "nothing_new"

    covered = post(service, 3, "seen")
    await seed_summary(service, covered=covered[-1])
    assert (await summarize(summarizer)).status == "nothing_new"
    assert llm.requests == []
    assert [r.summary for r in await rows(db)] == [EXISTING, EXISTING]


async def test_an_edited_marker_message_counts_as_new(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    covered = post(service, 3, "seen")
    await seed_summary(service, covered=covered[-1])
    service.windows.edit(CHANNEL, covered[-1].message_id, "seen 3, edited")
    llm.reply_text("Updated with the edit.")

    outcome = await summarize(summarizer)

    assert (outcome.status, outcome.new_messages) == ("updated", 1)
    assert "Alice: seen 3, edited" in user_prompt(llm, 0)
    assert (await rows(db))[0].covered_through_hash == message_hash(ALICE, "seen 3, edited")


async def test_a_first_summary_starts_from_none(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    new = post(service, 4, "hello")
    llm.reply_text("Alice and Bob said hello.")

    outcome = await summarize(summarizer, user=BOB)

    assert (outcome.status, outcome.new_messages, outcome.calls) == ("updated", 4, 1)
    assert "Existing Summary:\n(none yet)" in user_prompt(llm, 0)
    stored = await rows(db)
    assert [(r.scope_kind, r.user_id) for r in stored] == [("server", None), ("user", BOB)]
    assert all(r.covered_through_message_id == new[-1].message_id for r in stored)


async def test_placeholders_in_messages_are_not_substituted(
    service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    await seed_summary(service, summary="Summary mentions [LATEST_MEMORIES] literally.")
    service.observe_message(CHANNEL, message(ALICE, "what is [CHAT_SUMMARY]?"))
    llm.reply_text("ok")

    await summarize(summarizer)

    prompt = user_prompt(llm, 0)
    assert "Alice: what is [CHAT_SUMMARY]?" in prompt
    assert "Summary mentions [LATEST_MEMORIES] literally." in prompt


async def test_more_than_max_batches_reads_only_the_newest(
    db: Database, pg_url: URL, tmp_path: Path, llm: ScriptedLLM
) -> None:
    settings = make_test_settings(
        pg_url,
        tmp_path,
        llm={"max_retries": 0},
        stm={"max_turns_to_pull": 2, "raw_window": 50},
    )
    service, summarizer = summarizing(db, settings, llm)
    new = post(service, 2 * MAX_BATCHES + 3, "m")

    outcome = await summarize(summarizer)

    assert (outcome.status, outcome.calls, outcome.skipped) == ("updated", MAX_BATCHES, 3)
    assert outcome.new_messages == 2 * MAX_BATCHES
    assert "m 4" in user_prompt(llm, 0) and "m 3" not in user_prompt(llm, 0)
    assert (await rows(db))[0].covered_through_message_id == new[-1].message_id


# ------------------------------------------------------------------- auto trigger


async def test_auto_trigger_rules(service: MemoryService, quick_settings: Settings) -> None:
    config = await service.guild_config(GUILD)  # cadence 5
    entry = await service.entry(SERVER_KEY)
    toolless, tools = capabilities("perplexity"), capabilities("openai")
    opted_in = quick_settings.model_copy(
        update={"stm": quick_settings.stm.model_copy(update={"summarize_when_ignored_turns": 2})}
    )
    assert quick_settings.stm.summarize_when_ignored_turns == 0

    entry.turns_since_refresh = 4
    assert not should_auto_summarize(entry, config, toolless, 0, quick_settings)
    entry.turns_since_refresh = 5
    assert auto_summarize_reason(entry, config, toolless, 0, quick_settings) == (
        "tool-less provider"
    )
    assert not should_auto_summarize(entry, config, tools, 0, quick_settings)
    assert not should_auto_summarize(entry, config, tools, 1, opted_in)
    assert ignored_nudges(entry, config) == 0
    entry.turns_since_refresh = 7
    assert ignored_nudges(entry, config) == 2
    assert auto_summarize_reason(entry, config, tools, 2, opted_in) == "nudge ignored"
    assert not should_auto_summarize(entry, config, tools, 50, quick_settings)  # opt-in off
    disabled = type(config)(guild_id=GUILD, stm_enabled=False)
    assert not should_auto_summarize(entry, disabled, toolless, 9, opted_in)


async def test_with_a_tool_less_provider_the_summarizer_maintains_the_memory(
    db: Database, pg_url: URL, tmp_path: Path, llm: ScriptedLLM
) -> None:
    settings = make_test_settings(
        pg_url, tmp_path, provider="perplexity", llm={"max_retries": 0, "timeout_seconds": 5}
    )
    service = make_service(db.sessions, settings)
    client = openai_client(llm)
    runner = TurnRunner(
        service, client, settings, longterm=make_longterm(service), persona="You are Kioku."
    )
    summarizer = Summarizer(service, client, settings)
    caps = capabilities(settings.provider)
    assert not caps.tool_calling

    ran: list[str] = []
    for i in range(1, 6):
        asked = message(ALICE, f"question {i}")
        service.observe_message(CHANNEL, asked)
        llm.reply_text(f"answer {i}")
        reply = await runner.run(
            TurnRequest(
                channel_id=CHANNEL,
                user_id=ALICE,
                source_message_id=asked.message_id,
                content=asked.content,
                bot_user_id=BOT,
                guild_id=GUILD,
            )
        )
        assert "tools" not in llm.last_request
        answer = message(BOT, reply.text, is_bot=True)
        service.observe_message(CHANNEL, answer)
        # What the turn runner does after a turn.
        entry = await service.entry(SERVER_KEY)
        config = await service.guild_config(GUILD)
        reason = auto_summarize_reason(entry, config, caps, ignored_nudges(entry, config), settings)
        if reason is not None:
            llm.reply_text("Alice asked five questions; Kioku answered them.")
            outcome = await summarizer.summarize(
                guild_id=GUILD, channel_id=CHANNEL, actor_user_id=ALICE, reason=reason
            )
            assert (outcome.status, outcome.new_messages) == ("updated", 10)
            ran.append(reason)

    assert ran == ["tool-less provider"]  # once, when the cadence (5) came due
    stored = await rows(db)
    assert {r.summary for r in stored} == {"Alice asked five questions; Kioku answered them."}
    # Which model wrote it, and why it ran without being asked.
    assert {(r.origin, r.origin_detail) for r in stored} == {
        ("summarizer", f"{settings.model}, tool-less provider")
    }
    assert stored[0].covered_through_message_id == answer.message_id
    assert (await service.entry(SERVER_KEY)).turns_since_refresh == 0
