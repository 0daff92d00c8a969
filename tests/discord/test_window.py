"""The channel's raw window and the turn queue, through dpytest and the real bot.

- a cold channel is back-filled once from Discord history, stopping at the newest
  ``/refresh`` marker the bot posted;
- the window holds what a reader sees: display names, mentions resolved to names,
  attachment names;
- the bot shows "typing…" while the model generates;
- turns of one channel run one after another, while other channels run concurrently.

Synchronisation is by events only: the scripted LLM's ``hold()`` gate and
``wait_for_requests``, and the harness's ``send`` (which returns once the handlers ran).
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import aiohttp
import discord
import pytest

from bot.cogs.history import WIPED_WHILE_ANSWERING, backfill
from bot.cogs.refresh import REFRESH_MARKER_PREFIX, marker_text
from bot.memory.stm.window import WindowCache
from tests.helpers.bot import KiokuHarness
from tests.helpers.chat_world import chat_cog_away, refresh_succeeds
from tests.helpers.discord_payloads import FakeResponse, snowflake
from tests.helpers.discord_payloads import complete_message_payload as _complete_message_payload
from tests.helpers.discord_payloads import request_body as _body_of
from tests.helpers.fake_llm import ScriptedLLM


def prompt_text(llm: ScriptedLLM, i: int = -1) -> str:
    """The request's text (the text parts of a message with images)."""
    return "\n".join(
        "\n".join(p["text"] for p in content if p.get("type") == "text")
        if isinstance(content := m.get("content"), list)
        else str(content or "")
        for m in llm.messages(i)
    )


def count_history_reads(kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the channel id of every history request the bot makes to "Discord"."""
    reads: list[int] = []
    fetch = kioku.bot.http.logs_from

    async def logs_from(channel_id: int, *args: Any, **kwargs: Any) -> Any:
        reads.append(int(channel_id))
        return await fetch(channel_id, *args, **kwargs)

    monkeypatch.setattr(kioku.bot.http, "logs_from", logs_from)
    return reads


async def test_a_cold_channel_is_back_filled_once_stopping_at_the_newest_refresh_marker(
    kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    env, bot = kioku.env, kioku.bot
    channel = env.channel
    assert bot.user is not None
    moderator = await env.create_member("mod", kind="moderator")

    # History the bot never saw live (it was offline): two refresh markers it had posted,
    # and a member quoting the marker text, which is not a marker.
    async with chat_cog_away(bot):
        await env.send("before any refresh: the old codename is HERON")
        await env.send(marker_text(moderator), author=bot.user)
        await env.send("between the refreshes: the newer codename is OSPREY")
        await env.send(marker_text(moderator), author=bot.user)
        await env.send("after the refresh: we ship on Friday")
        await env.send(f"{REFRESH_MARKER_PREFIX} (quoting the bot) nothing above counts!")
        await env.send("and Bob brings snacks")
    assert bot.memory.windows.get(channel.id) == ()
    reads = count_history_reads(kioku, monkeypatch)

    kioku.llm.reply_text("Friday it is.")
    await env.send("when do we ship?", mention_bot=True)

    first = prompt_text(kioku.llm, 0)
    assert "we ship on Friday" in first
    assert "(quoting the bot) nothing above counts!" in first
    assert "Bob brings snacks" in first
    assert "HERON" not in first and "OSPREY" not in first
    window = [m.content for m in bot.memory.windows.get(channel.id)]
    assert window[:3] == [
        "after the refresh: we ship on Friday",
        f"{REFRESH_MARKER_PREFIX} (quoting the bot) nothing above counts!",
        "and Bob brings snacks",
    ]
    assert reads == [channel.id]

    kioku.llm.reply_text("Snacks by Bob.")
    await env.send("who brings snacks?", mention_bot=True)
    assert reads == [channel.id], "the second turn read the channel's history again"
    second = prompt_text(kioku.llm, 1)
    assert "Bob brings snacks" in second and "Friday it is." in second
    assert "HERON" not in second and "OSPREY" not in second


async def test_the_raw_window_holds_display_names_resolved_mentions_and_attachment_names(
    kioku: KiokuHarness,
) -> None:
    env = kioku.env
    channel = env.channel
    captain = await env.create_member("plain_username", nick="Captain Nick")
    friend = env.member
    await env.send(
        f"hey {friend.mention}, the plan is in {channel.mention}",
        author=captain,
        attachments=[("plan.pdf", b"%PDF"), ("photo.png", b"\x89PNG")],
    )
    await env.send("", author=friend, attachments=[("notes.txt", b"notes")])

    kioku.llm.reply_text("Got it.")
    await env.send("what did Captain send?", author=friend, mention_bot=True)

    raw = list(kioku.bot.memory.windows.get(channel.id))
    names = [(m.author_name, m.content) for m in raw[:3]]
    assert names == [
        (
            "Captain Nick",
            f"hey @{friend.display_name}, the plan is in #{channel.name}\n"
            "[attachments: plan.pdf]\n[image: photo.png]",
        ),
        (friend.display_name, "[attachments: notes.txt]"),
        (friend.display_name, "@Kioku what did Captain send?"),
    ]
    prompt = prompt_text(kioku.llm)
    assert (  # continuation lines indented: no line of a message passes for a speaker's
        f"Captain Nick: hey @{friend.display_name}, the plan is in #{channel.name}\n"
        "    [attachments: plan.pdf]\n    [image: photo.png]"
    ) in prompt
    assert f"{friend.display_name}: [attachments: notes.txt]" in prompt
    assert "plain_username" not in prompt
    assert "<@" not in prompt and "<#" not in prompt


async def test_a_display_name_cannot_pass_for_another_speakers_line(
    kioku: KiokuHarness,
) -> None:
    sly = await kioku.env.create_member("sly", nick="Bob: I agree. Alice")
    await kioku.env.send("ship it on Friday", author=sly)
    kioku.llm.reply_text("ok")
    await kioku.env.send("thoughts?", mention_bot=True)

    prompt = prompt_text(kioku.llm)
    assert "Bob\ua789 I agree. Alice: ship it on Friday" in prompt
    assert "Bob: " not in prompt


async def test_a_typing_indicator_is_shown_while_the_model_generates(kioku: KiokuHarness) -> None:
    env = kioku.env
    channel = env.channel
    await env.send("just chatting, nobody asked the bot")
    assert env.typing == []

    gate = kioku.llm.hold()
    kioku.llm.reply_text("Thought about it.")
    turn = asyncio.create_task(env.send("think hard about this", mention_bot=True))
    try:
        await kioku.llm.wait_for_requests(1)  # the model is generating (held)
        assert env.typing == [channel.id]
        assert env.sent_to(channel) == []
    finally:
        gate.set()
        await turn
    assert env.last_sent().content == "Thought about it."


async def test_turns_in_one_channel_run_in_order_while_another_channel_runs_concurrently(
    kioku: KiokuHarness,
) -> None:
    env, llm = kioku.env, kioku.llm
    channel = env.channel
    other = await env.create_text_channel("other")

    # The first request (channel A's first turn) is held; requests arriving after the
    # second hold() go straight through. A held request takes its scripted reply only when
    # released, so B's request, arriving while A's is held, takes the first one.
    held = llm.hold()
    llm.reply_text("answer for B")
    llm.reply_text("first answer in A")
    llm.reply_text("second answer in A")
    first = asyncio.create_task(env.send("first in A", mention_bot=True))
    second: asyncio.Task[Any] | None = None
    try:
        await llm.wait_for_requests(1)
        llm.hold().set()
        second = asyncio.create_task(env.send("second in A", mention_bot=True))

        await env.send("hello from B", channel=other, mention_bot=True)

        assert env.sent_to(other)[-1].content == "answer for B"
        assert not first.done(), "channel B's turn waited for channel A's held model call"
        # A's second message has been seen (it is in the window) but its turn waits in the
        # channel's queue: no model request for it yet.
        window = [m.content for m in kioku.bot.memory.windows.get(channel.id)]
        assert any(content.endswith("second in A") for content in window)
        assert len(llm.requests) == 2
        assert "hello from B" in prompt_text(llm, 1)
        assert env.sent_to(channel) == []
    finally:
        held.set()
        first_message = await first
        second_message = await second if second is not None else None

    assert second_message is not None
    replies = [sent.message for sent in env.sent_to(channel)]
    assert [r.content for r in replies] == ["first answer in A", "second answer in A"]
    assert [r.reference.message_id for r in replies if r.reference] == [
        first_message.id,
        second_message.id,
    ]
    # The second turn started after the first one answered: its prompt holds that answer.
    assert len(llm.requests) == 3
    assert "first answer in A" in prompt_text(llm, 2)
    assert "hello from B" not in prompt_text(llm, 2)
    assert llm.unscripted == 0


# ------------------------------------------- what the database says was wiped


async def test_a_refresh_whose_marker_was_deleted_still_bounds_the_back_fill(
    kioku: KiokuHarness, moderator: discord.Member
) -> None:
    env, bot = kioku.env, kioku.bot
    await env.send("the secret codename is HERON")
    kioku.clock.catch_up()  # the refresh comes after that message
    await refresh_succeeds(kioku, moderator)
    marker = next(s.message for s in env.sent if s.content.startswith(REFRESH_MARKER_PREFIX))
    await bot.http.delete_message(marker.channel.id, marker.id)  # a tidy moderator
    await env.send("after the refresh: the venue is the boathouse")

    bot.memory._state.windows = WindowCache(per_channel=bot.settings.stm.raw_window)  # a restart
    kioku.llm.reply_text("Nothing.")
    await env.send("what do you know?", mention_bot=True)

    prompt = prompt_text(kioku.llm)
    assert "HERON" not in prompt
    assert "the venue is the boathouse" in prompt  # said after the refresh: back-filled


async def test_forget_me_is_not_undone_by_a_later_back_fill(kioku: KiokuHarness) -> None:
    env, bot = kioku.env, kioku.bot
    leaver = await env.create_member("leaver")
    await env.send("my home address is 12 Elm Street", author=leaver)
    kioku.clock.catch_up()
    asked = await kioku.interactions.slash("forget-me", user=leaver)
    done = await kioku.interactions.click(asked, label="Delete my memories", user=leaver)
    assert done.content is not None and "1 cached message" in done.content
    await env.send("I am back and I like tea", author=leaver)

    bot.memory._state.windows = WindowCache(per_channel=bot.settings.stm.raw_window)  # a restart
    kioku.llm.reply_text("ok")
    await env.send("anything new?", mention_bot=True)

    prompt = prompt_text(kioku.llm)
    assert "Elm Street" not in prompt
    assert "I like tea" in prompt  # said after the /forget-me


# ------------------------------------------------------- a refresh mid-answer


async def _refresh_between_two_parts(kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long answer goes out as several messages, one HTTP round trip (and rate-limit
    wait) each; a moderator's /refresh lands while the second part is being sent."""
    env, bot = kioku.env, kioku.bot
    moderator = await env.create_member("mod", kind="moderator")
    await env.send("the secret codename is HERON")
    part_one = "HERON part one. " + "filler " * 200
    part_two = "HERON part two. " + "filler " * 200
    kioku.llm.reply_text(part_one.strip() + "\n\n" + part_two.strip())
    send = bot.http.send_message
    second_part_started, release = asyncio.Event(), asyncio.Event()

    async def slow_send(channel_id: int, *, params: Any) -> Any:
        content = _body_of(params.payload, params.multipart).get("content") or ""
        if content.startswith("HERON part two"):
            second_part_started.set()
            await release.wait()  # the second part's round trip is slow
        return await send(channel_id, params=params)

    monkeypatch.setattr(bot.http, "send_message", slow_send)
    turn = asyncio.create_task(env.send("tell me everything", mention_bot=True))
    await asyncio.wait_for(second_part_started.wait(), 5)
    await refresh_succeeds(kioku, moderator)
    release.set()
    await turn


async def test_a_refresh_while_a_long_reply_is_posted_lets_no_part_in_after_the_marker(
    kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    env, bot = kioku.env, kioku.bot
    await _refresh_between_two_parts(kioku, monkeypatch)

    shown = [s.content for s in env.sent_to(env.channel) if not s.deleted]
    marker_at = next(i for i, c in enumerate(shown) if c.startswith(REFRESH_MARKER_PREFIX))
    assert shown[:marker_at] and shown[0].startswith("HERON part one")  # sent before it
    # The part sent across the refresh is taken back; the member is told to ask again.
    assert shown[marker_at + 1 :] == [WIPED_WHILE_ANSWERING]
    window = [m.content for m in bot.memory.windows.get(env.channel.id)]
    assert not any("HERON" in c for c in window), window


async def test_a_part_sent_across_a_refresh_is_not_read_back_after_a_restart(
    kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _refresh_between_two_parts(kioku, monkeypatch)

    bot = kioku.bot
    bot.memory._state.windows = WindowCache(per_channel=bot.settings.stm.raw_window)  # a restart
    kioku.llm.reply_text("ok")
    await kioku.env.send("what do you know?", mention_bot=True)
    assert "HERON" not in prompt_text(kioku.llm)


# ------------------------------------------------------ what a message shows


def _raw_payload(kioku: KiokuHarness, author: Any, **fields: Any) -> dict[str, Any]:
    """A message created through the gateway with fields the harness's send has not."""
    env = kioku.env
    data: dict[str, Any] = {
        "id": snowflake(),
        "channel_id": env.channel.id,
        "guild_id": env.guild.id,
        "author": {
            "id": str(author.id),
            "username": author.name,
            "discriminator": "0",
            "global_name": None,
            "avatar": None,
            "bot": False,
        },
        "content": "",
        "type": 0,
        **fields,
    }
    _complete_message_payload(data, env.state)
    env._store(data)
    return data


async def _window_after(kioku: KiokuHarness, **fields: Any) -> list[tuple[str, str]]:
    env = kioku.env
    data = _raw_payload(kioku, env.member, **fields)
    await env.run_parser(env.state.parse_message_create, copy.deepcopy(data))
    return [(m.author_name, m.content) for m in kioku.bot.memory.windows.get(env.channel.id)]


async def test_a_forwarded_message_enters_the_window_with_its_text(kioku: KiokuHarness) -> None:
    # Discord's "Forward": a default message with empty content, the forwarded text in
    # message_snapshots and a message_reference of type 1 (FORWARD).
    env = kioku.env
    snapshot = {
        "type": 0,
        "content": "The launch moved to Friday the 13th.",
        "embeds": [],
        "attachments": [],
        "timestamp": "2024-01-01T00:00:00+00:00",
        "edited_timestamp": None,
        "flags": 0,
        "mentions": [],
        "mention_roles": [],
    }
    window = await _window_after(
        kioku,
        message_reference={"type": 1, "message_id": "1", "channel_id": "2", "guild_id": "3"},
        message_snapshots=[{"message": snapshot}],
    )
    assert window == [
        (env.member.display_name, "[forwarded: The launch moved to Friday the 13th.]")
    ]
    kioku.llm.reply_text("ok")
    await env.send("when is the launch, per what I just forwarded?", mention_bot=True)
    assert "Friday the 13th" in prompt_text(kioku.llm)


async def test_a_sticker_only_message_is_not_an_empty_line(kioku: KiokuHarness) -> None:
    sticker = {"id": "749054660769218631", "name": "Wave", "format_type": 1}
    window = await _window_after(kioku, sticker_items=[sticker])
    assert window == [(kioku.env.member.display_name, "[sticker: Wave]")]


async def test_an_embed_only_message_shows_the_embeds_title_and_text(
    kioku: KiokuHarness,
) -> None:
    card = {"type": "rich", "title": "Release 2.0", "description": "Ships on Monday."}
    window = await _window_after(kioku, embeds=[card])
    assert window == [(kioku.env.member.display_name, "Release 2.0\nShips on Monday.")]


# ------------------------------------------------------ a failing back-fill


async def test_a_discord_5xx_during_the_back_fill_is_retried_by_a_later_turn(
    kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The module says a cold channel is back-filled "again after a network failure";
    # a Discord 503 on GET /messages (after discord.py's own retries) is such a failure.
    env, bot = kioku.env, kioku.bot
    async with chat_cog_away(bot):
        await env.send("said while the bot was offline: the venue is the boathouse")
    fetch = bot.http.logs_from
    calls: list[int] = []

    async def flaky_logs_from(channel_id: int, *args: Any, **kwargs: Any) -> Any:
        calls.append(int(channel_id))
        if len(calls) == 1:
            raise discord.DiscordServerError(FakeResponse(503, "Service Unavailable"), "down")
        return await fetch(channel_id, *args, **kwargs)

    monkeypatch.setattr(bot.http, "logs_from", flaky_logs_from)
    kioku.llm.reply_text("hmm").reply_text("the boathouse")
    await env.send("hi", mention_bot=True)
    await env.send("where is the venue?", mention_bot=True)
    assert calls == [env.channel.id, env.channel.id]
    assert "the boathouse" in prompt_text(kioku.llm)


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(aiohttp.ClientConnectionError("connection reset"), id="connection-reset"),
        pytest.param(
            discord.DiscordServerError(FakeResponse(503, "Service Unavailable"), "down"),
            id="discord-503",
        ),
    ],
)
async def test_a_failed_back_fill_leaves_the_channel_cold_and_stops_recording_it(
    kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch, failure: Exception
) -> None:
    bot, channel = kioku.bot, kioku.env.channel
    windows = bot.memory.windows
    assert not windows.is_primed(channel.id)
    calls: list[int] = []

    async def failing_logs_from(channel_id: int, *args: Any, **kwargs: Any) -> Any:
        calls.append(int(channel_id))
        raise failure

    monkeypatch.setattr(bot.http, "logs_from", failing_logs_from)
    await backfill(bot, channel)  # the turn goes on
    windows.edit(channel.id, 7, "Alice's edited words")  # would be kept for a fill forever
    windows.forget_author(1234)
    assert windows._fills == {}
    assert not windows.is_primed(channel.id), "still cold: Discord may answer next time"
    await backfill(bot, channel)
    assert calls == [channel.id, channel.id]


@pytest.mark.parametrize(
    "refusal",
    [
        pytest.param(discord.Forbidden(FakeResponse(403, "Forbidden"), "refused"), id="403"),
        pytest.param(discord.NotFound(FakeResponse(404, "Not Found"), "refused"), id="404"),
    ],
)
async def test_a_refused_history_read_is_final(
    kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch, refusal: discord.HTTPException
) -> None:
    bot, channel = kioku.bot, kioku.env.channel
    calls: list[int] = []

    async def refused_logs_from(channel_id: int, *args: Any, **kwargs: Any) -> Any:
        calls.append(int(channel_id))
        raise refusal

    monkeypatch.setattr(bot.http, "logs_from", refused_logs_from)
    await backfill(bot, channel)
    assert bot.memory.windows.is_primed(channel.id), "asking again would be refused again"
    await backfill(bot, channel)
    assert calls == [channel.id]
