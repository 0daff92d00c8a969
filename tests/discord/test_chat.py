"""The turn pipeline end to end: Discord message → prompt → scripted LLM → tool → row.

Real parts only: discord.py's state through dpytest, the real ``openai`` client over HTTP
to the scripted server, the real command tree, embedded PostgreSQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import anyio
import anyio.lowlevel
import discord
import openai._base_client
import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import URL

from bot.cogs.history import WIPED_WHILE_ANSWERING
from bot.cogs.refresh import REFRESH_MARKER_PREFIX
from bot.cogs.replies import DISCORD_LIMIT
from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.db.engine import Database
from bot.db.models import ShortTermMemory, StmEvent
from bot.llm.tools.loop import TIMEOUT_MESSAGE
from bot.memory.turn.types import REASON_ALREADY_UPDATED, REASON_CLEARED, REASON_DISABLED
from bot.vocabulary.model import Category, ScopeKey
from tests.helpers.bot import KiokuHarness, start_kioku, stop_kioku
from tests.helpers.builders import settings_changed_elsewhere
from tests.helpers.discord_payloads import FakeResponse
from tests.helpers.discord_payloads import request_body as _body_of
from tests.helpers.fake_llm import ScriptedLLM, refused_base_url


def stm_call(summary: str) -> tuple[str, dict[str, Any]]:
    return (STM_TOOL_NAME, {"summary": summary})


async def rows(db: Database) -> list[ShortTermMemory]:
    async with db.sessions() as session:
        return list(
            await session.scalars(select(ShortTermMemory).order_by(ShortTermMemory.scope_kind))
        )


def prompt_text(llm: ScriptedLLM, i: int = -1) -> str:
    return "\n".join(str(m.get("content") or "") for m in llm.messages(i))


def tool_results(llm: ScriptedLLM, i: int = -1) -> list[str]:
    return [str(m["content"]) for m in llm.messages(i) if m.get("role") == "tool"]


async def test_a_mention_gets_an_answer_and_plain_chatter_does_not(kioku: KiokuHarness) -> None:
    kioku.llm.reply_text("Hello there!")
    await kioku.env.send("just chatting, not to the bot")
    assert kioku.llm.requests == []
    await kioku.env.send("hi", mention_bot=True)
    reply = kioku.env.last_sent()
    assert reply.content == "Hello there!"
    assert reply.allowed_mentions is not None
    assert reply.allowed_mentions.get("parse") == []
    # The earlier chatter is part of the prompt's raw history.
    assert "just chatting, not to the bot" in prompt_text(kioku.llm)


async def test_replying_to_the_bot_triggers_a_turn(kioku: KiokuHarness) -> None:
    kioku.llm.reply_text("first").reply_text("second")
    await kioku.env.send("hi", mention_bot=True)
    bot_message = kioku.env.last_sent().message
    await kioku.env.send("and another thing", reply_to=bot_message)
    assert len(kioku.llm.requests) == 2
    assert kioku.env.last_sent().content == "second"


async def test_other_bots_never_trigger_a_turn(kioku: KiokuHarness) -> None:
    other_bot = await kioku.env.create_member("helperbot")
    other_bot._user.bot = True
    await kioku.env.send("hello kioku", author=other_bot, mention_bot=True)
    assert kioku.llm.requests == []


async def test_dms_are_always_answered(kioku: KiokuHarness) -> None:
    kioku.llm.reply_text("Hi in DM")
    member = kioku.env.member
    await kioku.env.send("hello", channel=kioku.env.dm_channel(member), author=member)
    assert kioku.env.last_sent().content == "Hi in DM"


async def test_long_replies_are_split_at_discords_limit(kioku: KiokuHarness) -> None:
    kioku.llm.reply_text(("word " * 900).strip())
    await kioku.env.send("talk a lot", mention_bot=True)
    parts = [s.content for s in kioku.env.sent]
    assert len(parts) == 3 and all(len(p) <= 2000 for p in parts)
    assert " ".join(parts).split() == ["word"] * 900


async def test_the_model_cannot_ping_everyone(kioku: KiokuHarness) -> None:
    kioku.llm.reply_text("@everyone look! <@&123> @here")
    await kioku.env.send("say hi to all", mention_bot=True)
    mentions = kioku.env.last_sent().allowed_mentions
    assert mentions is not None
    assert mentions.get("parse") == [] and not mentions.get("roles")


async def test_tool_call_stores_memory_and_next_prompt_uses_it_instead_of_raw(
    db: Database, llm: ScriptedLLM, pg_url: URL, tmp_path: Path
) -> None:
    kioku = await start_kioku(db, llm, pg_url, tmp_path, settings={"stm": {"min_raw_tail": 1}})
    try:
        for text in ("the launch is friday", "alice writes the docs", "bob does release"):
            await kioku.env.send(text)
        llm.reply_tool_calls([stm_call("Launch Friday; Alice docs; Bob release.")])
        llm.reply_text("Got it.")
        trigger = await kioku.env.send("summarise please", mention_bot=True)
        # The tool is silent: the chat only sees the answer.
        assert [s.content for s in kioku.env.sent] == ["Got it."]
        assert tool_results(llm, 1) == ["saved"]
        server, user = await rows(db)
        assert server.summary == "Launch Friday; Alice docs; Bob release."
        assert (server.origin, server.origin_detail) == ("model_tool", "test-model")
        assert server.actor_user_id == kioku.env.member.id
        assert server.source_message_id == trigger.id
        assert server.covered_through_message_id == trigger.id
        assert user.user_id == kioku.env.member.id

        llm.reply_text("Friday.")
        await kioku.env.send("when is the launch?", mention_bot=True)
        prompt = prompt_text(llm)
        assert "Launch Friday; Alice docs; Bob release." in prompt
        for covered in ("the launch is friday", "alice writes the docs", "bob does release"):
            assert covered not in prompt
        assert "when is the launch?" in prompt
    finally:
        await stop_kioku(kioku)


async def test_stm_disabled_hides_the_tool_and_rejects_a_forced_call(
    kioku: KiokuHarness, db: Database
) -> None:
    admin = await kioku.env.create_member("admin", kind="admin")
    await kioku.bot.memory.update_guild_settings(
        kioku.env.guild.id, admin.id, short_term_memory_enabled=False
    )
    kioku.llm.reply_tool_calls([stm_call("sneaky")]).reply_text("ok")
    await kioku.env.send("hello", mention_bot=True)
    assert kioku.llm.tool_names(0) == []
    assert tool_results(kioku.llm, 1) == [f"rejected: {REASON_DISABLED}"]
    assert await rows(db) == []


async def test_stm_disabled_in_the_settings_command_hides_the_tool_and_rejects_a_forced_call(
    kioku: KiokuHarness, db: Database
) -> None:
    admin = await kioku.env.create_member("admin", kind="admin")
    assert admin.guild_permissions.manage_guild
    changed = await kioku.interactions.slash("stm settings", {"enabled": False}, user=admin)
    assert changed.content is not None and changed.content.startswith("**Settings updated.**")

    kioku.llm.reply_tool_calls([stm_call("sneaky")]).reply_text("ok")
    await kioku.env.send("hello", mention_bot=True)
    assert kioku.llm.tool_names(0) == []
    assert tool_results(kioku.llm, 1) == [f"rejected: {REASON_DISABLED}"]
    assert kioku.env.last_sent().content == "ok"
    assert await rows(db) == []


async def test_remember_that_hides_the_stm_tool_for_the_turn(kioku: KiokuHarness) -> None:
    kioku.llm.reply_text("I'll remember.").reply_text("hi")
    await kioku.env.send("remember that my cat is called Miso", mention_bot=True)
    assert STM_TOOL_NAME not in kioku.llm.tool_names(0)
    await kioku.env.send("I can't remember the title of that film", mention_bot=True)
    assert STM_TOOL_NAME in kioku.llm.tool_names(1)


async def test_a_second_update_in_one_turn_is_rejected(kioku: KiokuHarness, db: Database) -> None:
    kioku.llm.reply_tool_calls([stm_call("first")])
    kioku.llm.reply_tool_calls([stm_call("second")])
    kioku.llm.reply_text("done")
    await kioku.env.send("hello", mention_bot=True)
    # No longer offered after the update: defined (the history holds a call), not callable.
    assert kioku.llm.request(1)["tool_choice"] == "none"
    assert tool_results(kioku.llm, 2) == ["saved", f"rejected: {REASON_ALREADY_UPDATED}"]
    assert [r.summary for r in await rows(db)] == ["first", "first"]


async def test_a_request_replaying_tool_calls_still_defines_the_tools(
    kioku: KiokuHarness,
) -> None:
    # Bedrock (directly or behind LiteLLM / bedrock-access-gateway) and older Anthropic
    # endpoints answer 400 "The toolConfig field must be defined when using toolUse and
    # toolResult content blocks" to a request whose history holds tool calls but which
    # defines no tools: after a successful update the STM tool is no longer offered.
    kioku.llm.reply_tool_calls([stm_call("Alice asked about Paris.")])
    kioku.llm.reply_text("Paris is the capital of France.")
    await kioku.env.send("what's the capital of France?", mention_bot=True)

    follow_up = kioku.llm.request(1)
    assert any(m.get("role") == "tool" for m in follow_up["messages"])
    assert kioku.llm.tool_names(1) == [STM_TOOL_NAME]
    assert follow_up["tool_choice"] == "none"  # defined, not offered
    assert kioku.env.last_sent().content == "Paris is the capital of France."


async def test_answer_written_beside_a_tool_call_survives_a_failed_follow_up_call(
    kioku: KiokuHarness, db: Database
) -> None:
    # The nudge asks the model to answer, then update the memory: the answer comes with
    # the tool call. The follow-up request then fails (rate limit, outage).
    kioku.llm.reply_tool_calls(
        [stm_call("Asked about the capital of France.")],
        content="The capital of France is Paris.",
    )
    kioku.llm.reply_error(500)
    await kioku.env.send("what's the capital of France?", mention_bot=True, raise_errors=False)

    assert [r.summary for r in await rows(db)] == ["Asked about the capital of France."] * 2
    assert kioku.env.last_sent().content == "The capital of France is Paris."


async def test_a_short_final_answer_is_not_dropped_as_a_repeat_of_the_interim_text(
    kioku: KiokuHarness,
) -> None:
    kioku.llm.reply_tool_calls(
        [stm_call("Launch date question: Friday or Monday.")],
        content="Let me check my notes on Friday vs Monday.",
    )
    kioku.llm.reply_text("Monday.")
    await kioku.env.send("is the launch friday or monday?", mention_bot=True)

    # "Monday." is found inside the interim text, but it is the answer.
    assert kioku.env.last_sent().content == (
        "Let me check my notes on Friday vs Monday.\n\nMonday."
    )


async def test_refresh_during_a_turn_cannot_bring_the_memory_back(
    kioku: KiokuHarness, db: Database
) -> None:
    await kioku.bot.memory.admin_edit(
        guild_id=kioku.env.guild.id,
        channel_id=kioku.env.channel.id,
        actor_user_id=kioku.env.member.id,
        summary="old memory",
    )
    moderator = await kioku.env.create_member("mod", kind="moderator")
    gate = kioku.llm.hold()
    kioku.llm.reply_tool_calls([stm_call("resurrected memory")]).reply_text("done")
    turn = asyncio.create_task(kioku.env.send("hello", mention_bot=True))
    await kioku.llm.wait_for_requests(1)
    refreshed = await kioku.interactions.slash("refresh", user=moderator)
    assert not refreshed.command_failed
    gate.set()
    await turn
    assert tool_results(kioku.llm, 1) == [f"rejected: {REASON_CLEARED}"]
    assert await rows(db) == []
    key = ScopeKey.server(kioku.env.guild.id, kioku.env.channel.id)
    assert not (await kioku.bot.memory.entry(key)).has_content


async def test_categories_set_by_an_admin_shape_the_next_tool_schema(
    kioku: KiokuHarness,
) -> None:
    await kioku.bot.memory.set_categories(
        kioku.env.guild.id,
        kioku.env.member.id,
        [
            Category(0, "decisions", "Decisions", "What the group decided"),
            Category(1, "open_questions", "Open questions", "What is still unresolved"),
        ],
    )
    kioku.llm.reply_text("ok")
    await kioku.env.send("hello", mention_bot=True)
    schema = kioku.llm.tool_schema(STM_TOOL_NAME, 0)
    assert set(schema["properties"]) == {"decisions", "open_questions"}
    assert "What the group decided" in schema["properties"]["decisions"]["description"]


async def test_categories_submitted_in_the_form_by_an_admin_shape_the_next_tool_schema(
    kioku: KiokuHarness,
) -> None:
    admin = await kioku.env.create_member("admin", kind="admin")
    opened = await kioku.interactions.slash("stm categories set", user=admin)
    saved = await kioku.interactions.submit_modal(
        opened,
        {
            "category_1": "Decisions: what we decided",
            "category_2": "",
            "category_3": "Open Questions: what is unsettled",
        },
        user=admin,
    )
    assert saved.content is not None and saved.content.startswith("Saved 2 categories.")

    kioku.llm.reply_text("ok")
    await kioku.env.send("hello", mention_bot=True)
    schema = kioku.llm.tool_schema(STM_TOOL_NAME, 0)
    properties = schema["properties"]
    assert {slug: sorted(p) for slug, p in properties.items()} == {
        "decisions": ["description", "type"],
        "open_questions": ["description", "type"],
    }
    assert all(p["type"] == "string" for p in properties.values())
    assert properties["decisions"]["description"].startswith("Decisions: what we decided")
    assert properties["open_questions"]["description"].startswith(
        "Open Questions: what is unsettled"
    )
    assert schema["additionalProperties"] is False


async def test_a_new_bot_instance_answers_with_the_stored_memory(
    db: Database, llm: ScriptedLLM, pg_url: URL, tmp_path: Path
) -> None:
    first = await start_kioku(db, llm, pg_url, tmp_path)
    llm.reply_tool_calls([stm_call("The user's project is called Tanuki.")]).reply_text("ok")
    await first.env.send("my project is Tanuki", mention_bot=True)
    await stop_kioku(first)

    second = await start_kioku(db, llm, pg_url, tmp_path)
    try:
        assert second.env.channel.id == first.env.channel.id
        llm.reply_text("Tanuki!")
        await second.env.send("what is my project called?", mention_bot=True)
        assert "The user's project is called Tanuki." in prompt_text(llm)
        assert second.env.last_sent().content == "Tanuki!"
    finally:
        await stop_kioku(second)


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
    pg_url: URL,
    tmp_path: Path,
    script: Any,
    client_timeout: float,
    fragment: str,
    held: bool,
    rejected: str | None,
) -> None:
    """A model call that fails (slowly) gets a friendly reply and leaves the channel's
    stored memory and its cache entries exactly as they were; meanwhile another
    channel's turn is answered while the failing one is still waiting (an error is held
    by the server until then; a timeout is the client's, on the clock). Malformed tool
    arguments are answered to the model as a tool error: its next answer reaches the
    member, nothing is stored, and the answered turn only counts toward the cadence."""
    kioku = await start_kioku(
        db,
        llm,
        pg_url,
        tmp_path,
        settings={"llm": {"max_retries": 0, "timeout_seconds": client_timeout}},
    )
    try:
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
    finally:
        await stop_kioku(kioku)


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
    db: Database,
    llm: ScriptedLLM,
    pg_url: URL,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The model's endpoint refuses the connection: while the client waits to retry (held
    here, not on the clock) another channel's turn is answered; then the retry is refused
    too, the member hears the model can't be reached, and the channel's stored memory and
    cache entries are exactly as they were."""
    sleeps = _RecordedSleeps(held=True)
    monkeypatch.setattr(openai._base_client, "anyio", sleeps)
    kioku = await start_kioku(
        db, llm, pg_url, tmp_path, settings={"llm": {"max_retries": 1, "timeout_seconds": 5}}
    )
    try:
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
    finally:
        await stop_kioku(kioku)


async def test_a_silent_model_is_given_up_at_the_turn_timeout_and_the_channel_goes_on(
    db: Database, llm: ScriptedLLM, pg_url: URL, tmp_path: Path
) -> None:
    """A model that never answers is given up at ``turn_timeout_seconds``, not after one
    call's timeout per retry: the member hears it took too long, no retry was sent, the
    memory is untouched, and the channel's next message is answered."""
    kioku = await start_kioku(
        db,
        llm,
        pg_url,
        tmp_path,
        settings={"llm": {"max_retries": 2, "timeout_seconds": 60, "turn_timeout_seconds": 0.5}},
    )
    try:
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
    finally:
        await stop_kioku(kioku)


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
    db: Database,
    llm: ScriptedLLM,
    pg_url: URL,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``max_retries`` > 0 the client waits what ``retry-after`` says (not its own
    backoff), and makes exactly ``max_retries + 1`` requests before the user hears that
    the model is busy."""
    sleeps = _RecordedSleeps()
    monkeypatch.setattr(openai._base_client, "anyio", sleeps)
    kioku = await start_kioku(
        db, llm, pg_url, tmp_path, settings={"llm": {"max_retries": 2, "timeout_seconds": 5}}
    )
    try:
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
    finally:
        await stop_kioku(kioku)


async def test_malformed_tool_arguments_are_answered_as_a_tool_error(
    kioku: KiokuHarness, db: Database
) -> None:
    kioku.llm.reply_tool_calls([(STM_TOOL_NAME, '{"summary": "cut')]).reply_text("sorry")
    await kioku.env.send("hello", mention_bot=True)
    (result,) = tool_results(kioku.llm, 1)
    assert result.startswith("rejected: ") and "JSON" in result
    assert kioku.env.last_sent().content == "sorry"
    assert await rows(db) == []


async def test_edits_and_deletes_update_the_raw_window(kioku: KiokuHarness) -> None:
    message = await kioku.env.send("original text")
    window = kioku.bot.memory.windows
    edited = dict(kioku.env.message_payload(message.id) or {})
    edited["content"] = "edited text"
    await kioku.env.run_parser(kioku.env.state.parse_message_update, edited)
    assert [m.content for m in window.get(message.channel.id)] == ["edited text"]
    await kioku.env.run_parser(
        kioku.env.state.parse_message_delete,
        {
            "id": str(message.id),
            "channel_id": str(message.channel.id),
            "guild_id": str(kioku.env.guild.id),
        },
    )
    assert window.get(message.channel.id) == ()


async def test_private_channel_memory_never_reaches_a_public_channel(
    kioku: KiokuHarness,
) -> None:
    member = kioku.env.member
    private = await kioku.env.create_text_channel("staff", private=True, allow=(member,))
    kioku.llm.reply_tool_calls([stm_call("STAFF SECRET: salaries")]).reply_text("ok")
    await kioku.env.send("note the salaries", channel=private, mention_bot=True)
    public_other = await kioku.env.create_text_channel("random")
    kioku.llm.reply_tool_calls([stm_call("random chatter about cats")]).reply_text("ok")
    await kioku.env.send("cats!", channel=public_other, mention_bot=True)
    kioku.llm.reply_text("hi")
    await kioku.env.send("hello", mention_bot=True)
    prompt = prompt_text(kioku.llm)
    assert "random chatter about cats" in prompt
    assert "STAFF SECRET" not in prompt


async def test_an_always_on_channel_answers_without_a_mention(kioku: KiokuHarness) -> None:
    admin = await kioku.env.create_member("admin", kind="admin")
    result = await kioku.interactions.slash("stm settings", {"always_on": True}, user=admin)
    assert f"<#{kioku.env.channel.id}>" in result.content
    kioku.llm.reply_text("I'm always listening here.")
    await kioku.env.send("no mention at all")
    assert kioku.env.last_sent().content == "I'm always listening here."
    other = await kioku.env.create_text_channel("quiet")
    await kioku.env.send("no mention here either", channel=other)
    assert len(kioku.llm.requests) == 1


async def test_a_tool_less_provider_still_gets_memory_from_the_summarizer(
    db: Database, llm: ScriptedLLM, pg_url: URL, tmp_path: Path
) -> None:
    kioku = await start_kioku(
        db, llm, pg_url, tmp_path, settings={"provider": "novelai", "stm": {"refresh_cadence": 2}}
    )
    try:
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
    finally:
        await stop_kioku(kioku)


async def test_a_model_ignoring_the_nudge_gets_the_summarizer_when_opted_in(
    db: Database, llm: ScriptedLLM, pg_url: URL, tmp_path: Path
) -> None:
    # Cadence 1: every turn after the first is followed by an upkeep call. Two ignored:
    # summarize (and no upkeep call beside the summary).
    kioku = await start_kioku(
        db,
        llm,
        pg_url,
        tmp_path,
        settings={"stm": {"refresh_cadence": 1, "summarize_when_ignored_turns": 2}},
    )
    try:
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
    finally:
        await stop_kioku(kioku)


async def test_a_failed_automatic_summary_is_not_retried_on_every_turn(
    db: Database, llm: ScriptedLLM, pg_url: URL, tmp_path: Path
) -> None:
    kioku = await start_kioku(
        db,
        llm,
        pg_url,
        tmp_path,
        settings={"provider": "novelai", "stm": {"refresh_cadence": 1}, "llm": {"max_retries": 0}},
    )
    try:
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
    finally:
        await stop_kioku(kioku)


async def test_remember_with_a_tool_less_provider_is_told_it_cannot_store_anything(
    db: Database, llm: ScriptedLLM, pg_url: URL, tmp_path: Path
) -> None:
    kioku = await start_kioku(db, llm, pg_url, tmp_path, settings={"provider": "novelai"})
    try:
        llm.reply_text("I can't store long-term memories here.")
        await kioku.env.send("remember that my cat is called Miso", mention_bot=True)
        assert llm.tool_names(0) == []
        assert "long-term memory is not available with this model" in prompt_text(llm, 0)
    finally:
        await stop_kioku(kioku)


async def test_a_mention_logs_no_error(
    kioku: KiokuHarness, caplog: pytest.LogCaptureFixture
) -> None:
    kioku.llm.reply_text("hi")
    with caplog.at_level("ERROR"):
        await kioku.env.send("hi there", mention_bot=True)
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []


async def test_huge_tool_arguments_are_refused_and_the_user_still_gets_a_reply(
    kioku: KiokuHarness, db: Database
) -> None:
    huge = '{"summary": "' + "x" * 1_000_000 + '"}'
    kioku.llm.reply_tool_calls([(STM_TOOL_NAME, huge)]).reply_text("Sorry, too much.")
    await kioku.env.send("hello", mention_bot=True)
    (result,) = tool_results(kioku.llm, 1)
    assert result.startswith("rejected: ") and "too large" in result
    assert kioku.env.last_sent().content == "Sorry, too much."
    assert await rows(db) == []


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


async def test_an_always_on_channel_answers_in_arrival_order_on_a_cold_config(
    kioku: KiokuHarness,
) -> None:
    admin = await kioku.env.create_member("admin", kind="admin")
    await kioku.interactions.slash("stm settings", {"always_on": True}, user=admin)
    guild_id = kioku.env.channel.guild.id
    settings_changed_elsewhere(kioku.bot.memory, guild_id)  # e.g. just restarted or evicted
    assert kioku.bot.memory.cached_guild_config(guild_id) is None

    kioku.llm.reply_text("first answer").reply_text("second answer")
    first, second = await asyncio.gather(
        kioku.env.send("unaddressed, first"),
        kioku.env.send("addressed, second", mention_bot=True),
    )

    replies = [s.message for s in kioku.env.sent_to(kioku.env.channel)][-2:]
    assert [r.content for r in replies] == ["first answer", "second answer"]
    assert [r.reference.message_id for r in replies if r.reference] == [first.id, second.id]


async def test_a_memory_written_from_a_trimmed_history_does_not_claim_what_was_cut(
    db: Database, llm: ScriptedLLM, pg_url: URL, tmp_path: Path
) -> None:
    # An 8,192-token provider cannot see 40 long messages: the oldest are left out of the
    # prompt, so a summary written now must not move the marker past them.
    kioku = await start_kioku(db, llm, pg_url, tmp_path, settings={"provider": "ollama"})
    try:
        for i in range(40):
            await kioku.env.send(f"long message {i} " + "x" * 900)
        llm.reply_tool_calls([stm_call("A summary of what the model saw.")]).reply_text("ok")
        await kioku.env.send("what did we say?", mention_bot=True)

        assert "long message 0 " not in prompt_text(llm, 0)  # really trimmed
        assert tool_results(llm, 1) == ["saved"]
        server, _ = await rows(db)
        assert server.summary == "A summary of what the model saw."
        assert server.covered_through_message_id is None
    finally:
        await stop_kioku(kioku)


# ---------------------------------------------------------------- sending edges


async def test_a_failed_typing_indicator_does_not_drop_the_turn(
    kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # POST /typing is cosmetic; Discord may answer it with a 5xx (discord.py retries,
    # then raises). The member's question is still answered.
    async def typing_down(channel_id: int) -> None:
        raise discord.DiscordServerError(FakeResponse(503, "Service Unavailable"), "overloaded")

    monkeypatch.setattr(kioku.bot.http, "send_typing", typing_down)
    kioku.llm.reply_text("Here is your answer.")
    await kioku.env.send("what's the plan?", mention_bot=True, raise_errors=False)

    assert kioku.env.errors == []
    assert [s.content for s in kioku.env.sent] == ["Here is your answer."]


async def test_a_mention_in_a_channel_the_bot_may_not_post_in_calls_no_model(
    kioku: KiokuHarness,
) -> None:
    env = kioku.env
    read_only = discord.PermissionOverwrite(send_messages=False)
    await env.set_overwrite(env.channel, env.guild.me, read_only)
    kioku.llm.reply_text("never sent")

    await env.send("are you there?", mention_bot=True, raise_errors=False)

    assert (env.errors, env.sent, kioku.llm.requests) == ([], [], [])


async def test_a_mention_in_a_locked_thread_the_bot_may_not_post_in_calls_no_model(
    kioku: KiokuHarness,
) -> None:
    """In a locked thread only members with Manage Threads may post: a moderator's
    mention there would cost a model call whose answer Discord refuses."""
    env = kioku.env
    thread = await env.create_thread(env.channel, "closed topic", locked=True)
    moderator = await env.create_member("mod", permissions=discord.Permissions(manage_threads=True))
    kioku.llm.reply_text("never sent")

    await env.send("are you there?", channel=thread, author=moderator, mention_bot=True)

    assert (env.errors, env.sent, kioku.llm.requests) == ([], [], [])


async def test_a_reply_made_before_a_refresh_is_not_posted_into_the_wiped_channel(
    kioku: KiokuHarness,
) -> None:
    env, llm = kioku.env, kioku.llm
    moderator = await env.create_member("mod", kind="moderator")
    await env.send("the secret codename is HERON")
    gate = llm.hold()
    llm.reply_text("Noted: the codename is HERON.")
    turn = asyncio.create_task(env.send("remember the codename", mention_bot=True))
    try:
        await llm.wait_for_requests(1)
        refreshed = await kioku.interactions.slash("refresh", user=moderator)
        assert not refreshed.command_failed
    finally:
        gate.set()
        await turn

    assert env.sent[-1].content == WIPED_WHILE_ANSWERING
    llm.reply_text("Nothing yet.")
    await env.send("what do you know so far?", mention_bot=True)
    assert "HERON" not in prompt_text(kioku.llm)
    assert WIPED_WHILE_ANSWERING not in prompt_text(kioku.llm)  # a notice, not conversation


async def test_a_full_length_reply_that_starts_like_the_refresh_marker_fits_discords_limit(
    kioku: KiokuHarness,
) -> None:
    text = REFRESH_MARKER_PREFIX + " " + "x" * (DISCORD_LIMIT - 1 - len(REFRESH_MARKER_PREFIX))
    assert len(text) == DISCORD_LIMIT
    kioku.llm.reply_text(text)

    await kioku.env.send("quote the refresh notice and pad it", mention_bot=True)

    parts = [s.content for s in kioku.env.sent]
    assert all(len(p) <= DISCORD_LIMIT for p in parts), [len(p) for p in parts]
    assert not parts[0].startswith(REFRESH_MARKER_PREFIX)  # the guard's zero-width space
    assert "".join(parts).replace("\u200b", "").replace("\n", "") == text.replace("\n", "")


async def test_a_network_error_of_the_typing_indicator_does_not_drop_the_turn(
    kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # discord.py re-raises an OSError (connection reset, ECONNRESET 104 on Linux) or an
    # aiohttp ClientError from POST /typing as is, not as discord.HTTPException.
    async def typing_down(channel_id: int) -> None:
        raise aiohttp.ServerDisconnectedError()

    monkeypatch.setattr(kioku.bot.http, "send_typing", typing_down)
    kioku.llm.reply_text("Here is your answer.")
    await kioku.env.send("what's the plan?", mention_bot=True, raise_errors=False)

    assert kioku.env.errors == []
    assert [s.content for s in kioku.env.sent] == ["Here is your answer."]


def _refuse_references(kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Discord refuses a reply (message_reference) from a member without Read Message
    History: 403, JSON error 160002. The harness's fake Discord does not enforce it; this
    wrapper refuses every reference, as Discord does when its view of the permissions is
    newer than the bot's cache. Records whether each send carried a reference."""
    bot = kioku.bot
    send = bot.http.send_message
    references: list[bool] = []

    async def refusing(channel_id: int, *, params: Any) -> Any:
        body = _body_of(params.payload, params.multipart)
        references.append(bool(body.get("message_reference")))
        if body.get("message_reference"):
            raise discord.Forbidden(
                FakeResponse(403, "Forbidden"),
                {
                    "code": 160002,
                    "message": "Cannot reply without permission to read message history",
                },
            )
        return await send(channel_id, params=params)

    monkeypatch.setattr(bot.http, "send_message", refusing)
    return references


async def test_a_channel_without_read_message_history_gets_the_answer_without_a_reference(
    kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = kioku.env
    no_history = discord.PermissionOverwrite(read_message_history=False)
    await env.set_overwrite(env.channel, env.guild.me, no_history)
    references = _refuse_references(kioku, monkeypatch)
    kioku.llm.reply_text("Here is your answer.")

    await env.send("what's the plan?", mention_bot=True, raise_errors=False)

    assert [s.content for s in env.sent] == ["Here is your answer."]
    assert references == [False]  # known from the permissions: not even tried


async def test_a_refused_reply_reference_is_sent_again_without_it(
    kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = kioku.env
    references = _refuse_references(kioku, monkeypatch)
    kioku.llm.reply_text("Here is your answer.")

    await env.send("what's the plan?", mention_bot=True, raise_errors=False)

    assert [s.content for s in env.sent] == ["Here is your answer."]
    assert references == [True, False]


@pytest.mark.parametrize(
    "failure",
    [aiohttp.ClientConnectionError("connection reset"), TimeoutError(), OSError("unreachable")],
    ids=["connection-error", "timeout", "os-error"],
)
async def test_a_network_failure_while_posting_the_answer_is_logged_and_the_channel_keeps_serving(
    kioku: KiokuHarness,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    failure: Exception,
) -> None:
    env, bot = kioku.env, kioku.bot
    send = bot.http.send_message
    failures = [failure]

    async def flaky(channel_id: int, *, params: Any) -> Any:
        if failures:
            raise failures.pop()
        return await send(channel_id, params=params)

    monkeypatch.setattr(bot.http, "send_message", flaky)
    kioku.llm.reply_text("lost on the way")
    kioku.llm.reply_text("Here is your answer.")

    with caplog.at_level(logging.WARNING, logger="bot.cogs.chat.cog"):
        await env.send("what's the plan?", mention_bot=True, raise_errors=False)
        await env.send("still there?", mention_bot=True, raise_errors=False)

    assert env.errors == []
    assert [s.content for s in env.sent] == ["Here is your answer."]
    assert [
        (r.levelno, r.getMessage()) for r in caplog.records if r.name == "bot.cogs.chat.cog"
    ] == [
        (
            logging.WARNING,
            f"could not send a reply in {env.channel.id}: {failure.__class__.__name__}",
        )
    ]


async def test_the_bot_says_at_info_that_it_is_online(
    kioku: KiokuHarness, caplog: pytest.LogCaptureFixture
) -> None:
    # The gateway's own "connected" line is quieted with its chatter: after "logging in
    # using static token" the operator saw nothing that said the bot was online.
    assert kioku.bot.user is not None
    with caplog.at_level(logging.INFO, logger="bot.app"):
        await kioku.bot.on_ready()
    assert next(r.getMessage() for r in caplog.records if r.name == "bot.app") == (
        f"online as {kioku.bot.user} (id {kioku.bot.user.id}) in 1 server"
    )


async def test_the_invite_link_is_logged_once_with_the_permissions_the_bot_uses(
    kioku: KiokuHarness, caplog: pytest.LogCaptureFixture
) -> None:
    # The owner had to build the OAuth URL and guess the permissions.
    assert kioku.bot.user is not None
    client_id = kioku.bot.application_id or kioku.bot.user.id
    invite = kioku.bot.get_cog("InviteLink")
    assert invite is not None
    with caplog.at_level(logging.INFO, logger="bot.cogs.needs"):
        await invite.on_ready()  # type: ignore[attr-defined]
        await invite.on_ready()  # type: ignore[attr-defined]  # a resumed session is ready again
    invites = [r.getMessage() for r in caplog.records if r.getMessage().startswith("invite link: ")]
    assert len(invites) == 1
    query = parse_qs(urlsplit(invites[0].removeprefix("invite link: ")).query)
    assert query["client_id"] == [str(client_id)]
    assert query["scope"] == ["bot applications.commands"]
    # View Channels, Send Messages, Send Messages in Threads, Read Message History and
    # Add Reactions: the bits Discord documents, summed here rather than read from the code.
    expected = (1 << 10) | (1 << 11) | (1 << 38) | (1 << 16) | (1 << 6)
    assert query["permissions"] == [str(expected)]


# ---------------------------------------------------------------- shutdown


async def test_a_shutdown_lets_an_answer_in_flight_go_out_before_the_chat_stops(
    kioku: KiokuHarness,
) -> None:
    env = kioku.env
    gate = kioku.llm.hold()
    kioku.llm.reply_text("Here is your answer.")
    turn = asyncio.create_task(env.send("what's the plan?", mention_bot=True))
    await kioku.llm.wait_for_requests(1)

    sent_when_stopped: list[int] = []
    stopping = asyncio.create_task(kioku.bot.unload_extension("bot.cogs.chat"))
    stopping.add_done_callback(lambda _: sent_when_stopped.append(len(env.sent)))
    gate.set()
    await stopping
    await turn

    assert sent_when_stopped == [1]
    assert [s.content for s in env.sent] == ["Here is your answer."]


async def test_a_shutdown_cancels_answers_still_running_after_the_grace_period(
    kioku: KiokuHarness, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = kioku.env
    # By name: each bot loads the extension anew (an unload drops the module).
    monkeypatch.setattr(sys.modules["bot.cogs.chat.cog"], "SHUTDOWN_GRACE_SECONDS", 0.0)
    gate = kioku.llm.hold()
    kioku.llm.reply_tool_calls([stm_call("never stored")]).reply_text("never sent")
    turn = asyncio.create_task(env.send("what's the plan?", mention_bot=True, raise_errors=False))
    await kioku.llm.wait_for_requests(1)

    await kioku.bot.unload_extension("bot.cogs.chat")  # returns with the model still held
    gate.set()
    with contextlib.suppress(asyncio.CancelledError):
        await turn

    assert env.sent == []
    assert len(kioku.llm.requests) == 1
    assert await rows(db) == []  # the tool call it was given never ran


async def test_a_shutdown_drops_turns_still_waiting_for_their_channel(
    kioku: KiokuHarness,
) -> None:
    env = kioku.env
    gate = kioku.llm.hold()
    kioku.llm.reply_text("Here is your answer.").reply_text("never asked for")
    first = asyncio.create_task(env.send("what's the plan?", mention_bot=True))
    await kioku.llm.wait_for_requests(1)
    second = asyncio.create_task(env.send("and after that?", mention_bot=True))

    stopping = asyncio.create_task(kioku.bot.unload_extension("bot.cogs.chat"))
    gate.set()
    await asyncio.gather(stopping, first, second)

    assert [s.content for s in env.sent] == ["Here is your answer."]
    assert len(kioku.llm.requests) == 1


async def test_a_shutdown_cancels_a_background_summary_still_waiting_for_the_model(
    db: Database, llm: ScriptedLLM, pg_url: URL, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("bot.app.SUMMARY_SHUTDOWN_GRACE_SECONDS", 0.0)
    kioku = await start_kioku(
        db,
        llm,
        pg_url,
        tmp_path,
        settings={
            "provider": "novelai",
            "stm": {"refresh_cadence": 1},
            "llm": {"timeout_seconds": 120},  # the model would keep a waiting shutdown long
        },
    )
    stopped = False
    try:
        llm.reply_text("first answer")
        await kioku.env.send("let's talk about tea", mention_bot=True)
        gate = llm.hold()
        llm.reply_text("never used")
        await llm.wait_for_requests(2)  # the automatic summary waits for the model

        async with asyncio.timeout(30):  # a hang guard: it returns with the model held
            await stop_kioku(kioku)
        stopped = True
        gate.set()
        assert await rows(db) == []
    finally:
        if not stopped:
            await stop_kioku(kioku)
