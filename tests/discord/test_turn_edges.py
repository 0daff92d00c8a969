"""Turn edge cases through discord.py: queued turns, the fallback notice, the bot's role
mention, and what a back-fill may bring back when the channel changed while it ran."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import discord
import pytest
from aiohttp import web
from sqlalchemy import func, select
from sqlalchemy.engine import URL

from bot.cogs.history import WIPED_WHILE_ANSWERING
from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.conversation.turn import NO_LONG_TERM_TOOLS_NOTE
from bot.db.engine import Database
from bot.db.models import LongTermMemory, ShortTermMemory
from bot.db.storage import Fault, faults
from bot.llm.tools.loop import FALLBACK_REPLY, UNAVAILABLE_MESSAGE
from bot.llm.tools.text_calls import TOOLS_IN_PROMPT
from bot.vocabulary.model import RawMessage
from tests.helpers.bot import KiokuHarness, start_kioku, stop_kioku
from tests.helpers.chat_world import KiokuStarter, chat_cog_away, refresh_succeeds
from tests.helpers.discord_payloads import complete_message_payload as _complete_message_payload
from tests.helpers.discord_payloads import snowflake
from tests.helpers.fake_llm import ScriptedLLM


def prompt_text(llm: ScriptedLLM, i: int = -1) -> str:
    return "\n".join(str(m.get("content") or "") for m in llm.messages(i))


def arrivals(
    kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch, *texts: str
) -> list[asyncio.Event]:
    """One event per text, set when a message holding it reaches the raw window (on
    arrival, before its turn queues)."""
    events = [asyncio.Event() for _ in texts]
    observe = kioku.bot.memory.observe_message

    def spy(channel_id: int, message: RawMessage) -> None:
        observe(channel_id, message)
        for text, event in zip(texts, events, strict=True):
            if text in message.content:
                event.set()

    monkeypatch.setattr(kioku.bot.memory, "observe_message", spy)
    return events


async def test_the_fallback_reply_is_not_part_of_the_next_prompt(kioku: KiokuHarness) -> None:
    """FALLBACK_REPLY is one of FRIENDLY_ERRORS ("never part of the conversation the model
    sees next"), and back-fill skips it, but the live path stores it in the window."""
    llm = kioku.llm
    for _ in range(5):  # five consecutive tool errors end the loop early
        llm.reply_tool_calls([("no_such_tool", "{}")])
    llm.reply_error(500, "final call fails too")
    await kioku.env.send("first question", mention_bot=True)
    assert kioku.env.last_sent().content == FALLBACK_REPLY

    llm.reply_text("answered now")
    await kioku.env.send("second try", mention_bot=True)
    window = [m.content for m in kioku.bot.memory.windows.get(kioku.env.channel.id)]
    assert FALLBACK_REPLY not in window
    assert FALLBACK_REPLY not in prompt_text(llm)


async def test_a_refresh_during_the_back_fill_does_not_bring_wiped_messages_back(
    kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    env, bot = kioku.env, kioku.bot
    moderator = await env.create_member("mod", kind="moderator")
    async with chat_cog_away(bot):
        await env.send("before the refresh: the secret codename is HERON")

    fetch = bot.http.logs_from
    started, release = asyncio.Event(), asyncio.Event()

    async def slow_logs_from(channel_id: int, *args: Any, **kwargs: Any) -> Any:
        result = await fetch(channel_id, *args, **kwargs)  # Discord answered...
        started.set()
        await release.wait()  # ...but the answer arrives late
        return result

    monkeypatch.setattr(bot.http, "logs_from", slow_logs_from)
    kioku.llm.reply_text("hello")
    turn = asyncio.create_task(env.send("what's up?", mention_bot=True))
    await asyncio.wait_for(started.wait(), 5)
    await refresh_succeeds(kioku, moderator)
    release.set()
    await turn

    window = [m.content for m in bot.memory.windows.get(env.channel.id)]
    assert not any("HERON" in c for c in window), window
    assert kioku.llm.requests == []  # the refresh wiped the question too
    assert env.last_sent().content == WIPED_WHILE_ANSWERING
    await env.send("so what's up now?", mention_bot=True)
    assert "HERON" not in prompt_text(kioku.llm)


async def test_mentioning_the_bots_own_role_is_a_mention(kioku: KiokuHarness) -> None:
    """Discord's mention picker offers the bot's managed role next to the bot user;
    members who pick it mean the bot."""
    env, bot = kioku.env, kioku.bot
    assert bot.user is not None
    role = env.guild.self_role  # the harness gives the bot its managed role, as Discord does
    assert role is not None and role.is_bot_managed()
    rid = role.id
    kioku.llm.reply_text("you called?")
    message = await env.send(f"<@&{rid}> are you there?")
    assert [r.id for r in message.role_mentions] == [rid]
    assert kioku.llm.requests, "a mention of the bot's role got no answer"


async def test_back_fill_skips_system_messages_like_the_live_path(kioku: KiokuHarness) -> None:
    """Live, only default messages and replies enter the window; a back-fill reads every
    message type (joins, pins, thread-created notices...)."""
    env, bot = kioku.env, kioku.bot
    joiner = await env.create_member("newcomer")
    async with chat_cog_away(bot):
        for mtype, content in ((7, ""), (18, "THREADNAME-planning"), (6, "")):
            mid = snowflake()
            data: dict[str, Any] = {
                "id": mid,
                "channel_id": env.channel.id,
                "guild_id": env.guild.id,
                "author": {
                    "id": str(joiner.id),
                    "username": "newcomer",
                    "discriminator": "0",
                    "global_name": None,
                    "avatar": None,
                    "bot": False,
                },
                "content": content,
                "type": mtype,
            }
            _complete_message_payload(data, env.state)
            env._store(data)
            # The live path sees the same messages (and ignores them).
            await env.run_parser(env.state.parse_message_create, copy.deepcopy(data))
        assert bot.memory.windows.get(env.channel.id) == ()
    bot.memory.windows._primed.clear()  # cold channel (e.g. after a restart)

    kioku.llm.reply_text("hi")
    await env.send("hello", mention_bot=True)
    window = [(m.author_name, m.content) for m in bot.memory.windows.get(env.channel.id)]
    assert [c for _, c in window] == ["@Kioku hello", "hi"], window


async def _first_turn_held(kioku: KiokuHarness) -> tuple[asyncio.Event, asyncio.Task[Any]]:
    """The question "what is 2+2?" asked and its answer held at the model (the test
    scripts the replies); later requests go straight through. Returns (release, turn)."""
    env, llm = kioku.env, kioku.llm
    held = llm.hold()
    first = asyncio.create_task(env.send("what is 2+2?", mention_bot=True))
    await llm.wait_for_requests(1)
    llm.hold().set()  # later requests go straight through
    return held, first


async def test_a_queued_turn_answers_its_own_message_not_a_later_one(
    kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Turns of one channel queue; when a queued turn runs, the window already holds
    messages sent after its trigger, and the prompt ends with the newest of them, so
    the reply to one question is generated for another member's later question."""
    env, llm = kioku.env, kioku.llm
    bob = await env.create_member("bob")
    llm.reply_text("4").reply_text("Paris").reply_text("a joke")
    held, first = await _first_turn_held(kioku)
    france, joke = arrivals(kioku, monkeypatch, "capital of France", "tell me a joke")
    second = asyncio.create_task(env.send("what is the capital of France?", mention_bot=True))
    await asyncio.wait_for(france.wait(), 5)
    third = asyncio.create_task(env.send("tell me a joke", author=bob, mention_bot=True))
    await asyncio.wait_for(joke.wait(), 5)  # both now wait in the channel's queue
    held.set()
    await asyncio.gather(first, second, third)

    turn_for_france = llm.messages(1)
    last_user = [m for m in turn_for_france if m.get("role") == "user"][-1]
    assert "capital of France" in str(last_user["content"]), last_user


async def test_a_message_deleted_while_its_turn_is_queued_is_not_answered(
    kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The member deletes a message while its turn waits behind another: nothing is left
    to answer (the window would end with the previous question, answered twice)."""
    env, llm = kioku.env, kioku.llm
    llm.reply_text("4").reply_text("2+2 is 4, as I said.")
    held, first = await _first_turn_held(kioku)
    (arrived,) = arrivals(kioku, monkeypatch, "my password is hunter2")
    second = asyncio.create_task(env.send("oops my password is hunter2", mention_bot=True))
    await asyncio.wait_for(arrived.wait(), 5)
    window = kioku.bot.memory.windows.get(env.channel.id)
    (oops,) = [m for m in window if "hunter2" in m.content]
    await kioku.bot.http.delete_message(env.channel.id, oops.message_id)
    held.set()
    await asyncio.gather(first, second)

    assert [s.content for s in env.sent_to(env.channel)] == ["4"]
    assert len(llm.requests) == 1


async def _france_scrolled_out_behind_a_held_turn(
    kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch
) -> tuple[asyncio.Event, asyncio.Task[Any], asyncio.Task[Any]]:
    """A turn held at the model; "what is the capital of France?" waits behind it in the
    channel's queue while a raw window of chatter pushes it out of the window (the test
    scripts the replies). Returns (release, first turn, queued turn)."""
    env = kioku.env
    held, first = await _first_turn_held(kioku)
    (arrived,) = arrivals(kioku, monkeypatch, "capital of France")
    second = asyncio.create_task(env.send("what is the capital of France?", mention_bot=True))
    await asyncio.wait_for(arrived.wait(), 5)
    for i in range(kioku.bot.settings.stm.raw_window):
        await env.send(f"unrelated chatter {i}")
    return held, first, second


async def test_a_queued_turn_whose_message_scrolled_out_of_the_window_still_sees_it(
    kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a slow answer is generated, more messages arrive than the raw window holds:
    the queued turn's own message is pushed out of the window before its turn runs, and
    the model is still shown it."""
    llm = kioku.llm
    llm.reply_text("4").reply_text("Paris")
    held, first, second = await _france_scrolled_out_behind_a_held_turn(kioku, monkeypatch)
    held.set()
    await asyncio.gather(first, second)

    users = [m for m in llm.messages(1) if m["role"] == "user"]
    assert len(users) == 1, users
    assert "capital of France" in str(users[0]["content"])
    assert "unrelated chatter" not in prompt_text(llm, 1)  # said after it: turns of their own


async def test_a_memory_written_for_a_message_that_scrolled_out_claims_none_of_the_window(
    kioku: KiokuHarness, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model of that turn saw its question and none of what scrolled out with it: a
    summary it writes must not mark them (or the chatter after it) as covered."""
    llm = kioku.llm
    llm.reply_text("4")
    llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": "Asked about France."})]).reply_text("Paris")
    held, first, second = await _france_scrolled_out_behind_a_held_turn(kioku, monkeypatch)
    held.set()
    await asyncio.gather(first, second)

    assert [str(m["content"]) for m in llm.messages(2) if m["role"] == "tool"] == ["saved"]
    async with db.sessions() as session:
        stored = (await session.scalars(select(ShortTermMemory))).all()
    assert stored and all(m.summary == "Asked about France." for m in stored)
    assert [m.covered_through_message_id for m in stored] == [None] * len(stored)


async def _cold_channel_with_slow_history(
    kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch, *texts: Any
) -> tuple[list[Any], asyncio.Event, asyncio.Event]:
    env, bot = kioku.env, kioku.bot
    async with chat_cog_away(bot):
        old = [await env.send(text, author=author) for text, author in texts]
    fetch = bot.http.logs_from
    started, release = asyncio.Event(), asyncio.Event()

    async def slow_logs_from(channel_id: int, *args: Any, **kwargs: Any) -> Any:
        result = await fetch(channel_id, *args, **kwargs)
        started.set()
        await release.wait()
        return result

    monkeypatch.setattr(bot.http, "logs_from", slow_logs_from)
    return old, started, release


async def test_a_message_deleted_during_the_back_fill_stays_deleted(
    kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = kioku.env
    (old,), started, release = await _cold_channel_with_slow_history(
        kioku, monkeypatch, ("oops, my password is HERON", env.member)
    )
    kioku.llm.reply_text("hello")
    turn = asyncio.create_task(env.send("hi", mention_bot=True))
    await asyncio.wait_for(started.wait(), 5)
    await env.run_parser(
        env.state.parse_message_delete,
        {"id": str(old.id), "channel_id": str(env.channel.id), "guild_id": str(env.guild.id)},
    )
    release.set()
    await turn
    window = [m.content for m in kioku.bot.memory.windows.get(env.channel.id)]
    assert not any("HERON" in c for c in window), window


async def test_forget_me_during_the_back_fill_leaves_none_of_the_users_messages(
    kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = kioku.env
    leaver = await env.create_member("leaver")
    _, started, release = await _cold_channel_with_slow_history(
        kioku, monkeypatch, ("my address is 12 HERON street", leaver)
    )
    kioku.llm.reply_text("hello")
    turn = asyncio.create_task(env.send("hi", mention_bot=True))
    await asyncio.wait_for(started.wait(), 5)
    asked = await kioku.interactions.slash("forget-me", user=leaver)
    done = await kioku.interactions.click(asked, label="Delete my memories", user=leaver)
    assert done.content is not None and done.content.startswith("**Done.**")
    release.set()
    await turn
    window = [(m.author_id, m.content) for m in kioku.bot.memory.windows.get(env.channel.id)]
    assert all(author != leaver.id for author, _ in window), window
    assert "HERON" not in prompt_text(kioku.llm)


# ------------------------------------------------------------ odd model answers


class BrokenJsonLLM(ScriptedLLM):
    """An endpoint (or a proxy in front of it) answering 200 with a JSON content type and
    a body that is not JSON (cut off, or a mislabelled error page)."""

    async def _handle_chat(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        return web.Response(
            status=200, body=b'{"id": "chatcmpl-1", "choices": [', content_type="application/json"
        )


async def test_a_200_answer_whose_body_is_not_json_gets_the_friendly_notice(
    db: Database, pg_url: URL, tmp_path: Path
) -> None:
    async with BrokenJsonLLM() as broken:
        kioku = await start_kioku(db, broken, pg_url, tmp_path)
        try:
            await kioku.env.send("hi", mention_bot=True, raise_errors=False)
            assert kioku.env.errors == []
            assert [m.content for m in kioku.env.sent] == [UNAVAILABLE_MESSAGE]
        finally:
            await stop_kioku(kioku)


async def test_an_answer_cut_off_inside_its_reasoning_gets_a_notice_not_an_ellipsis(
    kioku: KiokuHarness,
) -> None:
    # A reasoning model spends the whole max_tokens inside <think>: nothing is left.
    kioku.llm.reply_text("<think>" + "Let me weigh every option. " * 200, finish_reason="length")

    await kioku.env.send("which database should I pick?", mention_bot=True)

    assert kioku.env.last_sent().content == FALLBACK_REPLY
    window = kioku.bot.memory.windows.get(kioku.env.channel.id)
    assert all(m.content != FALLBACK_REPLY for m in window)  # a notice, not an answer


async def test_the_answer_written_beside_a_memory_update_reaches_the_member(
    llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    # A model that updates the memory beside its answer: the answer is the content beside
    # the call, the model is not asked again, and no upkeep follows.
    async with kioku_with(settings={"stm": {"refresh_cadence": 1}}) as kioku:
        llm.reply_text("Hi!")
        await kioku.env.send("hello", mention_bot=True)  # the next turn's memory is due
        llm.reply_tool_calls(
            [(STM_TOOL_NAME, {"summary": "Alice asked for the capital of France."})],
            content="The capital of France is Paris.",
        )
        await kioku.env.send("what's the capital of France?", mention_bot=True)

        assert "Memory upkeep" not in str(llm.messages(1))  # never in the answering prompt
        assert kioku.env.last_sent().content == "The capital of France is Paris."
        assert len(llm.requests) == 2 and llm.unscripted == 0


@pytest.mark.parametrize(("provider", "in_prompt"), [("ollama", True), ("openrouter", False)])
async def test_a_model_that_cannot_take_tools_is_asked_again_without_them(
    llm: ScriptedLLM, kioku_with: KiokuStarter, provider: str, in_prompt: bool
) -> None:
    # Ollama answers 400 to a request with "tools" when the loaded model has none. Where
    # the provider row reads calls written as text, the tools move into the prompt;
    # elsewhere the process goes on without tools (the summarizer keeps memory).
    async with kioku_with(settings={"provider": provider}) as kioku:
        refusal = "registry.ollama.ai/library/gemma3:4b does not support tools"
        llm.reply_error(400, refusal, error_type="api_error")
        llm.reply_text("Hello!")
        llm.reply_text("Still here.")
        await kioku.env.send("hi", mention_bot=True, raise_errors=False)
        await kioku.env.send("are you there?", mention_bot=True, raise_errors=False)

        assert [m.content for m in kioku.env.sent] == ["Hello!", "Still here."]
        assert "tools" in llm.request(0)
        assert "tools" not in llm.request(1) and "tools" not in llm.request(2)
        described = [
            any(TOOLS_IN_PROMPT in str(m.get("content")) for m in llm.messages(i)) for i in (1, 2)
        ]
        assert described == [in_prompt, in_prompt]
        assert kioku.bot.turns.caps.stm_allowed is in_prompt
        assert kioku.bot.turns.caps.tools_in_prompt is in_prompt


async def test_groq_tool_use_failed_does_not_switch_the_process_to_tool_less(
    llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    # Groq checks the model's tool-call arguments against the schema and answers 400
    # "tool_use_failed" when they do not match. The model CAN call tools; this one
    # generation was bad.
    async with kioku_with(settings={"provider": "groq"}) as kioku:
        llm.reply_error(
            400,
            "tool call validation failed: parameters for tool update_short_term_memory did "
            "not match schema: errors: [at '/summary': length must be <= 1500, but got 1873]",
            code="tool_use_failed",
        )
        llm.reply_text("Hello!")
        llm.reply_text("Still here.")
        await kioku.env.send("hi", mention_bot=True, raise_errors=False)
        await kioku.env.send("are you there?", mention_bot=True, raise_errors=False)

        assert [m.content for m in kioku.env.sent] == ["Hello!", "Still here."]
        assert llm.tool_names(0) == [STM_TOOL_NAME]
        # One bad generation must not take the tools (STM, long-term memory) from every
        # guild of this process until a restart.
        assert kioku.bot.turns.caps.tool_calling and kioku.bot.turns.caps.stm_allowed
        assert llm.tool_names(2) == [STM_TOOL_NAME]


async def test_another_bad_request_is_still_the_unavailable_notice(kioku: KiokuHarness) -> None:
    kioku.llm.reply_error(400, "This model's maximum context length is 8192 tokens")

    await kioku.env.send("hi", mention_bot=True, raise_errors=False)

    assert kioku.env.last_sent().content == UNAVAILABLE_MESSAGE
    assert kioku.bot.turns.caps.tool_calling  # not mistaken for a refusal of tools


async def test_a_remember_request_in_the_turn_that_found_tools_refused_is_not_claimed_saved(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    # A server that refuses "tools" for a provider that reads no calls written as text.
    # The turn is asked again without tools, but the prompt still lets the model believe
    # it can store the fact (later turns get NO_LONG_TERM_TOOLS_NOTE; this one does not).
    async with kioku_with(settings={"provider": "openrouter"}) as kioku:
        llm.reply_error(400, "registry.ollama.ai/library/gemma3:4b does not support tools")
        llm.reply_text("Got it, I'll remember that your cat is called Miso!")
        await kioku.env.send(
            "remember that my cat is called Miso", mention_bot=True, raise_errors=False
        )

        assert "tools" in llm.request(0) and "tools" not in llm.request(1)
        async with db.sessions() as session:
            assert await session.scalar(select(func.count()).select_from(LongTermMemory)) == 0
        retried = [m["content"] for m in llm.messages(1) if m["role"] == "system"]
        assert NO_LONG_TERM_TOOLS_NOTE in retried


# The message being answered is carried beside the raw window (TurnRequest.trigger, for
# when it scrolled out); a /refresh or /forget-me that wiped it keeps it out all the same.


def _slow_recall(kioku: KiokuHarness) -> Fault:
    """Hold the turn in its long-term recall query: after the trigger was taken, before
    prepare_turn reads the channel's epoch."""
    return faults(kioku.database.sessions).hang("recalling facts", times=1)


def _arrival(kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch, text: str) -> asyncio.Event:
    """Set once a message holding ``text`` reaches the raw window."""
    event = asyncio.Event()
    observe = kioku.bot.memory.observe_message

    def spy(channel_id: int, message: Any) -> None:
        observe(channel_id, message)
        if text in message.content:
            event.set()

    monkeypatch.setattr(kioku.bot.memory, "observe_message", spy)
    return event


async def _queue_behind_a_held_turn(
    kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch, author: discord.Member
) -> tuple[asyncio.Event, asyncio.Task[Any], asyncio.Task[Any]]:
    """A turn held at the model; ``author``'s "12 Elm Street" message waits behind it in
    the channel's queue. Returns (release, first turn, queued turn)."""
    env, llm = kioku.env, kioku.llm
    llm.reply_text("4").reply_text("ok")
    held, first = await _first_turn_held(kioku)
    arrived = _arrival(kioku, monkeypatch, "Elm Street")
    queued = asyncio.create_task(
        env.send("my home address is 12 Elm Street", author=author, mention_bot=True)
    )
    await asyncio.wait_for(arrived.wait(), 5)
    return held, first, queued


async def test_a_refresh_before_the_turn_reads_memory_does_not_bring_the_wiped_trigger_back(
    kioku: KiokuHarness,
) -> None:
    env, bot, llm = kioku.env, kioku.bot, kioku.llm
    moderator = await env.create_member("mod", kind="moderator")
    recalling = _slow_recall(kioku)
    llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": "The codename is HERON."})])
    llm.reply_text("Noted: HERON.")
    turn = asyncio.create_task(env.send("the secret codename is HERON", mention_bot=True))
    await asyncio.wait_for(recalling.reached(), 5)
    kioku.clock.catch_up()
    await refresh_succeeds(kioku, moderator)
    assert bot.memory.windows.get(env.channel.id) == ()  # the refresh wiped the message
    recalling.release()
    await turn

    assert llm.requests == [], "the model was asked about a wiped message"
    assert env.last_sent().content == WIPED_WHILE_ANSWERING


async def test_a_forget_me_before_the_turn_reads_memory_does_not_bring_the_trigger_back(
    kioku: KiokuHarness,
) -> None:
    env, llm = kioku.env, kioku.llm
    leaver = await env.create_member("leaver")
    recalling = _slow_recall(kioku)
    llm.reply_text("ok")
    turn = asyncio.create_task(
        env.send("my home address is 12 Elm Street", author=leaver, mention_bot=True)
    )
    await asyncio.wait_for(recalling.reached(), 5)
    kioku.clock.catch_up()
    asked = await kioku.interactions.slash("forget-me", user=leaver)
    done = await kioku.interactions.click(asked, label="Delete my memories", user=leaver)
    assert done.content is not None and "1 cached message" in done.content
    recalling.release()
    await turn

    assert llm.requests == [], "the model was asked about a forgotten message"


async def test_forget_me_while_a_scrolled_out_message_waits_does_not_show_it_to_the_model(
    kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The message scrolled out of the window, so /forget-me found nothing of theirs in
    this channel (its epoch stays): the stored forget time keeps the trigger out."""
    env, llm = kioku.env, kioku.llm
    leaver = await env.create_member("leaver")
    held, first, queued = await _queue_behind_a_held_turn(kioku, monkeypatch, leaver)
    for i in range(kioku.bot.settings.stm.raw_window):
        await env.send(f"unrelated chatter {i}")
    kioku.clock.catch_up()
    asked = await kioku.interactions.slash("forget-me", user=leaver)
    done = await kioku.interactions.click(asked, label="Delete my memories", user=leaver)
    assert done.content is not None
    held.set()
    await asyncio.gather(first, queued)

    assert len(llm.requests) == 1, "the model was asked about a forgotten message"


async def test_a_forget_me_missed_while_deaf_is_not_undone_by_the_trigger_after_reconnect(
    kioku: KiokuHarness, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's /forget-me, unheard while the listener was down: the reconnect
    empties the windows, and the stored forget time keeps the trigger out too."""
    from bot.db.repositories import stm as stm_repo

    env, bot, llm = kioku.env, kioku.bot, kioku.llm
    leaver = await env.create_member("leaver")
    held, first, queued = await _queue_behind_a_held_turn(kioku, monkeypatch, leaver)
    bot.memory.listener_lost()
    kioku.clock.catch_up()
    async with db.sessions() as session, session.begin():  # the other process's /forget-me
        await stm_repo.record_forget(session, leaver.id, kioku.clock.now())
    bot.memory.listening_again()  # LISTEN is back: drop_all()
    held.set()
    await asyncio.gather(first, queued)

    assert len(llm.requests) == 1, "the model was asked about a forgotten message"


async def test_a_message_wiped_by_refresh_while_its_turn_is_queued_gets_no_model_call(
    kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A /refresh while a turn waits in the channel's queue wipes its message: the model
    would be asked to answer a conversation without it (here: none at all). The member
    is told to ask again instead, like a member whose answer the refresh overtook."""
    env, llm = kioku.env, kioku.llm
    moderator = await env.create_member("mod", kind="moderator")
    held, first, queued = await _queue_behind_a_held_turn(kioku, monkeypatch, env.member)
    await refresh_succeeds(kioku, moderator)
    held.set()
    await asyncio.gather(first, queued)

    assert len(llm.requests) == 1, [prompt_text(llm, i) for i in range(len(llm.requests))]
    replies = [s for s in env.sent_to(env.channel) if not s.content.startswith("🧹")]
    assert [s.content for s in replies] == [WIPED_WHILE_ANSWERING] * 2


async def test_a_message_its_author_had_forgotten_while_its_turn_is_queued_is_not_answered(
    kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/forget-me takes the member's queued message out of the window: the turn's
    conversation would end with the previous question, which the model answers again."""
    env, llm = kioku.env, kioku.llm
    leaver = await env.create_member("leaver")
    held, first, queued = await _queue_behind_a_held_turn(kioku, monkeypatch, leaver)
    asked = await kioku.interactions.slash("forget-me", user=leaver)
    await kioku.interactions.click(asked, label="Delete my memories", user=leaver)
    held.set()
    await asyncio.gather(first, queued)

    assert len(llm.requests) == 1, prompt_text(llm, -1)
    # The first answer too: /forget-me wiped what it was made from (the leaver's message).
    assert [s.content for s in env.sent_to(env.channel)] == [WIPED_WHILE_ANSWERING] * 2


async def test_a_stopping_bot_saves_the_turn_counts_of_its_last_turns(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    # The periodic saver is off in the harness: only close() can store these.
    async with kioku_with() as harness:
        llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": "Launch on Friday."})])
        llm.reply_text("Noted!")
        await harness.env.send("we launch on friday", mention_bot=True)
        for n in range(2):
            llm.reply_text(f"answer {n}")
            await harness.env.send(f"question {n}", mention_bot=True)

    async with db.sessions() as session:
        server = await session.scalar(
            select(ShortTermMemory).where(ShortTermMemory.scope_kind == "server")
        )
    assert server is not None
    # The updating turn resets the count; the two after it are what a restart reads.
    assert (server.version, server.turns_since_refresh) == (1, 2)
