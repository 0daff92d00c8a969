"""The chat coming up and going down: what the bot logs when it is online, and what a
shutdown does to answers and summaries still running."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from sqlalchemy.engine import URL

from bot.db.engine import Database
from tests.helpers.bot import KiokuHarness, start_kioku, stop_kioku
from tests.helpers.chat_world import rows, stm_call
from tests.helpers.fake_llm import ScriptedLLM


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
