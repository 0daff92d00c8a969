"""/stm show on the real bot: the channel's memory with its size, age and origin."""

from __future__ import annotations

import discord

from bot.vocabulary.model import Category
from tests.helpers.bot import KiokuHarness
from tests.helpers.stm_commands import SUMMARY, break_database, seed, use_categories


async def test_stm_show_without_memory_says_nothing_yet(kioku: KiokuHarness) -> None:
    result = await kioku.interactions.slash("stm show")
    assert result.ephemeral
    assert result.content == "I don't remember anything in this channel yet."


async def test_stm_show_gives_the_summary_with_its_size_age_and_origin(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    await seed(kioku, author=admin)
    kioku.clock.advance(minutes=5)
    result = await kioku.interactions.slash("stm show", user=kioku.env.member)
    assert result.ephemeral
    assert result.content == (
        "**What I remember in this channel**\n"
        f"Updated 5 min ago by an admin ({admin.mention}).\n"
        f"**Summary** ({len(SUMMARY)}/1500 chars)\n> {SUMMARY}"
    )


async def test_stm_show_in_category_mode_lists_each_category_with_its_size(
    kioku: KiokuHarness,
) -> None:
    await use_categories(kioku, "Decisions", "Questions")
    await seed(kioku, categories={"decisions": "Launch on Friday."})
    result = await kioku.interactions.slash("stm show")
    assert result.content is not None
    assert "**Decisions** (17/1500 chars)\n> Launch on Friday." in result.content
    assert "**Questions** (0/1500 chars)\n*(empty)*" in result.content


async def test_stm_show_in_a_dm_shows_the_dm_memory(kioku: KiokuHarness) -> None:
    user = kioku.env.member
    await seed(kioku, channel=kioku.env.dm_channel(user), dm=True, author=user, summary="DM notes")
    await seed(kioku, summary="server notes")
    result = await kioku.interactions.slash("stm show", user=user, dm=True)
    assert result.ephemeral
    assert result.content is not None
    assert result.content.startswith("**What I remember in our DMs**")
    assert "> DM notes" in result.content and "server notes" not in result.content


async def test_stm_show_splits_long_memories_into_messages_within_discords_limit(
    kioku: KiokuHarness,
) -> None:
    labels = ("One", "Two", "Three", "Four", "Five")
    await use_categories(kioku, *labels)
    await seed(kioku, categories={label.lower(): label[0] * 1500 for label in labels})
    result = await kioku.interactions.slash("stm show")
    texts = result.texts()
    assert len(texts) >= 4
    assert all(len(text) <= 2000 for text in texts)
    assert all(call.ephemeral for call in result.calls)
    joined = "\n".join(texts)
    assert all(f"> {label[0] * 1500}" in joined for label in labels)


async def test_stm_show_counts_one_pending_change_in_the_singular(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    await seed(kioku, author=admin, summary="old")
    break_database(kioku)
    opened = await kioku.interactions.slash("stm edit", user=admin)
    saved = await kioku.interactions.submit_modal(opened, {"summary": "new"}, user=admin)
    assert saved.texts()[-1].startswith("Saved, pending sync")

    shown = (await kioku.interactions.slash("stm show")).texts()[-1]

    assert "1 change to this channel's memory is waiting for the database (saved locally)." in shown
    assert "memory writes" not in shown and "wiped" not in shown


async def test_stm_show_after_a_refresh_in_an_outage_reports_the_wipe_not_a_saved_write(
    kioku: KiokuHarness, admin: discord.Member, moderator: discord.Member
) -> None:
    await seed(kioku, author=admin, summary="plan")
    break_database(kioku)
    wiped = await kioku.interactions.slash("refresh", user=moderator)
    assert "queued durably" in wiped.texts()[-1]

    shown = (await kioku.interactions.slash("stm show")).texts()[-1]

    assert shown.startswith("I don't remember anything in this channel yet.")
    assert (
        "This channel's memory was wiped; the deletion reaches the database when it is back."
        in shown
    )
    assert "saved locally" not in shown

    # Two writes after the wipe: counted (in the plural) beside it.
    for summary in ("first", "second"):
        opened = await kioku.interactions.slash("stm edit", user=admin)
        await kioku.interactions.submit_modal(opened, {"summary": summary}, user=admin)
    shown = (await kioku.interactions.slash("stm show")).texts()[-1]
    assert "was wiped" in shown
    assert "2 changes to this channel's memory are waiting for the database" in shown


async def test_stm_show_escapes_markdown_in_category_headings(kioku: KiokuHarness) -> None:
    await kioku.bot.memory.set_categories(
        kioku.env.guild.id, kioku.env.member.id, [Category(0, "pointers", "C** pointers", "")]
    )
    await seed(kioku, categories={"pointers": "Use them."})
    shown = (await kioku.interactions.slash("stm show")).texts()[-1]
    assert "**C\\*\\* pointers** (9/1500 chars)" in shown
