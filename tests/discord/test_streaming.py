"""Streamed replies end to end: the scripted server streams, the bot posts and edits.

Real parts only: discord.py's state through dpytest, the real ``openai`` client reading
the server's event stream over HTTP, embedded PostgreSQL. Time is the bot's injected
clock: :class:`TickingClock` moves on every reading, so an answer streamed in many pieces
is a slow one, the same on every run.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import select

from bot.cogs.history import WIPED_WHILE_ANSWERING
from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.db.engine import Database
from bot.db.models import ShortTermMemory
from bot.llm.failures import CUT_MESSAGE
from bot.memory.turn.types import REASON_ALREADY_UPDATED
from tests.helpers.bot import KiokuHarness
from tests.helpers.builders import ManualClock
from tests.helpers.chat_world import KiokuStarter
from tests.helpers.fake_llm import ScriptedLLM, ToolDelta

EDIT_SECONDS = 1.0


class TickingClock(ManualClock):
    """A clock that moves ``step`` seconds each time it is read."""

    def __init__(self, step: float) -> None:
        super().__init__(datetime.now(UTC))
        self.step = step

    def monotonic(self) -> float:
        self._mono += self.step
        return self._mono


@pytest.fixture
async def slow(llm: ScriptedLLM, kioku_with: KiokuStarter) -> AsyncIterator[KiokuHarness]:
    """The bot on a clock that moves 0.3 s per reading: every streamed piece is late."""
    async with kioku_with(
        clock=TickingClock(0.3), settings={"llm": {"stream_edit_seconds": EDIT_SECONDS}}
    ) as harness:
        yield harness


def words(text: str) -> list[str]:
    """``text`` cut into pieces that end inside words, as a model's tokens do."""
    return [text[i : i + 7] for i in range(0, len(text), 7)]


async def rows(db: Database) -> list[ShortTermMemory]:
    async with db.sessions() as session:
        return list(await session.scalars(select(ShortTermMemory)))


def tool_results(llm: ScriptedLLM, i: int = -1) -> list[str]:
    return [str(m["content"]) for m in llm.messages(i) if m.get("role") == "tool"]


async def test_a_fast_answer_is_sent_once_without_a_placeholder_or_an_edit(
    kioku: KiokuHarness,
) -> None:
    # The harness clock stands still: the whole answer is in before the first edit is due.
    text = "Here is the café you asked about, and its menu."
    kioku.llm.reply_stream(*words(text), split_within=["é", "menu"])
    await kioku.env.send("where?", mention_bot=True)
    assert kioku.llm.last_request.get("stream") is True
    [sent] = kioku.env.sent
    assert sent.content == text
    assert sent.edits == []
    assert sent.reference_id is not None  # a reply to the member, as ever


async def test_a_slow_answer_is_posted_then_edited_no_more_often_than_the_setting(
    slow: KiokuHarness,
) -> None:
    clock = slow.clock
    assert isinstance(clock, TickingClock)
    text = "Streaming means the answer appears while the model is still writing it. " * 3
    pieces = words(text.strip())
    slow.llm.reply_stream(*pieces)
    began = clock._mono
    await slow.env.send("explain streaming", mention_bot=True)
    elapsed = clock._mono - began
    [sent] = slow.env.sent
    # Posted with the text so far, edited as it grew, and last shows the whole answer.
    assert sent.reference_id is not None
    assert len(sent.content) < len(text.strip())
    assert text.strip().startswith(sent.content)
    assert len(sent.edits) >= 2
    assert sent.message.content == text.strip()
    shown = [sent.content] + [str(edit["content"]) for edit in sent.edits]
    assert all(later.startswith(earlier) for earlier, later in itertools.pairwise(shown))
    # One Discord call per due time at most, and the final edit when the answer ended.
    assert 1 + len(sent.edits) <= elapsed / EDIT_SECONDS + 2
    assert len(sent.edits) < len(pieces) // 3
    # The model reads the whole answer back next time, not a partial one.
    slow.llm.reply_text("Yes.")
    await slow.env.send("got it?", mention_bot=True)
    said = [m["content"] for m in slow.llm.messages() if m.get("role") == "assistant"]
    assert said == [text.strip()]


async def test_a_long_streamed_answer_goes_on_in_a_second_message_keeping_its_code_block(
    slow: KiokuHarness,
) -> None:
    intro = "Here is the script, line by line:\n\n```python\n"
    code = "".join(f"print('line number {n} of the example script')\n" for n in range(60))
    text = intro + code + "```\n\nThat is all of it."
    slow.llm.reply_stream(*words(text))
    await slow.env.send("show me the script", mention_bot=True)
    first, second = slow.env.sent
    assert [s.deleted for s in (first, second)] == [False, False]
    one, two = first.message.content, second.message.content
    assert len(one) <= 2000 and len(two) <= 2000
    # The block is closed at the cut and reopened with its language after it.
    assert one.endswith("\n```") and two.startswith("```python\n")
    assert two.endswith("```\n\nThat is all of it.")
    assert two.count("```") == 2  # reopened once, closed once: nothing reopened wrongly
    assert second.reference_id is None  # only the first part replies to the member
    lines = [line for line in (one + "\n" + two).splitlines() if line.startswith("print(")]
    assert lines == code.splitlines()  # no line of code (nor word) broken


async def test_tool_calls_arriving_as_deltas_between_text_are_run(kioku: KiokuHarness) -> None:
    kioku.llm.reply_stream(
        "Let me note th",
        ToolDelta(0, '{"summ', id="call_a", name=STM_TOOL_NAME),
        "at down — ",
        ToolDelta(1, '{"summary": "sec', id="call_b", name=STM_TOOL_NAME),
        ToolDelta(0, 'ary": "Ana likes the café ☕ on Main St"}'),
        "done.",
        ToolDelta(1, 'ond note"}'),
        split_within=['"summ', "é", "☕", "sec"],
    ).reply_stream("Noted: ", "the café ☕.")
    await kioku.env.send("Ana likes the café on Main St", mention_bot=True)
    assert {row.summary for row in await rows(kioku.database)} == {
        "Ana likes the café ☕ on Main St"
    }
    first, second = tool_results(kioku.llm)
    assert first == "saved" and REASON_ALREADY_UPDATED in second
    calls = kioku.llm.messages()[-3]["tool_calls"]
    assert [call["id"] for call in calls] == ["call_a", "call_b"]
    assert kioku.env.last_sent().message.content.endswith("Noted: the café ☕.")


async def test_a_memory_write_beside_a_streamed_answer_shows_it_and_asks_nothing_more(
    slow: KiokuHarness,
) -> None:
    text = "The launch moved to Friday, and Ana writes the docs for it this week."
    slow.llm.reply_stream(
        *words(text),
        ToolDelta(0, '{"summary": "Launch on Friday; Ana writes the docs."}', "c1", STM_TOOL_NAME),
    )
    await slow.env.send("what changed?", mention_bot=True)
    [sent] = slow.env.sent
    # Posted while it streamed, and the text beside the call is the whole reply.
    assert len(sent.content) < len(text) and text.startswith(sent.content)
    assert sent.message.content == text
    assert {row.summary for row in await rows(slow.database)} == {
        "Launch on Friday; Ana writes the docs."
    }
    assert len(slow.llm.requests) == 1 and slow.llm.unscripted == 0


async def test_a_stream_cut_midway_keeps_what_was_sent_and_says_it_was_cut(
    slow: KiokuHarness,
) -> None:
    said = "The first part of a long answer arrives, and more words follow, until"
    slow.llm.reply_stream(
        *words(said),
        " the connection drops here",
        ToolDelta(0, "{}", "c1", STM_TOOL_NAME),
        drop_within="drops",
    )
    await slow.env.send("tell me everything", mention_bot=True)
    [sent] = slow.env.sent
    assert sent.edits, "the answer was slow: posted, then edited"
    final = sent.message.content
    assert final.startswith(said) and final.endswith(CUT_MESSAGE)
    assert "drops" not in final
    assert await rows(slow.database) == []  # the call never arrived whole: nothing saved
    # What broke off is no answer the model reads back as its own.
    slow.llm.reply_text("Sorry about that.")
    await slow.env.send("again?", mention_bot=True)
    history = "\n".join(str(m.get("content")) for m in slow.llm.messages())
    assert "The first part of a long answer" not in history


async def test_an_error_event_before_the_first_edit_sends_what_came_with_the_cut_note(
    kioku: KiokuHarness,
) -> None:
    kioku.llm.reply_stream("Half an ans", "wer", error_event=True)
    await kioku.env.send("hi", mention_bot=True)
    [sent] = kioku.env.sent
    assert sent.content == f"Half an answer\n\n{CUT_MESSAGE}"
    assert sent.edits == []


async def test_a_provider_that_does_not_stream_is_asked_and_answered_as_before(
    llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with kioku_with(clock=TickingClock(0.3), settings={"provider": "gemini"}) as harness:
        llm.reply_stream(*words("A whole answer, sent in one go as it always was."))
        await harness.env.send("hi", mention_bot=True)
        request: dict[str, Any] = llm.last_request
        assert "stream" not in request
        [sent] = harness.env.sent
        assert sent.content == "A whole answer, sent in one go as it always was."
        assert sent.edits == []


async def test_a_server_that_ignores_stream_and_answers_whole_is_understood(
    kioku: KiokuHarness,
) -> None:
    kioku.llm.streams = False
    kioku.llm.reply_stream(
        "A plain ", "answer.", ToolDelta(0, '{"summary": "notes"}', "c1", STM_TOOL_NAME)
    )
    await kioku.env.send("hi", mention_bot=True)
    assert kioku.llm.request(0).get("stream") is True
    # The whole answer's call ran, and the text beside it is the reply (a memory write
    # needs no second request).
    assert {row.summary for row in await rows(kioku.database)} == {"notes"}
    assert kioku.env.last_sent().content == "A plain answer."
    assert len(kioku.llm.requests) == 1


async def test_a_refresh_while_an_answer_streams_takes_back_what_was_posted(
    slow: KiokuHarness,
) -> None:
    env, llm, bot = slow.env, slow.llm, slow.bot
    moderator = await env.create_member("mod", kind="moderator")
    await env.send("the secret codename is HERON")
    said = "The codename you gave me is HERON, and I will keep it in mind for the launch"
    llm.reply_stream(*words(said), " and later.", pause_within="later")
    turn = asyncio.create_task(env.send("what is the codename?", mention_bot=True))
    try:
        # The answer is slow: its first message is out before the pause.
        posted = await bot.wait_for("message", check=lambda m: m.author == bot.user, timeout=10)
        await llm.wait_paused()
        refreshed = await slow.interactions.slash("refresh", user=moderator)
        assert not refreshed.command_failed
    finally:
        llm.resume_stream()
        await turn
    [first] = [s for s in env.sent if s.message.id == posted.id]
    assert first.deleted
    assert env.sent[-1].content == WIPED_WHILE_ANSWERING
    assert all(s.deleted for s in env.sent if "HERON" in s.message.content)
    llm.reply_text("Nothing yet.")
    await env.send("what do you know so far?", mention_bot=True)
    history = "\n".join(str(m.get("content")) for m in llm.messages())
    assert "HERON" not in history


LONG = " ".join(f"word{i}" for i in range(12_000))  # about 85,000 characters


async def test_a_runaway_streamed_answer_takes_at_most_ten_messages(slow: KiokuHarness) -> None:
    slow.llm.reply_stream(*[LONG[i : i + 4_000] for i in range(0, len(LONG), 4_000)])
    await slow.env.send("tell me everything", mention_bot=True)
    sent = slow.env.sent
    assert len(sent) == 10
    assert all(len(part.content) <= 2_000 for part in sent)
    assert sent[-1].content.endswith("(The answer was cut here: it ran past 10 messages.)")


async def test_a_runaway_whole_answer_takes_at_most_the_configured_messages(
    llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with kioku_with(settings={"llm": {"max_reply_messages": 3}}) as kioku:
        llm.reply_text(LONG)
        await kioku.env.send("tell me everything", mention_bot=True)
        sent = kioku.env.sent
        assert len(sent) == 3
        assert sent[-1].content.endswith("(The answer was cut here: it ran past 3 messages.)")
