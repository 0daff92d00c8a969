"""Access control and the server's persona and model in the chat pipeline (dpytest
messages, the real ``openai`` client against the scripted server, embedded PostgreSQL):
a refused message gets no reply and costs no model call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import discord
import pytest

from bot.cogs.stm.answers import SUMMARY_NOT_ALLOWED
from bot.conversation.server_profile import SERVER_PERSONA_HEADING
from tests.helpers.bot import KiokuHarness
from tests.helpers.builders import settings_changed_elsewhere
from tests.helpers.chat_world import KiokuStarter
from tests.helpers.fake_llm import ScriptedLLM


@pytest.fixture
async def kioku(kioku_with: KiokuStarter) -> AsyncIterator[KiokuHarness]:
    async with kioku_with(settings={"servers": {"allowed_models": ["big-model"]}}) as harness:
        yield harness


async def admin_runs(
    kioku: KiokuHarness, command: str, options: dict[str, Any] | None = None
) -> None:
    admin = await kioku.env.create_member("admin", kind="admin")
    result = await kioku.interactions.slash(command, options or {}, user=admin)
    assert result.ephemeral and not result.texts()[0].startswith(("You need", "Something"))


def refused_count(kioku: KiokuHarness) -> float | None:
    return kioku.bot.metrics.registry.get_sample_value(
        "kioku_turns_total", {"outcome": "not_allowed"}
    )


def system_prompt(llm: ScriptedLLM) -> str:
    return str(llm.messages()[0]["content"])


async def test_a_blocked_member_gets_no_reply_and_no_model_call(kioku: KiokuHarness) -> None:
    env, llm = kioku.env, kioku.llm
    blocked = await env.create_member("spammer")
    await admin_runs(kioku, "kioku access block", {"user": blocked})
    sent_before = len(env.sent)
    await env.send("spend the budget", author=blocked, mention_bot=True)
    assert llm.requests == []
    assert len(env.sent) == sent_before
    assert refused_count(kioku) == 1
    # Still part of the channel's talk: the next member's turn sees it.
    llm.reply_text("Hi!")
    await env.send("hello", mention_bot=True)
    assert env.last_sent().content == "Hi!"
    assert "spend the budget" in "\n".join(str(m.get("content")) for m in llm.messages())


async def test_a_blocked_role_beats_an_allowed_member(kioku: KiokuHarness) -> None:
    env = kioku.env
    muted = await env.create_role("Muted", discord.Permissions.none())
    member = await env.create_member("muted-one", roles=[muted])
    await admin_runs(kioku, "kioku access allow", {"user": member})
    await admin_runs(kioku, "kioku access block", {"role": muted})
    await env.send("hello?", author=member, mention_bot=True)
    assert kioku.llm.requests == []
    # The role taken away, the member is answered again.
    await env.set_roles(member, [])
    kioku.llm.reply_text("Welcome back")
    await env.send("hello again", author=env.guild.get_member(member.id), mention_bot=True)
    assert env.last_sent().content == "Welcome back"


async def test_with_an_allow_list_only_its_roles_are_answered(kioku: KiokuHarness) -> None:
    env, llm = kioku.env, kioku.llm
    regulars = await env.create_role("Regulars", discord.Permissions.none())
    regular = await env.create_member("regular", roles=[regulars])
    await admin_runs(kioku, "kioku access allow", {"role": regulars})
    await env.send("may I?", author=env.member, mention_bot=True)
    assert llm.requests == []
    llm.reply_text("Of course")
    await env.send("may I?", author=regular, mention_bot=True)
    assert len(llm.requests) == 1 and env.last_sent().content == "Of course"


async def test_lists_read_from_the_database_refuse_too(kioku: KiokuHarness) -> None:
    # Another process changed the lists, this one has no cached copy: the turn's queue
    # reads them before the model is asked, for mentions and always-on chatter alike.
    env, memory = kioku.env, kioku.bot.memory
    blocked = await env.create_member("spammer")
    await memory.update_guild_settings(
        env.guild.id, 1, blocked_user_ids=[blocked.id], always_on=(env.channel.id, True)
    )
    settings_changed_elsewhere(memory, env.guild.id)
    await env.send("mention", author=blocked, mention_bot=True)
    settings_changed_elsewhere(memory, env.guild.id)
    await env.send("chatter in an always-on channel", author=blocked)
    assert kioku.llm.requests == []
    assert refused_count(kioku) == 2


async def test_owners_are_always_answered(kioku: KiokuHarness) -> None:
    env, llm = kioku.env, kioku.llm
    operator = await env.create_member("operator")
    await admin_runs(kioku, "kioku access block", {"user": operator})
    regulars = await env.create_role("Regulars", discord.Permissions.none())
    await admin_runs(kioku, "kioku access allow", {"role": regulars})
    # Without owner_ids the application's owner is asked of Discord: not this member.
    await env.send("let me in", author=operator, mention_bot=True)
    assert llm.requests == []
    assert kioku.bot.owner_id is not None and kioku.bot.owner_id != operator.id
    kioku.bot.owner_ids, kioku.bot.owner_id = {operator.id}, None  # as owner_ids sets it
    llm.reply_text("Yes, boss")
    await env.send("let me in", author=operator, mention_bot=True)
    assert env.last_sent().content == "Yes, boss"


async def test_dms_off_get_no_reply_except_for_owners(
    llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with kioku_with(settings={"access": {"direct_messages": False}}) as kioku:
        env = kioku.env
        member, operator = env.member, await env.create_member("operator")
        await env.send("hello", channel=env.dm_channel(member), author=member)
        assert llm.requests == [] and env.sent == []
        kioku.bot.owner_ids, kioku.bot.owner_id = {operator.id}, None  # as owner_ids sets it
        llm.reply_text("Hi, owner")
        await env.send("hello", channel=env.dm_channel(operator), author=operator)
        assert env.last_sent().content == "Hi, owner"
        # Servers are not DMs: a mention there is answered as before.
        llm.reply_text("Hi, server")
        await env.send("hello", mention_bot=True)
        assert env.last_sent().content == "Hi, server"


async def test_the_servers_persona_and_model_are_used_for_its_turns_not_dms(
    kioku: KiokuHarness,
) -> None:
    env, llm = kioku.env, kioku.llm
    await admin_runs(kioku, "kioku persona set", {"text": "Talk like a pirate to {user_name}."})
    await admin_runs(kioku, "kioku model set", {"name": "big-model"})
    llm.reply_text("Arr").reply_text("Hello")
    await env.send("hi", mention_bot=True)
    assert llm.request(0)["model"] == "big-model"
    prompt = str(llm.messages(0)[0]["content"])
    assert f"{SERVER_PERSONA_HEADING}\nTalk like a pirate to {env.member.display_name}." in prompt
    assert prompt.index(SERVER_PERSONA_HEADING) > 0  # after the operator's persona
    await env.send("hi", channel=env.dm_channel(env.member), author=env.member)
    assert llm.request(1)["model"] == "test-model"
    assert SERVER_PERSONA_HEADING not in str(llm.messages(1)[0]["content"])


async def test_the_summarizer_uses_the_servers_model(kioku: KiokuHarness) -> None:
    env, llm = kioku.env, kioku.llm
    await admin_runs(kioku, "kioku model set", {"name": "big-model"})
    for text in ("the launch is friday", "alice writes the docs"):
        await env.send(text)
    llm.reply_text("Launch Friday; Alice writes the docs.")
    moderator = await env.create_member("mod", kind="moderator")
    result = await kioku.interactions.slash("stm summarize", {}, user=moderator)
    assert result.texts()[-1].startswith("Summary updated")
    assert [r["model"] for r in llm.requests] == ["big-model"]


async def test_a_blocked_moderators_summarize_makes_no_model_call(kioku: KiokuHarness) -> None:
    env, llm = kioku.env, kioku.llm
    moderator = await env.create_member("mod", kind="moderator")
    await admin_runs(kioku, "kioku access block", {"user": moderator})
    await env.send("some talk worth a summary")

    result = await kioku.interactions.slash("stm summarize", user=moderator)

    assert llm.requests == []
    assert result.texts()[-1] == SUMMARY_NOT_ALLOWED


async def test_summarize_in_a_dm_with_dms_off_makes_no_model_call(
    kioku_with: KiokuStarter,
) -> None:
    async with kioku_with(settings={"access": {"direct_messages": False}}) as kioku:
        member = kioku.env.member
        await kioku.env.send("hello", channel=kioku.env.dm_channel(member), author=member)
        result = await kioku.interactions.slash("stm summarize", user=member, dm=True)
        assert kioku.llm.requests == []
        assert result.texts()[-1] == SUMMARY_NOT_ALLOWED


async def test_a_member_blocked_in_a_server_is_not_answered_in_dms(kioku: KiokuHarness) -> None:
    env, llm = kioku.env, kioku.llm
    blocked = await env.create_member("spammer")
    await admin_runs(kioku, "kioku access block", {"user": blocked})

    await env.send("hi in private", channel=env.dm_channel(blocked), author=blocked)

    assert llm.requests == []
    # Another member's DM is answered as ever.
    llm.reply_text("Hello!")
    await env.send("hi", channel=env.dm_channel(env.member), author=env.member)
    assert env.last_sent().content == "Hello!"
