"""The bound on turns waiting in one channel (``llm.max_waiting_turns``): a mention past
it makes no model call and gets a reaction instead; the running turn is not counted,
and every channel (a DM too) has a queue of its own.

A turn is kept running by the scripted LLM's ``hold()`` gate; a message's place in the
queue is known to be taken once it reached the raw window (see :class:`Arrivals`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import discord
import pytest
from sqlalchemy.engine import URL

from bot.cogs.chat.cog import TURNED_AWAY_REACTION
from bot.db.engine import Database
from bot.vocabulary.model import RawMessage
from tests.helpers.bot import KiokuHarness, start_kioku, stop_kioku
from tests.helpers.builders import settings_changed_elsewhere
from tests.helpers.chat_world import KiokuStarter
from tests.helpers.fake_llm import ScriptedLLM

Start = Callable[..., Awaitable[KiokuHarness]]


@pytest.fixture
async def start(
    db: Database, llm: ScriptedLLM, pg_url: URL, tmp_path: Path
) -> AsyncIterator[Start]:
    """Start the bot with ``max_waiting_turns`` set; stopped after the test."""
    started: list[KiokuHarness] = []

    async def make(max_waiting_turns: int, **kwargs: Any) -> KiokuHarness:
        harness = await start_kioku(
            db,
            llm,
            pg_url,
            tmp_path,
            settings={"llm": {"max_waiting_turns": max_waiting_turns}},
            **kwargs,
        )
        started.append(harness)
        return harness

    try:
        yield make
    finally:
        for harness in started:
            await stop_kioku(harness)


class Arrivals:
    """Sends messages as tasks, each returned once its message reached the raw window:
    its turn has then taken its place in the channel's queue (taken before anything is
    awaited), or been turned away."""

    def __init__(self, kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch) -> None:
        self._env = kioku.env
        self._llm = kioku.llm
        self._seen: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        observe = kioku.bot.memory.observe_message

        def spy(channel_id: int, message: RawMessage) -> None:
            observe(channel_id, message)
            for text, event in self._seen.items():
                if message.content.endswith(text):
                    event.set()

        monkeypatch.setattr(kioku.bot.memory, "observe_message", spy)

    @contextlib.asynccontextmanager
    async def while_running(
        self, text: str, **kwargs: Any
    ) -> AsyncIterator[asyncio.Task[discord.Message]]:
        """Send ``text`` and hold the model's answer to it while the block runs (later
        requests go straight through): its turn runs, and the channel's queue fills."""
        held = self._llm.hold()
        try:
            first = await self.send(text, **kwargs)
            await self._llm.wait_for_requests(1)
            self._llm.hold().set()
            yield first
        finally:
            held.set()

    async def send(self, text: str, **kwargs: Any) -> asyncio.Task[discord.Message]:
        arrived = self._seen[text]
        task = asyncio.create_task(self._env.send(text, **kwargs))
        await asyncio.wait_for(arrived.wait(), 5)
        return task


def asked(llm: ScriptedLLM, texts: list[str]) -> list[str]:
    """For each model request in order, which of ``texts`` its last user message holds."""
    found = []
    for i in range(len(llm.requests)):
        last_user = str([m for m in llm.messages(i) if m.get("role") == "user"][-1]["content"])
        found.append(next((t for t in texts if t in last_user), last_user))
    return found


def own_reactions(kioku: KiokuHarness, message: discord.Message) -> list[str]:
    payload = kioku.env.message_payload(message.id) or {}
    return [r["emoji"]["name"] for r in payload.get("reactions", []) if r["me"]]


async def test_past_the_bound_a_mention_gets_a_reaction_and_no_model_call(
    start: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    kioku = await start(2, channels=2)
    env, llm = kioku.env, kioku.llm
    arrivals = Arrivals(kioku, monkeypatch)
    async with arrivals.while_running("running question", mention_bot=True) as first:
        waiting = [await arrivals.send(f"spam number {i}", mention_bot=True) for i in range(1, 5)]
        other = env.channels[1]
        elsewhere = await env.send("a question elsewhere", channel=other, mention_bot=True)
    first_message, *messages = await asyncio.gather(first, *waiting)

    texts = ["running question", "a question elsewhere", *(f"spam number {i}" for i in range(1, 5))]
    assert asked(llm, texts) == [
        "running question",
        "a question elsewhere",  # another channel's queue: answered at once
        "spam number 1",
        "spam number 2",
    ]
    assert [own_reactions(kioku, m) for m in (first_message, *messages, elsewhere)] == [
        [],
        [],
        [],
        [TURNED_AWAY_REACTION],
        [TURNED_AWAY_REACTION],
        [],
    ]
    assert len(env.sent_to(env.channel)) == 3
    assert len(env.sent_to(other)) == 1
    window = [m.content for m in kioku.bot.memory.windows.get(env.channel.id)]
    assert sum("spam number 3" in c or "spam number 4" in c for c in window) == 2
    assert env.errors == []
    turns = kioku.bot.metrics.registry.get_sample_value
    assert turns("kioku_turns_total", {"outcome": "turned_away"}) == 2
    assert turns("kioku_turns_total", {"outcome": "answered"}) == 4


async def test_with_a_bound_of_zero_only_the_running_turn_is_taken(
    start: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    kioku = await start(0)
    env, llm = kioku.env, kioku.llm
    arrivals = Arrivals(kioku, monkeypatch)
    async with arrivals.while_running("running question", mention_bot=True) as first:
        second = await arrivals.send("while it runs", mention_bot=True)
    first_message, second_message = await asyncio.gather(first, second)
    # The running turn ended: its place is free again.
    after = await env.send("after it ended", mention_bot=True)

    texts = ["running question", "while it runs", "after it ended"]
    assert asked(llm, texts) == ["running question", "after it ended"]
    assert [own_reactions(kioku, m) for m in (first_message, second_message, after)] == [
        [],
        [TURNED_AWAY_REACTION],
        [],
    ]
    assert len(env.sent_to(env.channel)) == 2


async def test_each_dm_channel_has_a_queue_of_its_own(
    start: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    kioku = await start(0)
    env, llm = kioku.env, kioku.llm
    alice, bob = env.members[0], env.members[1]
    alice_dm, bob_dm = env.dm_channel(alice), env.dm_channel(bob)
    arrivals = Arrivals(kioku, monkeypatch)
    async with arrivals.while_running("alice asks", channel=alice_dm, author=alice) as first:
        again = await arrivals.send("alice again", channel=alice_dm, author=alice)
        bobs = await env.send("bob asks", channel=bob_dm, author=bob)
    first_message, again_message = await asyncio.gather(first, again)

    assert asked(llm, ["alice asks", "alice again", "bob asks"]) == ["alice asks", "bob asks"]
    assert [own_reactions(kioku, m) for m in (first_message, again_message, bobs)] == [
        [],
        [TURNED_AWAY_REACTION],
        [],
    ]
    assert (len(env.sent_to(alice_dm)), len(env.sent_to(bob_dm))) == (1, 1)


async def test_without_add_reactions_a_turned_away_mention_gets_no_reaction(
    start: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    kioku = await start(0)
    env, llm = kioku.env, kioku.llm
    no_reactions = discord.PermissionOverwrite(add_reactions=False)
    await env.set_overwrite(env.channel, env.guild.me, no_reactions)
    added: list[int] = []
    add_reaction = kioku.bot.http.add_reaction

    async def counting(channel_id: int, message_id: int, emoji: str) -> None:
        added.append(message_id)
        await add_reaction(channel_id, message_id, emoji)

    monkeypatch.setattr(kioku.bot.http, "add_reaction", counting)
    arrivals = Arrivals(kioku, monkeypatch)
    async with arrivals.while_running("running question", mention_bot=True) as first:
        second = await arrivals.send("while it runs", mention_bot=True)
    await asyncio.gather(first, second)

    assert added == []
    assert asked(llm, ["running question", "while it runs"]) == ["running question"]
    assert env.errors == []


async def test_a_failed_reaction_is_ignored(
    start: Start, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    kioku = await start(0)
    env, llm = kioku.env, kioku.llm

    async def reactions_down(channel_id: int, message_id: int, emoji: str) -> None:
        raise aiohttp.ServerDisconnectedError()

    monkeypatch.setattr(kioku.bot.http, "add_reaction", reactions_down)
    arrivals = Arrivals(kioku, monkeypatch)
    with caplog.at_level(logging.INFO):
        async with arrivals.while_running("running question", mention_bot=True) as first:
            second = await arrivals.send("while it runs", mention_bot=True)
        await asyncio.gather(first, second)

    assert env.errors == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert asked(llm, ["running question", "while it runs"]) == ["running question"]
    assert len(env.sent_to(env.channel)) == 1


async def test_a_turned_away_mention_is_logged_at_debug_by_channel_without_its_text(
    start: Start, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    kioku = await start(0)
    env = kioku.env
    arrivals = Arrivals(kioku, monkeypatch)
    with caplog.at_level(logging.DEBUG, logger="bot.cogs.chat.cog"):
        async with arrivals.while_running("running question", mention_bot=True) as first:
            second = await arrivals.send("the secret is HERON", mention_bot=True)
        await asyncio.gather(first, second)

    records = [r for r in caplog.records if r.name == "bot.cogs.chat.cog"]
    turned_away = [r for r in records if "turned away" in r.getMessage()]
    assert [(r.levelno, str(env.channel.id) in r.getMessage()) for r in turned_away] == [
        (logging.DEBUG, True)
    ]
    assert not any("HERON" in r.getMessage() for r in records)


async def test_chatter_where_always_on_is_not_known_yet_takes_no_place_of_a_mention(
    start: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unaddressed chatter waits for the channel's settings when they are not cached (as
    after a restart, or while the database's notices are missed): most of it turns out
    to need no answer, and must not fill the places mentions wait in."""
    kioku = await start(1)
    env, llm = kioku.env, kioku.llm
    arrivals = Arrivals(kioku, monkeypatch)
    async with arrivals.while_running("running question", mention_bot=True) as first:
        settings_changed_elsewhere(kioku.bot.memory, env.guild.id)
        chatter = await arrivals.send("just chatting")
        mention = await arrivals.send("a second question", mention_bot=True)
    messages = await asyncio.gather(first, chatter, mention)

    texts = ["running question", "just chatting", "a second question"]
    assert asked(llm, texts) == ["running question", "a second question"]
    assert [own_reactions(kioku, m) for m in messages] == [[], [], []]


async def test_in_an_always_on_channel_chatter_past_the_bound_is_turned_away_too(
    start: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    kioku = await start(0)
    env, llm = kioku.env, kioku.llm
    admin = await env.create_member("admin", kind="admin")
    await kioku.interactions.slash("stm settings", {"always_on": True}, user=admin)
    arrivals = Arrivals(kioku, monkeypatch)
    async with arrivals.while_running("running chatter") as first:
        second = await arrivals.send("more chatter")
    messages = await asyncio.gather(first, second)

    assert asked(llm, ["running chatter", "more chatter"]) == ["running chatter"]
    assert [own_reactions(kioku, m) for m in messages] == [[], [TURNED_AWAY_REACTION]]


async def test_a_member_past_their_turns_per_minute_gets_a_reaction_and_no_model_call(
    llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with kioku_with(channels=2, settings={"llm": {"turns_per_user_per_minute": 2}}) as kioku:
        env = kioku.env
        for _ in range(4):
            llm.reply_text("answered")
        first = await env.send("question one", mention_bot=True)
        second = await env.send("question two", channel=env.channels[1], mention_bot=True)
        # A third turn within the minute, in either channel: over the limit.
        third = await env.send("question three", mention_bot=True)
        neighbour = await env.send("my own question", author=env.members[1], mention_bot=True)
        kioku.clock.advance(seconds=61)  # the first turn's minute is over
        later = await env.send("question four", mention_bot=True)

        texts = ["question one", "question two", "question three", "my own question"]
        assert asked(llm, [*texts, "question four"]) == [
            "question one",
            "question two",
            "my own question",  # another member's turns are their own
            "question four",  # a minute later
        ]
        assert [own_reactions(kioku, m) for m in (first, second, third, neighbour, later)] == [
            [],
            [],
            [TURNED_AWAY_REACTION],
            [],
            [],
        ]
        window = [m.content for m in kioku.bot.memory.windows.get(env.channel.id)]
        assert any("question three" in text for text in window), "still part of the talk"
        turns = kioku.bot.metrics.registry.get_sample_value
        assert turns("kioku_turns_total", {"outcome": "rate_limited"}) == 1
        assert turns("kioku_turns_total", {"outcome": "answered"}) == 4
