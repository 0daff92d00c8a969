"""``bot.metrics``: the labels of STM tool results, and the endpoint's own life cycle."""

from __future__ import annotations

import socket

import aiohttp
import pytest

from bot.metrics import Metrics, MetricsServer, stm_tool_result


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


async def test_a_port_in_use_raises_and_leaves_nothing_running() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        server = MetricsServer(Metrics())
        with pytest.raises(OSError):
            await server.start("127.0.0.1", taken.getsockname()[1])
    await server.close()  # nothing to close: a no-op
