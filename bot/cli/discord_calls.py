"""Discord's refusals an operator can fix, as one line with what to do."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

import aiohttp
import discord

from bot.cli.errors import CliError

T = TypeVar("T")

DISCORD_STATUS = "https://discordstatus.com"

# Gateway close codes discord.py gives up on, with what the operator can do about each.
CLOSE_CODE_HINTS = {
    4004: "Discord rejected DISCORD_TOKEN (4004 authentication failed): copy the bot token "
    "again from https://discord.com/developers/applications",
    4010: "Discord rejected the shard ids (4010 invalid shard): --shards must lie in "
    "0…N-1 and every process must use the same --shard-count N (see docs/scaling.md)",
    4011: "Discord requires sharding for this bot: run with --shards/--shard-count "
    "(see docs/scaling.md)",
    4012: "Discord rejected the gateway version (4012): upgrade Kioku (and discord.py)",
    4013: "Discord rejected the gateway intents (4013 invalid intents): upgrade Kioku "
    "(and discord.py)",
    4014: "enable the Message Content intent for this bot in the Developer Portal "
    "(Bot → Privileged Gateway Intents)",
}


async def discord_call(awaitable: Awaitable[T]) -> T:
    """Await a Discord call, turning the failures an operator can fix into one line."""
    try:
        return await awaitable
    except discord.LoginFailure:
        raise CliError(
            "Discord rejected DISCORD_TOKEN (login failed): copy the bot token again from "
            "https://discord.com/developers/applications"
        ) from None
    except discord.PrivilegedIntentsRequired:
        raise CliError(CLOSE_CODE_HINTS[4014]) from None
    except discord.ConnectionClosed as exc:
        shard = f" (shard {exc.shard_id})" if exc.shard_id is not None else ""
        hint = CLOSE_CODE_HINTS.get(exc.code)
        if hint is None:
            reason = f": {exc.reason}" if exc.reason else ""
            hint = (
                f"Discord closed the gateway connection with code {exc.code}{reason}; "
                f"try again, and see {DISCORD_STATUS}"
            )
        raise CliError(hint + shard) from None
    except discord.GatewayNotFound:
        raise CliError(
            f"Discord did not give a gateway address (an outage?): try again later, "
            f"and see {DISCORD_STATUS}"
        ) from None
    except discord.Forbidden as exc:
        raise CliError(
            f"Discord refused the request (403 Forbidden{_detail(exc)}): invite the "
            "bot with the bot and applications.commands scopes, and check its permissions"
        ) from None
    except discord.DiscordServerError as exc:
        raise CliError(
            f"Discord failed with HTTP {exc.status}{_detail(exc)}: a problem on "
            f"Discord's side; try again later, and see {DISCORD_STATUS}"
        ) from None
    except discord.HTTPException as exc:
        raise CliError(
            f"Discord refused the request with HTTP {exc.status}{_detail(exc)}"
        ) from None
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise CliError(f"cannot reach Discord: {exc.__class__.__name__}: {exc}") from None


def _detail(exc: discord.HTTPException) -> str:
    """Discord's own error code and text, on one line, when it sent them."""
    text = " ".join(exc.text.split())
    detail = f"error {exc.code}: {text}" if exc.code else text
    return f", {detail}" if detail else ""
