"""``kioku run --shards 0-3 --shard-count 8``: parsing, the sharded bot it builds, and the
command line that does both."""

from __future__ import annotations

import os
from pathlib import Path

import discord
import pytest
from discord.ext import commands
from sqlalchemy.engine import URL

from bot.__main__ import CliError, main, parse_shards
from bot.app import KiokuBot, ShardedKiokuBot, build_bot
from bot.config import load_settings
from bot.db.engine import Database
from tests.helpers.processes import ROOT, kioku_env


@pytest.mark.parametrize(
    ("spec", "count", "expected"),
    [
        ("0-3", 8, [0, 1, 2, 3]),
        ("0,2,5", 8, [0, 2, 5]),
        ("4-7, 1", 8, [1, 4, 5, 6, 7]),
        ("0", 1, [0]),
        (None, None, None),
    ],
)
def test_shard_specs_parse(spec: str | None, count: int | None, expected: list[int] | None) -> None:
    assert parse_shards(spec, count) == expected


@pytest.mark.parametrize(
    ("spec", "count", "fragment"),
    [
        ("0-9", 8, r"names shards 8-9 outside 0–7 \(--shard-count 8\)"),
        ("0-3,7,12", 8, r"names shards 12 outside 0–7"),
        ("3-1", 8, "not a list of ids or ranges"),
        ("a-b", 8, "not a list of ids or ranges"),
        ("0-", 8, "not a list of ids or ranges"),
        ("0-3", None, "go together"),
        (None, 8, "go together"),
        ("0", 0, "at least 1"),
    ],
)
def test_bad_shard_specs_are_refused_clearly(
    spec: str | None, count: int | None, fragment: str
) -> None:
    with pytest.raises(CliError, match=fragment) as caught:
        parse_shards(spec, count)
    assert caught.value.code == 2


def test_a_shard_range_far_outside_the_count_is_refused_in_one_line(tmp_path: Path) -> None:
    """A typo like 0-100000000000 is refused from the range itself: expanding it first
    would eat memory until the process dies (capped here: a MemoryError traceback)."""
    import resource
    import subprocess
    import sys

    def cap_memory() -> None:
        limit = 1_500 * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    env = kioku_env(tmp_path, DISCORD_TOKEN="dummy")
    result = subprocess.run(
        [sys.executable, "-m", "bot", "run", "--shards", "0-100000000000", "--shard-count", "8"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=cap_memory,
    )
    assert (result.returncode, result.stderr.strip().splitlines()) == (
        2,
        [
            "kioku: --shards '0-100000000000' names shards 8-100000000000 outside 0–7 "
            "(--shard-count 8)"
        ],
    )


def test_sharded_bot_runs_the_given_shards(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path)
    sharded = build_bot(settings, shard_ids=[0, 1, 2, 3], shard_count=8)
    assert isinstance(sharded, ShardedKiokuBot)
    assert isinstance(sharded, commands.AutoShardedBot)
    assert (sharded.shard_ids, sharded.shard_count) == ([0, 1, 2, 3], 8)
    plain = build_bot(settings)
    assert type(plain) is KiokuBot


def cli_environment(monkeypatch: pytest.MonkeyPatch, data_dir: Path, **env: str) -> None:
    """This process's environment as :func:`kioku_env` makes a subprocess's."""
    for name in list(os.environ):
        if name.startswith("KIOKU_") or name in ("DATABASE_URL", "DISCORD_TOKEN"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("KIOKU_DATA_DIR", str(data_dir))
    monkeypatch.setenv("KIOKU_ENV_FILE", str(data_dir / "absent.env"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def test_run_with_shards_logs_in_with_a_sharded_bot_running_them(
    pg_url: URL,
    migrated_database: Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``kioku run --shards 0-3 --shard-count 8`` end to end through main(), up to the
    login, where Discord refuses the dummy token (no connection is made)."""
    logged_in: list[discord.Client] = []

    async def refused_login(self: discord.Client, token: str) -> None:
        logged_in.append(self)
        raise discord.LoginFailure("Improper token has been passed.")  # discord.py's, on 401

    monkeypatch.setattr(discord.Client, "login", refused_login)
    cli_environment(
        monkeypatch,
        tmp_path,
        DISCORD_TOKEN="dummy-token",
        DATABASE_URL=pg_url.render_as_string(hide_password=False),
    )
    code = main(["run", "--shards", "0-3", "--shard-count", "8"])
    (bot,) = logged_in
    assert isinstance(bot, ShardedKiokuBot)
    assert isinstance(bot, commands.AutoShardedBot)
    assert (bot.shard_ids, bot.shard_count) == ([0, 1, 2, 3], 8)
    assert (code, capsys.readouterr().err.strip().splitlines()[-1]) == (
        1,
        "kioku: Discord rejected DISCORD_TOKEN (login failed): copy the bot token again from "
        "https://discord.com/developers/applications",
    )


@pytest.mark.parametrize(
    ("options", "line"),
    [
        (
            ["--shards", "0-9", "--shard-count", "8"],
            "kioku: --shards '0-9' names shards 8-9 outside 0–7 (--shard-count 8)",
        ),
        (
            ["--shards", "0-3"],
            "kioku: --shards and --shard-count go together (e.g. --shards 0-3 --shard-count 8)",
        ),
        (
            ["--shard-count", "8"],
            "kioku: --shards and --shard-count go together (e.g. --shards 0-3 --shard-count 8)",
        ),
    ],
    ids=["outside-the-count", "no-count", "no-shards"],
)
def test_run_with_bad_shard_options_exits_2_with_one_line_before_anything_starts(
    options: list[str],
    line: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    logged_in: list[discord.Client] = []

    async def login(self: discord.Client, token: str) -> None:
        logged_in.append(self)

    monkeypatch.setattr(discord.Client, "login", login)
    cli_environment(monkeypatch, tmp_path, DISCORD_TOKEN="dummy-token")  # embedded database
    code = main(["run", *options])
    assert (code, capsys.readouterr().err.strip().splitlines()) == (2, [line])
    assert logged_in == []
    assert not (tmp_path / "postgres").exists(), "nothing should start"
