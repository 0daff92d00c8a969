"""Long-term memory through the bot: "remember that…", recall days later, guild scoping,
``/memories forget``, redaction."""

from __future__ import annotations

import discord
from sqlalchemy import select

from bot.conversation.tools.longterm import NO_FULL_MATCH
from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.db.engine import Database
from bot.db.models import LongTermMemory
from bot.memory.longterm.facts import LongTermService
from bot.vocabulary.model import Provenance
from tests.helpers.bot import KiokuHarness
from tests.helpers.chat_world import KiokuStarter
from tests.helpers.fake_llm import ScriptedLLM

TOKEN = "MTA4NzY1NDMyMTA5ODc2NTQzMg.GhJkLm.abcdefghijklmnopqrstuvwxyz0123456789AB"


def prompt_text(llm: ScriptedLLM, i: int = -1) -> str:
    return "\n".join(str(m.get("content") or "") for m in llm.messages(i))


async def facts(db: Database) -> list[LongTermMemory]:
    async with db.sessions() as session:
        return list(await session.scalars(select(LongTermMemory).order_by(LongTermMemory.id)))


async def join_second_guild(kioku: KiokuHarness, member: discord.Member) -> discord.Member:
    guild = kioku.env.guilds[1]
    payload = {
        "guild_id": str(guild.id),
        "user": {
            "id": str(member.id),
            "username": member.name,
            "discriminator": "0",
            "global_name": None,
            "avatar": None,
            "bot": False,
        },
        "roles": [],
        "joined_at": "2026-01-01T00:00:00+00:00",
        "deaf": False,
        "mute": False,
        "flags": 0,
        "pending": False,
        "nick": None,
    }
    await kioku.env.run_parser(kioku.env.state.parse_guild_member_add, payload)
    joined = guild.get_member(member.id)
    assert joined is not None
    return joined


async def assert_kept_by_the_long_term_tool(kioku: KiokuHarness, db: Database, fact: str) -> None:
    """The first request offered the long-term tools and not the STM one, and ``fact``
    is all that was stored."""
    offered = set(kioku.llm.tool_names(0))
    assert "remember" in offered, offered
    assert STM_TOOL_NAME not in offered
    assert [f.content for f in await facts(db)] == [fact]


async def test_remember_recall_scope_and_forget_through_the_bot(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with kioku_with(guilds=2) as kioku:
        env = kioku.env
        alice = env.members[0]
        home, elsewhere = env.channels[0], env.channels[1]
        assert home.guild != elsewhere.guild
        alice_elsewhere = await join_second_guild(kioku, alice)

        llm.reply_tool_calls([("remember", {"fact": "The user's cat is called Miso."})])
        llm.reply_text("I'll remember Miso.")
        trigger = await env.send(
            "remember that my cat is called Miso", channel=home, author=alice, mention_bot=True
        )
        offered = set(llm.tool_names(0))
        assert {"remember", "recall", "forget_memory"} <= offered
        assert STM_TOOL_NAME not in offered
        (fact,) = await facts(db)
        assert fact.content == "The user's cat is called Miso."
        assert (fact.user_id, fact.guild_id) == (alice.id, home.guild.id)
        assert (fact.origin, fact.origin_detail) == ("model_tool", "test-model")
        assert fact.source_message_id == trigger.id

        kioku.clock.advance(days=3)
        llm.reply_text("Your cat is Miso.")
        await env.send("what is my cat called?", channel=home, author=alice, mention_bot=True)
        assert "The user's cat is called Miso." in prompt_text(llm)

        llm.reply_text("I don't know.")
        await env.send(
            "what is my cat called?", channel=elsewhere, author=alice_elsewhere, mention_bot=True
        )
        assert "Miso" not in prompt_text(llm)

        result = await kioku.interactions.slash(
            "memories forget", {"id": fact.id}, user=alice, channel=home
        )
        assert result.ephemeral and not result.command_failed
        assert await facts(db) == []
        llm.reply_text("No idea.")
        await env.send("what is my cat called?", channel=home, author=alice, mention_bot=True)
        # The recalled fact is gone (the channel's own chat history still mentions Miso).
        assert "The user's cat is called Miso." not in prompt_text(llm)


async def test_a_remember_call_beside_the_answer_is_still_answered_again(
    kioku: KiokuHarness, db: Database
) -> None:
    # Unlike a short-term memory note, the model must read whether the fact was stored
    # (a refusal, a duplicate) before it says so: a second request follows.
    kioku.llm.reply_tool_calls(
        [("remember", {"fact": "The user's cat is called Miso."})],
        content="I'll remember that your cat is called Miso.",
    )
    kioku.llm.reply_text("Saved.")
    await kioku.env.send("remember that my cat is called Miso", mention_bot=True)
    assert len(kioku.llm.requests) == 2 and kioku.llm.pending == 0
    results = [m["content"] for m in kioku.llm.messages(1) if m.get("role") == "tool"]
    assert len(results) == 1 and results[0].startswith("saved")
    assert [f.content for f in await facts(db)] == ["The user's cat is called Miso."]
    assert kioku.env.last_sent().content == "I'll remember that your cat is called Miso.\n\nSaved."


async def test_a_secret_in_a_fact_is_stored_redacted(kioku: KiokuHarness, db: Database) -> None:
    kioku.llm.reply_tool_calls([("remember", {"fact": f"The user's bot token is {TOKEN}"})])
    kioku.llm.reply_text("Stored.")
    await kioku.env.send(f"remember that my token is {TOKEN}", mention_bot=True)
    (fact,) = await facts(db)
    assert TOKEN not in fact.content
    assert "[REDACTED:discord_token]" in fact.content


async def test_remember_that_after_the_bots_role_mention_offers_long_term_tools(
    kioku: KiokuHarness, db: Database
) -> None:
    # Discord's mention picker offers the bot's managed role next to the bot, and the chat
    # cog answers it: "remember that…" after it reserves the turn as after "<@bot>".
    env = kioku.env
    role = env.guild.self_role
    assert role is not None and role.is_bot_managed()
    kioku.llm.reply_tool_calls([("remember", {"fact": "The user's cat is called Miso."})])
    kioku.llm.reply_text("Noted.")
    await env.send(f"<@&{role.id}> please remember that my cat is called Miso")

    await assert_kept_by_the_long_term_tool(kioku, db, "The user's cat is called Miso.")


async def test_please_remember_a_past_event_offers_the_long_term_tools(
    kioku: KiokuHarness, db: Database
) -> None:
    # "please" asks to keep it, though "remember that … got married" reads like a memory.
    kioku.llm.reply_tool_calls([("remember", {"fact": "The user married Tom in 2025."})])
    kioku.llm.reply_text("Noted.")
    await kioku.env.send("please remember that Tom and I got married last year", mention_bot=True)

    await assert_kept_by_the_long_term_tool(kioku, db, "The user married Tom in 2025.")


async def test_a_struck_through_request_does_not_offer_the_long_term_tools(
    kioku: KiokuHarness, db: Database
) -> None:
    kioku.llm.reply_text("Ha, noted that you're kidding.")
    await kioku.env.send("~~remember that I'm vegan~~ jk", mention_bot=True)

    assert kioku.llm.tool_names(0) == [STM_TOOL_NAME]
    assert await facts(db) == []


async def test_without_an_explicit_request_the_model_cannot_remember_or_forget(
    kioku: KiokuHarness, db: Database
) -> None:
    # Facts change only when the user asks: a call the model forces anyway (prompted, say,
    # by another member's text) is answered as an unknown tool and stores nothing.
    kioku.llm.reply_tool_calls([("remember", {"fact": "The user likes tea."})])
    kioku.llm.reply_tool_calls([("forget_memory", {"id": 1})])
    kioku.llm.reply_text("What a nice day.")
    await kioku.env.send("I like tea, what a nice day", mention_bot=True)

    assert kioku.llm.tool_names(0) == [STM_TOOL_NAME]
    results = [str(m["content"]) for m in kioku.llm.messages(-1) if m.get("role") == "tool"]
    assert len(results) == 2
    assert all(r.startswith('error: unknown tool "') for r in results), results
    assert await facts(db) == []
    assert kioku.env.last_sent().content == "What a nice day."


async def test_an_opted_in_dm_sees_a_fact_another_process_just_stored(
    kioku: KiokuHarness, db: Database
) -> None:
    # DMs are served by shard 0's process; the fact is made in a server another process
    # serves, so this one never hears of it: its "no facts" shortcut must not hide it.
    env, llm = kioku.env, kioku.llm
    member = env.member
    await kioku.bot.memory.set_cross_context_opt_in(member.id, True)
    dm = env.dm_channel(member)
    llm.reply_text("nothing yet")
    await env.send("what do you know about my cat?", channel=dm, author=member)
    assert "Miso" not in prompt_text(llm)

    elsewhere = LongTermService(db.sessions, kioku.bot.settings, kioku.clock)
    await elsewhere.remember(
        member.id,
        env.guild.id,
        "The user's cat is called Miso.",
        Provenance("model_tool", "test-model", member.id, None),
        channel_id=env.channel.id,
    )
    llm.reply_text("Miso!")
    await env.send("and now?", channel=dm, author=member)
    assert "The user's cat is called Miso." in prompt_text(llm)


def tool_results(llm: ScriptedLLM, i: int = -1) -> list[str]:
    return [str(m["content"]) for m in llm.messages(i) if m.get("role") == "tool"]


async def test_forgetting_by_query_in_public_neither_finds_nor_names_a_private_fact(
    kioku: KiokuHarness, db: Database
) -> None:
    env, llm = kioku.env, kioku.llm
    member = env.member
    private = await env.create_text_channel("therapy", private=True, allow=[member])
    llm.reply_tool_calls([("remember", {"fact": "My therapist is Dr Kowalski."})])
    llm.reply_text("Noted.")
    await env.send(
        "remember that my therapist is Dr Kowalski",
        channel=private,
        author=member,
        mention_bot=True,
    )
    assert len(await facts(db)) == 1

    llm.reply_tool_calls([("forget_memory", {"query": "therapist"})]).reply_text("ok")
    await env.send("forget that my therapist thing", author=member, mention_bot=True)

    (result,) = tool_results(llm)
    assert result == NO_FULL_MATCH
    assert "Kowalski" not in "\n".join(str(m.get("content")) for m in llm.messages(-1))
    assert len(await facts(db)) == 1  # still there, to be forgotten where it was said


async def test_forgetting_a_dm_fact_by_id_in_a_server_does_not_repeat_it_there(
    kioku: KiokuHarness, db: Database
) -> None:
    env, llm = kioku.env, kioku.llm
    member = env.member
    llm.reply_tool_calls([("remember", {"fact": "I am secretly job hunting."})])
    llm.reply_text("Noted.")
    await env.send(
        "remember that I am secretly job hunting", channel=env.dm_channel(member), author=member
    )
    (fact,) = await facts(db)

    llm.reply_tool_calls([("forget_memory", {"fact_id": fact.id})]).reply_text("done")
    await env.send(f"forget memory #{fact.id} please", author=member, mention_bot=True)

    (result,) = tool_results(llm)
    assert result == f"deleted #{fact.id} (saved elsewhere; its text is not shown here)"
    assert await facts(db) == []


# ------------------------------------------- facts said where Discord shows nothing now


async def remember_in(kioku: KiokuHarness, channel: discord.abc.Messageable, fact: str) -> None:
    kioku.llm.reply_tool_calls([("remember", {"fact": fact})])
    kioku.llm.reply_text("Noted.")
    await kioku.env.send(f"remember that {fact}", channel=channel, mention_bot=True)


async def archive(kioku: KiokuHarness, thread: discord.Thread) -> None:
    """Discord archives an idle thread; discord.py drops it from the guild's cache, as it
    does for every archived thread after a restart."""
    env = kioku.env
    payload = {
        "id": str(thread.id),
        "guild_id": str(env.guild.id),
        "parent_id": str(thread.parent_id),
        "owner_id": str(thread.owner_id),
        "name": thread.name,
        "type": thread.type.value,
        "thread_metadata": {
            "archived": True,
            "auto_archive_duration": 1440,
            "archive_timestamp": "2026-01-02T00:00:00+00:00",
            "locked": False,
        },
    }
    await env.run_parser(env.state.parse_thread_update, payload)
    assert env.guild.get_thread(thread.id) is None


async def delete_channel(kioku: KiokuHarness, channel: discord.TextChannel) -> None:
    env = kioku.env
    await env.run_parser(
        env.state.parse_channel_delete,
        {"id": str(channel.id), "guild_id": str(env.guild.id), "type": 0, "name": channel.name},
    )
    assert env.guild.get_channel(channel.id) is None


async def recalled(kioku: KiokuHarness, channel: discord.abc.Messageable | None = None) -> str:
    """The prompt of a turn in ``channel`` (default: the first channel)."""
    kioku.llm.reply_text("Something vegan.")
    in_dm = isinstance(channel, discord.DMChannel)
    await kioku.env.send(
        "what should I cook tonight? I'm vegan-curious", channel=channel, mention_bot=not in_dm
    )
    return prompt_text(kioku.llm)


VEGAN = "The user is vegan."


async def test_a_fact_said_in_a_thread_is_still_recalled_after_the_thread_archives(
    kioku: KiokuHarness, db: Database
) -> None:
    env = kioku.env
    thread = await env.create_thread(env.channel, "chat")
    await remember_in(kioku, thread, VEGAN)
    (fact,) = await facts(db)
    assert (fact.channel_id, fact.parent_channel_id, fact.private_thread) == (
        thread.id,
        env.channel.id,
        False,
    )
    assert VEGAN in await recalled(kioku)  # in the parent channel

    await archive(kioku, thread)
    assert VEGAN in await recalled(kioku), "the long-term fact was lost"


async def test_a_fact_said_in_a_private_thread_stays_out_of_its_parent_once_archived(
    kioku: KiokuHarness, db: Database
) -> None:
    env = kioku.env
    thread = await env.create_thread(env.channel, "just us", private=True)
    await remember_in(kioku, thread, VEGAN)
    (fact,) = await facts(db)
    assert fact.private_thread
    assert VEGAN not in await recalled(kioku)

    await archive(kioku, thread)
    assert VEGAN not in await recalled(kioku)


async def test_an_opted_in_dm_recalls_a_fact_from_an_archived_public_thread(
    kioku: KiokuHarness,
) -> None:
    env = kioku.env
    await kioku.bot.memory.set_cross_context_opt_in(env.member.id, True)
    thread = await env.create_thread(env.channel, "chat")
    await remember_in(kioku, thread, VEGAN)
    await archive(kioku, thread)
    assert VEGAN in await recalled(kioku, env.dm_channel(env.member))


async def test_a_fact_said_in_a_deleted_channel_everyone_could_read_is_recalled_in_its_server(
    kioku: KiokuHarness,
) -> None:
    env = kioku.env
    scratch = await env.create_text_channel("bot-scratch")
    await remember_in(kioku, scratch, VEGAN)
    await delete_channel(kioku, scratch)
    assert VEGAN in await recalled(kioku), "the long-term fact was lost"


async def test_a_fact_said_in_a_deleted_private_channel_is_not_recalled(
    kioku: KiokuHarness, db: Database
) -> None:
    # Nobody can read the channel any more, and not every member could before: no
    # channel of the server is known to be as private as it was.
    env = kioku.env
    staff = await env.create_text_channel("staff", private=True, allow=[env.member])
    await remember_in(kioku, staff, VEGAN)
    (fact,) = await facts(db)
    assert not fact.readable_by_everyone
    await delete_channel(kioku, staff)
    assert VEGAN not in await recalled(kioku)
