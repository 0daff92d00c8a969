"""The summarizer on real PostgreSQL and the scripted LLM (SPEC §4, seed 000)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from bot.conversation.summary_prompt import (
    CUT_MARK,
    MAX_BATCHES,
    build_messages,
    plan_batches,
    request_chars,
)
from sqlalchemy import select
from sqlalchemy.engine import URL

from bot.config import Settings
from bot.conversation import summarizer as summarizer_module
from bot.conversation.summarizer import (
    CATEGORIES_CHANGED_MEANWHILE,
    CHANGED_MEANWHILE,
    CLEARED_MEANWHILE,
    CUT_OFF,
    EMPTY_ANSWER,
    INVALID_JSON,
    NO_ROOM,
    REPLY_SHARE,
    TOOL_CALL_ANSWER,
    Summarizer,
    SummaryOutcome,
    auto_summarize_reason,
    ignored_nudges,
    should_auto_summarize,
)
from bot.conversation.turn import TurnRequest, TurnRunner
from bot.db.engine import Database
from bot.db.models import ShortTermMemory, StmEvent
from bot.db.storage import faults
from bot.llm.tools.loop import UNAVAILABLE_MESSAGE
from bot.memory.service import MemoryService
from bot.memory.spool.durable import DurableSpool, spool_path
from bot.memory.stm.change import WriteResult
from bot.memory.turn.prompt import VALUE_LIMIT, assemble
from bot.memory.turn.types import REASON_CHANGED, TurnState
from bot.vocabulary import providers
from bot.vocabulary.model import Category, Marker, RawMessage, ScopeKey, message_hash
from bot.vocabulary.providers import CHARS_PER_TOKEN, capabilities
from tests.helpers.builders import (
    ALICE,
    BOB,
    BOT,
    CAROL,
    CHANNEL,
    GUILD,
    OTHER_CHANNEL,
    ManualClock,
    make_longterm,
    make_service,
    message,
    prepare,
)
from tests.helpers.database import make_test_settings
from tests.helpers.fake_llm import ScriptedLLM, openai_client
from tests.helpers.faults import back
from tests.integration.test_coherence import start_process

EXISTING = "The team is planning a launch party."
SERVER_KEY = ScopeKey.server(GUILD, CHANNEL)


@pytest.fixture
def quick_settings(pg_url: URL, tmp_path: Path) -> Settings:
    """Test settings whose model calls fail fast (no client retries)."""
    return make_test_settings(
        pg_url, tmp_path, model="test-model", llm={"max_retries": 0, "timeout_seconds": 5}
    )


@pytest.fixture
def service(db: Database, quick_settings: Settings) -> MemoryService:
    return make_service(db.sessions, quick_settings, ManualClock())


@pytest.fixture
def summarizer(service: MemoryService, llm: ScriptedLLM, quick_settings: Settings) -> Summarizer:
    return Summarizer(service, openai_client(llm), quick_settings)


def post(
    service: MemoryService, count: int, prefix: str, channel: int = CHANNEL
) -> list[RawMessage]:
    """``count`` messages, alternating Alice and Bob, into the channel's raw window."""
    posted = []
    for i in range(1, count + 1):
        raw = message(ALICE if i % 2 else BOB, f"{prefix} {i}")
        service.observe_message(channel, raw)
        posted.append(raw)
    return posted


async def seed_summary(
    service: MemoryService, covered: RawMessage | None = None, summary: str = EXISTING
) -> None:
    """A summary written by an admin, covering the channel up to ``covered``."""
    turn = TurnState(
        channel_id=CHANNEL,
        user_id=ALICE,
        guild_id=GUILD,
        config=await service.guild_config(GUILD),
        epoch=service.channel_epoch(CHANNEL),
    )
    marker = Marker.of(covered) if covered is not None else None
    result = await service.update_stm(turn, summary=summary, origin="admin", marker=marker)
    assert result.ok, str(result)


async def rows(db: Database, channel: int = CHANNEL) -> list[ShortTermMemory]:
    async with db.sessions() as session:
        query = (
            select(ShortTermMemory)
            .where(ShortTermMemory.channel_id == channel)
            .order_by(ShortTermMemory.scope_kind)
        )
        return list(await session.scalars(query))


async def events(db: Database) -> list[StmEvent]:
    async with db.sessions() as session:
        return list(await session.scalars(select(StmEvent).order_by(StmEvent.id)))


def user_prompt(llm: ScriptedLLM, i: int) -> str:
    messages = llm.messages(i)
    assert [m["role"] for m in messages] == ["system", "user"]
    content = messages[1]["content"]
    assert isinstance(content, str)
    return content


def snapshot(found: list[ShortTermMemory]) -> list[tuple[object, ...]]:
    return [
        (
            r.scope_kind,
            r.summary,
            dict(r.categories),
            r.covered_through_message_id,
            r.covered_through_hash,
            r.origin,
            r.version,
        )
        for r in found
    ]


async def summarize(
    summarizer: Summarizer, channel: int = CHANNEL, user: int = ALICE
) -> SummaryOutcome:
    return await summarizer.summarize(
        guild_id=GUILD, channel_id=channel, actor_user_id=user, reason="test"
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
    lines = [f"{m.author_name}: {m.content}" for m in new]
    assert "\n".join(lines[:20]) in first
    assert "Alice: new 21" not in first
    assert "old" not in first
    assert "Launch party planned; Alice and Bob discussed messages 1-20." in second
    assert "\n".join(lines[20:]) in second
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
    service = make_service(db.sessions, settings)
    summarizer = Summarizer(service, openai_client(llm), settings)
    new = post(service, 2 * MAX_BATCHES + 3, "m")

    outcome = await summarize(summarizer)

    assert (outcome.status, outcome.calls, outcome.skipped) == ("updated", MAX_BATCHES, 3)
    assert outcome.new_messages == 2 * MAX_BATCHES
    assert "m 4" in user_prompt(llm, 0) and "m 3" not in user_prompt(llm, 0)
    assert (await rows(db))[0].covered_through_message_id == new[-1].message_id


# ------------------------------------------------------------- failures change nothing


async def test_a_failed_call_leaves_summary_and_marker_untouched(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    old = post(service, 2, "old")
    await seed_summary(service, covered=old[-1])
    post(service, 5, "new")
    before = snapshot(await rows(db))
    llm.reply_error(500)

    outcome = await summarize(summarizer)

    assert (outcome.status, outcome.error, outcome.calls) == ("failed", UNAVAILABLE_MESSAGE, 1)
    assert snapshot(await rows(db)) == before
    entry = await service.entry(SERVER_KEY)
    assert (entry.summary, entry.marker) == (EXISTING, Marker.of(old[-1]))


async def test_a_failure_in_a_later_batch_writes_nothing(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    await seed_summary(service)
    post(service, 25, "new")
    before = snapshot(await rows(db))
    llm.reply_text("First batch folded in.").reply_error(429)

    outcome = await summarize(summarizer)

    assert (outcome.status, outcome.calls) == ("failed", 2)
    assert "rate limited" in (outcome.error or "")
    assert snapshot(await rows(db)) == before
    assert (await service.entry(SERVER_KEY)).marker is None


@pytest.mark.parametrize(
    ("lead_in", "then"),
    [
        ("Sure, updating the memory now.", "nothing"),
        ("Sure, updating the memory now.", "a summary"),
        ("Sure, updating the memory now.", "an error"),
        (None, "an error"),
    ],
)
async def test_an_answer_that_calls_a_tool_is_not_stored(
    db: Database,
    service: MemoryService,
    summarizer: Summarizer,
    llm: ScriptedLLM,
    lead_in: str | None,
    then: str,
) -> None:
    """A tool-trained model answers with the STM tool call it knows (with or without a
    lead-in line); the tool loop answers "unknown tool" and asks once more without tools.
    Whatever comes back (nothing or an error: the lead-in would be the text; a
    summary-like text; an error with no lead-in: the loop gives up with its fallback
    notice), none of it is the summary."""
    old = post(service, 2, "old")
    await seed_summary(service, covered=old[-1])
    post(service, 3, "venue idea")
    before = snapshot(await rows(db))
    llm.reply_tool_calls(
        [("update_short_term_memory", {"summary": "Launch party; Bob has venue ideas."})],
        content=lead_in,
    )
    if then == "nothing":
        llm.reply_text("")
    elif then == "a summary":
        llm.reply_text("I have updated the memory.")
    else:
        llm.reply_error(503)

    outcome = await summarize(summarizer)

    assert (outcome.status, outcome.error) == ("failed", TOOL_CALL_ANSWER)
    assert outcome.calls == len(llm.requests) == 2
    assert snapshot(await rows(db)) == before
    entry = await service.entry(SERVER_KEY)
    assert (entry.summary, entry.marker) == (EXISTING, Marker.of(old[-1]))


async def test_a_tool_call_in_a_later_batch_writes_nothing(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    await seed_summary(service)
    post(service, 25, "new")
    before = snapshot(await rows(db))
    llm.reply_text("First batch folded in.")
    llm.reply_tool_calls([("update_short_term_memory", {"summary": "x"})]).reply_error(503)

    outcome = await summarize(summarizer)

    assert (outcome.status, outcome.error) == ("failed", TOOL_CALL_ANSWER)
    assert outcome.calls == len(llm.requests) == 3
    assert snapshot(await rows(db)) == before


@pytest.mark.parametrize("answer", ["", "   \n ", "<think>nothing to add</think>"])
async def test_an_empty_result_leaves_the_memory_untouched(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM, answer: str
) -> None:
    old = post(service, 2, "old")
    await seed_summary(service, covered=old[-1])
    post(service, 3, "new")
    before = snapshot(await rows(db))
    llm.reply_text(answer)

    outcome = await summarize(summarizer)

    assert (outcome.status, outcome.error) == ("empty", EMPTY_ANSWER)
    assert snapshot(await rows(db)) == before
    assert (await service.entry(SERVER_KEY)).marker == Marker.of(old[-1])


async def test_an_answer_cut_off_at_the_length_limit_is_not_stored(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    old = post(service, 2, "old")
    await seed_summary(service, covered=old[-1])
    post(service, 4, "new")
    before = snapshot(await rows(db))
    # Stored, the half sentence would replace the summary and move the marker past
    # messages it never got to.
    llm.reply_text("Alice and Bob planned the la", finish_reason="length")

    outcome = await summarize(summarizer)

    assert (outcome.status, outcome.error) == ("failed", CUT_OFF)
    assert snapshot(await rows(db)) == before
    assert (await service.entry(SERVER_KEY)).marker == Marker.of(old[-1])


async def test_a_second_run_for_the_channel_is_busy(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    post(service, 3, "here")
    post(service, 2, "there", channel=OTHER_CHANNEL)
    gate = llm.hold()
    first = asyncio.create_task(summarize(summarizer))
    await llm.wait_for_requests(1)

    second = await summarize(summarizer)
    assert second.status == "busy"
    assert summarizer.is_running(CHANNEL)
    # Another channel is not held up by this one.
    other = asyncio.create_task(summarize(summarizer, channel=OTHER_CHANNEL))
    await llm.wait_for_requests(2)
    gate.set()

    assert (await first).status == "updated"
    assert (await other).status == "updated"
    assert len(llm.requests) == 2
    assert not summarizer.is_running(CHANNEL)
    # Once the first run is over the channel can be summarized again.
    post(service, 1, "later")
    assert (await summarize(summarizer)).status == "updated"


async def test_a_refresh_during_summarization_wins(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    await seed_summary(service)
    post(service, 4, "new")
    gate = llm.hold()
    llm.reply_text("A summary that must never be stored.")
    task = asyncio.create_task(summarize(summarizer))
    await llm.wait_for_requests(1)

    await service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    gate.set()
    outcome = await task

    assert (outcome.status, outcome.error) == ("failed", CLEARED_MEANWHILE)
    assert await rows(db) == []
    entry = await service.entry(SERVER_KEY)
    assert not entry.has_content and entry.marker is None


async def test_an_update_during_summarization_wins(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    await seed_summary(service)
    post(service, 4, "new")
    gate = llm.hold()
    llm.reply_text("Built on the old summary.")
    task = asyncio.create_task(summarize(summarizer))
    await llm.wait_for_requests(1)

    edited = await service.admin_edit(
        guild_id=GUILD, channel_id=CHANNEL, actor_user_id=BOB, summary="Edited meanwhile."
    )
    assert edited.ok
    gate.set()
    outcome = await task

    assert (outcome.status, outcome.error) == ("failed", CHANGED_MEANWHILE)
    server = [r for r in await rows(db) if r.scope_kind == "server"]
    assert [r.summary for r in server] == ["Edited meanwhile."]


async def test_a_guild_with_memory_off_is_not_summarized(
    service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    await service.update_guild_settings(GUILD, ALICE, short_term_memory_enabled=False)
    post(service, 3, "new")

    assert (await summarize(summarizer)).status == "disabled"
    assert llm.requests == []


async def test_a_summary_finished_after_memory_was_turned_off_is_not_stored(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    post(service, 3, "new")
    gate = llm.hold()
    llm.reply_text("A summary made while memory was being turned off.")
    task = asyncio.create_task(summarize(summarizer))
    await llm.wait_for_requests(1)
    await service.update_guild_settings(GUILD, BOB, short_term_memory_enabled=False)
    gate.set()
    outcome = await task

    assert (outcome.status, outcome.calls) == ("disabled", 1)
    assert await rows(db) == []


async def test_a_summary_finished_after_memory_was_turned_off_elsewhere_is_not_stored(
    db: Database, pg_url: URL, quick_settings: Settings, llm: ScriptedLLM
) -> None:
    a = await start_process(db, quick_settings, pg_url)
    b = await start_process(db, quick_settings, pg_url)
    try:
        summarizer = Summarizer(b.memory, openai_client(llm), quick_settings)
        b.memory.observe_message(CHANNEL, message(ALICE, "my new address is 12 Elm Street"))
        gate = llm.hold()
        llm.reply_text("Alice moved to 12 Elm Street.")
        task = asyncio.create_task(summarize(summarizer))
        await llm.wait_for_requests(1)
        # The admin (served by process A) turns short-term memory off.
        await a.memory.update_guild_settings(GUILD, ALICE, short_term_memory_enabled=False)
        while (await b.next_notice()).get("t") != "guild":
            pass
        gate.set()
        outcome = await task
        assert outcome.status == "disabled"
        assert await rows(db) == []
    finally:
        await a.listener.close()
        await b.listener.close()


async def test_a_summary_finished_after_the_categories_changed_is_not_stored(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    await seed_summary(service)
    post(service, 3, "new")
    gate = llm.hold()
    llm.reply_text("A summary, while the admin moved to categories.")
    task = asyncio.create_task(summarize(summarizer))
    await llm.wait_for_requests(1)
    await service.set_categories(GUILD, BOB, [Category(0, "goals", "Goals", "goals")])
    gate.set()
    outcome = await task

    assert (outcome.status, outcome.error) == ("failed", CATEGORIES_CHANGED_MEANWHILE)
    assert [r.summary for r in await rows(db) if r.scope_kind == "server"] == [EXISTING]


# -------------------------------------------------------------- the provider's context


def request_tokens(request: dict[str, Any]) -> int:
    """The request's prompt (at the project's estimate) plus the reply budget it asks."""
    prompt = sum(len(m["content"]) for m in request["messages"])
    return prompt // CHARS_PER_TOKEN + int(request.get("max_tokens") or 0)


def novelai(pg_url: URL, tmp_path: Path, **overrides: Any) -> Settings:
    """The tool-less provider with the smallest context (4096 tokens)."""
    return make_test_settings(
        pg_url,
        tmp_path,
        provider="novelai",
        llm={"max_retries": 0, "timeout_seconds": 5},
        **overrides,
    )


def test_batches_are_planned_by_count_and_size() -> None:
    # Count only: full batches first, at most max_batches, the oldest skipped.
    assert plan_batches([5] * 7, per_call=3, room=100, max_batches=2) == (1, [(1, 4), (4, 7)])
    # Size: 50 + 1 + 30 fits in 90, a third message does not; a message longer than the
    # room makes a batch of its own (it is cut when sent).
    assert plan_batches([50, 30, 20, 300, 10], per_call=20, room=90) == (
        0,
        [(0, 2), (2, 3), (3, 4), (4, 5)],
    )
    # What does not fit in max_batches batches by size is skipped, the oldest first.
    assert plan_batches([60] * 5, per_call=20, room=100, max_batches=2) == (3, [(3, 4), (4, 5)])


async def test_a_full_category_memory_fits_a_tool_less_providers_context(
    db: Database, pg_url: URL, tmp_path: Path, llm: ScriptedLLM
) -> None:
    """Five full categories on NovelAI: asking for room for every value at full size
    (3,200 tokens) on top of ~1,900 tokens of existing values overflowed 4,096."""
    settings = novelai(pg_url, tmp_path)
    context = capabilities(settings.provider).context_tokens
    service = make_service(db.sessions, settings, ManualClock())
    summarizer = Summarizer(service, openai_client(llm), settings)
    categories = [
        Category(i, slug, slug.title(), f"the {slug}")
        for i, slug in enumerate(["decisions", "questions", "people", "dates", "tasks"])
    ]
    await service.set_categories(GUILD, ALICE, categories)
    full = ("word " * 300).strip()
    edit = await service.admin_edit(
        guild_id=GUILD,
        channel_id=CHANNEL,
        actor_user_id=ALICE,
        categories={c.slug: full for c in categories},
    )
    assert edit.ok
    new = post(service, 3, "short note")
    llm.reply_text('{"decisions": "A short update."}')

    outcome = await summarize(summarizer)

    assert (outcome.status, outcome.calls, len(llm.requests)) == ("updated", 1, 1)
    assert llm.request(0)["max_tokens"] == context // REPLY_SHARE
    assert request_tokens(llm.request(0)) <= context
    entry = await service.entry(SERVER_KEY)
    assert entry.categories["decisions"] == "A short update."
    assert entry.categories["tasks"] == full
    assert entry.marker == Marker.of(new[-1])


async def test_long_messages_are_read_in_batches_that_fit_the_context(
    db: Database, pg_url: URL, tmp_path: Path, llm: ScriptedLLM
) -> None:
    """Twenty ordinary long messages (700 chars; Discord allows 2,000) were sent in one
    call whatever the provider's context."""
    settings = novelai(pg_url, tmp_path)
    context = capabilities(settings.provider).context_tokens
    service = make_service(db.sessions, settings, ManualClock())
    summarizer = Summarizer(service, openai_client(llm), settings)
    new = [message(ALICE if i % 2 else BOB, f"m{i:02d} " + "x" * 700) for i in range(20)]
    for raw in new:
        service.observe_message(CHANNEL, raw)
    for i in range(MAX_BATCHES):
        llm.reply_text(f"Summary after batch {i + 1}.")

    outcome = await summarize(summarizer)

    assert outcome.status == "updated"
    assert (outcome.new_messages, outcome.skipped) == (20, 0)
    assert 1 < outcome.calls == len(llm.requests) <= MAX_BATCHES
    assert all(request_tokens(request) <= context for request in llm.requests)
    # Every message is read once, whole and in order; each batch integrates into what
    # the previous one produced.
    prompts = [user_prompt(llm, i) for i in range(outcome.calls)]
    for raw in new:
        assert sum(raw.line() in prompt for prompt in prompts) == 1
    assert "Summary after batch 1." in prompts[1]
    assert CUT_MARK not in "".join(prompts)
    entry = await service.entry(SERVER_KEY)
    assert entry.summary == f"Summary after batch {outcome.calls}."
    assert entry.marker == Marker.of(new[-1])


async def test_a_message_longer_than_the_room_is_cut_not_sent_whole(
    db: Database, pg_url: URL, tmp_path: Path, llm: ScriptedLLM
) -> None:
    settings = novelai(pg_url, tmp_path)
    context = capabilities(settings.provider).context_tokens
    service = make_service(db.sessions, settings, ManualClock())
    summarizer = Summarizer(service, openai_client(llm), settings)
    huge = message(BOB, "start " + "y" * 20_000 + " end")
    service.observe_message(CHANNEL, huge)
    llm.reply_text("Bob posted a very long message.")

    outcome = await summarize(summarizer)

    assert (outcome.status, outcome.calls, outcome.new_messages) == ("updated", 1, 1)
    assert request_tokens(llm.request(0)) <= context
    prompt = user_prompt(llm, 0)
    assert "Bob: start yyy" in prompt
    assert CUT_MARK in prompt and " end" not in prompt
    assert (await service.entry(SERVER_KEY)).marker == Marker.of(huge)


async def test_messages_beyond_max_batches_by_size_are_skipped_and_counted(
    db: Database, pg_url: URL, tmp_path: Path, llm: ScriptedLLM
) -> None:
    settings = novelai(pg_url, tmp_path, stm={"raw_window": 50})
    context = capabilities(settings.provider).context_tokens
    service = make_service(db.sessions, settings, ManualClock())
    summarizer = Summarizer(service, openai_client(llm), settings)
    posted = [message(ALICE, f"m{i:02d} " + "z" * 1900) for i in range(1, 51)]
    for raw in posted:
        service.observe_message(CHANNEL, raw)
    for i in range(MAX_BATCHES):
        llm.reply_text(f"Summary after batch {i + 1}.")

    outcome = await summarize(summarizer)

    assert outcome.status == "updated"
    assert outcome.calls == len(llm.requests) == MAX_BATCHES
    assert all(request_tokens(request) <= context for request in llm.requests)
    assert outcome.skipped > 0
    assert outcome.skipped + outcome.new_messages == 50
    # The newest are read: the last one skipped is in no prompt, the next opens the first.
    prompts = "".join(user_prompt(llm, i) for i in range(MAX_BATCHES))
    assert posted[outcome.skipped - 1].line() not in prompts
    assert posted[outcome.skipped].line() in user_prompt(llm, 0)
    assert all(raw.line() in prompts for raw in posted[outcome.skipped :])
    assert (await service.entry(SERVER_KEY)).marker == Marker.of(posted[-1])


async def test_a_memory_that_leaves_no_room_fails_before_any_call(
    db: Database,
    service: MemoryService,
    summarizer: Summarizer,
    llm: ScriptedLLM,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No provider in the table is this small; an unknown server could be. Failing beats
    sending a request the provider rejects every time."""
    tiny = dataclasses.replace(providers.GENERIC, context_tokens=900)
    monkeypatch.setattr(summarizer_module, "capabilities", lambda name: tiny)
    old = post(service, 2, "old")
    await seed_summary(service, covered=old[-1])
    post(service, 3, "new")
    before = snapshot(await rows(db))

    outcome = await summarize(summarizer)

    assert (outcome.status, outcome.error, outcome.calls) == ("failed", NO_ROOM, 0)
    assert llm.requests == []
    assert snapshot(await rows(db)) == before


# ------------------------------------------------------------------- category mode

CATEGORIES = [
    Category(0, "decisions", "Decisions", "what the group decided"),
    Category(1, "open_questions", "Open questions", "what is still unsettled"),
]


async def test_category_mode_asks_for_json_and_writes_the_categories(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    await service.set_categories(GUILD, ALICE, CATEGORIES)
    result = await service.admin_edit(
        guild_id=GUILD,
        channel_id=CHANNEL,
        actor_user_id=ALICE,
        categories={"decisions": "Launch on Friday."},
    )
    assert result.ok
    new = post(service, 3, "venue talk")
    answer = {
        "decisions": "Launch on Friday; the venue is booked.",
        "open_questions": "Who brings snacks?",
        "not_a_category": "ignored",
    }
    llm.reply_text(f"Here you go:\n```json\n{json.dumps(answer)}\n```")

    outcome = await summarize(summarizer)

    assert outcome.status == "updated"
    assert outcome.chars == len(answer["decisions"]) + len(answer["open_questions"])
    system = llm.messages(0)[0]["content"]
    assert "JSON object" in system
    assert '"decisions", "open_questions"' in system
    assert "- open_questions (Open questions): what is still unsettled" in system
    prompt = user_prompt(llm, 0)
    existing = prompt.split("Existing Summary:\n", 1)[1]
    assert json.loads(existing) == {"decisions": "Launch on Friday.", "open_questions": ""}
    for row in await rows(db):
        assert row.categories == {
            "decisions": answer["decisions"],
            "open_questions": answer["open_questions"],
        }
        assert row.origin == "summarizer"
        assert row.covered_through_message_id == new[-1].message_id


async def test_the_answer_may_be_long_enough_for_every_category_at_full_size(
    service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM, quick_settings: Settings
) -> None:
    # Two full categories are about 3,000 characters of JSON: more than the chat reply
    # budget of 1,024 tokens allows, so the summarizer asks for its own.
    await service.set_categories(GUILD, ALICE, CATEGORIES)
    post(service, 3, "venue talk")
    llm.reply_text(json.dumps({"decisions": "Launch on Friday."}))

    assert (await summarize(summarizer)).status == "updated"

    asked = llm.requests[0]["max_tokens"]
    assert quick_settings.llm.max_reply_tokens == 1024
    assert asked > quick_settings.llm.max_reply_tokens
    # 1,500 characters at about 3 per token, plus the JSON around each value.
    assert asked >= len(CATEGORIES) * 600


async def test_category_mode_keeps_values_the_model_left_out(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    await service.set_categories(GUILD, ALICE, CATEGORIES)
    await service.admin_edit(
        guild_id=GUILD,
        channel_id=CHANNEL,
        actor_user_id=ALICE,
        categories={"decisions": "Launch on Friday.", "open_questions": "Snacks?"},
    )
    post(service, 2, "new")
    llm.reply_text(json.dumps({"open_questions": "Snacks: Bob.", "decisions": ""}))

    assert (await summarize(summarizer)).status == "updated"
    assert (await rows(db))[0].categories == {
        "decisions": "Launch on Friday.",
        "open_questions": "Snacks: Bob.",
    }


@pytest.mark.parametrize(
    ("answer", "status", "error"),
    [
        ("Decisions: launch on Friday.", "failed", INVALID_JSON),
        ('["decisions", "launch"]', "failed", INVALID_JSON),
        ('[{"decisions": "garbage"}]', "failed", INVALID_JSON),
        # The old values quoted first, the update after: storing the first object would
        # lose the update and still move the marker.
        (
            'You had {"decisions": "Launch on Friday."} and now {"decisions": "Moved."}',
            "failed",
            INVALID_JSON,
        ),
        (
            'I cannot do that; the expected format is {"decisions": "..."}.',
            "failed",
            INVALID_JSON,
        ),
        ('{"decisions": "A"}\n{"decisions": "B"}', "failed", INVALID_JSON),
        ('{"decisions": "  ", "other": "x"}', "empty", None),
    ],
)
async def test_category_mode_rejects_unusable_answers(
    db: Database,
    service: MemoryService,
    summarizer: Summarizer,
    llm: ScriptedLLM,
    answer: str,
    status: str,
    error: str | None,
) -> None:
    await service.set_categories(GUILD, ALICE, CATEGORIES)
    await service.admin_edit(
        guild_id=GUILD, channel_id=CHANNEL, actor_user_id=ALICE, categories={"decisions": "Fri."}
    )
    post(service, 2, "new")
    before = snapshot(await rows(db))
    llm.reply_text(answer)

    outcome = await summarize(summarizer)

    assert outcome.status == status
    if error is not None:
        assert outcome.error == error
    assert snapshot(await rows(db)) == before


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


# ------------------------------------------------- mode switches, concurrent writes

OLD = "Alice is allergic to peanuts; the launch is on Friday."


async def test_summarizer_after_switch_to_category_mode_is_given_the_old_summary(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    # The channel has a summary (summary mode), then an admin defines categories.
    await seed_summary(service, summary=OLD)
    await service.set_categories(GUILD, ALICE, CATEGORIES)
    # What the chat model is shown as this channel's memory is still the old summary.
    entry = await service.entry(SERVER_KEY)
    assert entry.summary == OLD
    post(service, 3, "venue talk")
    llm.reply_text(json.dumps({"decisions": "The venue is booked."}))

    outcome = await summarize(summarizer)
    assert outcome.status == "updated"
    # The summarizer integrates the new messages into the EXISTING memory: the old
    # summary (what the chat model was shown) is in its prompt, or its facts vanish.
    assert "allergic to peanuts" in user_prompt(llm, 0)
    entry = await service.entry(SERVER_KEY)
    assert (entry.summary, entry.categories) == ("", {"decisions": "The venue is booked."})


async def test_summarizer_after_switch_back_to_summary_mode_is_given_the_old_categories(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    await service.set_categories(GUILD, ALICE, CATEGORIES)
    ok = await service.admin_edit(
        guild_id=GUILD,
        channel_id=CHANNEL,
        actor_user_id=ALICE,
        categories={"decisions": "Launch on Friday; Alice is allergic to peanuts."},
    )
    assert ok.ok
    await service.set_categories(GUILD, ALICE, [])
    post(service, 3, "venue talk")
    llm.reply_text("The venue is booked.")

    assert (await summarize(summarizer)).status == "updated"
    assert "allergic to peanuts" in user_prompt(llm, 0)
    entry = await service.entry(SERVER_KEY)
    assert (entry.summary, entry.categories) == ("The venue is booked.", {})


async def test_a_model_write_in_flight_when_the_summary_is_checked_is_not_overwritten(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    """A model write holds the channel's lock (hydrating a key) when the summarizer's
    answer arrives; it commits first. The summary, built on the older memory, must not
    overwrite it (nor move the marker back): the version is checked under the lock."""
    first = post(service, 2, "old")
    await seed_summary(service, covered=first[-1], summary="Old summary.")
    new = post(service, 4, "new")
    gate = llm.hold()
    llm.reply_text("Summary built on the old memory.")
    task = asyncio.create_task(summarize(summarizer))
    await llm.wait_for_requests(1)

    # A chat turn of Bob: its write holds the channel lock while Bob's user key is
    # still being loaded from the database.
    newest = post(service, 1, "even newer")
    turn = TurnState(
        channel_id=CHANNEL,
        user_id=BOB,
        guild_id=GUILD,
        config=await service.guild_config(GUILD),
        epoch=service.channel_epoch(CHANNEL),
    )
    turn.marker = Marker.of(newest[-1])
    release = asyncio.Event()
    loading = asyncio.Event()
    real_entry = service._reader.entry

    async def slow_entry(key: ScopeKey, **kw: object):  # type: ignore[no-untyped-def]
        if key == ScopeKey.user(BOB, CHANNEL, GUILD) and not release.is_set():
            loading.set()
            await release.wait()
        return await real_entry(key, **kw)  # type: ignore[arg-type]

    service._reader.entry = slow_entry  # type: ignore[method-assign]
    summarizer_writing = asyncio.Event()
    real_update = service.update_stm

    async def spy_update(turn: TurnState, **kw: Any) -> WriteResult:
        if kw.get("origin") == "summarizer":
            summarizer_writing.set()  # it goes on to wait for the channel's lock
        return await real_update(turn, **kw)

    service.update_stm = spy_update  # type: ignore[method-assign]
    model_write = asyncio.create_task(service.update_stm(turn, summary="Model's fresh update."))
    await asyncio.wait_for(loading.wait(), 10)
    gate.set()  # the summarizer's answer arrives while the model write holds the lock
    await asyncio.wait_for(summarizer_writing.wait(), 10)
    release.set()
    written = await model_write
    outcome = await task

    assert written.ok
    assert (outcome.status, outcome.error) == ("failed", CHANGED_MEANWHILE)
    server = [r for r in await rows(db) if r.scope_kind == "server"]
    assert server[0].summary == "Model's fresh update."
    assert server[0].covered_through_message_id == newest[-1].message_id
    assert new[-1].message_id < newest[-1].message_id


async def test_a_later_batch_is_not_cut_when_the_running_categories_hold_line_breaks(
    db: Database, pg_url: URL, tmp_path: Path, llm: ScriptedLLM
) -> None:
    # In category mode the memory is shown as JSON, where a line break or a quote takes
    # two characters: a bullet list grows past its length in the prompt. The plan must
    # leave room for that, or a later batch is cut and the marker passes unread text.
    settings = make_test_settings(
        pg_url, tmp_path, provider="novelai", llm={"max_retries": 0, "timeout_seconds": 5}
    )
    service = make_service(db.sessions, settings, ManualClock())
    summarizer = Summarizer(service, openai_client(llm), settings)
    await service.set_categories(GUILD, ALICE, [Category(0, "notes", "Notes", "what matters")])
    config = await service.guild_config(GUILD)
    budget = summarizer._budget(config)
    unescaped = build_messages(config, [], summary="", categories={"notes": "x" * VALUE_LIMIT})
    room = budget.prompt_chars - request_chars(unescaped)
    # Ten messages, five of them filling that (too generous) room exactly.
    base = (room - 4) // 5
    sizes = [base] * 4 + [room - 4 - 4 * base]
    posted = [
        message(ALICE, f"m{i} " + "w" * (size - len("Alice: m0 ")))
        for i, size in enumerate(sizes * 2)
    ]
    for raw in posted:
        service.observe_message(CHANNEL, raw)
    bullets = ("- Bob prefers tea\n" * 200)[:VALUE_LIMIT].rstrip()
    llm.reply_text(json.dumps({"notes": bullets}))
    for _ in range(len(posted)):
        llm.reply_text(json.dumps({"notes": bullets}))

    outcome = await summarizer.summarize(
        guild_id=GUILD, channel_id=CHANNEL, actor_user_id=ALICE, reason="test"
    )

    assert outcome.status == "updated", outcome
    prompts = [str(llm.messages(i)[1]["content"]) for i in range(len(llm.requests))]
    assert not any(CUT_MARK in prompt for prompt in prompts)
    read = [raw for raw in posted if any(raw.line() in prompt for prompt in prompts)]
    assert read == posted[: len(read)] and outcome.new_messages == len(read) < len(posted)
    # The marker stops at the last message read whole; the rest waits for the next run.
    assert (await service.entry(SERVER_KEY)).marker == Marker.of(read[-1])
    again = await summarizer.summarize(
        guild_id=GUILD, channel_id=CHANNEL, actor_user_id=ALICE, reason="test"
    )
    assert again.status == "updated" and again.skipped == 0 and again.new_messages > 0
    later = posted[len(read) + again.new_messages - 1]
    assert (await service.entry(SERVER_KEY)).marker == Marker.of(later)


# /forget-me finds what was read, whatever the window holds by the write


def _quick(pg_url: URL, tmp_path: Path, **kw: object) -> Settings:
    return make_test_settings(
        pg_url, tmp_path, model="test-model", llm={"max_retries": 0, "timeout_seconds": 5}, **kw
    )


async def _channel_summaries(db: Database) -> list[str]:
    async with db.sessions() as session:
        rows = await session.scalars(
            select(ShortTermMemory).where(ShortTermMemory.channel_id == CHANNEL)
        )
        return [row.summary for row in rows]


async def test_a_message_deleted_while_summarizing_still_makes_its_author_a_contributor(
    db: Database, pg_url: URL, tmp_path: Path, llm: ScriptedLLM
) -> None:
    """Carol's message is read by the summarizer; she deletes it while the model answers.
    The stored summary holds her words, so /forget-me must find the row from her."""
    settings = _quick(pg_url, tmp_path)
    service = make_service(db.sessions, settings, ManualClock())
    summ = Summarizer(service, openai_client(llm), settings)
    service.observe_message(CHANNEL, message(ALICE, "where should we send the invites?"))
    carol = message(CAROL, "send mine to 12 Elm Street, Springfield", name="Carol")
    service.observe_message(CHANNEL, carol)
    service.observe_message(CHANNEL, message(ALICE, "thanks!"))

    gate = llm.hold()
    llm.reply_text("Invites: Carol's go to 12 Elm Street, Springfield.")
    task = asyncio.create_task(
        summ.summarize(guild_id=GUILD, channel_id=CHANNEL, actor_user_id=ALICE, reason="t")
    )
    await llm.wait_for_requests(1)
    assert "12 Elm Street" in str(llm.messages(0))  # the model read Carol's message
    service.windows.delete(CHANNEL, carol.message_id)  # Carol deletes it meanwhile
    gate.set()
    assert (await task).status == "updated"

    receipt = await service.forget_user(CAROL)
    async with db.sessions() as session:
        left = [
            r.summary
            for r in await session.scalars(
                select(ShortTermMemory).where(ShortTermMemory.channel_id == CHANNEL)
            )
        ]
    assert not any("Elm Street" in s for s in left), (receipt, left)


async def test_a_message_scrolled_out_while_summarizing_still_makes_its_author_a_contributor(
    db: Database, pg_url: URL, tmp_path: Path, llm: ScriptedLLM
) -> None:
    """No deletion needed: the raw window is full (50, the default) and one new message
    arrives while the model answers, pushing Carol's (the oldest read) out of it."""
    settings = _quick(pg_url, tmp_path)
    assert settings.stm.raw_window == 50
    service = make_service(db.sessions, settings, ManualClock())
    summ = Summarizer(service, openai_client(llm), settings)
    carol = message(CAROL, "my flat is 12 Elm Street, Springfield", name="Carol")
    service.observe_message(CHANNEL, carol)
    for i in range(49):
        service.observe_message(CHANNEL, message(ALICE, f"chatter {i}"))

    gate = llm.hold()
    for i in range(3):  # 50 messages: batches of 20 + 20 + 10
        llm.reply_text(f"Carol lives at 12 Elm Street, Springfield; chatter part {i}.")
    task = asyncio.create_task(
        summ.summarize(guild_id=GUILD, channel_id=CHANNEL, actor_user_id=ALICE, reason="t")
    )
    await llm.wait_for_requests(1)
    assert "Elm Street" in str(llm.messages(0))
    service.observe_message(CHANNEL, message(ALICE, "one more"))  # Carol's scrolls out
    gate.set()
    outcome = await task
    assert (outcome.status, outcome.new_messages) == ("updated", 50)

    await service.forget_user(CAROL)
    async with db.sessions() as session:
        left = [
            r.summary
            for r in await session.scalars(
                select(ShortTermMemory).where(ShortTermMemory.channel_id == CHANNEL)
            )
        ]
    assert not any("Elm Street" in s for s in left), left


async def test_model_write_after_the_window_scrolled_keeps_the_shown_authors(
    db: Database, pg_url: URL, tmp_path: Path
) -> None:
    """The same for the model's own tool write: the prompt showed Carol's message; one
    message arrives before the tool call and Carol is not recorded as a contributor."""
    settings = _quick(pg_url, tmp_path)
    service = make_service(db.sessions, settings, ManualClock())
    service.observe_message(CHANNEL, message(CAROL, "my flat is 12 Elm Street", name="Carol"))
    for i in range(49):
        service.observe_message(CHANNEL, message(ALICE, f"chatter {i}"))
    prepared = await prepare(service)
    assert "12 Elm Street" in str(assemble(prepared.prompt).history)  # the model sees it
    service.observe_message(CHANNEL, message(BOB, "a new message meanwhile"))
    result = await service.update_stm(prepared.turn, summary="Carol lives at 12 Elm Street.")
    assert result.ok
    await service.forget_user(CAROL)
    async with db.sessions() as session:
        left = [
            r.summary
            for r in await session.scalars(
                select(ShortTermMemory).where(ShortTermMemory.channel_id == CHANNEL)
            )
        ]
    assert not any("Elm Street" in s for s in left), left


async def test_a_trimmed_turn_does_not_claim_what_the_summarizer_covered_meanwhile(
    db: Database, pg_url: URL, tmp_path: Path, llm: ScriptedLLM
) -> None:
    """A turn whose oldest messages were cut to fit the context keeps the marker where it
    was; if a summary moved it meanwhile, the turn's write (built on the old memory and
    only the newest messages) is refused instead of claiming the cut messages."""
    settings = _quick(pg_url, tmp_path)
    service = make_service(db.sessions, settings, ManualClock())
    summarizer = Summarizer(service, openai_client(llm), settings)
    service.observe_message(CHANNEL, message(ALICE, "old"))
    llm.reply_text("Old summary.")
    first = await summarizer.summarize(
        guild_id=GUILD, channel_id=CHANNEL, actor_user_id=ALICE, reason="t"
    )
    assert first.updated
    trimmed = message(ALICE, "the launch moved to Friday")  # cut from the turn's prompt
    service.observe_message(CHANNEL, trimmed)
    service.observe_message(CHANNEL, message(ALICE, "what snacks?"))
    prepared = await prepare(service)
    prepared.turn.marker = None  # as TurnRunner.run does when the history was cut
    prepared.turn.history_trimmed = True
    llm.reply_text("Old summary. Launch moved to Friday; snacks discussed.")
    second = await summarizer.summarize(
        guild_id=GUILD, channel_id=CHANNEL, actor_user_id=ALICE, reason="t"
    )
    assert second.updated
    result = await service.update_stm(prepared.turn, summary="Old summary. Snacks: chips.")
    entry = await service.entry(SERVER_KEY)
    assert str(result) == f"rejected: {REASON_CHANGED}"
    assert "Friday" in entry.summary


async def test_a_summary_made_while_the_database_went_down_is_spooled_not_dropped(
    db: Database,
    quick_settings: Settings,
    llm: ScriptedLLM,
    tmp_path: Path,
) -> None:
    spool = DurableSpool(spool_path(tmp_path / "spool"))
    service = make_service(db.sessions, quick_settings, ManualClock(), spool=spool)
    summarizer = Summarizer(service, openai_client(llm), quick_settings)
    await seed_summary(service)  # Alice's turn: the channel's memory is cached
    post(service, 4, "new")
    gate = llm.hold()
    llm.reply_text("The launch party is on Friday.")
    # Bob (a moderator who never spoke here) runs /stm summarize; the database goes
    # away while the model is answering.
    task = asyncio.create_task(summarize(summarizer, user=BOB))
    await llm.wait_for_requests(1)
    faults(service.sessions).fail()
    gate.set()
    outcome = await task

    assert (outcome.status, outcome.pending_sync, outcome.error) == ("updated", True, None)
    await back(service.sessions)
    await spool.replay(db.sessions)
    written = {(r.scope_kind, r.user_id): r.summary for r in await rows(db)}
    assert written[("server", None)] == written[("user", BOB)] == "The launch party is on Friday."


async def test_a_summary_built_on_a_memory_forgotten_elsewhere_unheard_is_not_stored(
    db: Database, quick_settings: Settings, llm: ScriptedLLM
) -> None:
    clock = ManualClock()
    a = make_service(db.sessions, quick_settings, clock)
    b = make_service(db.sessions, quick_settings, clock)
    summarizer = Summarizer(a, openai_client(llm), quick_settings)
    await seed_summary(a, summary="Alice's sister is Maria.")  # version 1, Alice's words
    a.listener_lost()  # A hears no notices (and reads the database on every use)
    for i in range(3):
        a.observe_message(CHANNEL, message(BOB, f"bob {i}"))
    gate = llm.hold()
    llm.reply_text("Alice's sister is Maria. Bob talked about tea.")
    clock.advance(seconds=1)
    task = asyncio.create_task(summarize(summarizer, user=BOB))
    await llm.wait_for_requests(1)
    # Process B: Alice's /forget-me deletes the row; Carol's turn then writes a new
    # memory there, whose row starts over at version 1.
    clock.advance(seconds=1)
    await b.forget_user(ALICE)
    carol = (await prepare(b, CAROL)).turn
    assert (await b.update_stm(carol, summary="Carol's new topic.")).ok
    gate.set()
    outcome = await task

    assert outcome.status == "failed"
    assert not any("Maria" in r.summary for r in await rows(db))
