"""``kioku run`` from start-up to the login and a stop: shards, start-up failures that are the
bot's own, and Discord's refusals as one line."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest.mock import Mock

import aiohttp
import aiohttp.web
import discord
import pytest
from discord.ext import commands
from sqlalchemy.engine import URL

from bot.app import ShardedKiokuBot
from bot.db.engine import Database
from bot.memory.spool.durable import DurableSpool, spool_path
from tests.helpers.kioku_cli import RunHere, cli_environment, kioku
from tests.helpers.processes import ROOT, kioku_env

# No test asks the real Discord: doctor's token and intent rows ask a local fake.
pytestmark = pytest.mark.usefixtures("discord_api")


def test_a_local_endpoint_starts_without_a_key(tmp_path: Path, run_here: RunHere) -> None:
    # Ollama, vLLM and LM Studio take the client's placeholder key.
    code, err = run_here(
        no_key=True, KIOKU_DATA_DIR=str(tmp_path), OPENAI_BASE_URL="http://localhost:11434/v1"
    )
    assert code == 0, err
    assert "OPENAI_API_KEY" not in err


def test_run_with_dummy_token_migrates_then_fails_cleanly_at_login(tmp_path: Path) -> None:
    result = kioku("run", data_dir=tmp_path, DISCORD_TOKEN="dummy-token")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("kioku: ") and "Discord" in last
    # The embedded database was created and migrated before the login attempt.
    again = kioku("migrate", data_dir=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "already at revision" in again.stdout


def test_run_with_shards_logs_in_with_a_sharded_bot_running_them(
    pg_url: URL,
    migrated_database: Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``kioku run --shards 0-3 --shard-count 8`` end to end through main(), up to the
    login, where Discord refuses the dummy token (no connection is made)."""
    import bot.cli.main as cli

    logged_in: list[discord.Client] = []

    async def refused_login(self: discord.Client, token: str) -> None:
        logged_in.append(self)
        raise discord.LoginFailure("Improper token has been passed.")  # discord.py's, on 401

    monkeypatch.setattr(discord.Client, "login", refused_login)
    cli_environment(
        monkeypatch,
        tmp_path,
        KIOKU_DATA_DIR=str(tmp_path),
        DISCORD_TOKEN="dummy-token",
        DATABASE_URL=pg_url.render_as_string(hide_password=False),
    )
    code = cli.main(["run", "--shards", "0-3", "--shard-count", "8"])
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
    import bot.cli.main as cli

    logged_in: list[discord.Client] = []

    async def login(self: discord.Client, token: str) -> None:
        logged_in.append(self)

    monkeypatch.setattr(discord.Client, "login", login)
    # The embedded database, in tmp_path: nothing may start there.
    cli_environment(
        monkeypatch, tmp_path, KIOKU_DATA_DIR=str(tmp_path), DISCORD_TOKEN="dummy-token"
    )
    code = cli.main(["run", *options])
    assert (code, capsys.readouterr().err.strip().splitlines()) == (2, [line])
    assert logged_in == []
    assert not (tmp_path / "postgres").exists(), "nothing should start"


# `kioku run` with Discord's API at the address given as its first argument.
RUN_AGAINST = (
    "import sys\nimport discord.http\nimport bot.cli.main as cli\n"
    "discord.http.Route.BASE = sys.argv[1]\nsys.exit(cli.main(['run']))\n"
)


async def test_sigterm_while_logging_in_stops_without_blaming_discord(
    pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # Closing the bot closed the HTTP session under the login request: "kioku: cannot
    # reach Discord: ClientConnectionError: Connector is closed." and exit 1, for a stop.
    asked = asyncio.Event()

    async def login_never_answered(request: aiohttp.web.Request) -> aiohttp.web.Response:
        asked.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    app = aiohttp.web.Application()
    app.router.add_route("*", "/{path:.*}", login_never_answered)
    runner = aiohttp.web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.5)
    await runner.setup()
    await aiohttp.web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    env = kioku_env(
        tmp_path,
        DISCORD_TOKEN="dummy-token",
        OPENAI_API_KEY="test-key",
        DATABASE_URL=pg_url.render_as_string(hide_password=False),
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        RUN_AGAINST,
        f"http://127.0.0.1:{port}/api/v10",
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        await asyncio.wait_for(asked.wait(), 60)  # the login request is in flight
        process.terminate()
        _, raw_err = await asyncio.wait_for(process.communicate(), 60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await runner.cleanup()
    err = raw_err.decode()
    assert process.returncode == 0, err
    assert "kioku:" not in err and "Traceback" not in err, err


def test_run_with_an_external_database_refuses_a_data_dir_that_is_a_file(
    tmp_path: Path, run_here: RunHere
) -> None:
    # Was "cannot reach Discord: NotADirectoryError: … data/spool" (from the spool).
    data = tmp_path / "data"
    data.write_text("")
    code, err = run_here(KIOKU_DATA_DIR=str(data))
    assert (code, err.strip().splitlines()) == (
        2,
        [f"kioku: the data folder {data} (KIOKU_DATA_DIR) is a file, not a folder"],
    )


def test_a_local_failure_of_the_bots_start_up_is_not_blamed_on_discord(
    tmp_path: Path, run_here: RunHere
) -> None:
    # discord.py runs setup_hook inside login: the spool's OSError is the bot's own.
    data = tmp_path / "data"
    data.mkdir()
    (data / "spool").write_text("")
    code, err = run_here(KIOKU_DATA_DIR=str(data))
    lines = err.strip().splitlines()
    assert code == 1
    assert lines[-1].startswith(f"kioku: start-up failed: cannot use {data / 'spool'}: "), lines
    assert lines[-1].endswith(f"(in the data folder {data}, KIOKU_DATA_DIR)"), lines
    assert "Discord" not in lines[-1], lines


def test_a_metrics_port_in_use_stops_start_up_with_one_line(run_here: RunHere) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        code, err = run_here(KIOKU_METRICS__PORT=str(port))
    lines = err.strip().splitlines()
    assert code == 1
    assert lines[-1].startswith(
        f"kioku: start-up failed: cannot serve metrics on 127.0.0.1:{port} "
    )
    assert lines[-1].endswith("set KIOKU_METRICS__PORT to a free port, or 0 to turn metrics off")


def test_a_second_run_on_a_data_folder_in_use_stops_before_anything_starts(
    tmp_path: Path,
) -> None:
    # Was found only once logged in to Discord, after migrating, and told the operator to
    # give each process its own KIOKU_DATA_DIR: with the embedded database, a second
    # database, so a second bot with other memories answering beside the first.
    held = DurableSpool(spool_path(tmp_path))  # what the running `kioku run` holds
    try:
        embedded = kioku("run", data_dir=tmp_path, DISCORD_TOKEN="dummy-token")
        external = kioku(
            "run",
            data_dir=tmp_path,
            DISCORD_TOKEN="dummy-token",
            DATABASE_URL="postgresql://kioku@db.invalid/kioku",  # never reached
        )
    finally:
        held.close()
    assert (embedded.returncode, embedded.stderr.strip().splitlines()) == (
        1,
        [
            f"kioku: another kioku run is using the data folder {tmp_path} (KIOKU_DATA_DIR) "
            "and its embedded database: stop it first (several processes need an external "
            "DATABASE_URL and a data folder each, see docs/scaling.md)"
        ],
    )
    assert not (tmp_path / "postgres").exists(), "nothing should start beside the running bot"
    assert (external.returncode, external.stderr.strip().splitlines()) == (
        1,
        [
            f"kioku: another Kioku process is using the spool in {tmp_path / 'spool'}; "
            "give each process its own KIOKU_DATA_DIR"
        ],
    )


def http_error(kind: type[discord.HTTPException], status: int, body: Any) -> Exception:
    response = Mock(spec=aiohttp.ClientResponse, status=status, reason="Reason")
    return kind(response, body)


def gateway_closed(code: int) -> Exception:
    return discord.ConnectionClosed(
        Mock(spec=aiohttp.ClientWebSocketResponse), shard_id=None, code=code
    )


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            http_error(discord.Forbidden, 403, {"code": 50001, "message": "Missing Access"}),
            "Discord refused the request (403 Forbidden, error 50001: Missing Access): invite "
            "the bot with the bot and applications.commands scopes",
        ),
        (
            http_error(discord.DiscordServerError, 503, "upstream connect error"),
            "Discord failed with HTTP 503, upstream connect error: a problem on Discord's side",
        ),
        (
            http_error(
                discord.HTTPException,
                400,
                {"code": 50035, "message": "Invalid Form Body", "errors": {"name": {}}},
            ),
            "Discord refused the request with HTTP 400, error 50035: Invalid Form Body",
        ),
        (discord.GatewayNotFound(), "Discord did not give a gateway address"),
        (gateway_closed(4010), "(4010 invalid shard): --shards must lie in"),
        (
            gateway_closed(4011),
            "Discord requires sharding for this bot: run with --shards/--shard-count "
            "(see docs/scaling.md)",
        ),
        (gateway_closed(4013), "(4013 invalid intents)"),
        (gateway_closed(4014), "enable the Message Content intent"),
        (gateway_closed(4999), "Discord closed the gateway connection with code 4999"),
    ],
)
async def test_discord_refusals_become_one_line_with_a_hint(
    error: Exception, expected: str
) -> None:
    from bot.cli.discord_calls import discord_call
    from bot.cli.errors import EXIT_FAILURE, CliError

    async def fails() -> None:
        raise error

    with pytest.raises(CliError) as caught:
        await discord_call(fails())
    assert caught.value.code == EXIT_FAILURE
    assert "\n" not in str(caught.value)
    assert expected in str(caught.value)


def test_a_discord_refusal_exits_1_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Through main(), as `kioku sync` would meet a 403 after logging in.
    import bot.cli.main as cli
    import bot.cli.run
    from bot.cli.discord_calls import discord_call

    async def sync(settings: Any, token: str) -> int:
        async def forbidden() -> None:
            raise http_error(discord.Forbidden, 403, {"code": 50001, "message": "Missing Access"})

        return await discord_call(forbidden())

    monkeypatch.setattr(bot.cli.run, "sync", sync)
    monkeypatch.setenv("DISCORD_TOKEN", "dummy-token")
    monkeypatch.setenv("KIOKU_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("KIOKU_ENV_FILE", str(tmp_path / "absent.env"))
    assert cli.main(["sync"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kioku: Discord refused the request (403 Forbidden")
    assert len(err.strip().splitlines()) == 1
