"""``kioku doctor``'s LLM rows: the endpoint and the tool call, what each says when it fails, and
no secret of the URL or the key shown or logged."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from bot.db.engine import Database
from tests.helpers.database import make_test_settings
from tests.helpers.fake_llm import ScriptedLLM
from tests.helpers.kioku_cli import doctor_against, doctor_rows, kioku, row_of

# No test asks the real Discord: doctor's token and intent rows ask a local fake.
pytestmark = pytest.mark.usefixtures("discord_api")


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
    assert row_of(result, "llm tool call", code=1) == (
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
