"""``/kioku`` through the real command tree: access lists, persona and model are saved in
``guild_settings`` and shown by ``/kioku settings``; bad input is refused with one
ephemeral line and leaves the row as it was."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import discord
import pytest

from bot.cogs.errors import UNAVAILABLE
from bot.cogs.kioku.answers import (
    BOT_USER,
    EVERYONE_ROLE,
    LIST_MAX,
    LISTS_CLEARED,
    ONE_TARGET,
    UNKNOWN_ROLE,
)
from bot.db.models import GuildSettings
from bot.db.storage import faults
from tests.helpers.bot import KiokuHarness
from tests.helpers.chat_world import KiokuStarter
from tests.helpers.interaction_responses import InteractionResult

ALLOWED_MODELS = ["big-model", "small-model"]


@pytest.fixture
async def kioku(kioku_with: KiokuStarter) -> AsyncIterator[KiokuHarness]:
    async with kioku_with(
        guilds=2, settings={"servers": {"allowed_models": ALLOWED_MODELS, "persona_max_chars": 200}}
    ) as harness:
        yield harness


async def admin_runs(
    kioku: KiokuHarness, command: str, options: dict[str, Any] | None = None
) -> InteractionResult:
    admin = await kioku.env.create_member("admin", kind="admin")
    return await kioku.interactions.slash(command, options or {}, user=admin)


async def stored(kioku: KiokuHarness) -> dict[str, Any] | None:
    async with kioku.database.sessions() as session:
        row = await session.get(GuildSettings, kioku.env.guild.id)
        if row is None:
            return None
        return {
            "allowed_role_ids": sorted(row.allowed_role_ids),
            "blocked_role_ids": sorted(row.blocked_role_ids),
            "allowed_user_ids": sorted(row.allowed_user_ids),
            "blocked_user_ids": sorted(row.blocked_user_ids),
            "persona": row.persona,
            "model": row.model,
        }


def one_ephemeral_line(result: InteractionResult) -> str:
    texts = result.texts()
    assert result.ephemeral and len(texts) == 1, texts
    assert "\n" not in texts[0]
    return texts[0]


async def test_allow_block_and_remove_change_the_lists_and_settings_shows_them(
    kioku: KiokuHarness,
) -> None:
    role = await kioku.env.create_role("Regulars", discord.Permissions.none())
    member = kioku.env.member
    allowed = await admin_runs(kioku, "kioku access allow", {"role": role})
    assert one_ephemeral_line(allowed).startswith(f"Allowed <@&{role.id}>. Only allowed roles")
    blocked = await admin_runs(kioku, "kioku access block", {"user": member})
    assert one_ephemeral_line(blocked).startswith(f"Blocked <@{member.id}>")
    row = await stored(kioku)
    assert row is not None
    assert row["allowed_role_ids"] == [role.id] and row["blocked_user_ids"] == [member.id]

    shown = await admin_runs(kioku, "kioku settings")
    text = "\n".join(shown.texts())
    assert shown.ephemeral
    assert f"Allowed: 1 role: <@&{role.id}>" in text
    assert f"Blocked: 1 member: <@{member.id}>" in text
    assert "Direct messages: answered" in text
    assert "Model: `test-model` (the default)" in text
    assert "Persona: none" in text

    # Allowing a blocked member takes them off the block list: one list at most.
    await admin_runs(kioku, "kioku access allow", {"user": member})
    row = await stored(kioku)
    assert row is not None
    assert row["allowed_user_ids"] == [member.id] and row["blocked_user_ids"] == []

    removed = await admin_runs(kioku, "kioku access remove", {"role": role})
    assert one_ephemeral_line(removed).startswith(f"Removed <@&{role.id}>")
    again = await admin_runs(kioku, "kioku access remove", {"role": role})
    assert one_ephemeral_line(again) == f"<@&{role.id}> is on neither access list."

    cleared = await admin_runs(kioku, "kioku access clear")
    assert one_ephemeral_line(cleared) == LISTS_CLEARED
    row = await stored(kioku)
    assert row is not None and all(row[k] == [] for k in row if k.endswith("_ids"))


async def test_bad_targets_are_refused_and_nothing_is_saved(kioku: KiokuHarness) -> None:
    env = kioku.env
    await admin_runs(kioku, "kioku persona set", {"text": "Be calm."})
    before = await stored(kioku)
    foreign = await env.create_role("Elsewhere", discord.Permissions.none(), guild=env.guilds[1])
    helper_bot = await env.create_member("helperbot", bot=True)
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("kioku access allow", {"role": foreign}, UNKNOWN_ROLE),
        ("kioku access block", {"role": foreign}, UNKNOWN_ROLE),
        ("kioku access allow", {}, ONE_TARGET),
        ("kioku access block", {"role": env.guild.default_role}, EVERYONE_ROLE),
        ("kioku access block", {"role": foreign, "user": env.member}, ONE_TARGET),
        ("kioku access allow", {"user": helper_bot}, BOT_USER),
    ]
    for command, options, expected in cases:
        result = await admin_runs(kioku, command, options)
        assert one_ephemeral_line(result) == expected, (command, options)
    assert await stored(kioku) == before


async def test_a_full_list_refuses_one_more(kioku: KiokuHarness) -> None:
    ids = list(range(1, LIST_MAX + 1))
    await kioku.bot.memory.update_guild_settings(kioku.env.guild.id, 1, blocked_user_ids=ids)
    result = await admin_runs(kioku, "kioku access block", {"user": kioku.env.member})
    assert one_ephemeral_line(result).startswith(f"The list of blocked users is full ({LIST_MAX})")
    row = await stored(kioku)
    assert row is not None and row["blocked_user_ids"] == ids


async def test_persona_is_sanitized_saved_shown_and_cleared(kioku: KiokuHarness) -> None:
    token = "ghp_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5"
    result = await admin_runs(
        kioku, "kioku persona set", {"text": f"Talk like a pirate to {{user_name}}. {token}"}
    )
    line = one_ephemeral_line(result)
    assert line.startswith("Persona set (") and "changed as memories are" in line
    row = await stored(kioku)
    assert row is not None and row["persona"] is not None
    assert row["persona"].startswith("Talk like a pirate to {user_name}.")
    assert token not in row["persona"] and "[REDACTED:" in row["persona"]
    shown = "\n".join((await admin_runs(kioku, "kioku settings")).texts())
    assert "> Talk like a pirate to {user_name}." in shown

    cleared = await admin_runs(kioku, "kioku persona clear")
    assert one_ephemeral_line(cleared).startswith("Persona cleared")
    row = await stored(kioku)
    assert row is not None and row["persona"] is None


async def test_a_persona_over_the_cap_is_refused_and_the_old_one_kept(
    kioku: KiokuHarness,
) -> None:
    await admin_runs(kioku, "kioku persona set", {"text": "Be calm."})
    result = await admin_runs(kioku, "kioku persona set", {"text": "y" * 201})
    assert one_ephemeral_line(result) == ("The persona is 201 characters; at most 200 are allowed.")
    row = await stored(kioku)
    assert row is not None and row["persona"] == "Be calm."


async def test_model_set_takes_only_the_owners_models(kioku: KiokuHarness) -> None:
    refused = await admin_runs(kioku, "kioku model set", {"name": "gpt-5-ultra"})
    assert one_ephemeral_line(refused) == (
        "`gpt-5-ultra` is not a model this bot allows. "
        "Allowed: `test-model`, `big-model`, `small-model`."
    )
    assert await stored(kioku) is None  # not even a row was made

    chosen = await admin_runs(kioku, "kioku model set", {"name": "big-model"})
    assert one_ephemeral_line(chosen).startswith("Model set")
    row = await stored(kioku)
    assert row is not None and row["model"] == "big-model"
    assert "Model: `big-model`" in "\n".join((await admin_runs(kioku, "kioku settings")).texts())

    again = await admin_runs(kioku, "kioku model set", {"name": "nope"})
    assert one_ephemeral_line(again).startswith("`nope` is not a model this bot allows")
    row = await stored(kioku)
    assert row is not None and row["model"] == "big-model"

    reset = await admin_runs(kioku, "kioku model reset")
    assert (
        one_ephemeral_line(reset)
        == "Model reset: this server uses the default model, `test-model`."
    )
    row = await stored(kioku)
    assert row is not None and row["model"] is None


async def test_model_names_are_offered_from_the_owners_list(kioku: KiokuHarness) -> None:
    admin = await kioku.env.create_member("admin", kind="admin")
    result = await kioku.interactions.autocomplete("kioku model set", "name", "SMA", user=admin)
    assert [c["value"] for c in result.choices or []] == ["small-model"]


async def test_members_are_refused_and_nothing_changes(kioku: KiokuHarness) -> None:
    result = await kioku.interactions.slash(
        "kioku access block", {"user": kioku.env.member}, user=kioku.env.member
    )
    assert one_ephemeral_line(result).startswith("You need the **Manage Server** permission")
    assert await stored(kioku) is None


async def test_a_change_the_database_loses_at_commit_saves_nothing(kioku: KiokuHarness) -> None:
    role = await kioku.env.create_role("Regulars", discord.Permissions.none())
    await admin_runs(kioku, "kioku persona set", {"text": "Be calm."})
    before = await stored(kioku)
    plan = faults(kioku.bot.memory.sessions)
    plan.drop("saving guild settings", at="end")
    result = await admin_runs(kioku, "kioku access allow", {"role": role})
    plan.clear()
    assert one_ephemeral_line(result) == UNAVAILABLE
    assert await stored(kioku) == before
    # Nor does the bot act on it: the cached settings are those stored.
    config = await kioku.bot.memory.guild_config(kioku.env.guild.id)
    assert not config.access.restricted
