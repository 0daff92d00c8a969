"""``/healthz`` on the metrics server of a running bot (dpytest, embedded PostgreSQL):
200 "ok" while Discord is connected and the database answers, 503 with the reason when not."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest

from bot.db.engine import Database
from bot.runtime.health import HEALTH_STEP, Health
from bot.runtime.metrics import Metrics, MetricsServer
from tests.helpers.bot import KiokuHarness
from tests.helpers.chat_world import KiokuStarter
from tests.helpers.event_tasks import run_tracked
from tests.helpers.faults import outage


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
async def served(kioku_with: KiokuStarter) -> AsyncIterator[tuple[KiokuHarness, str]]:
    """The bot with its metrics server on, and the address of its ``/healthz``."""
    port = _free_port()
    async with kioku_with(settings={"metrics": {"port": port}}) as harness:
        yield harness, f"http://127.0.0.1:{port}/healthz"


async def healthz(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        return response.status, await response.text()


async def test_healthz_is_ok_when_connected_and_the_database_answers(
    served: tuple[KiokuHarness, str],
) -> None:
    _, url = served
    assert await healthz(url) == (200, "ok\n")


async def test_healthz_names_a_database_that_does_not_answer_then_recovers(
    served: tuple[KiokuHarness, str],
) -> None:
    kioku, url = served
    async with outage(kioku.database.sessions, HEALTH_STEP):
        assert await healthz(url) == (503, "database: does not answer (ConnectionRefusedError)\n")
    assert await healthz(url) == (200, "ok\n")


async def test_healthz_names_a_lost_gateway_until_the_session_resumes(
    served: tuple[KiokuHarness, str],
) -> None:
    kioku, url = served
    await run_tracked(kioku.bot.dispatch, "disconnect", limit=10)
    assert await healthz(url) == (503, "discord: disconnected, reconnecting\n")
    await run_tracked(kioku.bot.dispatch, "resumed", limit=10)
    assert await healthz(url) == (200, "ok\n")


async def test_healthz_says_discord_is_not_connected_before_the_bot_watches_it(
    db: Database,
) -> None:
    # The metrics server starts in setup_hook, before the gateway connects.
    server = MetricsServer(Metrics(), Health(db.sessions).problems)
    await server.start("127.0.0.1", 0)
    try:
        status = await healthz(f"http://127.0.0.1:{server.port}/healthz")
    finally:
        await server.close()
    assert status == (503, "discord: not connected yet\n")


async def test_build_info_names_the_version_and_python(
    served: tuple[KiokuHarness, str],
) -> None:
    _, url = served
    async with aiohttp.ClientSession() as http, http.get(url.replace("healthz", "metrics")) as r:
        body = await r.text()
    [line] = [line for line in body.splitlines() if line.startswith("kioku_build_info{")]
    assert 'python="3.' in line and 'version="' in line and line.endswith("} 1.0")
