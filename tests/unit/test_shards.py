"""``kioku run --shards 0-3 --shard-count 8``: parsing, and the sharded bot it builds."""

from __future__ import annotations

from pathlib import Path

import pytest
from discord.ext import commands

from bot.app import KiokuBot, ShardedKiokuBot, build_bot
from bot.cli.errors import CliError
from bot.cli.parser import parse_shards
from bot.config import load_settings
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
