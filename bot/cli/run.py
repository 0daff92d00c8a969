"""``kioku run`` (the bot on Discord until stopped) and ``kioku sync`` (publish its commands)."""

from __future__ import annotations

import asyncio
import logging
import signal

from bot.app import build_bot
from bot.cli.database import migrated
from bot.cli.discord_calls import discord_call
from bot.cli.errors import EXIT_OK, CliError
from bot.cli.preflight import spool_locked_message
from bot.config import Settings
from bot.db import Database, warn_of_clock_skew
from bot.memory import SpoolLocked
from bot.services import StartupFailed
from bot.vocabulary import DatabaseUnavailable

log = logging.getLogger(__name__)


async def serve(
    settings: Settings, token: str, shard_ids: list[int] | None, shard_count: int | None
) -> int:
    """Migrate, then run the bot until Discord closes or a stop request (Ctrl-C, SIGTERM)."""
    database = Database(settings)
    # The bot's closing on a stop request, kept so it is not collected.
    closing: list[asyncio.Task[None]] = []
    try:
        before, after = await migrated(database)
        if before != after:
            log.info("database migrated from %s to %s", before or "empty", after)
        await warn_of_clock_skew(database.engine)
        bot = build_bot(settings, database=database, shard_ids=shard_ids, shard_count=shard_count)
        if shard_ids is not None:
            log.info("running shards %s of %d", shard_ids, shard_count)

        def stop() -> None:
            closing.append(asyncio.create_task(bot.close()))

        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop)
        async with bot:
            await discord_call(bot.start(token))
    except CliError:
        # Closing the bot while it logs in closes the HTTP session under the request:
        # that failure ("Connector is closed") is the stop's doing, not Discord's.
        if not closing:
            raise
    except SpoolLocked:  # another run started since check_not_running
        raise CliError(spool_locked_message(settings)) from None
    except (DatabaseUnavailable, StartupFailed) as exc:
        raise _start_failed(exc) from None
    finally:
        await database.close()
    return EXIT_OK


async def sync(settings: Settings, token: str) -> int:
    """Publish the command tree (never done in ``on_ready``: it is rate limited)."""
    database = Database(settings)
    try:
        await migrated(database)
        bot = build_bot(
            settings, database=database, janitor=False, spool=False, serve_metrics=False
        )
        async with bot:
            await discord_call(bot.login(token))
            synced = await discord_call(bot.tree.sync())
    except (DatabaseUnavailable, StartupFailed) as exc:
        raise _start_failed(exc) from None
    finally:
        await database.close()
    print(f"published {len(synced)} slash commands: {', '.join(sorted(c.name for c in synced))}")
    return EXIT_OK


def _start_failed(exc: DatabaseUnavailable | StartupFailed) -> CliError:
    """Why the bot did not start, as the one line a verb ends with."""
    if isinstance(exc, DatabaseUnavailable):
        return CliError(str(exc))
    return CliError(f"start-up failed: {exc}")
