"""The doctor tests' fixture: ``kioku doctor`` run in this process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import URL

from bot.ops.doctor import run_doctor as doctor
from tests.helpers.database import make_test_settings
from tests.helpers.fake_llm import DEFAULT_MODEL_ID, ScriptedLLM
from tests.helpers.kioku_cli import DoctorHere, doctor_rows


@pytest.fixture
def doctor_here(llm: ScriptedLLM, pg_url: URL, capsys: pytest.CaptureFixture[str]) -> DoctorHere:
    """``kioku doctor`` in this process on the test database and the scripted LLM (whose
    tool call passes), with a dummy token unless the test's settings name one."""

    async def run(data_dir: Path, **overrides: Any) -> tuple[int, dict[str, tuple[str, str]]]:
        llm.reply_tool_calls([("ping", {"word": "pong"})])
        chosen = {
            "discord_token": "dummy-token",
            "openai_base_url": llm.base_url,
            "openai_api_key": "test-key",
            "model": DEFAULT_MODEL_ID,
            **overrides,
        }
        code = await doctor(make_test_settings(pg_url, data_dir, **chosen))
        return code, doctor_rows(capsys.readouterr().out)

    return run
