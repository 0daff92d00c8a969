"""/stm settings on the real bot: the server's settings and its always-on channels."""

from __future__ import annotations

import asyncio

import discord
import pytest

from bot.cogs.stm.answers import ALWAYS_ON_SHOWN
from bot.db.models import GuildSettings
from tests.helpers.bot import KiokuHarness
from tests.helpers.discord_payloads import channel_payload as _channel_payload
from tests.helpers.stm_commands import DISCORD_CONTENT_LIMIT, events


async def test_stm_settings_changes_and_shows_the_settings(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    changed = await kioku.interactions.slash(
        "stm settings",
        {"enabled": False, "cadence": 7, "render_mode": "supersede", "raw_messages": 3},
        user=admin,
    )
    assert changed.ephemeral
    assert changed.content is not None and changed.content.startswith("**Settings updated.**")
    config = await kioku.bot.memory.guild_config(kioku.env.guild.id)
    assert (
        config.stm_enabled,
        config.refresh_cadence,
        config.render_mode,
        config.crude_message_count,
    ) == (False, 7, "supersede", 3)

    shown = await kioku.interactions.slash("stm settings", user=admin)
    assert shown.content == (
        "**Short-term memory settings of this server**\n"
        "Enabled: **no**\n"
        "Refresh cadence: every **7** bot turns\n"
        "Render mode: **supersede: distilled text only, raw messages when there is none**\n"
        "Raw messages from other channels: **3**\n"
        "Categories: none (one summary per channel)\n"
        "Always-on channels: none"
    )
    assert [e.event for e in await events(kioku)] == ["settings"]


async def test_always_on_in_a_channel_the_bot_cannot_read_says_it_will_not_answer(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    # Discord delivers the command from a channel the bot cannot see, but none of the
    # channel's messages: marked always-on, it would stay silent with no word why.
    hidden = await kioku.env.create_text_channel(
        "staff", private=True, allow=[admin], include_bot=False
    )
    assert not hidden.permissions_for(kioku.env.guild.me).view_channel

    marked = await kioku.interactions.slash(
        "stm settings", {"always_on": True}, user=admin, channel=hidden
    )

    config = await kioku.bot.memory.guild_config(kioku.env.guild.id)
    assert config.always_on_channels == frozenset({hidden.id})  # done as asked
    text = "\n".join(marked.texts())
    assert text.startswith("**Settings updated.**")
    assert text.endswith(
        "\nI can't read or send messages in this channel, so I won't answer here until "
        "I'm given **View Channel** and **Send Messages**."
    )
    elsewhere = await kioku.interactions.slash("stm settings", {"always_on": True}, user=admin)
    assert "I can't read or send messages" not in "\n".join(elsewhere.texts())


async def test_stm_settings_with_many_always_on_channels_fits_in_one_message(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    # 90 channels named in full are over Discord's 2,000 characters: Discord refuses the
    # answer and the admin gets "Something went wrong" although the change was applied.
    env = kioku.env
    channels = [await env.create_text_channel(f"help-{i}") for i in range(90)]
    for channel in channels:
        await kioku.bot.memory.set_always_on(env.guild.id, channel.id, True, admin.id)

    result = await kioku.interactions.slash(
        "stm settings", {"always_on": True}, user=admin, channel=channels[-1]
    )

    [text] = result.texts()
    assert len(text) <= DISCORD_CONTENT_LIMIT
    line = text.splitlines()[-1]
    # The channel the admin is in comes first, then the oldest.
    named = [channels[-1], *channels[: ALWAYS_ON_SHOWN - 1]]
    assert line == (
        "Always-on channels: "
        + ", ".join(c.mention for c in named)
        + f" and {90 - ALWAYS_ON_SHOWN} more"
    )


async def test_a_deleted_always_on_channel_or_thread_is_unmarked(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    env = kioku.env
    doomed = await env.create_text_channel("doomed")
    kept = await env.create_text_channel("kept")
    doomed_thread = await env.create_thread(doomed, "in doomed")
    thread = await env.create_thread(kept, "thread")
    for place in (doomed, doomed_thread, kept, thread):
        await kioku.bot.memory.set_always_on(env.guild.id, place.id, True, admin.id)

    await env.run_parser(env.state.parse_channel_delete, _channel_payload(doomed))
    thread_gone = {
        "id": str(thread.id),
        "guild_id": str(env.guild.id),
        "parent_id": str(kept.id),
        "type": thread.type.value,
    }
    await env.run_parser(env.state.parse_thread_delete, thread_gone)

    # The channel's thread went with it.
    config = await kioku.bot.memory.guild_config(env.guild.id)
    assert config.always_on_channels == {kept.id}
    async with kioku.database.sessions() as session:
        stored = await session.get(GuildSettings, env.guild.id)
    assert stored is not None and stored.always_on_channel_ids == [kept.id]
    last = (await events(kioku))[-1]
    assert (last.event, last.actor_user_id) == ("settings", kioku.bot.user.id)


async def test_stm_settings_leaves_out_channels_the_server_no_longer_shows(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    # Deleted while the bot was away, or an archived thread Discord does not tell of.
    env = kioku.env
    unknown = 4242
    await kioku.bot.memory.set_always_on(env.guild.id, unknown, True, admin.id)
    await kioku.bot.memory.set_always_on(env.guild.id, env.channel.id, True, admin.id)

    shown = await kioku.interactions.slash("stm settings", user=admin)

    assert shown.content is not None
    assert shown.content.splitlines()[-1] == (
        f"Always-on channels: {env.channel.mention} (and 1 archived thread or deleted channel)"
    )


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("cadence", 0, "**cadence** must be between 1 and 100 (you gave `0`)."),
        ("cadence", 101, "**cadence** must be between 1 and 100 (you gave `101`)."),
        ("raw_messages", 11, "**raw_messages** must be between 1 and 10 (you gave `11`)."),
    ],
)
async def test_stm_settings_out_of_range_is_refused_by_the_transformer(
    kioku: KiokuHarness, admin: discord.Member, option: str, value: int, expected: str
) -> None:
    result = await kioku.interactions.slash("stm settings", {option: value}, user=admin)
    assert result.ephemeral
    assert result.content == expected
    config = await kioku.bot.memory.guild_config(kioku.env.guild.id)
    assert (config.refresh_cadence, config.crude_message_count) == (5, 6)
    assert await events(kioku) == []


async def test_two_always_on_toggles_at_once_both_stick(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    other = await kioku.env.create_text_channel("other")
    await asyncio.gather(
        kioku.interactions.slash("stm settings", {"always_on": True}, user=admin),
        kioku.interactions.slash("stm settings", {"always_on": True}, user=admin, channel=other),
    )
    config = await kioku.bot.memory.guild_config(kioku.env.guild.id)
    assert config.always_on_channels == frozenset({kioku.env.channel.id, other.id})
