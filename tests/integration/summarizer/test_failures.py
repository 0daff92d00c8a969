"""A failed, empty, cut-off or tool-calling answer changes nothing, and a second run for the
channel is busy."""

from __future__ import annotations

import asyncio

import pytest

from bot.conversation.summarizer import CUT_OFF, EMPTY_ANSWER, TOOL_CALL_ANSWER, Summarizer
from bot.db.engine import Database
from bot.llm.tools.loop import UNAVAILABLE_MESSAGE
from bot.memory.service import MemoryService
from bot.vocabulary.model import Marker
from tests.helpers.builders import CHANNEL, OTHER_CHANNEL
from tests.helpers.fake_llm import ScriptedLLM
from tests.integration.summarizer.harness import (
    EXISTING,
    SERVER_KEY,
    post,
    seed_summary,
    stored,
    summarize,
)

# ------------------------------------------------------------- failures change nothing


async def test_a_failed_call_leaves_summary_and_marker_untouched(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    old = post(service, 2, "old")
    await seed_summary(service, covered=old[-1])
    post(service, 5, "new")
    before = await stored(db)
    llm.reply_error(500)

    outcome = await summarize(summarizer)

    assert (outcome.status, outcome.error, outcome.calls) == ("failed", UNAVAILABLE_MESSAGE, 1)
    assert await stored(db) == before
    entry = await service.entry(SERVER_KEY)
    assert (entry.summary, entry.marker) == (EXISTING, Marker.of(old[-1]))


async def test_a_failure_in_a_later_batch_writes_nothing(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    await seed_summary(service)
    post(service, 25, "new")
    before = await stored(db)
    llm.reply_text("First batch folded in.").reply_error(429)

    outcome = await summarize(summarizer)

    assert (outcome.status, outcome.calls) == ("failed", 2)
    assert "rate limited" in (outcome.error or "")
    assert await stored(db) == before
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
    before = await stored(db)
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
    assert await stored(db) == before
    entry = await service.entry(SERVER_KEY)
    assert (entry.summary, entry.marker) == (EXISTING, Marker.of(old[-1]))


async def test_a_tool_call_in_a_later_batch_writes_nothing(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    await seed_summary(service)
    post(service, 25, "new")
    before = await stored(db)
    llm.reply_text("First batch folded in.")
    llm.reply_tool_calls([("update_short_term_memory", {"summary": "x"})]).reply_error(503)

    outcome = await summarize(summarizer)

    assert (outcome.status, outcome.error) == ("failed", TOOL_CALL_ANSWER)
    assert outcome.calls == len(llm.requests) == 3
    assert await stored(db) == before


@pytest.mark.parametrize("answer", ["", "   \n ", "<think>nothing to add</think>"])
async def test_an_empty_result_leaves_the_memory_untouched(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM, answer: str
) -> None:
    old = post(service, 2, "old")
    await seed_summary(service, covered=old[-1])
    post(service, 3, "new")
    before = await stored(db)
    llm.reply_text(answer)

    outcome = await summarize(summarizer)

    assert (outcome.status, outcome.error) == ("empty", EMPTY_ANSWER)
    assert await stored(db) == before
    assert (await service.entry(SERVER_KEY)).marker == Marker.of(old[-1])


async def test_an_answer_cut_off_at_the_length_limit_is_not_stored(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    old = post(service, 2, "old")
    await seed_summary(service, covered=old[-1])
    post(service, 4, "new")
    before = await stored(db)
    # Stored, the half sentence would replace the summary and move the marker past
    # messages it never got to.
    llm.reply_text("Alice and Bob planned the la", finish_reason="length")

    outcome = await summarize(summarizer)

    assert (outcome.status, outcome.error) == ("failed", CUT_OFF)
    assert await stored(db) == before
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
