"""A scripted OpenAI-compatible HTTP server for tests.

Why a real server rather than mocking the ``openai`` client: the bot talks to the model through
``openai.AsyncOpenAI``, and the behaviours worth testing (error classes, ``retry-after``
handling, timeouts, refused connections, streamed tool-call deltas) live inside that client's
HTTP and parsing layers. Serving canned answers over real HTTP on 127.0.0.1 exercises all of it,
while each test still decides exactly what "the model" says, in order.

Typical use::

    async def test_something(llm: ScriptedLLM) -> None:
        llm.reply_tool_calls([("remember", {"fact": "likes tea"})]).reply_text("Noted!")
        client = openai_client(llm)
        ...
        assert llm.tool_names() == ["remember"]

The module is registered as a pytest plugin from ``tests/conftest.py``, so the ``llm`` fixture is
available to every test.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import re
import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Self

import openai
import pytest_asyncio
from aiohttp import web

__all__ = [
    "DEFAULT_MODEL_ID",
    "STRICT_ROLES_MESSAGE",
    "ScriptedLLM",
    "ToolCallSpec",
    "ToolDelta",
    "llm",
    "openai_client",
    "refused_base_url",
    "role_order_problem",
]

DEFAULT_MODEL_ID = "test-model"

ToolCallSpec = tuple[str, Mapping[str, Any] | str]
"""``(name, arguments)``: a dict is JSON-encoded, a str is sent verbatim (for malformed JSON)."""


# --------------------------------------------------------------------------------------------
# Queued replies. Private: tests build them through the ``ScriptedLLM.reply_*`` methods.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Text:
    text: str
    finish_reason: str
    delay: float


@dataclass(frozen=True)
class _ToolCalls:
    calls: tuple[tuple[str, str, str], ...]  # (id, name, raw arguments)
    content: str | None
    delay: float


@dataclass(frozen=True)
class _Error:
    status: int
    message: str
    error_type: str
    code: str | None
    headers: Mapping[str, str]
    delay: float


@dataclass(frozen=True)
class _Disconnect:
    delay: float


@dataclass(frozen=True)
class ToolDelta:
    """One streamed piece of a tool call: ``id`` and ``name`` usually come with the first."""

    index: int
    arguments: str = ""
    id: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class _Streamed:
    pieces: tuple[str | ToolDelta, ...]
    finish_reason: str
    split_within: tuple[str, ...]  # the SSE body's bytes are cut inside each of these
    drop_within: str | None  # the connection drops inside this one's bytes
    pause_within: str | None  # the server waits for resume_stream() inside this one's bytes
    error_event: bool  # an error event instead of the finish
    delay: float


_Reply = _Text | _ToolCalls | _Error | _Disconnect | _Streamed


@dataclass
class _Recorded:
    """One chat-completions request as the server saw it."""

    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes = b""  # the body's bytes as they arrived
    query: dict[str, str] = field(default_factory=dict)  # the URL's query parameters


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _rough_tokens(text: str) -> int:
    """A crude token estimate (~4 chars per token): tests only need plausible, non-zero usage."""
    return max(1, (len(text) + 3) // 4) if text else 0


def _split_text(text: str) -> list[str]:
    """Split text into several stream pieces (word-wise, whitespace kept) that join back exactly.

    A single word is halved so that even short replies arrive in more than one chunk, which is
    what real servers do and what reassembly code must cope with.
    """
    pieces = re.findall(r"\S+\s*|\s+", text)
    if len(pieces) == 1 and len(text) > 1:
        mid = len(text) // 2
        pieces = [text[:mid], text[mid:]]
    return pieces


def _split_arguments(arguments: str, parts: int = 3) -> list[str]:
    """Cut a tool-call argument string into ``parts`` roughly equal slices (none empty)."""
    if not arguments:
        return [""]
    size = max(1, -(-len(arguments) // parts))
    return [arguments[i : i + size] for i in range(0, len(arguments), size)]


def _prompt_text(body: Mapping[str, Any]) -> str:
    """Flatten the request messages to text, only to estimate prompt tokens."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ""
    return json.dumps(messages, ensure_ascii=False)


STRICT_ROLES_MESSAGE = (
    "After the optional system message, conversation roles must alternate "
    "user/assistant/user/assistant/..."
)
"""What vLLM answers (HTTP 400) when a Mistral-style chat template refuses the roles."""


def role_order_problem(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """Why a strict chat template (Llama 2, Mistral; Perplexity, DeepSeek's
    reasoner) would refuse ``messages``, or ``None``: a system message anywhere but first;
    or the user and plain assistant messages, in order, not alternating from a user
    message (as Mistral's template checks it, an assistant message with ``tool_calls``
    and the ``tool`` results after it are left out of that sequence)."""
    for index, message in enumerate(messages):
        if message.get("role") == "system" and index > 0:
            return f"message {index} is 'system' after the first message"
    expected = "user"
    for index, message in enumerate(messages):
        role = message.get("role")
        if role in ("system", "tool") or (role == "assistant" and message.get("tool_calls")):
            continue
        if role != expected:
            return f"message {index} is {role!r} where {expected!r} belongs"
        expected = "assistant" if role == "user" else "user"
    return None


EMBEDDING_DIMS = 32


def hashed_words(text: str) -> list[float]:
    """A scripted embedding: ``text``'s words counted in hashed buckets (texts sharing
    words are near), plus a constant so that no vector is zero."""
    vector = [0.0] * EMBEDDING_DIMS
    for word in re.findall(r"\w+", text.casefold()):
        vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % EMBEDDING_DIMS] += 1.0
    vector[0] += 0.01
    return vector


def refused_base_url() -> str:
    """Return a ``/v1`` base URL on 127.0.0.1 where nothing is listening.

    Binds an ephemeral port, reads it and closes the socket, so a connection attempt is refused
    (rather than hanging, as an unroutable address would). Another process could grab the port
    in between, but that is vanishingly unlikely within one test.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


# --------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------


class ScriptedLLM:
    """An OpenAI-compatible chat-completions server that answers from a per-test script.

    Each ``POST /v1/chat/completions`` consumes the next queued reply, in order. When the queue
    is empty the server answers ``fallback_text`` and counts it in ``unscripted``, so a test can
    assert the bot made no calls beyond those it scripted. Every request body and its headers
    are recorded for assertions about prompts and offered tools.

    Reply methods return ``self`` so a script reads as one chain.
    """

    def __init__(
        self,
        *,
        model_id: str = DEFAULT_MODEL_ID,
        fallback_text: str = "ok",
        host: str = "127.0.0.1",
        backlog: int = 128,
    ) -> None:
        self.model_id = model_id
        # False: GET /models answers 404, as on gateways that do not list models.
        self.lists_models = True
        # The context length GET /models reports (None: none, as most servers).
        self.served_context: int | None = None
        # True: a request whose roles a strict chat template refuses (see
        # role_order_problem) gets vLLM's 400, without using a scripted reply.
        self.strict_roles = False
        # False: a request asking to stream is answered whole, as a plain JSON completion
        # (as servers that ignore `stream` do).
        self.streams = True
        self.refused_roles: list[str] = []  # why each such request was refused
        # Set: a request without `Authorization: Bearer <api_key>` gets 401 quoting the
        # key it sent (as some servers do), before anything is recorded or consumed.
        self.api_key: str | None = None
        # Set: each answer reports cached(prompt tokens) of its prompt as read from a prompt
        # cache, as `cache_report` says: "openai" in usage.prompt_tokens_details, "llama.cpp"
        # in `timings` (cache_n, prompt_n; the last event of a stream) and not in usage.
        self.cached: Callable[[int], int] | None = None
        self.cache_report: Literal["openai", "llama.cpp"] = "openai"
        self.fallback_text = fallback_text
        # POST /v1/embeddings: each input's vector (default: its words hashed into
        # EMBEDDING_DIMS buckets); None answers 503, as an endpoint that is down.
        self.embed: Callable[[str], list[float]] | None = hashed_words
        self.embedded: list[list[str]] = []  # each embeddings request's inputs
        self.host = host
        self._backlog = backlog
        self.unscripted = 0
        self._queue: deque[_Reply] = deque()
        self._recorded: list[_Recorded] = []
        self._call_ids = itertools.count(1)
        self._completion_ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        # Set on stop() so that replies sleeping in a delay return at once instead of keeping
        # the server (and the test) alive until the delay runs out.
        self._closing = asyncio.Event()
        self._arrived = asyncio.Condition()
        self._gate: asyncio.Event | None = None
        self._paused = asyncio.Event()
        self._resumed = asyncio.Event()
        # A streamed text answer's events, encoded once: the server shares the process
        # (and the CPU) with the bot in benchmarks.
        self._encoded: dict[tuple[str, str, str, bool], bytes] = {}

    # ---- synchronisation -------------------------------------------------------------------

    async def wait_for_requests(self, count: int) -> None:
        """Return once ``count`` chat requests have arrived in total (event-driven; a
        safety timeout turns a hang into a failure)."""
        async with asyncio.timeout(10), self._arrived:
            await self._arrived.wait_for(lambda: len(self._recorded) >= count)

    async def wait_paused(self) -> None:
        """Return once a streamed answer stopped at its ``pause_within``."""
        async with asyncio.timeout(10):
            await self._paused.wait()

    def resume_stream(self) -> None:
        """Let a streamed answer stopped at its ``pause_within`` go on."""
        self._resumed.set()

    def hold(self) -> asyncio.Event:
        """Hold every answer until the returned event is set: lets a test act while a
        turn is in flight (e.g. ``/refresh`` between the request and its tool call)."""
        self._gate = asyncio.Event()
        return self._gate

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self) -> Self:
        """Bind 127.0.0.1 on a free port and start serving."""
        if self._runner is not None:
            raise RuntimeError("ScriptedLLM already started")
        self._closing = asyncio.Event()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle_chat)
        app.router.add_get("/v1/models", self._handle_models)
        app.router.add_post("/v1/embeddings", self._handle_embeddings)
        # handler_cancellation: a client that gives up (timeout) cancels the handler, so no
        # sleeping handler outlives the request; a short shutdown_timeout keeps stop() fast.
        runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5
        )
        await runner.setup()
        # A benchmark opening a thousand connections at once needs a longer queue.
        site = web.TCPSite(runner, self.host, 0, backlog=self._backlog)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._port = int(runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        """Stop serving and drop open connections. Safe to call twice."""
        self._closing.set()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @property
    def port(self) -> int:
        """The bound TCP port (only once started)."""
        if self._port is None:
            raise RuntimeError("ScriptedLLM not started")
        return self._port

    @property
    def base_url(self) -> str:
        """What to hand to ``openai.AsyncOpenAI(base_url=...)``."""
        return f"http://{self.host}:{self.port}/v1"

    # ---- scripting -------------------------------------------------------------------------

    def reply_text(self, text: str, *, finish_reason: str = "stop", delay: float = 0.0) -> Self:
        """Queue a plain assistant text answer.

        ``finish_reason`` can be set to e.g. ``"length"`` to simulate a truncated answer.
        """
        self._queue.append(_Text(text=text, finish_reason=finish_reason, delay=delay))
        return self

    def reply_tool_calls(
        self,
        calls: Sequence[ToolCallSpec],
        content: str | None = None,
        *,
        delay: float = 0.0,
    ) -> Self:
        """Queue an answer that calls tools; ids are generated (``call_1``, ``call_2``, ...).

        Arguments given as a dict are JSON-encoded; a str is sent verbatim, which is how tests
        feed the bot malformed or truncated JSON.
        """
        if not calls:
            raise ValueError("reply_tool_calls needs at least one call")
        built = tuple(
            (
                f"call_{next(self._call_ids)}",
                name,
                args if isinstance(args, str) else json.dumps(dict(args), ensure_ascii=False),
            )
            for name, args in calls
        )
        self._queue.append(_ToolCalls(calls=built, content=content, delay=delay))
        return self

    def reply_error(
        self,
        status: int,
        message: str = "scripted error",
        headers: Mapping[str, str] | None = None,
        *,
        error_type: str | None = None,
        code: str | None = None,
        delay: float = 0.0,
    ) -> Self:
        """Queue an HTTP error with an OpenAI-style body ``{"error": {"message", "type", ...}}``.

        E.g. ``reply_error(429, headers={"retry-after": "2"})`` or ``reply_error(500)``.
        """
        if error_type is None:
            error_type = {
                400: "invalid_request_error",
                401: "authentication_error",
                404: "not_found_error",
                429: "rate_limit_exceeded",
            }.get(status, "server_error" if status >= 500 else "api_error")
        self._queue.append(
            _Error(
                status=status,
                message=message,
                error_type=error_type,
                code=code,
                headers=dict(headers or {}),
                delay=delay,
            )
        )
        return self

    def reply_stream(
        self,
        *pieces: str | ToolDelta,
        finish_reason: str | None = None,
        split_within: Sequence[str] = (),
        drop_within: str | None = None,
        pause_within: str | None = None,
        error_event: bool = False,
        delay: float = 0.0,
    ) -> Self:
        """Queue an answer streamed exactly as given: each piece one event (text or a tool
        call's delta), then the finish reason (``tool_calls`` when a call was sent) and
        ``[DONE]``.

        The SSE body's bytes are written in separate writes, cut in the middle of the UTF-8
        bytes of each ``split_within`` string (inside a word, a tool call's JSON, a
        multi-byte character). ``drop_within`` writes the body up to the middle of that
        string's bytes, then drops the connection; ``error_event`` sends an error event
        in place of the finish. ``pause_within`` stops the body there until
        :meth:`resume_stream` (:meth:`wait_paused` returns once it stopped). A request that
        did not ask to stream gets the pieces as one ordinary answer.
        """
        if finish_reason is None:
            calls = any(isinstance(piece, ToolDelta) for piece in pieces)
            finish_reason = "tool_calls" if calls else "stop"
        self._queue.append(
            _Streamed(
                pieces=tuple(pieces),
                finish_reason=finish_reason,
                split_within=tuple(split_within),
                drop_within=drop_within,
                pause_within=pause_within,
                error_event=error_event,
                delay=delay,
            )
        )
        return self

    def reply_disconnect(self, *, delay: float = 0.0) -> Self:
        """Queue a reply that closes the connection without sending any response."""
        self._queue.append(_Disconnect(delay=delay))
        return self

    def reply_delay(self, seconds: float, text: str | None = None) -> Self:
        """Queue a text answer sent only after ``seconds`` (to trip client timeouts).

        Shorthand for ``reply_text(text or fallback_text, delay=seconds)``; every ``reply_*``
        method also takes ``delay=``.
        """
        return self.reply_text(self.fallback_text if text is None else text, delay=seconds)

    @property
    def pending(self) -> int:
        """How many scripted replies have not been consumed yet."""
        return len(self._queue)

    def reset(self) -> None:
        """Forget the script and the recordings (configuration such as ``fallback_text`` stays)."""
        self._queue.clear()
        self._recorded.clear()
        self.refused_roles.clear()
        self.unscripted = 0
        self._call_ids = itertools.count(1)

    # ---- recordings ------------------------------------------------------------------------

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Parsed JSON bodies of every chat-completions request, oldest first."""
        return [r.body for r in self._recorded]

    def raw_request(self, i: int = -1) -> bytes:
        """Request ``i``'s body exactly as it arrived (bytes)."""
        self.request(i)  # the same LookupError for a request that never came
        return self._recorded[i].raw

    @property
    def headers(self) -> list[dict[str, str]]:
        """Headers of every chat-completions request (lower-cased names), oldest first."""
        return [r.headers for r in self._recorded]

    @property
    def request_queries(self) -> list[dict[str, str]]:
        """The URL query of every chat-completions request, oldest first."""
        return [r.query for r in self._recorded]

    @property
    def last_request(self) -> dict[str, Any]:
        """The most recent request body; raises ``LookupError`` if none was made."""
        return self.request(-1)

    def request(self, i: int = -1) -> dict[str, Any]:
        """Request body number ``i`` (negative indexes count from the latest)."""
        try:
            return self._recorded[i].body
        except IndexError:
            raise LookupError(
                f"no request #{i}: the fake LLM received {len(self._recorded)} request(s)"
            ) from None

    def messages(self, i: int = -1) -> list[dict[str, Any]]:
        """The ``messages`` list sent in request ``i``."""
        messages = self.request(i).get("messages", [])
        return list(messages) if isinstance(messages, list) else []

    def tool_names(self, i: int = -1) -> list[str]:
        """Names of the tools offered in request ``i``, in order; empty if none were offered."""
        return [name for name, _ in self._tools(i)]

    def tool_schema(self, name: str, i: int = -1) -> dict[str, Any]:
        """The JSON-schema ``parameters`` of tool ``name`` as offered in request ``i``."""
        for tool_name, spec in self._tools(i):
            if tool_name == name:
                params = spec.get("parameters", {})
                return dict(params) if isinstance(params, Mapping) else {}
        raise KeyError(f"tool {name!r} not offered in request #{i}; offered: {self.tool_names(i)}")

    def _tools(self, i: int) -> list[tuple[str, Mapping[str, Any]]]:
        tools = self.request(i).get("tools") or []
        out: list[tuple[str, Mapping[str, Any]]] = []
        for tool in tools:
            if not isinstance(tool, Mapping):
                continue
            # Function tools nest under "function"; custom tools carry the name at top level.
            spec = tool.get("function", tool)
            if isinstance(spec, Mapping) and isinstance(spec.get("name"), str):
                out.append((spec["name"], spec))
        return out

    # ---- HTTP handlers ---------------------------------------------------------------------

    def _refused_key(self, request: web.Request) -> web.Response | None:
        if self.api_key is None:
            return None
        sent = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if sent == self.api_key:
            return None
        return self._error_response(
            401, f"Incorrect API key provided: {sent}", "invalid_request_error", "invalid_api_key"
        )

    async def _handle_models(self, request: web.Request) -> web.Response:
        if (refused := self._refused_key(request)) is not None:
            return refused
        if not self.lists_models:  # some gateways have no GET /models
            return web.json_response({"error": {"message": "not found"}}, status=404)
        model: dict[str, Any] = {
            "id": self.model_id,
            "object": "model",
            "created": 0,
            "owned_by": "tests",
        }
        if self.served_context is not None:  # as vLLM reports it
            model["max_model_len"] = self.served_context
        return web.json_response({"object": "list", "data": [model]})

    async def _handle_embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        self.embedded.append(list(inputs))
        if self.embed is None:
            return web.json_response({"error": {"message": "down"}}, status=503)
        data = [
            {"object": "embedding", "index": i, "embedding": self.embed(text)}
            for i, text in enumerate(inputs)
        ]
        usage = {"prompt_tokens": 0, "total_tokens": 0}
        return web.json_response(
            {"object": "list", "data": data, "model": body["model"], "usage": usage}
        )

    async def _handle_chat(self, request: web.Request) -> web.StreamResponse:
        if (refused := self._refused_key(request)) is not None:
            return refused
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            return self._error_response(400, "request body is not valid JSON", "invalid_json")
        if not isinstance(body, dict):
            return self._error_response(400, "request body must be a JSON object", "invalid_json")
        self._recorded.append(
            _Recorded(
                body=body,
                headers={k.lower(): v for k, v in request.headers.items()},
                raw=raw,
                query=dict(request.query),
            )
        )
        async with self._arrived:
            self._arrived.notify_all()
        if self._gate is not None:
            await self._gate.wait()
        messages = body.get("messages")
        if self.strict_roles and isinstance(messages, list):
            problem = role_order_problem([m for m in messages if isinstance(m, Mapping)])
            if problem is not None:
                self.refused_roles.append(problem)
                return self._error_response(400, STRICT_ROLES_MESSAGE, "BadRequestError")

        if self._queue:
            reply = self._queue.popleft()
        else:
            self.unscripted += 1
            reply = _Text(text=self.fallback_text, finish_reason="stop", delay=0.0)

        if reply.delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), timeout=reply.delay)
            if self._closing.is_set():
                return await self._drop(request)

        if isinstance(reply, _Disconnect):
            return await self._drop(request)
        if isinstance(reply, _Error):
            return self._error_response(
                reply.status, reply.message, reply.error_type, reply.code, reply.headers
            )
        model = str(body.get("model") or self.model_id)
        if isinstance(reply, _Streamed):
            if not body.get("stream") or not self.streams:
                return web.json_response(self._completion(_as_whole(reply), model, body))
            return await self._stream_pieces(request, reply, model)
        if body.get("stream") and self.streams:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await self._stream(request, reply, model, body, include_usage)
        return web.json_response(self._completion(reply, model, body))

    @staticmethod
    def _error_response(
        status: int,
        message: str,
        error_type: str,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> web.Response:
        payload = {"error": {"message": message, "type": error_type, "param": None, "code": code}}
        return web.json_response(payload, status=status, headers=dict(headers or {}))

    @staticmethod
    async def _drop(request: web.Request) -> web.StreamResponse:
        """Abort the TCP connection before any response bytes are written."""
        transport = request.transport
        if transport is not None:
            transport.abort()
        # Nothing reaches the client: the transport is gone. aiohttp just needs a return value.
        return web.Response(status=204)

    def _completion(
        self, reply: _Text | _ToolCalls, model: str, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "refusal": None}
        if isinstance(reply, _Text):
            message["content"] = reply.text
            finish_reason = reply.finish_reason
            completion_text = reply.text
        else:
            message["content"] = reply.content
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for cid, name, args in reply.calls
            ]
            finish_reason = "tool_calls"
            completion_text = (reply.content or "") + "".join(n + a for _, n, a in reply.calls)
        return {
            "id": f"chatcmpl-{next(self._completion_ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": finish_reason,
                    "logprobs": None,
                }
            ],
            "usage": self._usage(body, completion_text),
            **self._timings(body, completion_text),
        }

    def _usage(self, body: Mapping[str, Any], completion_text: str) -> dict[str, Any]:
        prompt = _rough_tokens(_prompt_text(body))
        completion = _rough_tokens(completion_text)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        if self.cached is not None and self.cache_report == "openai":
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached(prompt)}
        return usage

    def _timings(self, body: Mapping[str, Any], completion_text: str) -> dict[str, Any]:
        """``{"timings": …}`` as llama-server adds it to an answer, or nothing."""
        if self.cached is None or self.cache_report != "llama.cpp":
            return {}
        prompt = _rough_tokens(_prompt_text(body))
        cached = self.cached(prompt)
        timings = {"cache_n": cached, "prompt_n": prompt - cached}
        return {"timings": {**timings, "predicted_n": _rough_tokens(completion_text)}}

    def _stream_tail(self, chunk: dict[str, Any], body: Mapping[str, Any], text: str) -> bytes:
        """The events after the finish: usage (when asked for) and llama.cpp's timings."""
        tail = {**chunk, "choices": [], **self._timings(body, text)}
        if "timings" not in tail and not (body.get("stream_options") or {}).get("include_usage"):
            return b""
        tail["usage"] = self._usage(body, text)
        return f"data: {json.dumps(tail)}\n\n".encode()

    async def _stream_pieces(
        self, request: web.Request, reply: _Streamed, model: str
    ) -> web.StreamResponse:
        """Answer with ``reply``'s events, its bytes cut and dropped where it says."""
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        completion_id = f"chatcmpl-{next(self._completion_ids)}"
        events: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        for piece in reply.pieces:
            if isinstance(piece, str):
                events.append({"content": piece})
                continue
            call: dict[str, Any] = {
                "index": piece.index,
                "function": {"arguments": piece.arguments},
            }
            if piece.id is not None:
                call["id"], call["type"] = piece.id, "function"
            if piece.name is not None:
                call["function"]["name"] = piece.name
            events.append({"tool_calls": [call]})
        lines = [
            _sse(completion_id, model, {"delta": delta, "finish_reason": None}) for delta in events
        ]
        if reply.error_event:
            error = {"error": {"message": "scripted stream error", "type": "server_error"}}
            lines.append(f"data: {json.dumps(error)}\n\n")
        else:
            lines.append(
                _sse(completion_id, model, {"delta": {}, "finish_reason": reply.finish_reason})
            )
            lines.append("data: [DONE]\n\n")
        data = "".join(lines).encode()
        cuts = {_middle_of(data, text) for text in reply.split_within}
        pause = None if reply.pause_within is None else _middle_of(data, reply.pause_within)
        end = len(data) if reply.drop_within is None else _middle_of(data, reply.drop_within)
        start = 0
        for cut in [*sorted(c for c in {*cuts, pause} if c is not None and c < end), end]:
            await response.write(data[start:cut])
            start = cut
            if cut == pause:
                self._paused.set()
                await self._resumed.wait()
            # The server's pace, not the test's synchronisation: a write the client reads
            # on its own, as from a model generating.
            await asyncio.sleep(0.005)
        if reply.drop_within is not None:
            return await self._drop(request)
        await response.write_eof()
        return response

    async def _stream(
        self,
        request: web.Request,
        reply: _Text | _ToolCalls,
        model: str,
        body: Mapping[str, Any],
        include_usage: bool,
    ) -> web.StreamResponse:
        """Answer as server-sent events of ``chat.completion.chunk`` objects, then ``[DONE]``."""
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        completion_id = f"chatcmpl-{next(self._completion_ids)}"
        created = int(time.time())

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            return {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [
                    {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
                ],
            }

        if isinstance(reply, _Text):
            key = (reply.text, reply.finish_reason, model, include_usage)
            encoded = self._encoded.get(key)
            if encoded is None:
                pieces = [chunk({"role": "assistant", "content": ""})]
                pieces += [chunk({"content": piece}) for piece in _split_text(reply.text)]
                pieces.append(chunk({}, reply.finish_reason))
                if include_usage:
                    for c in pieces:
                        c["usage"] = None
                encoded = b"".join(
                    f"data: {json.dumps(c, ensure_ascii=False)}\n\n".encode() for c in pieces
                )
                self._encoded[key] = encoded
            tail = self._stream_tail(chunk({}), body, reply.text)
            await response.write(encoded + tail + b"data: [DONE]\n\n")
            await response.write_eof()
            return response
        chunks: list[dict[str, Any]] = [chunk({"role": "assistant", "content": ""})]
        if isinstance(reply, _Text):
            text = reply.text
            finish_reason = reply.finish_reason
            chunks += [chunk({"content": piece}) for piece in _split_text(text)]
            completion_text = text
        else:
            finish_reason = "tool_calls"
            completion_text = reply.content or ""
            chunks += [chunk({"content": piece}) for piece in _split_text(completion_text)]
            for index, (cid, name, args) in enumerate(reply.calls):
                completion_text += name + args
                chunks.append(
                    chunk(
                        {
                            "tool_calls": [
                                {
                                    "index": index,
                                    "id": cid,
                                    "type": "function",
                                    "function": {"name": name, "arguments": ""},
                                }
                            ]
                        }
                    )
                )
                chunks += [
                    chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                    for piece in _split_arguments(args)
                ]
        chunks.append(chunk({}, finish_reason))
        if include_usage:
            for c in chunks:
                c["usage"] = None
        tail = self._stream_tail(chunk({}), body, completion_text)

        # One write: the client still reads every event, the server spends less.
        events = [f"data: {json.dumps(c, ensure_ascii=False)}\n\n" for c in chunks]
        await response.write(("".join(events)).encode() + tail + b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _sse(completion_id: str, model: str, choice: dict[str, Any]) -> str:
    """One ``data:`` event of a ``chat.completion.chunk`` with ``choice`` as its only choice."""
    event = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "logprobs": None, **choice}],
    }
    return f"data: {json.dumps(event, ensure_ascii=False)}\n\n"


def _middle_of(data: bytes, text: str) -> int:
    """The byte offset in the middle of ``text``'s first occurrence (UTF-8) in ``data``."""
    encoded = text.encode()
    start = data.find(encoded)
    if start < 0:
        # In the JSON of an event a quote or backslash is escaped: look for it so.
        encoded = json.dumps(text, ensure_ascii=False)[1:-1].encode()
        start = data.find(encoded)
    if start < 0:
        raise ValueError(f"{text!r} is not in the streamed body")
    return start + max(1, len(encoded) // 2)


def _as_whole(reply: _Streamed) -> _Text | _ToolCalls:
    """``reply``'s pieces as one answer, for a request that did not ask to stream."""
    text = "".join(piece for piece in reply.pieces if isinstance(piece, str))
    calls: dict[int, list[str]] = {}
    for piece in reply.pieces:
        if isinstance(piece, ToolDelta):
            parts = calls.setdefault(piece.index, ["", "", ""])
            parts[0] = piece.id or parts[0]
            parts[1] = piece.name or parts[1]
            parts[2] += piece.arguments
    if not calls:
        return _Text(text=text, finish_reason=reply.finish_reason, delay=0.0)
    built = tuple((cid, name, args) for cid, name, args in (calls[i] for i in sorted(calls)))
    return _ToolCalls(calls=built, content=text or None, delay=0.0)


# --------------------------------------------------------------------------------------------
# pytest glue
# --------------------------------------------------------------------------------------------


def openai_client(llm: ScriptedLLM, **kwargs: Any) -> openai.AsyncOpenAI:
    """A real ``AsyncOpenAI`` client aimed at ``llm``; retries off unless ``max_retries`` given.

    Retries default to 0 so a scripted error surfaces immediately instead of consuming further
    queued replies (and sleeping between attempts).
    """
    kwargs.setdefault("api_key", "test")
    kwargs.setdefault("base_url", llm.base_url)
    kwargs.setdefault("max_retries", 0)
    return openai.AsyncOpenAI(**kwargs)


@pytest_asyncio.fixture
async def llm() -> AsyncIterator[ScriptedLLM]:
    """A started ``ScriptedLLM`` for one test, stopped afterwards."""
    async with ScriptedLLM() as server:
        yield server
