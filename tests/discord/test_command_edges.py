"""Slash commands against what happens around them: an edit form opened before a model
update or a /refresh, a settings change racing a read, acknowledging before the
database, long memories in /stm show, a reply that looks like a refresh marker."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

import discord
import pytest
from sqlalchemy import func, select

from bot.cogs.errors import OUT_OF_DATE, UNAVAILABLE
from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.db.models import GuildSettings, StmEvent
from bot.db.storage import faults
from bot.vocabulary.model import ScopeKey
from tests.helpers.bot import KiokuHarness
from tests.helpers.builders import settings_changed_elsewhere
from tests.helpers.discord_payloads import snowflake
from tests.helpers.faults import callbacks_already_scheduled
from tests.helpers.stm_commands import seed, use_categories


def server_key(kioku: KiokuHarness) -> ScopeKey:
    return ScopeKey.server(kioku.env.guild.id, kioku.env.channel.id)


# ------------------------------------------------- F1: stale /stm edit modal (lost update)


async def test_a_stale_edit_modal_does_not_undo_the_models_update_of_another_category(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    await use_categories(kioku, "Decisions", "Questions")
    seeded = await kioku.bot.memory.admin_edit(
        guild_id=kioku.env.guild.id,
        channel_id=kioku.env.channel.id,
        actor_user_id=admin.id,
        categories={"decisions": "launch on Friday", "questions": "who writes docs?"},
    )
    assert seeded.ok
    opened = await kioku.interactions.slash("stm edit", user=admin)
    assert opened.modal is not None
    prefill = {f["custom_id"]: f["value"] for f in opened.modal.text_inputs}

    # While the admin types, a turn's model updates "decisions".
    kioku.llm.reply_tool_calls(
        [(STM_TOOL_NAME, {"decisions": "launch moved to Monday"})]
    ).reply_text("Noted.")
    await kioku.env.send("launch moves to monday", mention_bot=True)
    live = await kioku.bot.memory.entry(server_key(kioku))
    assert live.categories["decisions"] == "launch moved to Monday"

    # The admin only answers the open question; Discord submits every input, the
    # untouched ones with their (now stale) prefill.
    await kioku.interactions.submit_modal(
        opened, {**prefill, "questions": "Alice writes the docs"}, user=admin
    )

    entry = await kioku.bot.memory.entry(server_key(kioku))
    assert entry.categories["questions"] == "Alice writes the docs"
    assert entry.categories["decisions"] == "launch moved to Monday", (
        "the stale prefill silently reverted the model's newer update"
    )


async def test_an_edit_modal_opened_before_a_refresh_does_not_bring_the_wiped_memory_back(
    kioku: KiokuHarness, admin: discord.Member, moderator: discord.Member
) -> None:
    await use_categories(kioku, "Decisions", "Questions")
    await seed(
        kioku, author=admin, categories={"decisions": "secret plan", "questions": "old question"}
    )
    opened = await kioku.interactions.slash("stm edit", user=admin)
    assert opened.modal is not None
    prefill = {f["custom_id"]: f["value"] for f in opened.modal.text_inputs}

    await kioku.interactions.slash("refresh", user=moderator)
    assert not (await kioku.bot.memory.entry(server_key(kioku))).has_content

    saved = await kioku.interactions.submit_modal(
        opened, {**prefill, "questions": "new question"}, user=admin
    )

    entry = await kioku.bot.memory.entry(server_key(kioku))
    assert "secret plan" not in entry.categories.values(), (
        f"wiped text came back through a modal opened before /refresh: {saved.content!r}"
    )


async def test_a_stale_summary_edit_is_refused_and_hands_back_what_was_typed(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    memory = kioku.bot.memory
    guild, channel = kioku.env.guild.id, kioku.env.channel.id
    await memory.admin_edit(
        guild_id=guild, channel_id=channel, actor_user_id=admin.id, summary="v1"
    )
    opened = await kioku.interactions.slash("stm edit", user=admin)
    await memory.admin_edit(
        guild_id=guild, channel_id=channel, actor_user_id=admin.id, summary="v2"
    )

    saved = await kioku.interactions.submit_modal(opened, {"summary": "typed by hand"}, user=admin)

    text = "\n".join(saved.texts())
    assert text.startswith("Not saved: the memory changed while you were editing it")
    assert "> typed by hand" in text
    assert (await memory.entry(server_key(kioku))).summary == "v2"


async def test_a_category_edit_refused_as_the_categories_went_hands_back_each_field(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    await use_categories(kioku, "Decisions", "Questions")
    await seed(kioku, author=admin, categories={"questions": "who writes docs?"})
    opened = await kioku.interactions.slash("stm edit", user=admin)
    # Another admin goes back to one summary while the form is open.
    await kioku.bot.memory.set_categories(kioku.env.guild.id, admin.id, [])
    typed = "Launch on Friday; Alice owns the docs; budget approved at 4k"

    saved = await kioku.interactions.submit_modal(
        opened, {"decisions": typed, "questions": ""}, user=admin
    )

    assert saved.texts() == [
        "Not saved: the categories changed since you opened the form. "
        "Run `/stm edit` again to get the current fields.\n"
        "What you typed, to paste again:\n"
        f"**Decisions**\n> {typed}\n"
        "**Questions**: *(emptied)*"
    ]


async def test_a_category_edit_refused_after_a_refresh_hands_back_what_was_typed(
    kioku: KiokuHarness, admin: discord.Member, moderator: discord.Member
) -> None:
    await use_categories(kioku, "Decisions")
    opened = await kioku.interactions.slash("stm edit", user=admin)
    await kioku.interactions.slash("refresh", user=moderator)

    saved = await kioku.interactions.submit_modal(
        opened, {"decisions": "a paragraph that took ten minutes"}, user=admin
    )

    text = "\n".join(saved.texts())
    assert text.startswith("Not saved: this channel's memory was wiped while you were editing")
    assert "this turn" not in text
    assert "**Decisions**\n> a paragraph that took ten minutes" in text
    assert not (await kioku.bot.memory.entry(server_key(kioku))).has_content


async def test_a_summary_edit_refused_as_categories_came_says_so_in_admin_terms(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    opened = await kioku.interactions.slash("stm edit", user=admin)
    await use_categories(kioku, "Decisions")

    saved = await kioku.interactions.submit_modal(opened, {"summary": "by hand"}, user=admin)

    text = "\n".join(saved.texts())
    assert text.startswith("Not saved: the categories changed since you opened the form.")
    assert "give category values" not in text
    assert text.endswith("What you typed, to paste again:\n> by hand")


# --------------------------------------- F2: settings change raced by a config read in flight


async def test_stm_settings_is_not_undone_by_a_config_read_already_in_flight(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    guild_id = kioku.env.guild.id
    memory = kioku.bot.memory
    settings_changed_elsewhere(memory, guild_id)
    plan = faults(memory.sessions)
    # The first read (a turn's, say) reads the old row, then its task is slow to resume
    # (scheduling, a slow network) until after the settings commit.
    read = plan.hang("loading guild settings", at="end", times=1)
    saved = plan.hang("saving guild settings", at="end", times=1)

    turn_read = asyncio.create_task(memory.guild_config(guild_id))
    await read.reached()
    changing = asyncio.create_task(
        kioku.interactions.slash("stm settings", {"cadence": 7}, user=admin)
    )
    await saved.reached()  # committed ...
    saved.release()
    await callbacks_already_scheduled()  # ... and taken in: the cached copy dropped
    read.release()  # the old row arrives after that
    result = await changing
    await turn_read

    assert "every **7** bot turns" in (result.content or ""), result.content
    assert (await memory.guild_config(guild_id)).refresh_cadence == 7, (
        "the old configuration read before the commit was cached after it"
    )


# ------------------------------------------ F3: modal submits touch the DB before answering


async def test_modal_submits_acknowledge_before_touching_the_database(
    kioku: KiokuHarness, admin: discord.Member, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = kioku.bot.memory
    seen: list[tuple[str, bool]] = []

    def watching(name: str) -> None:
        real = getattr(memory, name)

        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            current = kioku.interactions.results[-1]
            seen.append((name, current.response is not None))
            return await real(*args, **kwargs)

        monkeypatch.setattr(memory, name, wrapper)

    opened = await kioku.interactions.slash("stm categories set", user=admin)
    watching("set_categories")
    await kioku.interactions.submit_modal(
        opened, {"category_1": "Decisions: what we decided"}, user=admin
    )
    opened = await kioku.interactions.slash("stm edit", user=admin)
    watching("admin_edit")
    await kioku.interactions.submit_modal(opened, {"decisions": "ship friday"}, user=admin)

    # Discord drops an interaction not acknowledged within 3 s; the storage timeout is 5 s.
    assert seen == [("set_categories", True), ("admin_edit", True)]


# ----------------------------------------------- F4: /stm show cuts quoted memory mid-line


async def test_stm_show_splits_a_many_line_memory_between_lines_keeping_the_quote(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    summary = "\n".join(f"i{i:03d}" for i in range(300))  # 300 short lines, 1499 chars
    assert len(summary) <= 1500
    saved = await kioku.bot.memory.admin_edit(
        guild_id=kioku.env.guild.id,
        channel_id=kioku.env.channel.id,
        actor_user_id=admin.id,
        summary=summary,
    )
    assert saved.ok
    result = await kioku.interactions.slash("stm show")
    texts = result.texts()
    assert all(len(t) <= 2000 for t in texts)
    body_lines = [line for t in texts for line in t.splitlines()]
    items = [line for line in body_lines if "**" not in line and not line.startswith("Updated")]
    broken = [line for line in items if not (line.startswith("> i") and len(line) == 6)]
    assert not broken, f"lines cut in two or left unquoted: {broken[:3]}"
    assert len(items) == 300


# ------------------------------------ F5: /stm edit in summary mode hides leftover categories


async def test_stm_edit_after_categories_were_cleared_shows_what_stm_show_shows(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    await use_categories(kioku, "Decisions", "Questions")
    await seed(kioku, author=admin, categories={"decisions": "launch on Friday"})
    await kioku.interactions.slash("stm categories clear", user=admin)
    shown = await kioku.interactions.slash("stm show")
    assert "launch on Friday" in "\n".join(shown.texts())  # the memory is there

    opened = await kioku.interactions.slash("stm edit", user=admin)
    assert opened.modal is not None
    [field] = opened.modal.text_inputs
    assert "launch on Friday" in (field.get("value") or ""), (
        "the edit modal opens empty although /stm show lists the memory"
    )


async def test_stm_edit_of_leftover_categories_longer_than_the_form_says_what_it_cut(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    # Back in summary mode, the form shows the leftover categories as one text: longer
    # than a summary may be, it is cut, and saving replaces them all. The cut must show in
    # the form, and what it left out be handed back, not dropped unseen.
    await use_categories(kioku, "Decisions", "People")
    decisions, people = "D" * 900, "P" * 900
    await seed(kioku, author=admin, categories={"decisions": decisions, "people": people})
    await kioku.interactions.slash("stm categories clear", user=admin)
    whole = f"Decisions:\n{decisions}\n\nPeople:\n{people}"

    opened = await kioku.interactions.slash("stm edit", user=admin)
    assert opened.modal is not None
    [field] = opened.modal.text_inputs
    shown = field["value"]
    assert len(shown) == 1500 and whole.startswith(shown)
    assert field["label"] == f"Summary (cut to 1500 of {len(whole)} characters)"
    assert len(field["label"]) <= 45

    saved = await kioku.interactions.submit_modal(
        opened, {"summary": "Decisions: all made.\n" + shown[22:]}, user=admin
    )

    text = "\n".join(saved.texts())
    assert text.startswith("Saved.")
    assert (
        f"The end of the memory did not fit in the form ({len(whole) - 1500} characters) "
        "and is no longer kept. It was:\n> " + "P" * (len(whole) - 1500)
    ) in text
    assert all(len(t) <= 2000 for t in saved.texts())
    entry = await kioku.bot.memory.entry(server_key(kioku))
    assert entry.summary.startswith("Decisions: all made.") and entry.categories == {}


# ------------------------------- F6: a chat reply that looks like a refresh marker is one


async def test_a_reply_starting_like_the_refresh_marker_does_not_cut_back_fill(
    kioku: KiokuHarness,
) -> None:
    from bot.cogs.refresh import REFRESH_MARKER_PREFIX

    await kioku.env.send("the launch is on friday")
    # Any member can get the model to echo a phrase; no /refresh (Manage Messages) ran.
    kioku.llm.reply_text(f"{REFRESH_MARKER_PREFIX} by me, ha. (just quoting you)")
    await kioku.env.send(f'say "{REFRESH_MARKER_PREFIX}"', mention_bot=True)
    # Restart: the window is cold and is back-filled from Discord history.
    kioku.bot.memory.drop_all()
    kioku.llm.reply_text("Friday.")
    await kioku.env.send("when is the launch?", mention_bot=True)
    prompt = "\n".join(str(m.get("content") or "") for m in kioku.llm.messages(-1))
    assert "the launch is on friday" in prompt, "a fake marker hid the history like /refresh"


# ------------------------------------- F7: /stm settings reports "nothing was changed" wrongly


async def test_settings_failing_half_way_say_nothing_was_changed_and_change_nothing(
    kioku: KiokuHarness, admin: discord.Member
) -> None:
    # /stm settings writes every change and its audit event in one transaction: the
    # connection dropping after the settings were written must undo them, or the reply
    # ("nothing was changed") would be false.
    guild_id = kioku.env.guild.id
    first = await kioku.interactions.slash("stm settings", {"cadence": 5}, user=admin)
    assert first.texts()[0].startswith("**Settings updated.**")
    plan = faults(kioku.bot.memory.sessions)
    plan.drop("saving guild settings", at="end")  # at its commit, once everything is written
    result = await kioku.interactions.slash(
        "stm settings", {"always_on": True, "cadence": 9}, user=admin
    )

    assert plan.met == ["saving guild settings"], "the failure was not half-way through"
    assert result.texts() == [UNAVAILABLE]
    async with kioku.database.sessions() as session:
        row = await session.get(GuildSettings, guild_id)
        assert row is not None
        assert (row.refresh_cadence, row.always_on_channel_ids) == (5, [])
        settings_events = await session.scalar(
            select(func.count()).select_from(StmEvent).where(StmEvent.event == "settings")
        )
    assert settings_events == 1
    config = await kioku.bot.memory.guild_config(guild_id)
    assert (config.refresh_cadence, config.always_on_channels) == (5, frozenset())


@pytest.mark.parametrize(
    "stale",
    [
        pytest.param(lambda data: data.update(name="remember-this"), id="a command since removed"),
        pytest.param(
            lambda data: data["options"][0].update(name="summarise"),
            id="a subcommand since renamed",
        ),
    ],
)
async def test_a_command_discord_still_offers_from_before_an_upgrade_says_it_is_out_of_date(
    kioku: KiokuHarness, stale: Callable[[dict[str, Any]], None]
) -> None:
    # Until `kioku sync` runs, Discord keeps sending the commands of the last sync.
    current = await kioku.interactions.slash("stm show")
    payload = copy.deepcopy(current.payload)
    payload["id"], payload["token"] = str(snowflake()), f"stale-{snowflake()}"
    stale(payload["data"])

    result = await kioku.interactions.dispatch(payload)

    assert result.ephemeral
    assert result.content == OUT_OF_DATE
