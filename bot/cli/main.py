"""``kioku``'s entry point: parse, load the settings, check, run the verb, exit."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Coroutine, Sequence
from typing import Any

from bot.cli.errors import EXIT_CONFIG, EXIT_OK, CliError
from bot.cli.parser import build_parser, parse_shards
from bot.cli.preflight import (
    check_files,
    check_llm_key,
    check_not_running,
    configure_logging,
    discord_token,
)
from bot.config import SettingsError, load_settings


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``kioku`` with ``argv``; return the exit code (0 ok, 1 failure, 2 configuration)."""
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings()
        configure_logging(settings)
        shard_ids = parse_shards(args.shards, args.shard_count) if args.command == "run" else None
        check_files(settings, args.command)
        if args.command == "run":
            check_not_running(settings)
            token = discord_token(settings)
            check_llm_key(settings)
            from bot.cli.run import serve

            return run_command(serve(settings, token, shard_ids, args.shard_count))
        if args.command == "sync":
            token = discord_token(settings)
            from bot.cli.run import sync

            return run_command(sync(settings, token))
        if args.command == "migrate":
            from bot.cli.database import migrate

            return run_command(migrate(settings))
        if args.command == "doctor":
            from bot.ops import run_doctor

            return run_command(run_doctor(settings))
        if args.command == "console":
            check_llm_key(settings)
            from bot.cli.console import run_console

            return run_command(run_console(settings))
        if args.command == "backup":
            from bot.cli.backup import backup

            return run_command(backup(settings, args.file))
        from bot.cli.backup import restore  # the parser knows no other verb

        return run_command(restore(settings, args.file, confirmed=args.yes))
    except SettingsError as exc:
        for line in str(exc).splitlines():
            print(f"kioku: {line}", file=sys.stderr)
        return EXIT_CONFIG
    except CliError as exc:
        print(f"kioku: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return EXIT_OK


def run_command(command: Coroutine[Any, Any, int]) -> int:
    """``asyncio.run``, with SIGTERM cancelling the command as Ctrl-C does."""
    # By default SIGTERM (docker stop) kills at once, leaving an embedded PostgreSQL up.
    # `kioku run` puts its own handler in once the bot exists, to close it gracefully.

    async def cancelled_by_sigterm() -> int:
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        return await command

    try:
        return asyncio.run(cancelled_by_sigterm())
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None
