"""The ``kioku`` command line, driven as a real subprocess (as an operator would)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL

from bot.db.engine import Database
from tests.helpers.fake_llm import DEFAULT_MODEL_ID, ScriptedLLM

ROOT = Path(__file__).resolve().parents[2]
OWN_VARIABLES = {"DISCORD_TOKEN", "DATABASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL"}


def kioku(*args: str, data_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith("KIOKU_") and k not in OWN_VARIABLES
    }
    clean.update({"KIOKU_DATA_DIR": str(data_dir), **env})
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_run_without_token_exits_2_with_one_line(tmp_path: Path) -> None:
    result = kioku("run", data_dir=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("kioku: DISCORD_TOKEN is not set")
    assert not (tmp_path / "postgres").exists(), "nothing should start without a token"


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
    async with migrated_database.engine.connect() as connection:
        await connection.execution_options(isolation_level="AUTOCOMMIT")
        await connection.execute(text("DROP DATABASE IF EXISTS kioku_cli"))
        await connection.execute(text("CREATE DATABASE kioku_cli"))
    url = pg_url.set(database="kioku_cli").render_as_string(hide_password=False)
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


def test_doctor_reports_an_unreachable_llm(tmp_path: Path) -> None:
    from tests.helpers.fake_llm import refused_base_url

    result = kioku("doctor", data_dir=tmp_path, OPENAI_BASE_URL=refused_base_url())
    assert result.returncode == 1
    rows = doctor_rows(result.stdout)
    assert "migrations" in rows
    assert rows["database"][0] == "ok"
    assert rows["llm endpoint"][0] == "FAIL"
    assert rows["llm tool call"][0] == "FAIL"


async def doctor_against(
    llm: ScriptedLLM, pg_url: URL, data_dir: Path, **env: str
) -> subprocess.CompletedProcess[str]:
    """``kioku doctor`` on the migrated test database and the scripted LLM. In a thread:
    the scripted server answers on this test's event loop, which must keep running."""
    return await asyncio.to_thread(
        kioku,
        "doctor",
        data_dir=data_dir,
        DATABASE_URL=pg_url.render_as_string(hide_password=False),
        DISCORD_TOKEN="dummy-token",
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="test-key",
        KIOKU_MODEL=DEFAULT_MODEL_ID,
        **env,
    )


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
        "database",
        "migrations",
        "spool",
        "llm endpoint",
        "llm tool call",
    ]
    assert {status for status, _ in rows.values()} == {"ok"}
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
