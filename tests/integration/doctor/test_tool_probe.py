"""``kioku doctor``'s model rows: a probe shaped like a turn, each family's fix, the context."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from bot.db.engine import Database
from bot.llm.tools.text_calls import TOOLS_IN_PROMPT
from tests.helpers.fake_llm import EMBEDDING_DIMS, ScriptedLLM
from tests.helpers.kioku_cli import doctor_against, doctor_rows

pytestmark = pytest.mark.usefixtures("discord_api")

PING = '<tool_call>{"name": "ping", "arguments": {"word": "pong"}}</tool_call>'


async def test_the_probe_asks_as_a_turn_asks(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # A template that lists tools only inside a system message, and only with
    # tool_choice, gets both.
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    result = await doctor_against(llm, pg_url, tmp_path)
    assert result.returncode == 0, result.stdout
    assert doctor_rows(result.stdout)["llm tool call"][1].startswith("the model called the tool")
    [probe] = llm.requests
    assert [m["role"] for m in probe["messages"]] == ["system", "user"]
    assert probe["tool_choice"] == "auto" and llm.tool_names(0) == ["ping"]


async def test_a_server_answering_tools_empty_passes_with_the_tools_in_the_prompt(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # llama-cpp-python's chatml-function-calling, with a model that calls tools.
    llm.reply_text("").reply_text(PING.replace('"', "&#34;").replace("<", "&lt;"))
    result = await doctor_against(llm, pg_url, tmp_path, KIOKU_PROVIDER="llamacpp")
    assert result.returncode == 0, result.stdout
    status, detail = doctor_rows(result.stdout)["llm tool call"]
    assert status == "ok" and "llama-cpp-python" in detail, detail
    assert "tools" not in llm.request(1)
    assert any(TOOLS_IN_PROMPT in str(m["content"]) for m in llm.messages(1))


async def test_a_model_that_calls_nothing_names_each_familys_fix(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    llm.reply_text("pong")
    result = await doctor_against(llm, pg_url, tmp_path, KIOKU_PROVIDER="llamacpp")
    assert result.returncode == 1
    status, detail = doctor_rows(result.stdout)["llm tool call"]
    assert status == "FAIL"
    assert "llama-server with --jinja" in detail
    assert "--chat_format chatml-function-calling" in detail
    # Another family's fix is not offered for llama.cpp.
    assert "--enable-auto-tool-choice" not in detail


async def test_a_call_written_as_text_passes_where_kioku_reads_it(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    llm.reply_text(PING)
    result = await doctor_against(llm, pg_url, tmp_path, KIOKU_PROVIDER="ollama")
    assert result.returncode == 0, result.stdout
    assert doctor_rows(result.stdout)["llm tool call"][0] == "ok"


@pytest.mark.parametrize(
    ("served", "provider", "shown"),
    [
        (
            4096,
            "vllm",
            (
                "WARN",
                "the server serves 4,096 tokens, provider vllm assumes 32,768: long prompts "
                "will be cut or refused; start it with --max-model-len 32768",
            ),
        ),
        (16_384, "llamacpp", ("ok", "16,384 tokens (provider llamacpp: 8,192)")),
    ],
)
async def test_the_servers_context_is_compared_with_the_provider_rows(
    llm: ScriptedLLM,
    pg_url: URL,
    migrated_database: Database,
    tmp_path: Path,
    served: int,
    provider: str,
    shown: tuple[str, str],
) -> None:
    llm.served_context = served
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    result = await doctor_against(llm, pg_url, tmp_path, KIOKU_PROVIDER=provider)
    assert result.returncode == 0, result.stdout
    assert doctor_rows(result.stdout)["llm context"] == shown


async def test_a_slow_model_is_told_which_timeouts_to_set(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # A small probe at this speed: a turn's prompt would outlast the configured timeouts.
    llm.reply_tool_calls([("ping", {"word": "pong"})], delay=0.5)
    result = await doctor_against(
        llm,
        pg_url,
        tmp_path,
        KIOKU_LLM__TIMEOUT_SECONDS="2",
        KIOKU_LLM__TURN_TIMEOUT_SECONDS="3",
    )
    assert result.returncode == 0, result.stdout
    status, detail = doctor_rows(result.stdout)["llm tool call"]
    assert status == "WARN" and "the model called the tool; slow:" in detail
    assert "KIOKU_LLM__TIMEOUT_SECONDS=" in detail and "KIOKU_LLM__TURN_TIMEOUT_SECONDS=" in detail


async def test_the_speed_is_that_of_the_prompt_tokens_the_server_did_not_have_cached(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # llama.cpp kept all but one token of the probe from an earlier request: the half
    # second went on reading one token, so a turn would read 1,500 at that pace.
    llm.cached, llm.cache_report = (lambda prompt: prompt - 1), "llama.cpp"
    llm.reply_tool_calls([("ping", {"word": "pong"})], delay=0.5)
    result = await doctor_against(llm, pg_url, tmp_path)
    assert result.returncode == 0, result.stdout
    status, detail = doctor_rows(result.stdout)["llm tool call"]
    assert status == "WARN", detail
    found = re.search(r"a 1,500-token turn would take about (\d+) s", detail)
    assert found is not None and int(found.group(1)) >= 750, detail


async def test_the_embeddings_row_is_skipped_unless_an_endpoint_is_set(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    result = await doctor_against(llm, pg_url, tmp_path)
    status, detail = doctor_rows(result.stdout)["embeddings"]
    assert status == "ok" and "full-text search only" in detail
    assert llm.embedded == []


async def test_the_embeddings_row_checks_the_endpoint_and_pgvector(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    result = await doctor_against(llm, pg_url, tmp_path, KIOKU_EMBEDDINGS__BASE_URL="same")
    assert result.returncode == 0, result.stdout
    status, detail = doctor_rows(result.stdout)["embeddings"]
    assert status == "ok" and f"{EMBEDDING_DIMS} dimensions" in detail, detail
    assert llm.embedded == [["kioku doctor"]]


async def test_an_embeddings_endpoint_that_is_down_fails_its_row(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    llm.embed = None
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    result = await doctor_against(llm, pg_url, tmp_path, KIOKU_EMBEDDINGS__BASE_URL="same")
    assert result.returncode == 1
    status, detail = doctor_rows(result.stdout)["embeddings"]
    assert status == "FAIL" and "falls back to full-text" in detail, detail
