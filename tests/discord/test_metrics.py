"""Prometheus metrics of a running bot: turns, STM tool calls and memory state, counted
through the real pipeline (dpytest, the scripted LLM, embedded PostgreSQL), and served
over HTTP when ``[metrics] port`` is set."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import aiohttp
import pytest
from sqlalchemy.engine import URL

from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.db.engine import Database
from bot.runtime.metrics import Metrics
from tests.helpers.bot import KiokuHarness, start_kioku, stop_kioku
from tests.helpers.chat_world import KiokuStarter
from tests.helpers.fake_llm import ScriptedLLM


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


@pytest.fixture
def free_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    yield port


async def test_turns_and_stm_tool_calls_are_counted_by_outcome(kioku: KiokuHarness) -> None:
    metrics = kioku.bot.metrics
    # A turn that saves, then tries a second update (refused: one per turn).
    kioku.llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": "Launch is on Friday."})])
    kioku.llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": "again"})])
    kioku.llm.reply_text("Noted.")
    await kioku.env.send("the launch is on Friday", mention_bot=True)
    # A turn whose model is down.
    kioku.llm.reply_error(500)
    await kioku.env.send("still there?", mention_bot=True)

    assert sample(metrics, "kioku_turns_total", outcome="answered") == 1
    assert sample(metrics, "kioku_turns_total", outcome="llm_unavailable") == 1
    assert sample(metrics, "kioku_turn_duration_seconds_count") == 2
    assert sample(metrics, "kioku_turns_in_progress") == 0
    assert sample(metrics, "kioku_stm_tool_calls_total", result="saved") == 1
    assert sample(metrics, "kioku_stm_tool_calls_total", result="rejected") == 1
    assert sample(metrics, "kioku_stm_tool_calls_total", result="pending_sync") is None
    # The server key and the user key of the write are cached.
    cached = sample(metrics, "kioku_stm_cache_entries")
    assert cached is not None and cached >= 2
    assert sample(metrics, "kioku_spool_pending") == 0
    assert sample(metrics, "kioku_cache_notices_heard") == 1
    assert sample(metrics, "kioku_database_failing") == 0
    assert sample(metrics, "kioku_guilds") == 1


async def test_model_requests_are_counted_by_outcome_with_the_tokens_reported(
    kioku: KiokuHarness,
) -> None:
    metrics = kioku.bot.metrics
    kioku.llm.reply_text("Hello there!")
    await kioku.env.send("hi", mention_bot=True)
    kioku.llm.reply_error(500)
    await kioku.env.send("still there?", mention_bot=True)
    kioku.llm.reply_error(429, headers={"retry-after": "0"})
    await kioku.env.send("and now?", mention_bot=True)
    kioku.llm.reply_disconnect()
    await kioku.env.send("hello?", mention_bot=True)
    kioku.llm.reply_error(401, "bad key")
    await kioku.env.send("anyone?", mention_bot=True)

    for outcome in ("ok", "server_error", "rate_limited", "unreachable", "refused"):
        assert sample(metrics, "kioku_llm_requests_total", outcome=outcome) == 1, outcome
    assert sample(metrics, "kioku_llm_requests_total", outcome="timeout") is None
    assert sample(metrics, "kioku_llm_request_duration_seconds_count") == 5
    # The scripted server reports ~4 characters a token: "Hello there!" is 3.
    assert sample(metrics, "kioku_llm_tokens_total", kind="completion") == 3
    prompt = sample(metrics, "kioku_llm_tokens_total", kind="prompt")
    assert prompt is not None and prompt > 0


@pytest.mark.parametrize("style", ["openai", "llama.cpp"])
@pytest.mark.parametrize("provider", ["generic", "gemini"], ids=["streamed", "whole"])
async def test_cached_prompt_tokens_are_counted_from_what_the_server_reports(
    llm: ScriptedLLM, kioku_with: KiokuStarter, style: Literal["openai", "llama.cpp"], provider: str
) -> None:
    # OpenAI (and vLLM) report usage.prompt_tokens_details.cached_tokens; llama.cpp's
    # llama-server `timings` (cache_n), in a streamed answer's last event.
    llm.cached, llm.cache_report = (lambda prompt: prompt - 5), style
    async with kioku_with(settings={"provider": provider}) as kioku:
        llm.reply_text("Hello there!")
        await kioku.env.send("hi", mention_bot=True)
        metrics = kioku.bot.metrics
        assert llm.last_request.get("stream", False) is (provider == "generic")
        prompt = sample(metrics, "kioku_llm_tokens_total", kind="prompt")
        assert prompt is not None and prompt > 5
        assert sample(metrics, "kioku_llm_cached_prompt_tokens_total") == prompt - 5
        assert sample(metrics, "kioku_llm_tokens_total", kind="completion") == 3


async def test_no_cached_tokens_are_counted_when_the_server_reports_none(
    kioku: KiokuHarness,
) -> None:
    kioku.llm.reply_text("Hello there!")
    await kioku.env.send("hi", mention_bot=True)
    assert sample(kioku.bot.metrics, "kioku_llm_cached_prompt_tokens_total") == 0


async def test_a_model_request_past_the_client_timeout_counts_as_a_timeout(
    llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with kioku_with(settings={"llm": {"max_retries": 0, "timeout_seconds": 0.2}}) as kioku:
        llm.reply_text("late", delay=5)
        await kioku.env.send("hi", mention_bot=True)
        metrics = kioku.bot.metrics
        assert sample(metrics, "kioku_llm_requests_total", outcome="timeout") == 1
        assert sample(metrics, "kioku_llm_requests_total", outcome="ok") is None
        assert sample(metrics, "kioku_turns_total", outcome="llm_unavailable") == 1


async def test_a_turn_whose_answer_is_empty_counts_as_given_up(kioku: KiokuHarness) -> None:
    kioku.llm.reply_text("")  # nothing left to send: the fallback reply goes instead
    await kioku.env.send("hello?", mention_bot=True)
    assert sample(kioku.bot.metrics, "kioku_turns_total", outcome="gave_up") == 1
    assert sample(kioku.bot.metrics, "kioku_turns_total", outcome="answered") is None


async def test_summarizer_runs_are_counted_by_status(kioku: KiokuHarness) -> None:
    moderator = await kioku.env.create_member("mod", kind="moderator")
    await kioku.interactions.slash("stm summarize", user=moderator)  # nothing new
    await kioku.env.send("we ship on Friday")
    kioku.llm.reply_error(503)
    await kioku.interactions.slash("stm summarize", user=moderator)  # the model is down
    metrics = kioku.bot.metrics
    assert sample(metrics, "kioku_summaries_total", status="nothing_new") == 1
    assert sample(metrics, "kioku_summaries_total", status="failed") == 1
    # Only the failed run asked the model, and its request is counted too.
    assert sample(metrics, "kioku_llm_requests_total", outcome="server_error") == 1
    assert sample(metrics, "kioku_summaries_total", status="updated") is None


async def test_metrics_hold_no_ids_and_no_memory_text(kioku: KiokuHarness) -> None:
    kioku.llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": "Mira's birthday is in May."})])
    kioku.llm.reply_text("Noted.")
    await kioku.env.send("Mira's birthday is in May", mention_bot=True)
    text = kioku.bot.metrics.render().decode()
    assert "Mira" not in text
    ids = {kioku.env.guild.id, kioku.env.channel.id, *(m.id for m in kioku.env.members)}
    assert not any(str(i) in text for i in ids)


async def test_metrics_are_served_over_http_when_a_port_is_set(
    db: Database, llm: ScriptedLLM, pg_url: URL, tmp_path: Path, free_port: int
) -> None:
    kioku = await start_kioku(db, llm, pg_url, tmp_path, settings={"metrics": {"port": free_port}})
    url = f"http://127.0.0.1:{free_port}/metrics"
    try:
        llm.reply_text("Hello!")
        await kioku.env.send("hi", mention_bot=True)
        async with aiohttp.ClientSession() as http, http.get(url) as response:
            body = await response.text()
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain")
        assert 'kioku_turns_total{outcome="answered"} 1.0' in body
        assert "kioku_spool_pending 0.0" in body
    finally:
        await stop_kioku(kioku)
    # Closed with the bot: the port is free again.
    with socket.create_server(("127.0.0.1", free_port)):
        pass


async def test_without_a_port_no_endpoint_listens(kioku: KiokuHarness) -> None:
    assert kioku.bot.settings.metrics.port == 0
    assert kioku.bot.services is not None
    assert kioku.bot.services.metrics_server is None
    kioku.llm.reply_text("Hello!")
    await kioku.env.send("hi", mention_bot=True)
    # The counters count all the same (for an endpoint turned on later, or a test).
    assert sample(kioku.bot.metrics, "kioku_turns_total", outcome="answered") == 1
