"""The slash commands on the real bot: /refresh, /stm …, /forget-me and the error handler."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

import discord
import pytest
from sqlalchemy import func, insert, select

from bot.cogs.errors import GUILD_ONLY, SOMETHING_WENT_WRONG, UNAVAILABLE
from bot.cogs.privacy import CANCELLED, NOT_YOURS
from bot.cogs.refresh import REFRESH_MARKER_PREFIX
from bot.cogs.stm import forms as stm_forms
from bot.cogs.stm.answers import ALWAYS_ON_SHOWN
from bot.cogs.stm.forms import WIPE_ASK_A_MODERATOR, WIPE_WITH_REFRESH
from bot.cogs.stm.history import describe_events
from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.db.models import GuildSettings, LongTermMemory, ShortTermMemory, StmCategory, StmEvent
from bot.db.storage import faults
from bot.vocabulary.model import AuditEvent, Category, Provenance, ScopeKey
from tests.helpers.bot import KiokuHarness
from tests.helpers.builders import settings_changed_elsewhere
from tests.helpers.discord_payloads import channel_payload as _channel_payload
from tests.helpers.faults import back

SUMMARY = "Team picked Friday for the launch."
DISCORD_CONTENT_LIMIT = 2000


# ------------------------------------------------------------------- helpers


async def seed(
    kioku: KiokuHarness,
    *,
    channel: discord.abc.Snowflake | None = None,
    author: discord.abc.User | None = None,
    dm: bool = False,
    summary: str = SUMMARY,
    categories: dict[str, str] | None = None,
) -> None:
    """Give a channel a memory through the service (origin admin)."""
    channel_id = (channel or kioku.env.channel).id
    result = await kioku.bot.memory.admin_edit(
        guild_id=None if dm else kioku.env.guild.id,
        channel_id=channel_id,
        actor_user_id=(author or kioku.env.member).id,
        summary=None if categories is not None else summary,
        categories=categories,
    )
    assert result.ok, str(result)


async def stm_rows(kioku: KiokuHarness, channel_id: int | None = None) -> list[ShortTermMemory]:
    query = select(ShortTermMemory).order_by(ShortTermMemory.scope_kind)
    if channel_id is not None:
        query = query.where(ShortTermMemory.channel_id == channel_id)
    async with kioku.database.sessions() as session:
        return list(await session.scalars(query))


async def count(kioku: KiokuHarness, model: type[object]) -> int:
    async with kioku.database.sessions() as session:
        return int(await session.scalar(select(func.count()).select_from(model)) or 0)


async def events(kioku: KiokuHarness) -> list[StmEvent]:
    async with kioku.database.sessions() as session:
        return list(await session.scalars(select(StmEvent).order_by(StmEvent.id)))


async def use_categories(kioku: KiokuHarness, *labels: str) -> None:
    await kioku.bot.memory.set_categories(
        kioku.env.guild.id,
        kioku.env.member.id,
        [Category(i, label.lower(), label, f"{label} so far") for i, label in enumerate(labels)],
    )


def markers(kioku: KiokuHarness, channel: object) -> list[str]:
    return [
        sent.content
        for sent in kioku.env.sent_to(channel)
        if sent.content.startswith(REFRESH_MARKER_PREFIX)
    ]


def break_database(kioku: KiokuHarness) -> None:
    """The bot's database refuses every connection (until ``back``), and the bot's spool
    replayer stops: it would replay what the test spools once the database is back,
    racing the test's checks of what is pending (tests replay by hand, with
    ``kioku.bot.spool.replay``)."""
    faults(kioku.bot.memory.sessions).fail()
    for task in kioku.bot.tasks:
        if task.get_name() == "spool-replayer":
            task.cancel()


@pytest.fixture
async def moderator(kioku: KiokuHarness) -> discord.Member:
    return await kioku.env.create_member("mod", kind="moderator")


@pytest.fixture
async def admin(kioku: KiokuHarness) -> discord.Member:
    return await kioku.env.create_member("admin", kind="admin")


# ------------------------------------------------------------------ /refresh


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


# ------------------------------------------------------------------ /stm show


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


# ------------------------------------------------------------------ /stm edit


async def test_stm_edit_opens_a_prefilled_modal_and_saves_with_origin_admin(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    await seed(kioku, summary="old summary")
    opened = await kioku.interactions.slash("stm edit", user=admin)
    assert opened.modal is not None
    [field] = opened.modal.text_inputs
    assert field["value"] == "old summary"
    assert field["max_length"] == 1500

    saved = await kioku.interactions.submit_modal(opened, {"summary": "new summary"}, user=admin)

    assert saved.ephemeral
    assert saved.content is not None and saved.content.startswith("Saved.")
    server = next(r for r in await stm_rows(kioku) if r.scope_kind == "server")
    assert (server.summary, server.origin, server.origin_detail, server.actor_user_id) == (
        "new summary",
        "admin",
        "/stm edit",
        admin.id,
    )


async def test_stm_edit_in_a_thread_keeps_the_parent_channel(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    thread = await kioku.env.create_thread(kioku.env.channel, "planning")
    opened = await kioku.interactions.slash("stm edit", user=admin, channel=thread)
    assert opened.modal is not None

    await kioku.interactions.submit_modal(opened, {"summary": "thread notes"}, user=admin)

    rows = [r for r in await stm_rows(kioku) if r.channel_id == thread.id]
    assert rows and all(r.parent_channel_id == kioku.env.channel.id for r in rows)


async def test_stm_edit_in_category_mode_has_one_prefilled_input_per_category(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    await use_categories(kioku, "Decisions", "Questions", "People")
    await seed(kioku, categories={"decisions": "Friday", "people": "Ana, Bo"})
    opened = await kioku.interactions.slash("stm edit", user=admin)
    assert opened.modal is not None
    inputs = {f["custom_id"]: f for f in opened.modal.text_inputs}
    assert list(inputs) == ["decisions", "questions", "people"]
    assert [inputs[slug].get("value") for slug in inputs] == ["Friday", None, "Ana, Bo"]

    saved = await kioku.interactions.submit_modal(
        opened, {"decisions": "Thursday", "questions": "Venue?", "people": ""}, user=admin
    )

    assert saved.content is not None and saved.content.startswith("Saved.")
    server = next(r for r in await stm_rows(kioku) if r.scope_kind == "server")
    assert server.categories == {"decisions": "Thursday", "questions": "Venue?"}
    assert server.origin == "admin"


async def test_stm_edit_of_a_category_says_it_replaced_the_summary_from_before_categories(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    # The summary written before the server chose categories is the channel's memory
    # (/stm show lists it, the model reads it) until a category gets a value; the form
    # has no field for it, so filling one category must not drop it without a word.
    await seed(kioku, summary="Launch on Friday; Alice owns the docs.")
    await use_categories(kioku, "Decisions", "People")
    opened = await kioku.interactions.slash("stm edit", user=admin)

    saved = await kioku.interactions.submit_modal(opened, {"people": "Bob is new"}, user=admin)

    assert saved.texts() == [
        "Saved. The model sees the new memory from its next reply on.\n"
        "The summary kept from before the categories was replaced by them. "
        "It was, to paste into a category:\n"
        "> Launch on Friday; Alice owns the docs."
    ]
    entry = await kioku.bot.memory.entry(ScopeKey.server(kioku.env.guild.id, kioku.env.channel.id))
    assert (entry.summary, entry.categories) == ("", {"people": "Bob is new"})

    opened = await kioku.interactions.slash("stm edit", user=admin)
    again = await kioku.interactions.submit_modal(opened, {"decisions": "Friday"}, user=admin)
    assert again.texts() == ["Saved. The model sees the new memory from its next reply on."]


async def test_stm_edit_reports_a_rejected_write(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    await use_categories(kioku, "Decisions", "Questions")
    opened = await kioku.interactions.slash("stm edit", user=admin)
    saved = await kioku.interactions.submit_modal(opened, {"decisions": "Friday"}, user=admin)
    assert saved.content is not None and saved.content.startswith("Saved.")

    opened = await kioku.interactions.slash("stm edit", user=admin)
    emptied = await kioku.interactions.submit_modal(opened, {"decisions": ""}, user=admin)

    assert emptied.content is not None
    assert emptied.content.startswith(
        f"Not saved: that would leave every category empty. {WIPE_ASK_A_MODERATOR}"
    )
    assert [r.categories for r in await stm_rows(kioku)] == [{"decisions": "Friday"}] * 2


async def test_stm_edit_submitted_unchanged_saves_nothing(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    await use_categories(kioku, "Decisions", "Questions")
    opened = await kioku.interactions.slash("stm edit", user=admin)
    saved = await kioku.interactions.submit_modal(opened, {}, user=admin)
    assert saved.content == "Nothing changed, so nothing was saved."
    assert await stm_rows(kioku) == []


async def test_stm_edit_with_a_whitespace_only_summary_says_it_cannot_be_empty(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    await seed(kioku, summary="old summary")
    opened = await kioku.interactions.slash("stm edit", user=admin)

    saved = await kioku.interactions.submit_modal(opened, {"summary": "   \n  "}, user=admin)

    assert saved.ephemeral
    # The admin has Manage Server only: /refresh (Manage Messages) would refuse them.
    assert saved.texts() == [f"Not saved: the summary can't be empty. {WIPE_ASK_A_MODERATOR}"]
    assert [r.summary for r in await stm_rows(kioku)] == ["old summary"] * 2
    refused = await kioku.interactions.slash("refresh", user=admin)
    assert refused.content is not None and "**Manage Messages**" in refused.content


async def test_stm_edit_tells_an_admin_who_may_refresh_to_use_refresh(
    kioku: KiokuHarness,
) -> None:
    both = await kioku.env.create_member(
        "both", kind="admin", permissions=discord.Permissions(manage_messages=True)
    )
    await seed(kioku, summary="old summary")
    opened = await kioku.interactions.slash("stm edit", user=both)

    saved = await kioku.interactions.submit_modal(opened, {"summary": "   "}, user=both)

    assert saved.texts() == [f"Not saved: the summary can't be empty. {WIPE_WITH_REFRESH}"]


async def test_stm_edit_with_a_whitespace_only_category_field_clears_that_category(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    await use_categories(kioku, "Decisions", "Questions")
    await seed(kioku, categories={"decisions": "ship friday", "questions": "who writes docs?"})
    opened = await kioku.interactions.slash("stm edit", user=admin)
    assert opened.modal is not None
    prefill = {f["custom_id"]: f.get("value") or "" for f in opened.modal.text_inputs}

    saved = await kioku.interactions.submit_modal(
        opened, {**prefill, "decisions": "  \n "}, user=admin
    )

    assert saved.texts()[-1].startswith("Saved.")
    server = next(r for r in await stm_rows(kioku) if r.scope_kind == "server")
    assert server.categories == {"questions": "who writes docs?"}


async def test_stm_edit_with_whitespace_in_an_empty_category_field_changes_nothing(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    await use_categories(kioku, "Decisions", "Questions")
    await seed(kioku, categories={"questions": "who writes docs?"})
    before = [(r.scope_kind, r.categories, r.version, r.updated_at) for r in await stm_rows(kioku)]
    events_before = [e.id for e in await events(kioku)]
    assert before and events_before
    opened = await kioku.interactions.slash("stm edit", user=admin)
    assert opened.modal is not None
    prefill = {f["custom_id"]: f.get("value") or "" for f in opened.modal.text_inputs}

    saved = await kioku.interactions.submit_modal(
        opened, {**prefill, "decisions": "   "}, user=admin
    )

    assert saved.content == "Nothing changed, so nothing was saved."
    after = [(r.scope_kind, r.categories, r.version, r.updated_at) for r in await stm_rows(kioku)]
    assert after == before
    assert [e.id for e in await events(kioku)] == events_before


# ------------------------------------------------------------ /stm categories


async def test_stm_categories_set_stores_the_categories_with_slugs(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    opened = await kioku.interactions.slash("stm categories set", user=admin)
    assert opened.modal is not None and opened.modal.title == "Memory categories"
    assert [f["custom_id"] for f in opened.modal.text_inputs] == [
        f"category_{n}" for n in range(1, 6)
    ]

    saved = await kioku.interactions.submit_modal(
        opened,
        {
            "category_1": "Decisions: what we decided",
            "category_2": "",
            "category_3": "Open Questions: what is unsettled",
        },
        user=admin,
    )

    assert saved.ephemeral
    assert saved.content == (
        "Saved 2 categories. The model now keeps one field per category:\n"
        "• **Decisions** → `decisions`: what we decided\n"
        "• **Open Questions** → `open_questions`: what is unsettled"
    )
    config = await kioku.bot.memory.guild_config(kioku.env.guild.id)
    assert [(c.slug, c.label) for c in config.categories] == [
        ("decisions", "Decisions"),
        ("open_questions", "Open Questions"),
    ]


async def test_one_category_and_a_cadence_of_one_are_counted_in_the_singular(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    opened = await kioku.interactions.slash("stm categories set", user=admin)
    saved = await kioku.interactions.submit_modal(
        opened, {"category_1": "Decisions: what we decided"}, user=admin
    )
    assert saved.texts()[0].startswith("Saved 1 category. The model now keeps one field")

    changed = await kioku.interactions.slash("stm settings", {"cadence": 1}, user=admin)
    assert "Refresh cadence: every **1** bot turn\n" in changed.texts()[0]


async def test_stm_categories_set_keeps_the_description_of_a_category_labelled_password(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    opened = await kioku.interactions.slash("stm categories set", user=admin)
    await kioku.interactions.submit_modal(
        opened, {"category_1": "Password: reset requests and who handled them"}, user=admin
    )
    async with kioku.database.sessions() as session:
        stored = [(c.label, c.description) for c in await session.scalars(select(StmCategory))]
    assert stored == [("Password", "reset requests and who handled them")]


async def test_stm_categories_set_prefills_the_current_categories(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    await use_categories(kioku, "Decisions", "People")
    opened = await kioku.interactions.slash("stm categories set", user=admin)
    assert opened.modal is not None
    assert [f.get("value") for f in opened.modal.text_inputs] == [
        "Decisions: Decisions so far",
        "People: People so far",
        None,
        None,
        None,
    ]


async def test_stm_categories_set_with_bad_lines_lists_every_problem_and_changes_nothing(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    await use_categories(kioku, "Decisions")
    opened = await kioku.interactions.slash("stm categories set", user=admin)
    typed = [": no label", "Empty:", "Plans: what is next", "plans: twice", ""]

    saved = await kioku.interactions.submit_modal(
        opened, {f"category_{n}": row for n, row in enumerate(typed, start=1)}, user=admin
    )

    assert saved.ephemeral
    assert saved.content == (
        "Nothing was changed. Please fix:\n"
        "• row 1: the label is empty\n"
        "• row 2: the description is empty\n"
        "• row 4: the label 'plans' is already used by row 3"
    )
    config = await kioku.bot.memory.guild_config(kioku.env.guild.id)
    assert [c.slug for c in config.categories] == ["decisions"]
    # "Edit again" reopens the modal with what was typed, so nothing is lost.
    again = await kioku.interactions.click(saved, label="Edit again", user=admin)
    assert again.modal is not None
    assert [f.get("value") for f in again.modal.text_inputs] == [*typed[:4], None]


async def test_an_expired_edit_again_button_is_removed_and_hands_back_what_was_typed(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    opened = await kioku.interactions.slash("stm categories set", user=admin)
    typed = ["Decisions: what we decided", "Plans what is next", "", "People: who is who"]
    refused = await kioku.interactions.submit_modal(
        opened, {f"category_{n}": row for n, row in enumerate(typed, start=1)}, user=admin
    )
    assert refused.custom_ids, "an Edit again button"

    await kioku.interactions.expire_view(refused)

    # A click now would go unanswered ("This interaction failed") and the rows be lost.
    assert refused.components == []
    assert refused.content == (
        "The **Edit again** button has expired: `/stm categories set` opens the form again.\n"
        "What you typed, to paste again:\n"
        "> Decisions: what we decided\n"
        "> Plans what is next\n"
        "> People: who is who"
    )
    assert (await kioku.bot.memory.guild_config(kioku.env.guild.id)).categories == ()


async def test_an_expired_edit_again_button_of_a_blank_form_hands_back_nothing(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    opened = await kioku.interactions.slash("stm categories set", user=admin)
    # Discord's "required" lets spaces through.
    refused = await kioku.interactions.submit_modal(opened, {"category_1": "   "}, user=admin)
    assert "define at least one category" in (refused.content or "")

    await kioku.interactions.expire_view(refused)

    assert refused.components == []
    assert refused.content == (
        "The **Edit again** button has expired: `/stm categories set` opens the form again."
    )


async def test_categories_refused_by_a_database_outage_can_be_edited_again(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    # Like a /stm edit form, a categories form the storage refused keeps what was typed.
    opened = await kioku.interactions.slash("stm categories set", user=admin)
    break_database(kioku)
    typed = {"category_1": "Decisions: what we decided", "category_2": "People: who is who"}

    refused = await kioku.interactions.submit_modal(opened, typed, user=admin)

    assert refused.ephemeral
    assert refused.texts() == [UNAVAILABLE]
    await back(kioku.bot.memory.sessions)
    again = await kioku.interactions.click(refused, label="Edit again", user=admin)
    assert again.modal is not None
    assert [f.get("value") for f in again.modal.text_inputs] == [*typed.values(), None, None, None]
    saved = await kioku.interactions.submit_modal(again, typed, user=admin)
    assert saved.texts()[-1].startswith("Saved 2 categories.")


async def test_stm_categories_list_shows_the_categories(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    empty = await kioku.interactions.slash("stm categories list", user=admin)
    assert empty.content is not None and empty.content.startswith("No categories")
    await use_categories(kioku, "Decisions", "People")
    listed = await kioku.interactions.slash("stm categories list", user=admin)
    assert listed.ephemeral
    assert listed.content == (
        "**Memory categories** (2)\n"
        "• **Decisions** → `decisions`: Decisions so far\n"
        "• **People** → `people`: People so far"
    )


async def test_category_labels_and_descriptions_are_escaped_in_the_list_and_the_receipt(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    # An admin's `**` or `_` must not break the bold of the list.
    label = "C** pointers"
    opened = await kioku.interactions.slash("stm categories set", user=admin)
    receipt = await kioku.interactions.submit_modal(
        opened, {"category_1": f"{label}: what **we** decided <@&1>"}, user=admin
    )
    listed = await kioku.interactions.slash("stm categories list", user=admin)

    escaped = "• **C\\*\\* pointers** → `c_pointers`: what \\*\\*we\\*\\* decided <@&1>"
    assert escaped in receipt.texts()[-1]
    assert escaped in listed.texts()[-1]
    # A mention in a label is shown, never pinged: the bot allows no mentions.
    assert kioku.bot.allowed_mentions is not None
    assert kioku.bot.allowed_mentions.to_dict()["parse"] == []


async def test_the_receipt_of_five_long_markdown_heavy_categories_fits_discords_limit(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    # Five labels of 40 and descriptions of 200 characters are accepted; escaping their
    # `_` and `*` doubles them, past 2,000 characters in one message: Discord refuses it
    # and the admin would read "Something went wrong" although the categories were saved.
    rows = {
        f"category_{n}": f"snake_case_label_{n}_{'_x' * 10}: " + "a_b*" * 50 for n in range(1, 6)
    }
    opened = await kioku.interactions.slash("stm categories set", user=admin)

    saved = await kioku.interactions.submit_modal(opened, rows, user=admin)

    assert len((await kioku.bot.memory.guild_config(kioku.env.guild.id)).categories) == 5
    texts = saved.texts()
    assert texts[0].startswith("Saved 5 categories.")
    assert all(len(text) <= DISCORD_CONTENT_LIMIT for text in texts), [len(t) for t in texts]
    assert "\n".join(texts).count("• **snake") == 5
    assert all(call.ephemeral for call in saved.calls)


async def test_stm_categories_clear_goes_back_to_summary_mode(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    await use_categories(kioku, "Decisions", "People")
    result = await kioku.interactions.slash("stm categories clear", user=admin)
    assert result.content == "Categories cleared: the model keeps one summary per channel again."
    config = await kioku.bot.memory.guild_config(kioku.env.guild.id)
    assert config.categories == () and not config.category_mode
    assert await count(kioku, StmCategory) == 0
    again = await kioku.interactions.slash("stm categories clear", user=admin)
    assert again.content == "There are no categories; the model already keeps one summary."


# ------------------------------------------------------------- /stm settings


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


# -------------------------------------------------------------- /stm history


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


# ----------------------------------------------------------------- /forget-me


async def seed_user_data(kioku: KiokuHarness, user: discord.Member) -> None:
    await seed(kioku, author=user)
    async with kioku.database.sessions() as session, session.begin():
        await session.execute(
            insert(LongTermMemory).values(
                user_id=user.id, guild_id=None, content="likes tea", origin="model_tool"
            )
        )


async def test_forget_me_confirm_deletes_everything_and_shows_the_receipt(
    kioku: KiokuHarness,
) -> None:
    user = kioku.env.member
    await seed_user_data(kioku, user)
    asked = await kioku.interactions.slash("forget-me", user=user)
    assert asked.ephemeral
    assert asked.content is not None and asked.content.startswith("**Forget me**")
    assert [b["label"] for b in asked.response.buttons] == ["Delete my memories", "Cancel"]  # type: ignore[union-attr]
    assert [b["style"] for b in asked.response.buttons] == [4, 2]  # type: ignore[union-attr]

    done = await kioku.interactions.click(asked, label="Delete my memories", user=user)

    assert done.content == (
        "**Done.** I deleted everything derived from your messages:\n"
        "• 1 memory of yours\n"
        "• 1 shared memory built from your messages\n"
        "• 1 long-term memory\n"
        "• 2 audit entries no longer naming you\n"
        "• 0 cached messages and 2 cached memories"
    )
    assert asked.components == []  # the buttons are gone
    assert await stm_rows(kioku) == []
    assert await count(kioku, LongTermMemory) == 0
    assert (
        kioku.bot.memory.cache.get(ScopeKey.server(kioku.env.guild.id, kioku.env.channel.id))
        is None
    )


async def test_a_double_click_on_forget_me_deletes_once_and_keeps_the_receipt(
    kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = kioku.env.member
    await seed_user_data(kioku, user)
    asked = await kioku.interactions.slash("forget-me", user=user)
    calls = 0
    forget = kioku.bot.memory.forget_user

    async def counted(user_id: int) -> Any:
        nonlocal calls
        calls += 1
        return await forget(user_id)

    monkeypatch.setattr(kioku.bot.memory, "forget_user", counted)

    await asyncio.gather(
        kioku.interactions.click(asked, label="Delete my memories", user=user),
        kioku.interactions.click(asked, label="Delete my memories", user=user),
    )

    assert calls == 1
    assert asked.content is not None and asked.content.startswith("**Done.**")
    assert "• 1 memory of yours" in asked.content
    async with kioku.database.sessions() as session:
        forgets = await session.scalar(
            select(func.count())
            .select_from(StmEvent)
            .where(StmEvent.event == "forget", StmEvent.channel_id.is_(None))
        )
    assert forgets == 1  # one request recorded, not two


@pytest.mark.parametrize(
    ("command", "reads"),
    [
        ("stm show", "guild_config"),
        ("stm settings", "guild_config"),
        ("stm history", "recent_events"),
        ("stm categories list", "guild_config"),
        ("stm categories clear", "guild_config"),
    ],
)
async def test_commands_that_read_the_database_acknowledge_before_reading(
    kioku: KiokuHarness,
    admin: discord.Member,
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    reads: str,
) -> None:
    # Discord drops an interaction not answered within 3 s; a slow database must not.
    memory = kioku.bot.memory
    real = getattr(memory, reads)
    seen: list[bool] = []

    async def watched(*args: Any, **kwargs: Any) -> Any:
        seen.append(kioku.interactions.results[-1].deferred)
        return await real(*args, **kwargs)

    monkeypatch.setattr(memory, reads, watched)
    result = await kioku.interactions.slash(command, user=admin)
    assert seen and all(seen), f"{reads} ran before the acknowledgement: {seen}"
    assert result.deferred and result.ephemeral
    assert result.texts(), "the real answer follows the acknowledgement"


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


async def test_forget_me_cancel_deletes_nothing(kioku: KiokuHarness) -> None:
    user = kioku.env.member
    await seed_user_data(kioku, user)
    asked = await kioku.interactions.slash("forget-me", user=user)

    cancelled = await kioku.interactions.click(asked, label="Cancel", user=user)

    assert cancelled.content == CANCELLED
    assert asked.components == []
    assert len(await stm_rows(kioku)) == 2
    assert await count(kioku, LongTermMemory) == 1


async def test_forget_me_buttons_refuse_another_user(kioku: KiokuHarness) -> None:
    user = kioku.env.member
    other = await kioku.env.create_member("other")
    await seed_user_data(kioku, user)
    asked = await kioku.interactions.slash("forget-me", user=user)

    refused = await kioku.interactions.click(asked, label="Delete my memories", user=other)

    assert refused.ephemeral and refused.content == NOT_YOURS
    assert len(await stm_rows(kioku)) == 2
    assert await count(kioku, LongTermMemory) == 1
    assert asked.custom_ids  # still there for its owner
    done = await kioku.interactions.click(asked, label="Delete my memories", user=user)
    assert done.content is not None and done.content.startswith("**Done.**")


async def test_forget_me_works_in_a_dm(kioku: KiokuHarness) -> None:
    user = kioku.env.member
    await seed(kioku, channel=kioku.env.dm_channel(user), dm=True, author=user)
    asked = await kioku.interactions.slash("forget-me", user=user, dm=True)
    done = await kioku.interactions.click(asked, label="Delete my memories", user=user)
    assert done.content is not None and "• 1 memory of yours" in done.content
    assert await stm_rows(kioku) == []


# ------------------------------------------------------------- error handler


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


async def test_forget_me_with_the_database_down_is_spooled_and_says_so(
    kioku: KiokuHarness,
) -> None:
    user = kioku.env.member
    await seed_user_data(kioku, user)
    asked = await kioku.interactions.slash("forget-me", user=user)
    break_database(kioku)
    assert len(await stm_rows(kioku)) == 2 and await count(kioku, LongTermMemory) == 1
    done = await kioku.interactions.click(asked, label="Delete my memories", user=user)
    assert "the stored copies are deleted as soon as it is back" in done.content
    await back(kioku.bot.memory.sessions)
    await kioku.bot.spool.replay(kioku.bot.memory.sessions)
    assert await stm_rows(kioku) == []
    assert await count(kioku, LongTermMemory) == 0, "the long-term fact goes too"
    assert [e for e in await events(kioku) if e.actor_user_id == user.id] == []
    assert kioku.bot.memory.pending_sync == 0


async def test_settings_with_the_database_down_answers_memory_unavailable(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    break_database(kioku)
    result = await kioku.interactions.slash("stm settings", {"cadence": 9}, user=admin)
    assert result.ephemeral
    assert result.content == UNAVAILABLE


async def test_admin_command_in_a_dm_is_guild_only(kioku: KiokuHarness) -> None:
    result = await kioku.interactions.slash("stm settings", dm=True)
    assert result.ephemeral and result.content == GUILD_ONLY


async def test_unexpected_error_is_logged_and_answered_generically(
    kioku: KiokuHarness, caplog: pytest.LogCaptureFixture
) -> None:
    settings_changed_elsewhere(kioku.bot.memory, kioku.env.guild.id)
    faults(kioku.bot.memory.sessions).fail("loading guild settings", error=RuntimeError("boom"))
    with caplog.at_level(logging.ERROR, logger="bot.cogs.errors"):
        result = await kioku.interactions.slash("stm show")
    assert result.ephemeral and result.content == SOMETHING_WENT_WRONG
    [record] = [r for r in caplog.records if r.name == "bot.cogs.errors"]
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)
    assert "/stm show failed" in record.getMessage()


@pytest.mark.parametrize("command", ["stm edit", "stm categories set"])
async def test_a_modal_command_on_a_stalled_database_answers_in_time(
    kioku: KiokuHarness, admin: discord.Member, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    # A modal must be the first answer, so it cannot be preceded by "thinking…": the
    # reads before it get a short limit, and the user hears why instead of nothing.
    monkeypatch.setattr(stm_forms, "MODAL_READ_SECONDS", 0.05)
    settings_changed_elsewhere(kioku.bot.memory, kioku.env.guild.id)
    faults(kioku.bot.memory.sessions).hang("loading guild settings")  # never answers

    result = await kioku.interactions.slash(command, user=admin)

    assert result.modal is None
    assert result.ephemeral and result.content == UNAVAILABLE


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
