"""/stm history on the real bot: the server's memory events, in words, without memory
text, and only of channels the admin can read."""

from __future__ import annotations

from datetime import UTC, datetime

import discord

from bot.cogs.stm.history import describe_events
from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.vocabulary.model import AuditEvent
from tests.helpers.bot import KiokuHarness
from tests.helpers.stm_commands import seed


async def test_stm_history_shows_events_without_memory_text(
    kioku: KiokuHarness, admin: discord.Member, moderator: discord.Member
) -> None:
    secret_text = "the-launch-codeword-is-pelican"
    await seed(kioku, author=admin, summary=secret_text)
    await kioku.interactions.slash("refresh", user=moderator)

    result = await kioku.interactions.slash("stm history", user=admin)

    assert result.ephemeral
    content = result.content
    assert content is not None
    lines = content.splitlines()
    # The write's channel memory and the admin's copy are one line.
    assert lines[0].startswith("**Last 2 memory events**")
    refresh, update = lines[1:]
    channel = kioku.env.channel.mention
    assert refresh.startswith(
        f"• **Wiped (/refresh)** · channel memory and every copy · {channel} · <t:"
    )
    assert refresh.endswith(f"by {moderator.mention}")
    assert update.startswith(
        f"• **Memory updated** by an admin ({admin.mention}) · "
        f"channel memory and {admin.mention}'s copy · {channel} · <t:"
    )
    assert update.endswith(f" · 0 → {len(secret_text)} chars")
    assert "pelican" not in content


async def test_stm_history_shows_a_forget_me_without_naming_the_member(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    member = kioku.env.member
    await seed(kioku, author=member, summary="Sam plans the offsite.")
    asked = await kioku.interactions.slash("forget-me", user=member)
    await kioku.interactions.click(asked, label="Delete my memories", user=member)

    result = await kioku.interactions.slash("stm history", user=admin)

    content = result.texts()[-1]
    # The log keeps every event (append-only), naming the member in none: the deletion
    # says a member's memories of the channel went, and how much; the update they made
    # stays, by nobody.
    [head, forgot, update] = content.splitlines()
    assert head.startswith("**Last 2 memory events**")
    size = len("Sam plans the offsite.")
    channel = kioku.env.channel.mention
    assert forgot.startswith(
        f"• **Forgotten (/forget-me)** · what a member's messages made of it · {channel} · <t:"
    )
    assert forgot.endswith(f" · {2 * size} → 0 chars")
    assert update.startswith(
        f"• **Memory updated** by an admin · channel memory and a member's copy · {channel} · "
    )
    assert update.endswith(f" · 0 → {size} chars")
    assert str(member.id) not in content


async def test_stm_history_names_a_model_update_in_words(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    env = kioku.env
    kioku.llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": "Launch on Friday."})])
    kioku.llm.reply_text("Noted!")
    await env.send("we launch on friday", mention_bot=True)

    result = await kioku.interactions.slash("stm history", user=admin)

    [head, update] = result.texts()[-1].splitlines()
    assert head.startswith("**Last 1 memory event**")
    assert update.startswith(
        f"• **Memory updated** by the model, answering {env.member.mention} · "
        f"channel memory and {env.member.mention}'s copy · {env.channel.mention} · <t:"
    )
    assert update.endswith(" · 0 → 17 chars")
    for code in ("model_tool", " server ", " user ", "**update**"):
        assert code not in update


def test_a_write_whose_two_copies_differ_in_size_shows_both_sizes() -> None:
    at = datetime(2025, 1, 1, tzinfo=UTC)
    common = {"event": "update", "origin": "admin", "actor_user_id": 7, "channel_id": 9}
    server = AuditEvent(
        scope_kind="server", chars_before=10, chars_after=40, created_at=at, **common
    )
    user = AuditEvent(
        scope_kind="user", user_id=7, chars_before=0, chars_after=40, created_at=at, **common
    )
    later = AuditEvent(scope_kind="user", user_id=7, created_at=at.replace(hour=1), **common)

    lines = describe_events([user, server, later])

    assert len(lines) == 2
    assert "channel memory (10 → 40 chars) and <@7>'s copy (0 → 40 chars)" in lines[0]
    assert " · <@7>'s copy · " in lines[1]


async def test_stm_history_without_events_says_so(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    result = await kioku.interactions.slash("stm history", user=admin)
    assert result.content == "No memory events recorded in this server yet."


async def test_stm_history_leaves_out_channels_the_admin_cannot_read(kioku: KiokuHarness) -> None:
    # Manage Server does not open every channel; an event line names the channel, who
    # talked there and when.
    env, llm = kioku.env, kioku.llm
    admin = await env.create_member("admin", kind="admin")
    insider = await env.create_member("insider")
    mods = await env.create_text_channel("mods", private=True, allow=[insider])
    assert not mods.permissions_for(admin).view_channel
    llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": "x" * 42})]).reply_text("ok")
    await env.send("a complaint about the admin", channel=mods, author=insider, mention_bot=True)
    llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": "y" * 7})]).reply_text("ok")
    await env.send("hello", mention_bot=True)  # the public channel
    assert llm.pending == 0

    seen_by_admin = (await kioku.interactions.slash("stm history", user=admin)).content or ""
    seen_by_insider = (await kioku.interactions.slash("stm history", user=insider)).content

    assert str(mods.id) not in seen_by_admin and str(insider.id) not in seen_by_admin
    assert f"<#{env.channel.id}>" in seen_by_admin
    assert seen_by_insider is not None and "Manage Server" in seen_by_insider  # refused


async def test_stm_history_looks_past_a_busy_channel_the_admin_cannot_read(
    kioku: KiokuHarness,
) -> None:
    env, memory = kioku.env, kioku.bot.memory
    admin = await env.create_member("admin", kind="admin")
    insider = await env.create_member("insider")
    mods = await env.create_text_channel("mods", private=True, allow=[insider])
    await seed(kioku, author=admin, summary="public")  # the public channel, first
    for n in range(40):  # then a busy private channel: two events a write
        saved = await memory.admin_edit(
            guild_id=env.guild.id, channel_id=mods.id, actor_user_id=insider.id, summary=f"{n}"
        )
        assert saved.ok

    shown = await kioku.interactions.slash("stm history", user=admin)

    content = "\n".join(shown.texts())
    assert "No memory events recorded" not in content, "events exist: just not in sight"
    assert env.channel.mention in content, "the admin's readable event was left out"
    assert mods.mention not in content and insider.mention not in content


async def test_stm_history_says_when_every_event_is_in_a_channel_the_admin_cannot_read(
    kioku: KiokuHarness,
) -> None:
    env = kioku.env
    admin = await env.create_member("admin", kind="admin")
    insider = await env.create_member("insider")
    mods = await env.create_text_channel("mods", private=True, allow=[insider])
    await seed(kioku, channel=mods, author=insider)

    shown = await kioku.interactions.slash("stm history", user=admin)

    assert shown.ephemeral
    # Not "none recorded", nor a hint of what happens where the admin cannot look.
    assert shown.content == "No memory events recorded in the channels you can read."
