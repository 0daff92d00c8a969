"""A fact from a turn begun before /forget-me or /memories clear is refused, and the recall cache
never hides a fact nor brings a forgotten one back."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy import select

from bot.config import Settings
from bot.conversation.turn import TurnRequest, TurnRunner
from bot.db.engine import Database
from bot.db.models import ShortTermMemory
from bot.db.storage import faults
from bot.memory.longterm.facts import FactRefused, LongTermService
from bot.memory.longterm.holders import STEP as HOLDERS_STEP
from bot.memory.longterm.ranking import Recalled
from tests.helpers.builders import (
    ALICE,
    BOB,
    BOT,
    CHANNEL,
    GUILD,
    OTHER_CHANNEL,
    ManualClock,
    make_longterm,
    make_service,
)
from tests.helpers.fake_llm import ScriptedLLM, openai_client
from tests.integration.longterm.harness import CAT, bulk_insert, by_model

# ------------------------------------------------------------------ forget-me


async def test_a_remember_from_a_turn_that_started_before_forget_me_is_refused(
    db: Database, settings: Settings, clock: ManualClock, service: LongTermService
) -> None:
    memory = make_service(db.sessions, settings, clock)
    started = clock.now()
    clock.advance(seconds=1)
    await memory.forget_user(ALICE)  # /forget-me while the model was thinking
    clock.advance(seconds=5)

    with pytest.raises(FactRefused, match="forget-me"):
        await service.remember(ALICE, GUILD, "My cat is Miso", by_model(), started_at=started)
    assert (await service.list_facts(ALICE)).total == 0
    # A turn that starts after the /forget-me may save facts again.
    result = await service.remember(
        ALICE, GUILD, "My cat is Miso", by_model(), started_at=clock.now()
    )
    assert result.created


@pytest.mark.parametrize(
    ("wipe", "said"),
    [
        (lambda runner: runner.memory.forget_user(ALICE), "forget-me"),
        (lambda runner: runner.longterm.clear(ALICE), "memories clear"),
    ],
    ids=["forget-me", "memories-clear"],
)
async def test_a_remember_in_flight_during_a_wipe_does_not_survive_it(
    db: Database,
    settings: Settings,
    llm: ScriptedLLM,
    wipe: Callable[[TurnRunner], Awaitable[object]],
    said: str,
) -> None:
    memory = make_service(db.sessions, settings)
    runner = TurnRunner(
        memory, openai_client(llm), settings, longterm=make_longterm(memory), persona="p"
    )
    llm.reply_tool_calls([("remember", {"fact": "My cat is called Miso"})]).reply_text("Noted!")
    held = llm.hold()
    request = TurnRequest(
        channel_id=CHANNEL,
        user_id=ALICE,
        source_message_id=10,
        content="remember that my cat is called Miso",
        bot_user_id=BOT,
        guild_id=GUILD,
    )
    turn = asyncio.create_task(runner.run(request))
    await llm.wait_for_requests(1)  # the model is thinking about the request
    await wipe(runner)  # confirmed by the user meanwhile
    held.set()
    await turn

    assert (await runner.longterm.list_facts(ALICE)).total == 0
    tool_result = next(m for m in llm.messages(1) if m["role"] == "tool")
    assert said in tool_result["content"]


# ------------------------------------------------------------------ /memories clear


async def test_a_remember_from_a_turn_that_started_before_memories_clear_is_refused(
    clock: ManualClock, service: LongTermService
) -> None:
    await service.remember(ALICE, GUILD, "My dog is Rex", by_model())
    started = clock.now()
    clock.advance(seconds=1)
    assert await service.clear(ALICE) == 1  # /memories clear while the model was thinking
    clock.advance(seconds=5)

    with pytest.raises(FactRefused, match="memories clear"):
        await service.remember(ALICE, GUILD, "My cat is Miso", by_model(), started_at=started)
    assert (await service.list_facts(ALICE)).total == 0
    # Another user's turn of the same age is not concerned.
    other = await service.remember(BOB, GUILD, "I like tea", by_model(), started_at=started)
    assert other.created
    # A turn that starts after the clear may save facts again.
    result = await service.remember(
        ALICE, GUILD, "My cat is Miso", by_model(), started_at=clock.now()
    )
    assert result.created


async def test_a_clear_with_nothing_to_delete_still_refuses_an_older_turns_fact(
    clock: ManualClock, service: LongTermService
) -> None:
    started = clock.now()
    clock.advance(seconds=1)
    assert await service.clear(ALICE) == 0

    with pytest.raises(FactRefused, match="memories clear"):
        await service.remember(ALICE, GUILD, "My cat is Miso", by_model(), started_at=started)
    assert (await service.list_facts(ALICE)).total == 0


# ------------------------------------------------------------------ recall cache


class HeldRecall(LongTermService):
    """The real service; a test may hold one recall after its query ran and committed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hold: asyncio.Event | None = None
        self.queried = asyncio.Event()

    async def recall(self, *args: Any, **kwargs: Any) -> Recalled:
        recalled = await super().recall(*args, **kwargs)
        hold, self.hold = self.hold, None
        if hold is not None:
            self.queried.set()
            await hold.wait()
        return recalled


def turn_request(channel: int, content: str, message_id: int) -> TurnRequest:
    return TurnRequest(
        channel_id=channel,
        user_id=ALICE,
        source_message_id=message_id,
        content=content,
        bot_user_id=BOT,
        guild_id=GUILD,
    )


async def test_a_fact_remembered_while_another_channel_recalls_is_not_hidden_there(
    db: Database, settings: Settings, llm: ScriptedLLM
) -> None:
    memory = make_service(db.sessions, settings)
    runner = TurnRunner(
        memory, openai_client(llm), settings, persona="p", longterm=make_longterm(memory)
    )
    chatting = turn_request(OTHER_CHANNEL, "what should I feed my cat", 1)
    asking = turn_request(CHANNEL, "remember that my cat is called Miso", 2)

    # Alice's turn in one channel has found she has no facts (the query ran; its answer is
    # on its way) while, in another (another channel lock), her "remember that…" turn
    # stores one.
    found_none = faults(db.sessions).hang(HOLDERS_STEP, at="end", times=1)
    recall = asyncio.create_task(runner.recall.notes(chatting, False))
    await found_none.reached()
    remember_tool = runner._long_term_tools(asking, False, None)["remember"]
    assert (await remember_tool.run('{"fact": "My cat is called Miso"}')).ok
    found_none.release()
    assert await recall == []  # that turn started before the fact existed

    # Her next turn there sees the fact: "no facts here" was not cached by the first.
    assert await runner.recall.notes(chatting, False) == [CAT]


async def test_a_scope_without_facts_is_not_queried_again(
    db: Database, settings: Settings, llm: ScriptedLLM
) -> None:
    memory = make_service(db.sessions, settings)
    runner = TurnRunner(
        memory, openai_client(llm), settings, longterm=make_longterm(memory), persona="p"
    )
    chatting = turn_request(CHANNEL, "what should I feed my cat", 1)
    assert await runner.recall.notes(chatting, False) == []
    # A fact that did not come through this process's remember (another shard's): the
    # scope is remembered as empty, so the query is not run again.
    await bulk_insert(db, ALICE, [CAT])
    assert await runner.recall.notes(chatting, False) == []
    # A save through this process clears that.
    remember_tool = runner._long_term_tools(chatting, False, None)["remember"]
    assert (await remember_tool.run('{"fact": "My cat eats tuna"}')).ok
    assert sorted(await runner.recall.notes(chatting, False)) == sorted([CAT, "My cat eats tuna"])


async def test_facts_recalled_before_forget_me_cannot_be_stored_again_by_that_turn(
    db: Database, settings: Settings, llm: ScriptedLLM
) -> None:
    clock = ManualClock()
    memory = make_service(db.sessions, settings, clock)
    longterm = HeldRecall(db.sessions, settings, clock)
    runner = TurnRunner(memory, openai_client(llm), settings, persona="p", longterm=longterm)
    await longterm.remember(ALICE, GUILD, CAT, by_model())
    # The model copies the fact it was shown into the channel's short-term memory.
    llm.reply_tool_calls(
        [("update_short_term_memory", {"summary": "Alice's cat is called Miso"})]
    ).reply_text("Tuna is fine.")

    # Alice's turn has recalled her facts when her /forget-me (another channel, another
    # lock) deletes them; the turn goes on to build its prompt and call the model.
    longterm.hold = release = asyncio.Event()
    turn = asyncio.create_task(runner.run(turn_request(CHANNEL, "what should I feed my cat", 1)))
    await longterm.queried.wait()
    clock.advance(seconds=1)
    await memory.forget_user(ALICE)
    clock.advance(seconds=1)
    release.set()
    reply = await turn

    assert CAT in str(llm.messages(0))  # the recall was made before the /forget-me
    async with db.sessions() as session:
        summaries = list(await session.scalars(select(ShortTermMemory.summary)))
    assert not any("Miso" in summary for summary in summaries), summaries
    assert reply.stm_results and reply.stm_results[0].startswith("rejected")
