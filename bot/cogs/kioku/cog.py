"""``/kioku``: who the bot answers in a server (access lists), and the server's persona
and model. Manage Server, in a server; answers are ephemeral.

Bad input (no role or member, a role of another server, a persona over the cap, a model
the operator does not allow) is refused with one line and nothing is saved."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import discord
from discord import app_commands
from discord.ext import commands

from bot.cogs.checks import admin_only
from bot.cogs.errors import InputRefused, answer, think
from bot.cogs.kioku.answers import (
    BOT_USER,
    COLUMNS,
    EVERYONE_ROLE,
    LIST_MAX,
    LISTS_CLEARED,
    LISTS_EMPTY,
    MODEL_RESET,
    NO_MODEL,
    NO_PERSONA,
    ONE_TARGET,
    PERSONA_CLEARED,
    UNKNOWN_ROLE,
    Kind,
    Rule,
    describe_change,
    describe_kioku,
    list_full,
    mention,
    model_refused,
)
from bot.cogs.stm import answer_blocks
from bot.conversation import PersonaRefused, clean_persona
from bot.memory import MemoryService
from bot.vocabulary import GuildConfig

if TYPE_CHECKING:
    from bot.app import KiokuBot

log = logging.getLogger(__name__)

ROLE_HELP = "A role of this server"
USER_HELP = "A member"


class KiokuCog(commands.Cog):
    """The ``/kioku`` command group."""

    # Hidden from members and in DMs; every command checks Manage Server again.
    kioku = app_commands.Group(
        name="kioku",
        description="Who the bot answers in this server, its persona and its model",
        default_permissions=discord.Permissions(manage_guild=True),
        guild_only=True,
    )
    access = app_commands.Group(
        name="access", description="Allow or block roles and members", parent=kioku
    )
    persona = app_commands.Group(name="persona", description="This server's persona", parent=kioku)
    model = app_commands.Group(name="model", description="This server's model", parent=kioku)

    def __init__(self, bot: KiokuBot) -> None:
        self.bot = bot

    @property
    def memory(self) -> MemoryService:
        return self.bot.memory

    @staticmethod
    def _guild(interaction: discord.Interaction[Any]) -> discord.Guild:
        guild = interaction.guild
        assert guild is not None  # the admin checks refuse DMs
        return guild

    async def _update(self, interaction: discord.Interaction[Any], **changes: Any) -> GuildConfig:
        guild = self._guild(interaction)
        config = await self.memory.update_guild_settings(guild.id, interaction.user.id, **changes)
        log.info("guild %s changed /kioku settings: %s", guild.id, sorted(changes))
        return config

    # ------------------------------------------------------------------ settings

    @kioku.command(name="settings", description="Who the bot answers here, its persona and model")
    @admin_only()
    async def settings(self, interaction: discord.Interaction[KiokuBot]) -> None:
        await think(interaction)  # the database may be slow: Discord waits only 3 s
        config = await self.memory.guild_config(self._guild(interaction).id)
        await answer_blocks(interaction, describe_kioku(config, self.bot.settings))

    # -------------------------------------------------------------------- access

    @access.command(
        name="allow", description="Answer this role or member (then only those allowed)"
    )
    @app_commands.describe(role=ROLE_HELP, user=USER_HELP)
    @admin_only()
    async def access_allow(
        self,
        interaction: discord.Interaction[KiokuBot],
        role: discord.Role | None = None,
        user: discord.User | None = None,
    ) -> None:
        await self._change_access(interaction, "allow", role, user)

    @access.command(name="block", description="Never answer this role or member")
    @app_commands.describe(role=ROLE_HELP, user=USER_HELP)
    @admin_only()
    async def access_block(
        self,
        interaction: discord.Interaction[KiokuBot],
        role: discord.Role | None = None,
        user: discord.User | None = None,
    ) -> None:
        await self._change_access(interaction, "block", role, user)

    @access.command(name="remove", description="Take a role or member off the access lists")
    @app_commands.describe(role=ROLE_HELP, user=USER_HELP)
    @admin_only()
    async def access_remove(
        self,
        interaction: discord.Interaction[KiokuBot],
        role: discord.Role | None = None,
        user: discord.User | None = None,
    ) -> None:
        await self._change_access(interaction, None, role, user)

    @access.command(name="clear", description="Empty the access lists: answer everyone")
    @admin_only()
    async def access_clear(self, interaction: discord.Interaction[KiokuBot]) -> None:
        await think(interaction)
        config = await self.memory.guild_config(self._guild(interaction).id)
        if config.access.empty:
            await answer(interaction, LISTS_EMPTY)
            return
        await self._update(interaction, **{column: [] for column in COLUMNS.values()})
        await answer(interaction, LISTS_CLEARED)

    def _target(
        self, interaction: discord.Interaction[Any], role: discord.Role | None, user: Any
    ) -> tuple[Kind, int]:
        """The one role or member named, checked (see :class:`InputRefused`)."""
        if (role is None) == (user is None):
            raise InputRefused(ONE_TARGET)
        if role is not None:
            guild = self._guild(interaction)
            if guild.get_role(role.id) is None:
                raise InputRefused(UNKNOWN_ROLE)
            if role.is_default():
                raise InputRefused(EVERYONE_ROLE)
            return "role", role.id
        if user.bot:
            raise InputRefused(BOT_USER)
        return "user", int(user.id)

    async def _change_access(
        self,
        interaction: discord.Interaction[KiokuBot],
        rule: Rule | None,
        role: discord.Role | None,
        user: discord.User | None,
    ) -> None:
        kind, item_id = self._target(interaction, role, user)
        await think(interaction)
        config = await self.memory.guild_config(self._guild(interaction).id)
        lists = {
            "allow": config.access.allowed_roles if kind == "role" else config.access.allowed_users,
            "block": config.access.blocked_roles if kind == "role" else config.access.blocked_users,
        }
        if rule is None and not any(item_id in ids for ids in lists.values()):
            await answer(interaction, f"{mention(kind, item_id)} is on neither access list.")
            return
        if rule is not None and item_id not in lists[rule] and len(lists[rule]) >= LIST_MAX:
            raise InputRefused(list_full(rule, kind))
        # One statement: on one list at most (allowing takes off the block, and back).
        id_changes = {COLUMNS[(r, kind)]: (item_id, r == rule) for r in ("allow", "block")}
        config = await self._update(interaction, id_changes=id_changes)
        await answer(interaction, describe_change(rule, kind, item_id, config))

    # ------------------------------------------------------------------- persona

    @persona.command(name="set", description="Give the bot a persona in this server")
    @app_commands.describe(text="How the bot should act here (added after the operator's persona)")
    @admin_only()
    async def persona_set(self, interaction: discord.Interaction[KiokuBot], text: str) -> None:
        try:
            cleaned = clean_persona(text, self.bot.settings.servers.persona_max_chars)
        except PersonaRefused as exc:
            raise InputRefused(str(exc)) from None
        await think(interaction)
        await self._update(interaction, persona=cleaned)
        changed = cleaned != text.strip()
        note = " Some of it was changed as memories are (secrets, hidden characters)." * changed
        await answer(interaction, f"Persona set ({len(cleaned)} characters).{note}")

    @persona.command(name="clear", description="Remove this server's persona")
    @admin_only()
    async def persona_clear(self, interaction: discord.Interaction[KiokuBot]) -> None:
        await think(interaction)
        config = await self.memory.guild_config(self._guild(interaction).id)
        if config.persona is None:
            await answer(interaction, NO_PERSONA)
            return
        await self._update(interaction, persona=None)
        await answer(interaction, PERSONA_CLEARED)

    # --------------------------------------------------------------------- model

    @model.command(name="set", description="Choose this server's model (from the owner's list)")
    @app_commands.describe(name="One of the models the bot's owner allows")
    @admin_only()
    async def model_set(self, interaction: discord.Interaction[KiokuBot], name: str) -> None:
        allowed = self.bot.settings.server_models
        if name.strip() not in allowed:
            raise InputRefused(model_refused(name, allowed))
        await think(interaction)
        await self._update(interaction, model=name.strip())
        await answer(
            interaction, f"Model set: this server's turns and summaries use `{name.strip()}`."
        )

    @model_set.autocomplete("name")
    async def model_names(
        self, interaction: discord.Interaction[KiokuBot], current: str
    ) -> list[app_commands.Choice[str]]:
        wanted = current.strip().lower()
        return [
            app_commands.Choice(name=m[:100], value=m)
            for m in self.bot.settings.server_models
            if wanted in m.lower()
        ][:25]

    @model.command(name="reset", description="Use the default model in this server again")
    @admin_only()
    async def model_reset(self, interaction: discord.Interaction[KiokuBot]) -> None:
        await think(interaction)
        config = await self.memory.guild_config(self._guild(interaction).id)
        default = self.bot.settings.model
        if config.model is None:
            await answer(interaction, NO_MODEL.format(model=default))
            return
        await self._update(interaction, model=None)
        await answer(interaction, MODEL_RESET.format(model=default))


async def setup(bot: KiokuBot) -> None:
    await bot.add_cog(KiokuCog(bot))
