"""Fuzzing every slash command through the real command tree (dpytest + the real bot).

Every command the bot registers is invoked with arbitrary option values (by option
type: out-of-range integers, unknown choices, hostile strings), by members with and
without the needed permissions, in servers and DMs; modals it opens are submitted with
hostile text, and buttons it shows are clicked. Invariants after every interaction:

* it got exactly one initial response (a deferred one is completed), every message fits
  Discord's limits, and every modal is one Discord would accept;
* nothing escaped: no "Something went wrong" answer, no error logged, no handler error;
* every memory text in the database (read back with SQL: ``short_term_memories`` values,
  ``stm_categories`` labels and descriptions, ``long_term_memories`` facts) is clean: no
  control characters but ``\\n``/``\\t`` (none at all in a label or description), no
  invisible characters, only the prompt's placeholders, no planted secret, within its
  length cap (1500 / 40 / 200 / 500); category rows are valid; nobody deletes another
  user's memories.

One bot per test, shared by its examples. ``--fuzz`` runs 20,000 examples per test.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import discord
import pytest
from discord import app_commands
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import func, select

from bot.cogs.errors import GUILD_ONLY, SOMETHING_WENT_WRONG
from bot.db.models import LongTermMemory, StmCategory
from bot.db.storage import faults
from bot.vocabulary.model import Provenance, ScopeKey
from bot.vocabulary.sanitize import sanitize_value
from tests.helpers.bot import KiokuHarness
from tests.helpers.builders import settings_changed_elsewhere
from tests.helpers.fuzz import (
    FuzzCounter,
    fuzz_settings,
    hostile_text,
    stored_memory_problems,
    weighted,
)
from tests.helpers.interaction_responses import DEFERRED_CHANNEL_MESSAGE, InteractionResult

pytestmark = pytest.mark.fuzz

MESSAGE_LIMIT = 2000
EMBED_TOTAL_LIMIT = 6000
MODAL_TITLE_LIMIT = 45
INPUT_LABEL_LIMIT = 45
MODAL_INPUT_LIMIT = 5
INPUT_PLACEHOLDER_LIMIT = 100
INPUT_VALUE_LIMIT = 4000
CUSTOM_ID_LIMIT = 100
SLUG = r"[a-z][a-z0-9_]{0,47}"
VICTIM_FACT = "The victim's long-term fact: Kx-Victim-5150"


# ------------------------------------------------------------------- world


@dataclass
class World:
    kioku: KiokuHarness
    admin: discord.Member
    moderator: discord.Member
    member: discord.Member
    owner: discord.Member
    victim: discord.Member  # never acts; their memories must survive everything
    errors: ErrorLog

    @property
    def actors(self) -> list[discord.Member]:
        return [self.admin, self.moderator, self.member, self.owner]


class ErrorLog(logging.Handler):
    """Every record logged at ERROR or above, from any logger, while the test runs."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def error_log() -> Iterator[ErrorLog]:
    handler = ErrorLog()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


@pytest.fixture
async def world(kioku: KiokuHarness, error_log: ErrorLog) -> World:
    env = kioku.env
    world = World(
        kioku=kioku,
        admin=await env.create_member("admin", kind="admin"),
        moderator=await env.create_member("mod", kind="moderator"),
        member=env.member,
        owner=await env.create_member("owner", kind="owner"),
        victim=await env.create_member("victim"),
        errors=error_log,
    )
    memory = kioku.bot.memory
    # Something to show, edit, refresh and forget from the start, written by the victim.
    for channel in (env.channel.id, env.dm_channel(world.victim).id):
        guild_id = env.guild.id if channel == env.channel.id else None
        result = await memory.admin_edit(
            guild_id=guild_id,
            channel_id=channel,
            actor_user_id=world.victim.id,
            summary="The victim's memory {evil} password: Hunter2-Zq9vXw",
        )
        assert result.ok
    await kioku.bot.longterm.remember(
        world.victim.id, env.guild.id, VICTIM_FACT, Provenance("user_command")
    )
    return world


# ------------------------------------------------------------- invariants


class Checker:
    """Checks each interaction as it happens and the database afterwards."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.log_mark = len(world.errors.records)
        self.error_mark = len(world.kioku.env.errors)

    def interaction(self, result: InteractionResult, what: str) -> None:
        responses = [call for call in result.calls if call.kind == "response"]
        assert len(responses) == 1, f"{what}: {len(responses)} initial responses"
        if result.response_type == DEFERRED_CHANNEL_MESSAGE:
            assert result.followups or result.edits, f"{what}: deferred and never completed"
        for call in result.calls:
            content = call.content or ""
            assert len(content) <= MESSAGE_LIMIT, f"{what}: {len(content)} characters"
            assert SOMETHING_WENT_WRONG not in content, f"{what}: {content}"
            embeds = sum(len(embed) for embed in call.embeds)
            assert embeds <= EMBED_TOTAL_LIMIT, f"{what}: embeds of {embeds} characters"
            if call.modal is not None:
                self.modal(call.modal.title, call.modal.text_inputs, what)
        self.no_errors(what)

    @staticmethod
    def modal(title: str, inputs: list[dict[str, Any]], what: str) -> None:
        assert 0 < len(title) <= MODAL_TITLE_LIMIT, f"{what}: modal title {title!r}"
        assert 0 < len(inputs) <= MODAL_INPUT_LIMIT, f"{what}: {len(inputs)} inputs"
        for field in inputs:
            label = field.get("label") or ""
            assert 0 < len(label) <= INPUT_LABEL_LIMIT, f"{what}: input label {label!r}"
            assert len(field.get("placeholder") or "") <= INPUT_PLACEHOLDER_LIMIT, what
            limit = field.get("max_length") or INPUT_VALUE_LIMIT
            assert limit <= INPUT_VALUE_LIMIT, what
            assert len(field.get("value") or "") <= limit, f"{what}: default longer than max"
            assert 0 < len(field["custom_id"]) <= CUSTOM_ID_LIMIT, what

    def no_errors(self, what: str) -> None:
        errors = self.world.errors.records[self.log_mark :]
        assert not errors, f"{what}: logged {[r.getMessage() for r in errors]}"
        assert len(self.world.kioku.env.errors) == self.error_mark, self.world.kioku.env.errors

    async def database(self) -> None:
        kioku = self.world.kioku
        async with kioku.database.sessions() as session:
            categories = (await session.execute(select(StmCategory))).scalars().all()
            victim_facts = await session.scalar(
                select(func.count())
                .select_from(LongTermMemory)
                .where(LongTermMemory.user_id == self.world.victim.id)
            )
        # Every stored memory text: STM summaries and category values, category labels
        # and descriptions, long-term facts (control and invisible characters, unknown
        # placeholders, planted secrets, length caps).
        problems = await stored_memory_problems(kioku.database.sessions)
        assert not problems, problems[:10]
        per_guild: dict[int, list[StmCategory]] = {}
        for category in categories:
            per_guild.setdefault(category.guild_id, []).append(category)
            assert re.fullmatch(SLUG, category.slug), category.slug
            assert 0 < len(category.label) <= 40 and 0 < len(category.description) <= 200
        for guild_categories in per_guild.values():
            assert len(guild_categories) <= 5
            assert len({c.slug for c in guild_categories}) == len(guild_categories)
        assert victim_facts == 1, "someone deleted another user's long-term memory"


# -------------------------------------------------------------- strategies

int64 = st.integers(-(2**63), 2**63 - 1)
huge_int = st.integers(-(2**200), 2**200)


def in_range(low: int | None, high: int | None) -> st.SearchStrategy[int]:
    return st.integers(min_value=low, max_value=high)


def int_option(low: int | None, high: int | None) -> st.SearchStrategy[int]:
    edges = [v for v in (low, high) if v is not None]
    near = [e + d for e in edges for d in (-1, 0, 1)] + [0, -1, 2**31, 2**53, -(2**53)]
    return weighted(
        (3, in_range(low, high)),
        (1, st.sampled_from(near)),
        (1, int64),
        (1, huge_int),
    )


option_text = hostile_text(max_size=6000)


def choice_option(choices: list[app_commands.Choice[Any]]) -> st.SearchStrategy[Any]:
    values = [choice.value for choice in choices]
    kind = type(values[0]) if values else str
    other: st.SearchStrategy[Any] = option_text if kind is str else int_option(None, None)
    return weighted((3, st.sampled_from(values)), (1, other))


def option_strategy(param: app_commands.Parameter, world: World) -> st.SearchStrategy[Any]:
    """Values of every kind an option of this type could arrive with."""
    kind = param.type
    if param.choices:
        return choice_option(list(param.choices))
    if kind is discord.AppCommandOptionType.integer:
        return int_option(param.min_value, param.max_value)  # type: ignore[arg-type]
    if kind is discord.AppCommandOptionType.number:
        return st.floats(allow_nan=False, allow_infinity=False)
    if kind is discord.AppCommandOptionType.boolean:
        return st.booleans()
    if kind is discord.AppCommandOptionType.string:
        return option_text
    if kind in (discord.AppCommandOptionType.user, discord.AppCommandOptionType.mentionable):
        return st.sampled_from([*world.actors, world.victim])
    if kind is discord.AppCommandOptionType.channel:
        return st.just(world.kioku.env.channel)
    if kind is discord.AppCommandOptionType.role:
        return st.just(world.kioku.env.guild.default_role)
    return st.nothing()


def leaf_commands(world: World) -> list[app_commands.Command[Any, ..., Any]]:
    tree = world.kioku.bot.tree
    commands = [c for c in tree.walk_commands() if isinstance(c, app_commands.Command)]
    return sorted(commands, key=lambda c: c.qualified_name)


# ----------------------------------------------------------------- helpers


async def submit_modal(
    world: World,
    checker: Checker,
    result: InteractionResult,
    user: discord.Member,
    dm: bool,
    data: st.DataObject,
) -> InteractionResult:
    modal = result.modal
    assert modal is not None
    values = {
        field["custom_id"]: data.draw(
            weighted((3, hostile_text(max_size=1500)), (1, hostile_text(max_size=4000))),
            label=f"modal {field['custom_id']}",
        )
        for field in modal.text_inputs
    }
    submitted = await world.kioku.interactions.submit_modal(modal, values, user=user, dm=dm)
    checker.interaction(submitted, f"modal {modal.title!r}")
    return submitted


async def click_some_button(
    world: World,
    checker: Checker,
    result: InteractionResult,
    user: discord.Member,
    dm: bool,
    data: st.DataObject,
) -> InteractionResult | None:
    # (what the button is on, the button): the response's message or a follow-up.
    targets: list[tuple[Any, Mapping[str, Any]]] = []
    if result.response is not None:
        targets += [(result, b) for b in result.response.buttons if b.get("custom_id")]
    for call in result.followups:
        targets += [(call, b) for b in call.buttons if b.get("custom_id")]
    if not targets:
        return None
    target, button = data.draw(st.sampled_from(targets), label="button")
    # Answers are ephemeral: only the person who ran the command can click them.
    clicked = await world.kioku.interactions.click(
        target, button["custom_id"], user=user if not dm else user._user
    )
    checker.interaction(clicked, f"button {button.get('label')!r}")
    if clicked.modal is not None:
        await submit_modal(world, checker, clicked, user, dm, data)
    return clicked


# ------------------------------------------------------------------- tests


@fuzz_settings(600, database=True)
@given(data=st.data())
async def test_every_command_with_arbitrary_options_answers_once_and_stores_clean_text(
    world: World, fuzz_counter: FuzzCounter, data: st.DataObject
) -> None:
    checker = Checker(world)
    command = data.draw(st.sampled_from(leaf_commands(world)), label="command")
    user = data.draw(st.sampled_from(world.actors), label="user")
    dm = data.draw(weighted((9, st.just(False)), (1, st.just(True))), label="dm")
    options: dict[str, Any] = {}
    for param in command.parameters:
        if param.required or data.draw(st.booleans(), label=f"give {param.name}"):
            options[param.name] = data.draw(option_strategy(param, world), label=param.name)

    result = await world.kioku.interactions.slash(
        command.qualified_name, options, user=user._user if dm else user, dm=dm
    )
    checker.interaction(result, f"/{command.qualified_name} {options!r:.200}")
    if result.modal is not None and data.draw(st.booleans(), label="submit"):
        submitted = await submit_modal(world, checker, result, user, dm, data)
        await click_some_button(world, checker, submitted, user, dm, data)
    elif data.draw(st.booleans(), label="click"):
        await click_some_button(world, checker, result, user, dm, data)
    await checker.database()
    fuzz_counter.tick(command.qualified_name)


@fuzz_settings(300, database=True)
@given(
    enabled=st.none() | st.booleans(),
    cadence=st.none() | int_option(1, 100),
    render_mode=st.none()
    | choice_option([app_commands.Choice(name=v, value=v) for v in ("crude_summary", "supersede")]),
    raw_messages=st.none() | int_option(1, 10),
    always_on=st.none() | st.booleans(),
    who=st.sampled_from(["admin", "owner", "moderator", "member", "dm"]),
)
async def test_stm_settings_applies_valid_values_and_changes_nothing_otherwise(
    world: World,
    fuzz_counter: FuzzCounter,
    enabled: bool | None,
    cadence: int | None,
    render_mode: str | None,
    raw_messages: int | None,
    always_on: bool | None,
    who: str,
) -> None:
    checker = Checker(world)
    kioku = world.kioku
    guild_id = kioku.env.guild.id
    channel_id = kioku.env.channel.id
    memory = kioku.bot.memory
    settings_changed_elsewhere(memory, guild_id)
    before = await memory.guild_config(guild_id)
    given_options = {
        "enabled": enabled,
        "cadence": cadence,
        "render_mode": render_mode,
        "raw_messages": raw_messages,
        "always_on": always_on,
    }
    options = {name: value for name, value in given_options.items() if value is not None}
    user = world.admin if who == "dm" else getattr(world, who)

    result = await kioku.interactions.slash(
        "stm settings", options, user=user._user if who == "dm" else user, dm=who == "dm"
    )

    checker.interaction(result, f"/stm settings {options}")
    settings_changed_elsewhere(memory, guild_id)
    after = await memory.guild_config(guild_id)
    content = result.content or ""
    valid = (
        (cadence is None or 1 <= cadence <= 100)
        and (raw_messages is None or 1 <= raw_messages <= 10)
        and (render_mode is None or render_mode in ("crude_summary", "supersede"))
    )
    if who == "dm":
        assert content == GUILD_ONLY
        assert after == before
        outcome = "dm"
    elif who in ("moderator", "member"):
        assert "**Manage Server**" in content
        assert after == before
        outcome = "refused"
    elif not valid:
        assert "must be between" in content or "can't use" in content, content
        assert after == before
        outcome = "invalid"
    else:
        assert content.startswith("**"), content
        assert after.stm_enabled == (before.stm_enabled if enabled is None else enabled)
        assert after.refresh_cadence == (cadence or before.refresh_cadence)
        assert after.render_mode == (render_mode or before.render_mode)
        assert after.crude_message_count == (raw_messages or before.crude_message_count)
        expected_on = channel_id in before.always_on_channels if always_on is None else always_on
        assert (channel_id in after.always_on_channels) == expected_on
        outcome = "applied"
    await checker.database()
    fuzz_counter.tick(outcome)


category_line = st.builds(
    "{}:{}".format,
    weighted((3, st.text(min_size=1, max_size=20)), (1, hostile_text(max_pieces=3))),
    weighted((3, st.text(min_size=1, max_size=60)), (1, hostile_text(max_pieces=4))),
)
categories_text = weighted(
    (3, st.lists(category_line, min_size=1, max_size=6).map("\n".join)),
    (1, hostile_text(max_size=3000)),
)


@fuzz_settings(300, database=True)
@given(data=st.data(), text=categories_text)
async def test_categories_set_then_edit_with_hostile_text(
    world: World, fuzz_counter: FuzzCounter, data: st.DataObject, text: str
) -> None:
    """``/stm categories set`` with arbitrary modal text, then ``/stm edit`` in whatever
    mode resulted, with hostile values; then ``/stm show`` and ``/stm categories list``."""
    checker = Checker(world)
    kioku = world.kioku
    admin = world.admin
    interactions = kioku.interactions
    opened = await interactions.slash("stm categories set", user=admin)
    checker.interaction(opened, "/stm categories set")
    assert opened.modal is not None
    rows = text.split("\n")[: len(opened.modal.text_inputs)]
    typed = {f["custom_id"]: row for f, row in zip(opened.modal.text_inputs, rows, strict=False)}
    saved = await interactions.submit_modal(opened.modal, typed, user=admin)
    checker.interaction(saved, f"categories modal {text!r:.100}")
    accepted = not (saved.content or "").startswith("Nothing was changed")
    if not accepted:
        retry = await interactions.click(saved, label="Edit again", user=admin)
        checker.interaction(retry, "Edit again")
        assert retry.modal is not None

    edit = await interactions.slash("stm edit", user=admin)
    checker.interaction(edit, "/stm edit")
    assert edit.modal is not None
    config = await kioku.bot.memory.guild_config(kioku.env.guild.id)
    custom_ids = [f["custom_id"] for f in edit.modal.text_inputs]
    if config.category_mode:
        assert custom_ids == [c.slug for c in config.categories]
    assert 0 < len(custom_ids) <= MODAL_INPUT_LIMIT
    # Always as many draws as a modal can have inputs: how many the modal has depends on
    # the categories an earlier example left in the shared database, and a draw count
    # that varies between runs of one example makes Hypothesis fail as flaky.
    drawn = data.draw(
        st.lists(
            hostile_text(max_size=3000), min_size=MODAL_INPUT_LIMIT, max_size=MODAL_INPUT_LIMIT
        ),
        label="edit values",
    )
    values = dict(zip(custom_ids, drawn, strict=False))
    written = await interactions.submit_modal(edit.modal, values, user=admin)
    checker.interaction(written, "/stm edit modal")
    entry = await kioku.bot.memory.entry(ScopeKey.server(kioku.env.guild.id, kioku.env.channel.id))
    if (written.content or "").startswith("Saved"):
        if config.category_mode:
            for slug, value in values.items():
                assert entry.categories.get(slug, "") == (sanitize_value(value) if value else "")
        else:
            assert entry.summary == sanitize_value(values[custom_ids[0]])

    for command in ("stm show", "stm categories list", "stm history"):
        shown = await interactions.slash(command, user=admin)
        checker.interaction(shown, f"/{command}")
    if data.draw(st.booleans(), label="clear"):
        cleared = await interactions.slash("stm categories clear", user=admin)
        checker.interaction(cleared, "/stm categories clear")
    await checker.database()
    fuzz_counter.tick("accepted" if accepted else "refused")


async def test_the_checks_catch_an_escaped_exception(world: World) -> None:
    """The invariants are not vacuous: a command that blows up fails them."""

    memory = world.kioku.bot.memory
    settings_changed_elsewhere(memory, world.kioku.env.guild.id)
    faults(memory.sessions).fail("loading guild settings", error=RuntimeError("boom"))
    checker = Checker(world)
    result = await world.kioku.interactions.slash("stm show", user=world.member)
    with pytest.raises(AssertionError, match="Something went wrong"):
        checker.interaction(result, "/stm show")
    with pytest.raises(AssertionError, match="logged"):
        checker.no_errors("/stm show")
