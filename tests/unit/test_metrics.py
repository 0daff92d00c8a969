"""``bot.runtime.metrics``: the labels of STM tool results and model requests, what a model
request adds, and the endpoint's own life cycle."""

from __future__ import annotations

import socket

import aiohttp
import pytest
from aiohttp import web

from bot.llm.client import LlmRequest, request_outcome
from bot.runtime.metrics import Metrics, MetricsServer, stm_tool_result


@pytest.mark.parametrize(
    ("told", "label"),
    [
        ("saved", "saved"),
        ("saved, pending sync", "pending_sync"),
        ("rejected: short-term memory was already updated this turn", "rejected"),
        ("error: the arguments are not valid JSON", "rejected"),
    ],
)
def test_stm_tool_results_are_labelled_by_what_the_model_was_told(told: str, label: str) -> None:
    assert stm_tool_result(told) == label


def test_a_200_whose_body_is_no_json_is_a_bad_answer() -> None:
    # What the openai client raises when a proxy answers 200 with an HTML page.
    assert request_outcome(ValueError("Expecting value: line 1 column 1")) == "bad_answer"


def test_a_model_request_counts_its_time_and_only_the_tokens_reported() -> None:
    metrics = Metrics()
    metrics.llm_request(LlmRequest("ok", 0.3, prompt_tokens=120, completion_tokens=8))
    metrics.llm_request(LlmRequest("ok", 0.2))  # a server that reports no usage
    metrics.llm_request(LlmRequest("timeout", 30.0))
    value = metrics.registry.get_sample_value
    assert value("kioku_llm_requests_total", {"outcome": "ok"}) == 2
    assert value("kioku_llm_requests_total", {"outcome": "timeout"}) == 1
    assert value("kioku_llm_request_duration_seconds_count") == 3
    assert value("kioku_llm_request_duration_seconds_sum") == pytest.approx(30.5)
    assert value("kioku_llm_tokens_total", {"kind": "prompt"}) == 120
    assert value("kioku_llm_tokens_total", {"kind": "completion"}) == 8
    assert value("kioku_llm_cached_prompt_tokens_total") == 0


def test_cached_prompt_tokens_are_counted_apart_from_the_prompt_they_are_part_of() -> None:
    metrics = Metrics()
    metrics.llm_request(LlmRequest("ok", 0.3, prompt_tokens=120, cached_tokens=100))
    metrics.llm_request(LlmRequest("ok", 0.2, prompt_tokens=130, cached_tokens=120))
    value = metrics.registry.get_sample_value
    assert value("kioku_llm_tokens_total", {"kind": "prompt"}) == 250
    assert value("kioku_llm_cached_prompt_tokens_total") == 220
    # No label: no series per model, channel or anything else.
    assert "kioku_llm_cached_prompt_tokens_total 220.0" in metrics.render().decode()


def test_each_metrics_object_has_its_own_registry() -> None:
    first, second = Metrics(), Metrics()  # a shared registry would refuse the second
    first.turn_ended("answered", 0.5)
    assert first.registry.get_sample_value("kioku_turns_total", {"outcome": "answered"}) == 1
    assert second.registry.get_sample_value("kioku_turns_total", {"outcome": "answered"}) is None


def test_a_gauge_is_read_at_each_scrape() -> None:
    metrics = Metrics()
    pending = [3]
    metrics.gauge("kioku_test_pending", "test", lambda: pending[0])
    assert metrics.registry.get_sample_value("kioku_test_pending") == 3
    pending[0] = 0
    assert metrics.registry.get_sample_value("kioku_test_pending") == 0


async def test_the_server_serves_metrics_on_a_free_port_and_frees_it() -> None:
    metrics = Metrics()
    metrics.turn_ended("gave_up", 1.0)
    server = MetricsServer(metrics)
    await server.start("127.0.0.1", 0)
    assert server.port
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{server.port}/metrics") as response:
                assert response.status == 200
                assert 'kioku_turns_total{outcome="gave_up"} 1.0' in await response.text()
            async with http.get(f"http://127.0.0.1:{server.port}/") as response:
                assert response.status == 404
    finally:
        await server.close()
    with socket.create_server(("127.0.0.1", server.port)):
        pass


async def test_a_port_in_use_raises_and_leaves_nothing_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runners: list[web.AppRunner] = []

    class Recorded(web.AppRunner):
        async def setup(self) -> None:
            runners.append(self)
            await super().setup()

    monkeypatch.setattr(web, "AppRunner", Recorded)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        server = MetricsServer(Metrics())
        with pytest.raises(OSError):
            await server.start("127.0.0.1", taken.getsockname()[1])
    # The runner set up before the bind failed was cleaned up (no server, no site), and
    # the metrics server holds none and claims no port.
    [runner] = runners
    assert (runner.server, runner.sites, runner.addresses) == (None, set(), [])
    assert (server._runner, server.port) == (None, None)
    await server.close()  # nothing to close: a no-op
