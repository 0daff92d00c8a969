"""What makes the bot answer in a channel, and what its answer looks like there."""

from __future__ import annotations

import asyncio

import pytest

from tests.helpers.bot import KiokuHarness
from tests.helpers.builders import settings_changed_elsewhere
from tests.helpers.chat_world import prompt_text


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


async def test_a_mention_logs_no_error(
    kioku: KiokuHarness, caplog: pytest.LogCaptureFixture
) -> None:
    kioku.llm.reply_text("hi")
    with caplog.at_level("ERROR"):
        await kioku.env.send("hi there", mention_bot=True)
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []


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
