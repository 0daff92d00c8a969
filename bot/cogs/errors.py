"""The one error handler of the command tree, and the helpers every cog answers with
(``answer``, ``think``, ``plural``).

Each known error type maps to a short ephemeral answer; anything else is logged with
its traceback (never with memory text: commands put none in their exceptions) and
answered with a generic apology. Modals and views route their errors here too (they
subclass :class:`ReportingModal` and :class:`ReportingView`), so the user gets the same
answer wherever a command fails.
"""

from __future__ import annotations

import logging
from typing import Any

import discord
from discord import app_commands
from discord.ext import commands
from sqlalchemy import exc as sa_exc

from bot.cogs.checks import MissingMemoryPermission
from bot.vocabulary import MemoryUnavailable

log = logging.getLogger(__name__)

UNAVAILABLE = "Memory storage is unavailable right now; nothing was changed. Try again shortly."
GUILD_ONLY = "This command only works in a server."
SOMETHING_WENT_WRONG = "Something went wrong while running this command. It has been logged."
NOT_ALLOWED = "You can't use this command here."
OUT_OF_DATE = "This command is out of date. Try again in a minute."

# The database could not be reached or timed out: the transaction did not commit.
_STORAGE_ERRORS: tuple[type[BaseException], ...] = (
    MemoryUnavailable,
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.DisconnectionError,
    sa_exc.TimeoutError,
    OSError,  # refused connections and asyncio timeouts included
)
_VALUE_PREVIEW = 50


class InputRefused(app_commands.AppCommandError):
    """Bad input a command refuses (nothing was saved); the message is the whole answer."""


async def think(interaction: discord.Interaction[Any]) -> None:
    """Acknowledge now ("thinking…", ephemeral) when the answer needs the database: an
    interaction not answered within 3 s is gone, whatever comes later. ``answer``
    then sends the real answer."""
    if not interaction.response.is_done():
        await interaction.response.defer(ephemeral=True, thinking=True)


async def answer(interaction: discord.Interaction[Any], content: str, **kwargs: Any) -> None:
    """Answer ephemerally: the first response if there is none yet, else a follow-up."""
    kwargs.setdefault("ephemeral", True)
    if interaction.response.is_done():
        await interaction.followup.send(content, **kwargs)
    else:
        await interaction.response.send_message(content, **kwargs)


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """``1 row``, ``2 rows``: a count as the answers word it."""
    word = singular if count == 1 else (plural_form or singular + "s")
    return f"{count} {word}"


def _option_name(interaction: discord.Interaction[Any], transformer: object) -> str | None:
    command = interaction.command
    if not isinstance(command, app_commands.Command):
        return None
    # discord.py keeps no public link from an option to its transformer; each option's
    # transformer instance is the annotation it was declared with.
    parameters: dict[str, Any] = getattr(command, "_params", {})
    for parameter in parameters.values():
        if getattr(parameter, "_annotation", None) is transformer:
            return str(parameter.display_name)
    return None


def _bad_option(interaction: discord.Interaction[Any], error: app_commands.TransformerError) -> str:
    name = _option_name(interaction, error.transformer)
    option = f"**{name}**" if name else "That option"
    low = getattr(error.transformer, "min_value", None)
    high = getattr(error.transformer, "max_value", None)
    value = str(error.value)
    if len(value) > _VALUE_PREVIEW:
        value = value[: _VALUE_PREVIEW - 1] + "…"
    if low is not None and high is not None:
        return f"{option} must be between {low} and {high} (you gave `{value}`)."
    return f"{option} has a value I can't use (`{value}`)."


def _cooldown(error: app_commands.CommandOnCooldown) -> str:
    seconds = max(1, round(error.retry_after))
    return f"Slow down: you can use this command again in {seconds} s."


def _missing_permissions(error: app_commands.MissingPermissions) -> str:
    names = [
        p.replace("_", " ").replace("guild", "server").title() for p in error.missing_permissions
    ]
    return "You need the " + ", ".join(f"**{n}**" for n in names) + " permission to do this."


def message_for(interaction: discord.Interaction[Any], error: BaseException) -> str:
    """The answer for ``error`` (logging the ones nobody expected)."""
    original = error
    if isinstance(error, app_commands.CommandInvokeError):
        original = error.original
    if isinstance(original, MissingMemoryPermission | InputRefused):
        return str(original)
    if isinstance(original, app_commands.NoPrivateMessage):
        return GUILD_ONLY
    if isinstance(original, app_commands.MissingPermissions):
        return _missing_permissions(original)
    if isinstance(original, app_commands.CommandOnCooldown):
        return _cooldown(original)
    if isinstance(original, app_commands.TransformerError):
        return _bad_option(interaction, original)
    if isinstance(original, app_commands.CheckFailure):
        return NOT_ALLOWED
    if isinstance(original, app_commands.CommandNotFound | app_commands.CommandSignatureMismatch):
        return OUT_OF_DATE
    command = interaction.command.qualified_name if interaction.command else None
    if isinstance(original, _STORAGE_ERRORS):
        log.warning(
            "memory storage unavailable for /%s (guild %s, channel %s): %s",
            command,
            interaction.guild_id,
            interaction.channel_id,
            original.__class__.__name__,
        )
        return UNAVAILABLE
    log.error(
        "/%s failed (guild %s, channel %s, interaction type %s)",
        command,
        interaction.guild_id,
        interaction.channel_id,
        interaction.type.name,
        exc_info=original,
    )
    return SOMETHING_WENT_WRONG


async def report_error(interaction: discord.Interaction[Any], error: BaseException) -> None:
    """Answer ``error`` ephemerally, however far the interaction got."""
    content = message_for(interaction, error)
    try:
        await answer(interaction, content)
    except discord.HTTPException as exc:  # expired token, or a modal was the response
        log.warning("could not report a command error to the user: %s", exc.__class__.__name__)


class ReportingView(discord.ui.View):
    """A view whose errors get the tree's answers (a view bypasses ``tree.on_error``)."""

    async def on_error(
        self, interaction: discord.Interaction[Any], error: Exception, item: discord.ui.Item[Any], /
    ) -> None:
        await report_error(interaction, error)


class ReportingModal(discord.ui.Modal):
    """A modal whose errors get the tree's answers (a modal bypasses ``tree.on_error``)."""

    async def on_error(  # type: ignore[override]  # Modal narrows View's signature
        self, interaction: discord.Interaction[Any], error: Exception, /
    ) -> None:
        await report_error(interaction, error)


def install_error_handler(tree: app_commands.CommandTree[Any]) -> None:
    """Make :func:`report_error` the tree's error handler."""

    async def on_error(
        interaction: discord.Interaction[Any], error: app_commands.AppCommandError
    ) -> None:
        await report_error(interaction, error)

    tree.error(on_error)


async def setup(bot: commands.Bot) -> None:
    install_error_handler(bot.tree)
