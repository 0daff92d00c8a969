"""Prometheus metrics: what an operator watches while the bot runs, served at ``/metrics``."""

# Counters are kept by the code that sees the event; the memory's state is read at each
# scrape, so the memory core stays free of metrics. No label holds an id or any text:
# metrics leave the machine, and a series per channel would grow without bound.

from __future__ import annotations

import logging
import platform
import socket
from collections.abc import Awaitable, Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Literal

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    generate_latest,
)

from bot.llm import LlmRequest

log = logging.getLogger(__name__)

TurnOutcome = Literal[
    "answered",
    "gave_up",
    "llm_unavailable",
    "unanswered",
    "error",
    "turned_away",
    "rate_limited",
    "not_allowed",
]
StmToolResult = Literal["saved", "pending_sync", "rejected"]

# A turn is mostly the model's answer: from a local model's first token to a slow
# hosted one's long tool loop.
TURN_SECONDS_BUCKETS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0)
# One model request: a local model's short answer to a hosted one retried after a 429.
LLM_SECONDS_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)

# Why the process is unhealthy, one line per reason (empty: healthy); see bot.runtime.health.
HealthProblems = Callable[[], Awaitable[list[str]]]


def release() -> str:
    """Kioku's installed version, or ``unknown`` in a checkout never installed."""
    try:
        return version("kioku")
    except PackageNotFoundError:
        return "unknown"


def stm_tool_result(told: str) -> StmToolResult:
    """What the STM tool told the model, as a metric label (anything else is a rejection)."""
    if told.startswith("saved, pending sync"):
        return "pending_sync"
    if told.startswith("saved"):
        return "saved"
    return "rejected"


class Metrics:
    """The bot's metrics, in a registry of its own (several bots in a process never collide)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.turns = Counter(
            "kioku_turns",
            "Turns by how they ended: answered, gave_up (fallback reply), llm_unavailable, "
            "unanswered (message gone), error, turned_away (channel queue full), rate_limited "
            "(the member's turns per minute), not_allowed (access lists, DMs off: no reply)",
            ["outcome"],
            registry=self.registry,
        )
        self.turn_seconds = Histogram(
            "kioku_turn_duration_seconds",
            "Time from a turn's start to its reply text, model calls included",
            buckets=TURN_SECONDS_BUCKETS,
            registry=self.registry,
        )
        self.turns_in_progress = Gauge(
            "kioku_turns_in_progress",
            "Turns between their start and their reply text",
            registry=self.registry,
        )
        self.stm_tool_calls = Counter(
            "kioku_stm_tool_calls",
            "update_short_term_memory calls by what the model was told",
            ["result"],
            registry=self.registry,
        )
        self.summaries = Counter(
            "kioku_summaries",
            "Summarizer runs by status (updated, nothing_new, busy, disabled, failed, empty)",
            ["status"],
            registry=self.registry,
        )
        self.llm_requests = Counter(
            "kioku_llm_requests",
            "Chat Completions requests (turns and the summarizer) by outcome: ok, timeout, "
            "rate_limited (429), refused (another 4xx), server_error (5xx), unreachable, "
            "bad_answer (a 200 that is no Chat Completions answer)",
            ["outcome"],
            registry=self.registry,
        )
        self.llm_seconds = Histogram(
            "kioku_llm_request_duration_seconds",
            "Time of one Chat Completions request, the client's own retries included",
            buckets=LLM_SECONDS_BUCKETS,
            registry=self.registry,
        )
        self.llm_tokens = Counter(
            "kioku_llm_tokens",
            "Tokens the model server reported using, by kind (prompt, completion)",
            ["kind"],
            registry=self.registry,
        )
        # A part of kind="prompt" above, so a counter of its own: summing the kinds stays
        # the billed total. A prefix the server kept costs no reading (llama.cpp), or
        # bills at a fraction (OpenAI).
        self.llm_cached_tokens = Counter(
            "kioku_llm_cached_prompt_tokens",
            "Prompt tokens the model server reported reading from its prompt cache",
            registry=self.registry,
        )
        # Which build runs where, for dashboards that compare before and after a release.
        Info("kioku_build", "Kioku's version and Python's", registry=self.registry).info(
            {"version": release(), "python": platform.python_version()}
        )

    def llm_request(self, request: LlmRequest) -> None:
        """Count one Chat Completions request of a turn or the summarizer."""
        self.llm_requests.labels(request.outcome).inc()
        self.llm_seconds.observe(request.seconds)
        if request.prompt_tokens:
            self.llm_tokens.labels("prompt").inc(request.prompt_tokens)
        if request.completion_tokens:
            self.llm_tokens.labels("completion").inc(request.completion_tokens)
        if request.cached_tokens:
            self.llm_cached_tokens.inc(request.cached_tokens)

    def turn_ended(self, outcome: TurnOutcome, seconds: float | None = None) -> None:
        self.turns.labels(outcome).inc()
        if seconds is not None:
            self.turn_seconds.observe(seconds)

    def stm_tool_called(self, told: str) -> None:
        self.stm_tool_calls.labels(stm_tool_result(told)).inc()

    def summary_ran(self, status: str) -> None:
        self.summaries.labels(status).inc()

    def gauge(self, name: str, documentation: str, read: Callable[[], float]) -> None:
        """A value read at each scrape (the state of something this bot owns)."""
        Gauge(name, documentation, registry=self.registry).set_function(read)

    def render(self) -> bytes:
        """The registry in Prometheus' text format."""
        return generate_latest(self.registry)


class MetricsServer:
    """Serves ``GET /metrics`` and ``GET /healthz`` on the bot's own event loop (no thread,
    stopped at close)."""

    def __init__(self, metrics: Metrics, health: HealthProblems | None = None) -> None:
        self._metrics = metrics
        self._health = health
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    async def start(self, host: str, port: int) -> None:
        """Listen on ``host:port`` (port 0: any free one; :attr:`port` tells which)."""
        app = web.Application()
        app.router.add_get("/metrics", self._serve)
        if self._health is not None:
            app.router.add_get("/healthz", self._serve_health)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            sock = socket.create_server((host, port))
        except OSError:
            await runner.cleanup()
            raise
        self.port = sock.getsockname()[1]
        await web.SockSite(runner, sock).start()
        self._runner = runner
        log.info("metrics on http://%s:%d/metrics", host, self.port)

    async def _serve(self, request: web.Request) -> web.Response:
        body = self._metrics.render()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _serve_health(self, request: web.Request) -> web.Response:
        # 200 "ok", or 503 with one reason per line: what a container health check reads.
        assert self._health is not None
        problems = await self._health()
        if problems:
            return web.Response(status=503, text="\n".join(problems) + "\n")
        return web.Response(text="ok\n")

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
