"""A model that fails, is slow, unreachable or rate limited: the member gets a friendly
reply, the channel's memory stays exactly as it was, and other channels keep working."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import anyio
import anyio.lowlevel
import openai._base_client
import pytest
from sqlalchemy import func, select

from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.db.engine import Database
from bot.db.models import ShortTermMemory, StmEvent
from bot.llm.tools.loop import TIMEOUT_MESSAGE
from bot.vocabulary.model import ScopeKey
from tests.helpers.bot import KiokuHarness
from tests.helpers.chat_world import KiokuStarter, prompt_text, rows, stm_call, tool_results
from tests.helpers.fake_llm import ScriptedLLM, refused_base_url

SEEDED = "The team moved the launch to Friday."


# The client timeout of the timeout case (its reply comes far later).
FAULT_SECONDS = 1.5


async def stm_state(kioku: KiokuHarness, db: Database) -> tuple[list[dict[str, Any]], Any]:
    """Every STM row (all columns), the audit event count, and copies of the cached
    entries of the harness's channel: what a failed turn must leave exactly as it was."""
    columns = ShortTermMemory.__table__.columns
    stored = [{c.key: getattr(row, c.key) for c in columns} for row in await rows(db)]
    async with db.sessions() as session:
        events = await session.scalar(select(func.count()).select_from(StmEvent))
    cache = kioku.bot.memory.cache
    cached = {
        key: copy.deepcopy(cache.get(key)) for key in cache.keys_of_channel(kioku.env.channel.id)
    }
    return stored, (events, cached)


async def seed_memory(kioku: KiokuHarness, db: Database) -> tuple[list[dict[str, Any]], Any]:
    """A turn in which the model stores :data:`SEEDED`; returns the state after it."""
    kioku.llm.reply_tool_calls([stm_call(SEEDED)]).reply_text("noted")
    await kioku.env.send("the launch moved to Friday", mention_bot=True)
    assert tool_results(kioku.llm, -1) == ["saved"]
    state = await stm_state(kioku, db)
    stored, (_, cached) = state
    assert [row["summary"] for row in stored] == [SEEDED, SEEDED]  # server and user rows
    assert [entry.summary for entry in cached.values()] == [SEEDED, SEEDED]
    return state


@pytest.mark.parametrize(
    ("script", "client_timeout", "fragment", "held", "rejected"),
    [
        pytest.param(
            lambda llm: llm.reply_error(500, "boom"),
            5,
            "can't reach",
            True,
            None,
            id="500",
        ),
        pytest.param(
            lambda llm: llm.reply_error(429, "slow down", headers={"retry-after": "0"}),
            5,
            "busy",
            True,
            None,
            id="429",
        ),
        pytest.param(
            lambda llm: llm.reply_text("late", delay=10 * FAULT_SECONDS),
            FAULT_SECONDS,
            "too long",
            False,
            None,
            id="timeout",
        ),
        pytest.param(
            lambda llm: llm.reply_tool_calls([(STM_TOOL_NAME, '{"summary": "cut')]).reply_text(
                "Sorry, I could not note that down."
            ),
            5,
            "Sorry, I could not note that down.",
            True,
            "JSON",
            id="malformed-tool-arguments",
        ),
    ],
)
async def test_llm_faults_get_a_friendly_reply_and_other_channels_keep_working(
    db: Database,
    llm: ScriptedLLM,
    script: Any,
    client_timeout: float,
    fragment: str,
    held: bool,
    rejected: str | None,
    kioku_with: KiokuStarter,
) -> None:
    """A model call that fails (slowly) gets a friendly reply and leaves the channel's
    stored memory and its cache entries exactly as they were; meanwhile another
    channel's turn is answered while the failing one is still waiting (an error is held
    by the server until then; a timeout is the client's, on the clock). Malformed tool
    arguments are answered to the model as a tool error: its next answer reaches the
    member, nothing is stored, and the answered turn only counts toward the cadence."""
    async with kioku_with(
        settings={"llm": {"max_retries": 0, "timeout_seconds": client_timeout}}
    ) as kioku:
        channel = kioku.env.channel
        other = await kioku.env.create_text_channel("other")
        before = await seed_memory(kioku, db)

        if held:
            # A held request takes its scripted reply once released, after the other
            # channel's: so the other channel's reply is queued first.
            gate = llm.hold()
            llm.reply_text("all good here")
            script(llm)
        else:
            script(llm)  # the next model call (this channel's) fails...
            llm.reply_text("all good here")  # ...and the one after it is the other channel's
        requests = len(llm.requests)
        failing = asyncio.create_task(kioku.env.send("and now?", mention_bot=True))
        await llm.wait_for_requests(requests + 1)  # it is waiting for the model
        if held:
            llm.hold().set()  # the other channel's request goes straight through
        await kioku.env.send("hello", channel=other, mention_bot=True)
        assert kioku.env.sent_to(other)[-1].content == "all good here"
        assert not failing.done(), "the other channel was answered while the fault lasted"

        if held:
            gate.set()
        await failing
        assert fragment in kioku.env.sent_to(channel)[-1].content
        if rejected is not None:  # the model was told why its call failed, then answered
            (result,) = tool_results(llm, -1)
            assert result.startswith("rejected: ") and rejected in result
            before = counted_one_more_turn(before, kioku)
        assert await stm_state(kioku, db) == before


def counted_one_more_turn(state: tuple[list[dict[str, Any]], Any], kioku: KiokuHarness) -> Any:
    """``state`` (from :func:`stm_state`) after one more answered turn of the harness's
    channel that stored nothing: its server entry counts the turn toward the cadence (in
    the cache only, until the counts are saved); rows, events and all else are unchanged."""
    stored, (events, cached) = copy.deepcopy(state)
    cached[ScopeKey.server(kioku.env.guild.id, kioku.env.channel.id)].turns_since_refresh += 1
    return stored, (events, cached)


class _RecordedSleeps:
    """Stands in for ``anyio`` in ``openai._base_client``, whose only use of it is the
    sleep between retries: records each delay and sleeps none of it. With ``held``,
    each sleep instead waits for ``release`` (``waiting`` is set once one has begun), so
    a test can act while the client is between two attempts."""

    def __init__(self, *, held: bool = False) -> None:
        self.delays: list[float] = []
        self.waiting = asyncio.Event()
        self.release = asyncio.Event()
        if not held:
            self.release.set()

    async def sleep(self, delay: float) -> None:
        self.delays.append(delay)
        self.waiting.set()
        await self.release.wait()
        await anyio.lowlevel.checkpoint()  # still a point where the task may yield

    def __getattr__(self, name: str) -> Any:
        return getattr(anyio, name)


async def test_an_unreachable_model_gets_a_friendly_reply_and_other_channels_keep_working(
    db: Database, llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch, kioku_with: KiokuStarter
) -> None:
    """The model's endpoint refuses the connection: while the client waits to retry (held
    here, not on the clock) another channel's turn is answered; then the retry is refused
    too, the member hears the model can't be reached, and the channel's stored memory and
    cache entries are exactly as they were."""
    sleeps = _RecordedSleeps(held=True)
    monkeypatch.setattr(openai._base_client, "anyio", sleeps)
    async with kioku_with(settings={"llm": {"max_retries": 1, "timeout_seconds": 5}}) as kioku:
        channel = kioku.env.channel
        other = await kioku.env.create_text_channel("other")
        before = await seed_memory(kioku, db)
        reachable = kioku.bot.turns.client
        kioku.bot.turns.client = reachable.with_options(base_url=refused_base_url())
        requests = len(llm.requests)
        failing = asyncio.create_task(kioku.env.send("and now?", mention_bot=True))
        async with asyncio.timeout(10):  # a hang guard: refused once, it waits to retry
            await sleeps.waiting.wait()
        # A turn takes the client as it starts: only the waiting one is unreachable.
        kioku.bot.turns.client = reachable
        llm.reply_text("all good here")
        await kioku.env.send("hello", channel=other, mention_bot=True)
        assert kioku.env.sent_to(other)[-1].content == "all good here"
        assert not failing.done(), "the other channel was answered while the fault lasted"

        sleeps.release.set()
        await failing
        assert "can't reach" in kioku.env.sent_to(channel)[-1].content
        assert len(sleeps.delays) == 1  # the one retry was made, and refused as well
        assert len(llm.requests) == requests + 1  # only the other channel's reached a model
        assert await stm_state(kioku, db) == before


async def test_a_silent_model_is_given_up_at_the_turn_timeout_and_the_channel_goes_on(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    """A model that never answers is given up at ``turn_timeout_seconds``, not after one
    call's timeout per retry: the member hears it took too long, no retry was sent, the
    memory is untouched, and the channel's next message is answered."""
    async with kioku_with(
        settings={"llm": {"max_retries": 2, "timeout_seconds": 60, "turn_timeout_seconds": 0.5}}
    ) as kioku:
        before = await seed_memory(kioku, db)
        llm.reply_text("far too late", delay=60.0)
        requests = len(llm.requests)
        await kioku.env.send("are you there?", mention_bot=True)
        assert kioku.env.last_sent().content == TIMEOUT_MESSAGE
        assert len(llm.requests) == requests + 1
        assert await stm_state(kioku, db) == before

        llm.reply_text("here now")
        await kioku.env.send("and now?", mention_bot=True)
        assert kioku.env.last_sent().content == "here now"


async def test_unreachable_model_gets_a_friendly_reply(kioku: KiokuHarness, db: Database) -> None:
    before = await seed_memory(kioku, db)
    client = kioku.bot.turns.client
    kioku.bot.turns.client = client.with_options(base_url=refused_base_url())
    await kioku.env.send("hello", mention_bot=True)
    assert "can't reach" in kioku.env.last_sent().content
    assert await stm_state(kioku, db) == before


# Not a delay the client's own backoff could pick (0.375 to 0.5 s before a first retry).
RETRY_AFTER_SECONDS = 0.6


async def test_a_rate_limit_is_retried_after_retry_after_and_then_given_up(
    llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch, kioku_with: KiokuStarter
) -> None:
    """With ``max_retries`` > 0 the client waits what ``retry-after`` says (not its own
    backoff), and makes exactly ``max_retries + 1`` requests before the user hears that
    the model is busy."""
    sleeps = _RecordedSleeps()
    monkeypatch.setattr(openai._base_client, "anyio", sleeps)
    async with kioku_with(settings={"llm": {"max_retries": 2, "timeout_seconds": 5}}) as kioku:
        retry_after = {"retry-after": str(RETRY_AFTER_SECONDS)}
        llm.reply_error(429, "slow down", headers=retry_after).reply_text("made it")
        await kioku.env.send("hello", mention_bot=True)
        assert kioku.env.last_sent().content == "made it"
        assert len(llm.requests) == 2
        assert sleeps.delays == [RETRY_AFTER_SECONDS]

        for _ in range(3):
            llm.reply_error(429, "still slow", headers={"retry-after-ms": "20"})
        llm.reply_text("a fourth attempt was made")
        await kioku.env.send("hello again", mention_bot=True)
        assert "busy" in kioku.env.last_sent().content
        assert len(llm.requests) == 2 + 3  # max_retries + 1 for the second message
        assert llm.pending == 1  # the reply after the third 429 was never asked for
        assert sleeps.delays == [RETRY_AFTER_SECONDS, 0.02, 0.02]


async def test_an_error_notice_is_not_part_of_the_next_prompt(kioku: KiokuHarness) -> None:
    kioku.llm.reply_error(500, "boom")
    await kioku.env.send("first question", mention_bot=True)
    notice = kioku.env.last_sent().content
    assert "can't reach" in notice

    kioku.llm.reply_text("answered now")
    await kioku.env.send("second try", mention_bot=True)
    prompt = prompt_text(kioku.llm)
    assert "first question" in prompt and "second try" in prompt
    assert notice not in prompt
    assert all(m.content != notice for m in kioku.bot.memory.windows.get(kioku.env.channel.id))
