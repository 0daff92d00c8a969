"""Who may run what (SPEC §7), checked cell by cell on the real bot.

Every command × every kind of user × (server channel, DM). The kinds: a plain member, a
moderator (Manage Messages), an admin (Manage Server only), a member holding
Administrator (which implies every permission, so they may run everything a moderator
or admin may), the server's owner (every permission by ownership) and an operator (a
bot owner without any server permission). Each cell runs the command
for real (without Discord's gating, so the bot's own runtime check decides) and
expects either the command's normal answer or the error handler's refusal. Each cell
also asks what Discord's gating (``default_permissions``, guild-only) would do: a
command is never hidden from someone allowed to run it, and a top-level command is
hidden from exactly those refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import discord
import pytest
from discord import app_commands
from sqlalchemy import select

from bot.cogs.checks import MANAGE_MESSAGES, MANAGE_SERVER
from bot.cogs.errors import GUILD_ONLY
from bot.db.models import ShortTermMemory, StmCategory
from tests.conftest import Figures
from tests.helpers.bot import KiokuHarness
from tests.helpers.interaction_responses import InteractionResult

KINDS = ("member", "moderator", "admin", "administrator", "owner", "operator")
PLACES = ("guild", "dm")


def text_starts(prefix: str) -> Callable[[InteractionResult], bool]:
    return lambda r: r.modal is None and (r.texts() or [""])[-1].startswith(prefix)


def modal_titled(prefix: str) -> Callable[[InteractionResult], bool]:
    return lambda r: r.modal is not None and r.modal.title.startswith(prefix)


def confirm_buttons(r: InteractionResult) -> bool:
    return (r.content or "").startswith("**Forget me**") and len(r.custom_ids) == 2


def memory_shown(r: InteractionResult) -> bool:
    content = r.content or ""
    return content.startswith(("I don't remember anything", "**What I remember"))


@dataclass(frozen=True)
class Rule:
    """``permission``: what a server channel needs (``None``: anyone); ``dm``: whether
    the command works in a DM; ``answered``: recognises the command's normal answer."""

    permission: str | None
    dm: bool
    answered: Callable[[InteractionResult], bool]
    options: dict[str, object] = field(default_factory=dict)


RULES: dict[str, Rule] = {
    "refresh": Rule(MANAGE_MESSAGES, True, text_starts("Memory of this channel wiped")),
    "forget-me": Rule(None, True, confirm_buttons),
    "stm show": Rule(None, True, memory_shown),
    "stm edit": Rule(MANAGE_SERVER, False, modal_titled("Memory of")),
    "stm categories set": Rule(MANAGE_SERVER, False, modal_titled("Memory categories")),
    "stm categories list": Rule(MANAGE_SERVER, False, text_starts("No categories")),
    "stm categories clear": Rule(MANAGE_SERVER, False, text_starts("There are no categories")),
    "stm settings": Rule(MANAGE_SERVER, False, text_starts("**Short-term memory settings")),
    "stm history": Rule(MANAGE_SERVER, False, lambda r: "memory events" in (r.content or "")),
    # SPEC §7 names DM use only for /refresh; /stm summarize is allowed in a DM too, on
    # purpose (a product decision): in a DM the user is the only participant and the
    # memory it rewrites is their own, exactly the reasoning that lets them /refresh it.
    # Earlier cells post refresh markers, so there may be something new to summarize.
    "stm summarize": Rule(
        MANAGE_MESSAGES,
        True,
        lambda r: (
            r.modal is None
            and (r.texts() or [""])[-1].startswith(("Nothing new since", "Summary updated from"))
        ),
    ),
    "memories list": Rule(None, True, text_starts("I have no long-term memories")),
    "memories forget": Rule(
        None, True, text_starts("You have no long-term memory #999"), {"id": 999}
    ),
    "memories clear": Rule(None, True, text_starts("You have no long-term memories to delete")),
    "memories cross-context": Rule(
        None, True, text_starts("Cross-context memory "), {"enabled": "off"}
    ),
    "kioku settings": Rule(MANAGE_SERVER, False, text_starts("**Kioku in this server**")),
    # Without a role or member, the command's own answer (past the permission check).
    "kioku access allow": Rule(MANAGE_SERVER, False, text_starts("Name one role or one member")),
    "kioku access block": Rule(MANAGE_SERVER, False, text_starts("Name one role or one member")),
    "kioku access remove": Rule(MANAGE_SERVER, False, text_starts("Name one role or one member")),
    "kioku access clear": Rule(MANAGE_SERVER, False, text_starts("The access lists are already")),
    "kioku persona set": Rule(MANAGE_SERVER, False, text_starts("Persona set"), {"text": "Calm."}),
    # The first allowed cell clears what `persona set` stored; the next find nothing.
    "kioku persona clear": Rule(
        MANAGE_SERVER,
        False,
        lambda r: (
            r.modal is None
            and (r.texts() or [""])[-1].startswith(
                ("Persona cleared", "This server has no persona")
            )
        ),
    ),
    "kioku model set": Rule(MANAGE_SERVER, False, text_starts("Model set"), {"name": "test-model"}),
    "kioku model reset": Rule(
        MANAGE_SERVER,
        False,
        lambda r: (
            r.modal is None
            and (r.texts() or [""])[-1].startswith(("Model reset", "This server already uses"))
        ),
    ),
}

# What each kind holds in a server channel ("operator": a bot owner from owner_ids,
# with no permission in the server; "administrator": a role with only the Administrator
# flag, which Discord treats as every permission; "owner": the server's owner, who has
# them all).
HOLDS = {
    "member": set(),
    "moderator": {MANAGE_MESSAGES},
    "admin": {MANAGE_SERVER},
    "administrator": {MANAGE_MESSAGES, MANAGE_SERVER},
    "owner": {MANAGE_MESSAGES, MANAGE_SERVER},
    "operator": {MANAGE_MESSAGES, MANAGE_SERVER},
}


def expected_allowed(rule: Rule, kind: str, place: str) -> bool:
    if place == "dm":
        return rule.dm
    return rule.permission is None or rule.permission in HOLDS[kind]


def refusal_for(rule: Rule, place: str) -> str:
    if place == "dm":
        return GUILD_ONLY
    return f"You need the **{rule.permission}** permission"


@dataclass(frozen=True)
class Cell:
    command: str
    kind: str
    place: str
    expected: str
    got: str
    hidden: str | None

    def row(self) -> str:
        return f"/{self.command:<22} {self.kind:<13} {self.place:<5} {self.expected:<7} {self.got}"


def outcome(result: InteractionResult, rule: Rule, place: str) -> str:
    texts = result.texts()
    if (
        result.modal is None
        and result.ephemeral
        and len(texts) == 1
        and texts[0].startswith(refusal_for(rule, place))
    ):
        return "refused"
    # A modal is private by nature; every text answer must be ephemeral.
    if rule.answered(result) and (result.modal is not None or result.ephemeral):
        return "allowed"
    return f"unexpected: {texts or result.modal}"


async def test_the_matrix_covers_every_command_the_bot_registers(kioku: KiokuHarness) -> None:
    registered = {
        command.qualified_name
        for command in kioku.bot.tree.walk_commands()
        if isinstance(command, app_commands.Command)
    }
    assert registered == set(RULES)


async def test_every_command_answers_every_kind_of_user_as_the_spec_says(
    kioku: KiokuHarness, figures: Figures
) -> None:
    env, harness = kioku.env, kioku.interactions
    users: dict[str, discord.Member] = {
        "member": env.member,
        "moderator": await env.create_member("mod", kind="moderator"),
        "admin": await env.create_member("admin", kind="admin"),
        "administrator": await env.create_member(
            "administrator", permissions=discord.Permissions(administrator=True)
        ),
        "owner": await env.create_member("owner", kind="owner"),
        "operator": await env.create_member("operator"),
    }
    kioku.bot.owner_ids = {users["operator"].id}
    assert env.guild.owner_id == users["owner"].id

    # The kinds are what they claim to be: each role grants exactly its own flags, so a
    # cell the administrator passes is passed through Administrator alone, and the
    # owner's through ownership alone (no role grants them anything).
    def role_flags(member: discord.Member) -> list[discord.Permissions]:
        return [role.permissions for role in member.roles if not role.is_default()]

    assert role_flags(users["administrator"]) == [discord.Permissions(administrator=True)]
    assert role_flags(users["admin"]) == [discord.Permissions(manage_guild=True)]
    assert role_flags(users["owner"]) == role_flags(users["operator"]) == []
    here = {kind: env.channel.permissions_for(user) for kind, user in users.items()}
    assert here["administrator"].manage_messages and here["administrator"].manage_guild
    assert here["owner"].manage_messages and here["owner"].manage_guild
    assert not here["admin"].manage_messages and not here["operator"].manage_guild
    tree = kioku.bot.tree

    cells: list[Cell] = []
    for command, rule in RULES.items():
        root = tree.get_command(command.split()[0])
        for kind in KINDS:
            user = users[kind]
            for place in PLACES:
                dm = place == "dm"
                # Commands are run one after another, as people would: a /stm summarize
                # right after a /refresh of the same channel must not share its instant
                # (a write that started no later than a wipe is refused as overtaken).
                kioku.clock.advance(seconds=1)
                result = await harness.slash(command, rule.options, user=user, dm=dm, gate=False)
                permissions = 0 if dm else env.channel.permissions_for(user).value
                hidden = harness.block_reason(
                    root,
                    guild=None if dm else env.guild,
                    guild_scoped=False,
                    permissions=permissions,
                )
                allowed = expected_allowed(rule, kind, place)
                cells.append(
                    Cell(
                        command,
                        kind,
                        place,
                        "allowed" if allowed else "refused",
                        outcome(result, rule, place),
                        hidden,
                    )
                )

    wrong = [c for c in cells if c.expected != c.got]
    # Discord never hides a command from someone the bot would let run it (its gating
    # knows nothing of bot owners, so operators are left out) ...
    hidden_wrongly = [
        c for c in cells if c.hidden and c.expected == "allowed" and c.kind != "operator"
    ]
    # ... and hides a top-level command from everyone the bot would refuse.
    shown_wrongly = [
        c for c in cells if " " not in c.command and c.expected == "refused" and c.hidden is None
    ]
    table = "\n".join(c.row() for c in cells)
    print(f"\n{len(cells)} matrix cells checked\n{table}")
    figures["matrix cells checked"] = len(cells)
    figures["cells answered otherwise than SPEC §7"] = len(wrong)
    assert len(cells) == len(RULES) * len(KINDS) * len(PLACES) == 276
    assert not wrong, "\n".join(c.row() for c in wrong)
    assert not hidden_wrongly, "\n".join(f"{c.row()} hidden: {c.hidden}" for c in hidden_wrongly)
    assert not shown_wrongly, "\n".join(c.row() for c in shown_wrongly)
    assert {c.got for c in cells} == {"allowed", "refused"}


# ------------------------------------- forms and buttons outlive the command that opened them


async def demoted(kioku: KiokuHarness, member: discord.Member) -> discord.Member:
    """``member`` without the roles that gave them Manage Server."""
    await kioku.env.set_roles(member, [])
    member = kioku.env.guild.get_member(member.id) or member
    assert not kioku.env.channel.permissions_for(member).manage_guild
    return member


async def category_slugs(kioku: KiokuHarness) -> list[str]:
    async with kioku.database.sessions() as session:
        return [c.slug for c in await session.scalars(select(StmCategory))]


def refused_for_manage_server(result: InteractionResult) -> bool:
    texts = result.texts()
    return (
        result.modal is None
        and result.ephemeral
        and len(texts) == 1
        and texts[0].startswith(f"You need the **{MANAGE_SERVER}** permission")
    )


@pytest.mark.parametrize(
    ("command", "fields"),
    [
        pytest.param(
            "stm categories set", {"category_1": "Decisions: what we decided"}, id="categories"
        ),
        pytest.param("stm edit", {"summary": "rewritten by hand"}, id="stm-edit"),
    ],
)
async def test_a_form_submitted_after_losing_manage_server_is_refused(
    kioku: KiokuHarness, command: str, fields: dict[str, str]
) -> None:
    admin = await kioku.env.create_member("admin", kind="admin")
    opened = await kioku.interactions.slash(command, user=admin)
    assert opened.modal is not None
    member = await demoted(kioku, admin)

    submitted = await kioku.interactions.submit_modal(opened, fields, user=member)

    assert refused_for_manage_server(submitted), submitted.texts()
    assert await category_slugs(kioku) == []
    async with kioku.database.sessions() as session:
        assert list(await session.scalars(select(ShortTermMemory))) == []


async def test_edit_again_after_losing_manage_server_reopens_no_form(
    kioku: KiokuHarness,
) -> None:
    admin = await kioku.env.create_member("admin", kind="admin")
    opened = await kioku.interactions.slash("stm categories set", user=admin)
    failed = await kioku.interactions.submit_modal(opened, {"category_1": "no colon"}, user=admin)
    assert failed.texts()[-1].startswith("Nothing was changed. Please fix:")
    member = await demoted(kioku, admin)

    clicked = await kioku.interactions.click(failed, label="Edit again", user=member)

    assert refused_for_manage_server(clicked), clicked.texts()
    assert await category_slugs(kioku) == []
