"""A recording proxy in front of the OpenAI-compatible endpoint: every call, counted.

The bot and the baselines talk to the model through it, so the harness sees every call
each system makes (the bot's tool round trips and background summaries included) with
no hook inside the bot. Each call is recorded with the phase the harness was in (which
system, ingesting or answering which question), the prompt tokens counted here from the
request, the usage fields the server reported (when it did, streamed answers included)
and its duration. Bodies pass through unchanged; streamed answers are relayed as they come.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from bot.llm.client import reported_tokens
from bot.llm.tokens import MESSAGE_TOKENS, TokenCounter

# Not forwarded: hop-by-hop headers, and what aiohttp sets or undoes itself (it
# decompresses what it reads, so the body it relays is no longer encoded).
_DROPPED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "content-encoding",
        "accept-encoding",
    }
)
TOKEN_COUNTER = (
    f"cl100k_base (tiktoken), plus {MESSAGE_TOKENS} per message and 3 for the reply; "
    "tool schemas and calls as JSON"
)
"""How :func:`counted_prompt_tokens` counts, as the report states it."""
COUNTER = TokenCounter.for_encoding("cl100k_base")
"""The harness's tokenizer, whatever the model: figures compare across models and runs."""


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: only their text counts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def counted_prompt_tokens(body: Mapping[str, Any]) -> int:
    """Prompt tokens of a chat request, counted here (see :data:`TOKEN_COUNTER`): the
    messages' text and tool calls, the tool schemas, the framing of each message."""
    messages = body.get("messages")
    tools = body.get("tools")
    return COUNTER.count_messages(
        [m for m in messages if isinstance(m, Mapping)] if isinstance(messages, list) else [],
        tools if isinstance(tools, list) else None,
    )


@dataclass(frozen=True, slots=True)
class Phase:
    """What the harness was doing when a call was made."""

    system: str
    stage: str  # "ingest" or "answer"
    key: str = ""  # the question's key while answering


@dataclass
class Call:
    phase: Phase | None
    path: str
    request: dict[str, Any]
    status: int = 0
    seconds: float = 0.0
    counted_prompt_tokens: int = 0
    # What the server reported (None: it did not say).
    server_prompt_tokens: int | None = None
    server_completion_tokens: int | None = None
    # Of the prompt, the tokens the server said it read from its prompt cache (0: none said).
    server_cached_tokens: int = 0
    reply: str = ""
    error: str | None = None

    def prompt_text(self) -> str:
        """Every message's text, joined (what the model was shown)."""
        messages = self.request.get("messages")
        return "\n".join(
            _content_text(m.get("content"))
            for m in (messages if isinstance(messages, list) else ())
            if isinstance(m, Mapping)
        )


@dataclass
class _Reading:
    """What a response said, read as it passed: usage and the answer's text."""

    usage: dict[str, Any] = field(default_factory=dict)
    # llama.cpp's llama-server: how much of the prompt its cache held (cache_n).
    timings: dict[str, Any] = field(default_factory=dict)
    text: list[str] = field(default_factory=list)

    def read_completion(self, data: object) -> None:
        if not isinstance(data, Mapping):
            return
        if isinstance(data.get("usage"), Mapping):
            self.usage = dict(data["usage"])
        if isinstance(data.get("timings"), Mapping):
            self.timings = dict(data["timings"])
        for choice in data.get("choices") or ():
            if not isinstance(choice, Mapping):
                continue
            part = choice.get("message") or choice.get("delta") or {}
            if isinstance(part, Mapping) and isinstance(part.get("content"), str):
                self.text.append(part["content"])

    def read_events(self, body: bytes) -> None:
        for line in body.decode("utf-8", "replace").splitlines():
            if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                continue
            try:
                self.read_completion(json.loads(line[5:]))
            except ValueError:
                continue


def _usage_field(usage: Mapping[str, Any], name: str) -> int | None:
    value = usage.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class RecordingProxy:
    """Relays ``/v1/...`` on 127.0.0.1 to ``upstream`` and records each call in ``calls``.

    ``before_forward`` (the scripted run's oracle) sees each request body before it goes on.
    """

    def __init__(
        self,
        upstream: str,
        *,
        before_forward: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.before_forward = before_forward
        self.phase: Phase | None = None
        self.calls: list[Call] = []
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}/v1"

    async def start(self) -> RecordingProxy:
        # No total timeout: the clients' own timeouts apply, and a client that gives up
        # cancels the relay (handler_cancellation).
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/v1/{tail:.*}", self._relay)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = int(self._runner.addresses[0][1])
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def calls_in(self, phases: Sequence[Phase]) -> list[Call]:
        wanted = set(phases)
        return [call for call in self.calls if call.phase in wanted]

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        raw = await request.read()
        body: dict[str, Any] = {}
        if raw:
            try:
                loaded = json.loads(raw)
                body = loaded if isinstance(loaded, dict) else {}
            except ValueError:
                body = {}
        tail = request.match_info["tail"]
        chat = tail.endswith("chat/completions")
        call = Call(self.phase, tail, body)
        if chat:
            call.counted_prompt_tokens = counted_prompt_tokens(body)
            self.calls.append(call)
            if self.before_forward is not None:
                self.before_forward(body)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROPPED_HEADERS}
        started = time.perf_counter()
        reading = _Reading()
        response: web.StreamResponse | None = None
        received = bytearray()
        try:
            async with self._session.request(
                request.method,
                f"{self.upstream}/{tail}",
                params=request.query,
                data=raw or None,
                headers=headers,
            ) as upstream:
                call.status = upstream.status
                response = web.StreamResponse(
                    status=upstream.status,
                    headers={
                        k: v
                        for k, v in upstream.headers.items()
                        if k.lower() not in _DROPPED_HEADERS
                    },
                )
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():
                    received.extend(chunk)
                    await response.write(chunk)
                await response.write_eof()
        except aiohttp.ClientError as exc:
            call.error = type(exc).__name__
            call.seconds = time.perf_counter() - started
            if response is not None:  # cut mid-answer: the client sees the stream end
                return response
            return web.json_response(
                {"error": {"message": f"proxy: upstream failed: {exc}", "type": "proxy_error"}},
                status=502,
            )
        call.seconds = time.perf_counter() - started
        if chat:
            if "text/event-stream" in upstream.headers.get("Content-Type", ""):
                reading.read_events(bytes(received))
            else:
                with contextlib.suppress(ValueError):
                    reading.read_completion(json.loads(received))
            call.server_prompt_tokens = _usage_field(reading.usage, "prompt_tokens")
            call.server_completion_tokens = _usage_field(reading.usage, "completion_tokens")
            _, _, call.server_cached_tokens = reported_tokens(
                {"usage": reading.usage, "timings": reading.timings}
            )
            call.reply = "".join(reading.text)
        return response
