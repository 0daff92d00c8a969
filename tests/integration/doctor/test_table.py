"""``kioku doctor``'s table: every row in order as its check completes, the config, persona,
token and spool rows, and no configured secret shown."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from bot.db.engine import Database
from tests.helpers.database import make_test_settings
from tests.helpers.fake_llm import DEFAULT_MODEL_ID, ScriptedLLM
from tests.helpers.kioku_cli import (
    CONFIG_FILE_READ,
    DOCTOR_ROWS,
    NOT_UTF8_PERSONA,
    doctor_against,
    doctor_process,
    doctor_rows,
    printed_to_the_end,
    printed_until,
    row_of,
)

# No test asks the real Discord: doctor's token and intent rows ask a local fake.
pytestmark = pytest.mark.usefixtures("discord_api")


async def test_doctor_passes_when_the_model_calls_the_tool(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    result = await doctor_against(llm, pg_url, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = doctor_rows(result.stdout)
    assert list(rows) == list(DOCTOR_ROWS)
    assert {status for status, _ in rows.values()} == {"ok"}
    assert rows["backup"][1] == f"none in {tmp_path / 'backups'} (kioku backup makes one)"
    assert f"{DEFAULT_MODEL_ID} listed" in rows["llm endpoint"][1]
    assert rows["llm tool call"][1].startswith("the model called the tool")
    assert llm.pending == 0 and len(llm.requests) == 1
    assert llm.tool_names() == ["ping"]


async def test_doctor_does_not_show_the_password_in_the_llm_url(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # The database row and the invalid-setting line hid a URL's password; this row did not.
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    url = llm.base_url.replace("http://", "http://proxy-user:proxy-secret@")
    result = await doctor_against(llm, pg_url, tmp_path, OPENAI_BASE_URL=url)
    assert row_of(result, "config", code=0) == (
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
    assert row_of(result, "config", code=0) == (
        "ok",
        f"model {DEFAULT_MODEL_ID} via openai at http://127.0.0.1:{llm.port}/v1"
        f"?api-key=***&api-version=***; {CONFIG_FILE_READ}",
    )
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
    assert row_of(result, "config", code=0) == (
        "ok",
        f"model {DEFAULT_MODEL_ID} via openai at {llm.base_url}; "
        f"config file: none found at {elsewhere / 'config' / 'kioku.toml'}",
    )


async def test_doctor_prints_each_row_as_its_check_completes(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # It printed nothing until every check was done: a blank terminal for as long as a
    # silent LLM endpoint took to time out. Here the tool call's answer is held.
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    answer = llm.hold()
    with (tmp_path / "stderr").open("wb") as stderr:
        async with doctor_process(llm, pg_url, tmp_path, stderr=stderr) as process:
            shown = await printed_until(process, lambda line: line.startswith("llm context"))
            async with asyncio.timeout(60):  # a hang guard, not a measure
                await llm.wait_for_requests(1)  # the tool call is waiting for its answer
            assert list(doctor_rows("".join(shown))) == list(DOCTOR_ROWS[:-2])
            answer.set()
            rest, returncode = await printed_to_the_end(process)
    assert returncode == 0, "".join(shown) + rest + (tmp_path / "stderr").read_text()
    rows = doctor_rows("".join(shown) + rest)
    assert list(rows)[-2:] == ["llm tool call", "embeddings"]
    assert rows["llm tool call"][0] == "ok"


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
    assert row_of(result, "persona", code=0) == (
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


async def test_doctor_fails_a_persona_file_that_is_not_utf8(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    persona = tmp_path / "persona.md"
    persona.write_bytes(NOT_UTF8_PERSONA)
    result = await doctor_against(llm, pg_url, tmp_path, KIOKU_PERSONA_FILE=str(persona))
    assert "Traceback" not in result.stderr, result.stderr[-600:]
    assert row_of(result, "persona", code=1) == (
        "FAIL",
        f"{persona} is not UTF-8 text (byte 36): save it as UTF-8",
    )


async def test_doctor_fails_the_spool_row_for_a_data_dir_that_is_a_file(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # With an external database only `kioku run` (its spool) needs the folder: doctor
    # says so in a row instead of refusing to run.
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    data = tmp_path / "data"
    data.write_text("")
    result = await doctor_against(llm, pg_url, data)
    assert row_of(result, "spool", code=1) == (
        "FAIL",
        f"the data folder {data} (KIOKU_DATA_DIR) is a file, not a folder",
    )


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
