"""/stm edit on the real bot: the prefilled form, what a submission saves, and what it
refuses."""

from __future__ import annotations

import discord

from bot.cogs.stm.forms import WIPE_ASK_A_MODERATOR, WIPE_WITH_REFRESH
from bot.vocabulary.model import ScopeKey
from tests.helpers.bot import KiokuHarness
from tests.helpers.stm_commands import events, seed, stm_rows, use_categories


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
