"""The verbs and options of ``kioku``, and ``--shards`` read into shard ids."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Final, NoReturn

from bot.cli.errors import EXIT_CONFIG, CliError


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (``--help`` shows the usage)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_CONFIG, f"{self.prog}: {message} (see {self.prog} --help)\n")


def version() -> str:
    """``kioku 0.1.0 (schema revision 0005)``: what a bug report needs."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as release_of

    from bot.db import head_revision

    try:
        release = release_of("kioku")
    except PackageNotFoundError:  # run from a checkout that was never installed
        release = "unknown"
    return f"kioku {release} (schema revision {head_revision()})"


class _Version(argparse.Action):
    """``--version``, worked out only when asked (it reads the migration scripts)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str) -> None:
        super().__init__(option_strings, dest, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> NoReturn:
        print(version())
        parser.exit()


# Each verb: its summary (in the list of `kioku --help`) and what its own --help adds.
_VERBS: Final = (
    (
        "run",
        "migrate the database, then connect to Discord",
        "Needs DISCORD_TOKEN; DATABASE_URL unset means an embedded PostgreSQL in "
        "KIOKU_DATA_DIR (default ./data). Ctrl-C or SIGTERM stops it.",
    ),
    (
        "migrate",
        "upgrade the database schema (idempotent)",
        "Safe to run again, also beside a running bot or another migrate.",
    ),
    (
        "doctor",
        "check configuration, database and LLM endpoint",
        "Prints a table; exits 0 when every check passes, 1 otherwise, 2 on an invalid setting.",
    ),
    (
        "console",
        "chat with the bot in this terminal (no Discord)",
        "The same pipeline, database and LLM as `kioku run`; /show, /refresh, /help, /quit.",
    ),
    (
        "sync",
        "publish the slash commands to Discord, then exit",
        "Needs DISCORD_TOKEN; run once after install or upgrade (rate limited, so never "
        "done at start-up).",
    ),
    (
        "backup",
        "write the database to a file",
        "pg_dump's custom format, made with the PostgreSQL tools Kioku ships; by default "
        "KIOKU_DATA_DIR/backups/kioku-<UTC time>.dump. Safe beside a running bot.",
    ),
    (
        "restore",
        "replace the database's contents with a backup",
        "Stop every bot using the database first; the spool must be empty. The restored "
        "database is then migrated to this version.",
    ),
)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kioku",
        description="Kioku, a Discord bot with memory",
        epilog="Settings come from the environment, then .env, then config/kioku.toml; "
        "config/example.env lists every variable. Exit codes: 0 success, 1 runtime "
        "failure, 2 configuration error.",
    )
    parser.add_argument("--version", action=_Version, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    verbs = {
        # argparse shows a sub-command's help= only in the list of `kioku --help`.
        name: sub.add_parser(
            name, help=summary, description=f"{summary[0].upper()}{summary[1:]}. {details}"
        )
        for name, summary, details in _VERBS
    }
    verbs["run"].add_argument(
        "--shards",
        metavar="IDS",
        help="shard ids this process runs, e.g. 0-3 or 0,2,5 (needs --shard-count)",
    )
    verbs["run"].add_argument(
        "--shard-count", type=int, metavar="N", help="total shards across all processes"
    )
    verbs["backup"].add_argument(
        "file", nargs="?", type=Path, help="the file to write (it must not exist yet)"
    )
    verbs["restore"].add_argument("file", type=Path, help="a file written by kioku backup")
    verbs["restore"].add_argument(
        "--yes", action="store_true", help="replace what is in the database (required)"
    )
    return parser


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
