"""Sending the answer: typing indicators that fail, channels the bot may not post in,
replies Discord refuses, and network failures while posting."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import discord
import pytest

from bot.cogs.history import WIPED_WHILE_ANSWERING
from bot.cogs.refresh import REFRESH_MARKER_PREFIX
from bot.cogs.replies import DISCORD_LIMIT
from tests.helpers.bot import KiokuHarness
from tests.helpers.chat_world import prompt_text, refresh_succeeds
from tests.helpers.discord_payloads import FakeResponse
from tests.helpers.discord_payloads import request_body as _body_of


@pytest.mark.parametrize(
    "failure",
    [
        # POST /typing is cosmetic; Discord may answer it with a 5xx (discord.py retries,
        # then raises).
        pytest.param(
            discord.DiscordServerError(FakeResponse(503, "Service Unavailable"), "overloaded"),
            id="discord-5xx",
        ),
        # discord.py re-raises an OSError (connection reset, ECONNRESET 104 on Linux) or an
        # aiohttp ClientError from POST /typing as is, not as discord.HTTPException.
        pytest.param(aiohttp.ServerDisconnectedError(), id="network-error"),
    ],
)
async def test_a_failed_typing_indicator_does_not_drop_the_turn(
    kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch, failure: Exception
) -> None:
    # The member's question is still answered.
    async def typing_down(channel_id: int) -> None:
        raise failure

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
    kioku: KiokuHarness, moderator: discord.Member
) -> None:
    env, llm = kioku.env, kioku.llm
    await env.send("the secret codename is HERON")
    gate = llm.hold()
    llm.reply_text("Noted: the codename is HERON.")
    turn = asyncio.create_task(env.send("remember the codename", mention_bot=True))
    try:
        await llm.wait_for_requests(1)
        await refresh_succeeds(kioku, moderator)
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
