"""/stm categories on the real bot: setting, listing and clearing the server's memory
categories, and the form handed back when a submission is refused."""

from __future__ import annotations

import discord
from sqlalchemy import select

from bot.cogs.errors import UNAVAILABLE
from bot.db.models import StmCategory
from tests.helpers.bot import KiokuHarness
from tests.helpers.faults import back
from tests.helpers.stm_commands import (
    DISCORD_CONTENT_LIMIT,
    TWO_CATEGORIES_TYPED,
    break_database,
    count,
    use_categories,
)


async def test_stm_categories_set_stores_the_categories_with_slugs(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    opened = await kioku.interactions.slash("stm categories set", user=admin)
    assert opened.modal is not None and opened.modal.title == "Memory categories"
    assert [f["custom_id"] for f in opened.modal.text_inputs] == [
        f"category_{n}" for n in range(1, 6)
    ]

    saved = await kioku.interactions.submit_modal(opened, TWO_CATEGORIES_TYPED, user=admin)

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
