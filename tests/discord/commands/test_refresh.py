"""/refresh on the real bot: who may wipe a channel's memory, what goes, the marker it
posts, and a wipe queued while the database is down."""

from __future__ import annotations

import discord

from bot.cogs.refresh import REFRESH_MARKER_PREFIX
from bot.vocabulary.model import Provenance, ScopeKey
from tests.helpers.bot import KiokuHarness
from tests.helpers.faults import back
from tests.helpers.stm_commands import SUMMARY, break_database, events, markers, seed, stm_rows


async def test_refresh_by_a_member_is_refused_and_deletes_nothing(kioku: KiokuHarness) -> None:
    await seed(kioku)
    result = await kioku.interactions.slash("refresh", user=kioku.env.member)
    assert result.ephemeral
    assert result.content is not None and "**Manage Messages**" in result.content
    assert [row.summary for row in await stm_rows(kioku)] == [SUMMARY, SUMMARY]
    entry = await kioku.bot.memory.entry(ScopeKey.server(kioku.env.guild.id, kioku.env.channel.id))
    assert entry.summary == SUMMARY
    assert markers(kioku, kioku.env.channel) == []


async def test_refresh_by_a_moderator_wipes_cache_and_rows_and_posts_the_marker(
    kioku: KiokuHarness, moderator: discord.Member
) -> None:
    other = await kioku.env.create_text_channel("other")
    await seed(kioku)
    await seed(kioku, channel=other)
    key = ScopeKey.server(kioku.env.guild.id, kioku.env.channel.id)
    assert kioku.bot.memory.cache.get(key) is not None

    result = await kioku.interactions.slash("refresh", user=moderator)

    assert result.ephemeral
    assert result.texts()[-1] == (
        "Memory of this channel wiped: 2 stored memories and 2 cached memories removed."
    )
    assert await stm_rows(kioku, kioku.env.channel.id) == []
    assert len(await stm_rows(kioku, other.id)) == 2  # another channel is untouched
    assert kioku.bot.memory.cache.get(key) is None
    assert not (await kioku.bot.memory.entry(key)).has_content  # not hydrated back
    [marker] = [s for s in kioku.env.sent_to(kioku.env.channel)]
    assert marker.content.startswith(REFRESH_MARKER_PREFIX)
    assert moderator.mention in marker.content
    assert marker.allowed_mentions is not None and marker.allowed_mentions["parse"] == []
    assert not marker.message.flags.ephemeral
    [refresh] = [e for e in await events(kioku) if e.event == "refresh"]
    assert (refresh.channel_id, refresh.actor_user_id) == (kioku.env.channel.id, moderator.id)


async def test_refresh_where_the_bot_may_not_post_wipes_and_says_the_marker_is_missing(
    kioku: KiokuHarness, moderator: discord.Member
) -> None:
    quiet = await kioku.env.create_text_channel("announcements")
    await kioku.env.set_overwrite(
        quiet, kioku.env.guild.me, discord.PermissionOverwrite(send_messages=False)
    )
    await seed(kioku, channel=quiet)

    result = await kioku.interactions.slash("refresh", user=moderator, channel=quiet)

    assert result.texts()[-1] == (
        "Memory of this channel wiped: 2 stored memories and 2 cached memories removed.\n"
        "I couldn't post the refresh marker in this channel, so older messages may be read "
        "back after a restart. Check that I can send messages here."
    )
    assert await stm_rows(kioku, quiet.id) == []
    assert kioku.env.sent_to(quiet) == []


async def test_refresh_in_a_dm_wipes_the_users_dm_memory(kioku: KiokuHarness) -> None:
    user = kioku.env.member
    dm = kioku.env.dm_channel(user)
    await seed(kioku, channel=dm, dm=True, author=user)
    await seed(kioku)  # a server memory the DM refresh must not touch
    assert len(await stm_rows(kioku, dm.id)) == 1

    result = await kioku.interactions.slash("refresh", user=user, dm=True)

    assert result.ephemeral
    assert result.texts()[-1].startswith("Memory of this channel wiped: 1 stored memory")
    assert await stm_rows(kioku, dm.id) == []
    assert len(await stm_rows(kioku, kioku.env.channel.id)) == 2
    assert len(markers(kioku, dm)) == 1


async def test_refresh_after_stm_show_counts_no_cached_memory(
    kioku: KiokuHarness, moderator: discord.Member
) -> None:
    shown = await kioku.interactions.slash("stm show", user=moderator)
    assert (shown.content or "").startswith("I don't remember anything")
    key = ScopeKey.server(kioku.env.guild.id, kioku.env.channel.id)
    assert kioku.bot.memory.cache.get(key) is not None  # the empty entry /stm show read

    wiped = await kioku.interactions.slash("refresh", user=moderator)

    assert wiped.texts()[-1] == (
        "Memory of this channel wiped: 0 stored memories and 0 cached memories removed."
    )
    assert kioku.bot.memory.cache.get(key) is None


async def test_the_refresh_marker_promises_only_the_channels_conversation_is_forgotten(
    kioku: KiokuHarness, moderator: discord.Member
) -> None:
    # Long-term memories said above the marker are still recalled: it must not claim
    # that nothing above it is remembered.
    env = kioku.env
    await kioku.bot.longterm.remember(
        env.member.id,
        env.guild.id,
        "My cat is called Miso",
        Provenance("model_tool"),
        channel_id=env.channel.id,
    )
    await kioku.interactions.slash("refresh", user=moderator)
    [marker] = markers(kioku, env.channel)
    kioku.llm.reply_text("Miso!")
    await env.send("what is my cat called?", mention_bot=True)

    assert "Miso" in str(kioku.llm.messages(-1)), "long-term memories survive a refresh"
    assert "nothing above this line is part of my memory" not in marker
    assert "conversation starts fresh" in marker
    assert "Long-term memories people asked me to keep stay (see `/memories`)." in marker


async def test_refresh_with_the_database_down_is_spooled_and_says_so(
    kioku: KiokuHarness, moderator: discord.Member
) -> None:
    await seed(kioku)
    break_database(kioku)
    result = await kioku.interactions.slash("refresh", user=moderator)
    assert result.ephemeral
    assert "the stored copy will be deleted as soon as it is back" in result.content
    assert len(markers(kioku, kioku.env.channel)) == 1
    assert kioku.bot.memory.pending_sync == 1
    # When the database is back, the queued deletion happens.
    await back(kioku.bot.memory.sessions)
    await kioku.bot.spool.replay(kioku.bot.memory.sessions)
    assert await stm_rows(kioku) == []
