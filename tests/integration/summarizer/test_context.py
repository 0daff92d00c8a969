"""Every request fits the provider's context: batches planned by count and size, long messages
cut, the oldest skipped and counted, no room failing before any call."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import URL

from bot.config import Settings
from bot.conversation.summarizer import (
    CUT_MARK,
    MAX_BATCHES,
    NO_ROOM,
    REPLY_SHARE,
    Summarizer,
    build_messages,
    plan_batches,
    request_chars,
)
from bot.conversation.summarizer import run as summarizer_module
from bot.conversation.summarizer.prompt import HEADER_ROOM
from bot.db.engine import Database
from bot.memory.service import MemoryService
from bot.memory.turn.prompt import VALUE_LIMIT
from bot.vocabulary import providers
from bot.vocabulary.model import Category, Marker
from bot.vocabulary.providers import CHARS_PER_TOKEN, capabilities
from tests.helpers.builders import ALICE, BOB, CHANNEL, GUILD, message
from tests.helpers.database import make_test_settings
from tests.helpers.fake_llm import ScriptedLLM
from tests.integration.summarizer.harness import (
    SERVER_KEY,
    post,
    seed_summary,
    stored,
    summarize,
    summarizing,
    user_prompt,
)

# -------------------------------------------------------------- the provider's context


def request_tokens(request: dict[str, Any]) -> int:
    """The request's prompt (at the project's estimate) plus the reply budget it asks."""
    prompt = sum(len(m["content"]) for m in request["messages"])
    return prompt // CHARS_PER_TOKEN + int(request.get("max_tokens") or 0)


def answer_every_batch(llm: ScriptedLLM) -> None:
    """The model answers each of MAX_BATCHES calls with a summary naming its batch."""
    for i in range(MAX_BATCHES):
        llm.reply_text(f"Summary after batch {i + 1}.")


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
    service, summarizer = summarizing(db, settings, llm)
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
    service, summarizer = summarizing(db, settings, llm)
    new = [message(ALICE if i % 2 else BOB, f"m{i:02d} " + "x" * 700) for i in range(20)]
    for raw in new:
        service.observe_message(CHANNEL, raw)
    answer_every_batch(llm)

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
    service, summarizer = summarizing(db, settings, llm)
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
    service, summarizer = summarizing(db, settings, llm)
    posted = [message(ALICE, f"m{i:02d} " + "z" * 1900) for i in range(1, 51)]
    for raw in posted:
        service.observe_message(CHANNEL, raw)
    answer_every_batch(llm)

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
    before = await stored(db)

    outcome = await summarize(summarizer)

    assert (outcome.status, outcome.error, outcome.calls) == ("failed", NO_ROOM, 0)
    assert llm.requests == []
    assert await stored(db) == before


async def test_a_later_batch_is_not_cut_when_the_running_categories_hold_line_breaks(
    db: Database, pg_url: URL, tmp_path: Path, llm: ScriptedLLM
) -> None:
    # In category mode the memory is shown as JSON, where a line break or a quote takes
    # two characters: a bullet list grows past its length in the prompt. The plan must
    # leave room for that, or a later batch is cut and the marker passes unread text.
    settings = make_test_settings(
        pg_url, tmp_path, provider="novelai", llm={"max_retries": 0, "timeout_seconds": 5}
    )
    service, summarizer = summarizing(db, settings, llm)
    await service.set_categories(GUILD, ALICE, [Category(0, "notes", "Notes", "what matters")])
    config = await service.guild_config(GUILD)
    budget = summarizer._budget(config)
    unescaped = build_messages(config, [], summary="", categories={"notes": "x" * VALUE_LIMIT})
    # A batch opens with its day's header; each line starts with its time.
    room = budget.prompt_chars - request_chars(unescaped) - HEADER_ROOM
    # Ten messages, five of them filling that (too generous) room exactly.
    base = (room - 4) // 5
    sizes = [base] * 4 + [room - 4 - 4 * base]
    posted = [
        message(ALICE, f"m{i} " + "w" * (size - len("12:00 Alice: m0 ")))
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
