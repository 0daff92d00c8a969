"""``kioku doctor``'s Discord rows: the token, asked of Discord, and the Message Content intent."""

# The two commonest set-up failures of a Discord bot: a token copied wrong (or reset), and
# the privileged Message Content intent left off in the Developer Portal, which makes
# `kioku run` stop at connect ("privileged intents") or, unchecked, read empty messages.

from __future__ import annotations

import os
from typing import Any

import aiohttp
import discord

from bot.ops.table import Check, Status

# Tests point doctor at a local fake of Discord's API; nothing else should need it.
DISCORD_API_VARIABLE = "KIOKU_DISCORD_API_URL"
DISCORD_API_URL = "https://discord.com/api/v10"
PORTAL = "https://discord.com/developers/applications"
REQUEST_TIMEOUT_SECONDS = 10.0
TOKEN_ROW = "discord token"
INTENT_ROW = "message content"


def discord_api_url() -> str:
    """Discord's API, or where ``KIOKU_DISCORD_API_URL`` points."""
    return (os.environ.get(DISCORD_API_VARIABLE) or DISCORD_API_URL).rstrip("/")


async def discord_rows(token: str | None) -> list[Check]:
    """The token row and the Message Content row, asking Discord when there is a token."""
    if token is None:
        return [
            Check(TOKEN_ROW, Status.FAIL, "DISCORD_TOKEN is not set"),
            Check(INTENT_ROW, Status.SKIP, "skipped: no token to ask Discord with"),
        ]
    base = discord_api_url()
    headers = {"Authorization": f"Bot {token}", "User-Agent": "Kioku doctor"}
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECONDS)
    async with aiohttp.ClientSession(headers=headers, timeout=timeout) as http:
        try:
            status, user = await _get(http, f"{base}/users/@me")
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            why = _unreachable(exc)
            return [
                Check(TOKEN_ROW, Status.FAIL, f"cannot ask Discord: {why}"),
                Check(INTENT_ROW, Status.SKIP, "skipped: Discord could not be asked"),
            ]
        token_row = _token_row(status, user)
        if token_row.status is not Status.OK:
            return [token_row, Check(INTENT_ROW, Status.SKIP, "skipped: the token was refused")]
        try:
            status, application = await _get(http, f"{base}/applications/@me")
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            detail = f"cannot ask Discord: {_unreachable(exc)}"
            return [token_row, Check(INTENT_ROW, Status.FAIL, detail)]
    return [token_row, _intent_row(status, application)]


async def _get(http: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    async with http.get(url) as response:
        try:
            body = await response.json(content_type=None)
        except ValueError:  # an HTML error page, a proxy's text
            body = None
        return response.status, body


def _unreachable(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer within {REQUEST_TIMEOUT_SECONDS:g} s"
    text = " ".join(str(exc).split())
    return f"{exc.__class__.__name__}: {text}" if text else exc.__class__.__name__


def _token_row(status: int, user: Any) -> Check:
    if status == 401:
        return Check(
            TOKEN_ROW,
            Status.FAIL,
            f"Discord rejected DISCORD_TOKEN (HTTP 401): copy the bot token again from {PORTAL}",
        )
    if status != 200 or not isinstance(user, dict) or "id" not in user:
        return Check(TOKEN_ROW, Status.FAIL, f"Discord answered HTTP {status} to GET /users/@me")
    name = str(user.get("username", "?"))
    discriminator = str(user.get("discriminator", "0"))
    if discriminator not in ("0", ""):  # bots still carry the old #1234 tags
        name = f"{name}#{discriminator}"
    return Check(TOKEN_ROW, Status.OK, f"valid: {name} (id {user['id']})")


def _intent_row(status: int, application: Any) -> Check:
    if status != 200 or not isinstance(application, dict):
        detail = f"Discord answered HTTP {status} to GET /applications/@me"
        return Check(INTENT_ROW, Status.FAIL, detail)
    flags = discord.ApplicationFlags._from_value(int(application.get("flags") or 0))
    if flags.gateway_message_content:
        return Check(INTENT_ROW, Status.OK, "enabled")
    if flags.gateway_message_content_limited:
        # Granted without review below 100 servers; a verified bot needs Discord's approval.
        return Check(INTENT_ROW, Status.OK, "enabled (until the bot is in 100 servers)")
    return Check(
        INTENT_ROW,
        Status.FAIL,
        "not enabled: turn on Message Content Intent in the Developer Portal → your "
        "application → Bot (without it kioku run cannot connect)",
    )
