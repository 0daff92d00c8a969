"""``kioku doctor``'s model rows: the endpoint, its context, and a tool call like a turn's."""

# A real turn sends a system message and tools with tool_choice "auto"; some templates
# (llama-cpp-python's chatml-function-calling) list tools only inside a system message
# and drop them without tool_choice, so the probe sends the same shape.

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any

import aiohttp
import openai

from bot.config import Settings, api_key_problem
from bot.llm import (
    chat_completion,
    make_client,
    reported_tokens,
    text_tool_calls,
    tool_prompt,
    unescape_new_entities,
)
from bot.ops.table import Check, Status, Table
from bot.vocabulary import ProviderCaps, capabilities

ENDPOINT_ROW = "llm endpoint"
CONTEXT_ROW = "llm context"
TOOL_ROW = "llm tool call"
LLM_ROWS = (ENDPOINT_ROW, CONTEXT_ROW, TOOL_ROW)
BASE_URL_HINT = "check OPENAI_BASE_URL (most OpenAI-compatible servers end in /v1)"
API_KEY_HINT = "check OPENAI_API_KEY"
# About what a turn with memory sends; the probe's speed is scaled up to it.
TURN_PROMPT_TOKENS = 1_500
CONTEXT_TIMEOUT_SECONDS = 5.0

# How to make each server family pass tools to the model.
TOOL_FIXES: Mapping[str, str] = {
    "llama.cpp": "llama.cpp: start llama-server with --jinja",
    "llama-cpp-python": "llama-cpp-python: start it with --chat_format chatml-function-calling",
    "ollama": "Ollama: use a model whose template has tools (ollama show --template MODEL)",
    "vllm": "vLLM: start it with --enable-auto-tool-choice --tool-call-parser NAME",
}
_FAMILIES: Mapping[str, tuple[str, ...]] = {
    "llamacpp": ("llama.cpp", "llama-cpp-python"),
    "ollama": ("ollama",),
    "vllm": ("vllm",),
}
# How to give each family a larger context.
CONTEXT_FIXES: Mapping[str, str] = {
    "llamacpp": "start llama-server with -c N (llama-cpp-python: --n_ctx N)",
    "ollama": "set OLLAMA_CONTEXT_LENGTH=N (or num_ctx)",
    "vllm": "start it with --max-model-len N",
    "lmstudio": "load the model with a context length of N",
}


def tool_fix(caps: ProviderCaps) -> str:
    """The likely cause of a model that calls no tool, and each server family's fix."""
    families = _FAMILIES.get(caps.name, tuple(TOOL_FIXES))
    fixes = "; ".join(TOOL_FIXES[family] for family in families)
    return f"the server may not pass the tool list to the model: {fixes}"


async def llm_rows(settings: Settings, table: Table, hide: Callable[[str], str]) -> None:
    """Show the endpoint, context and tool-call rows, each as soon as it is known."""
    show = table.show
    caps = capabilities(settings.provider)
    if api_key_problem(settings) is not None:
        # Every request would be refused, and would send the client's placeholder key.
        why = "skipped: OPENAI_API_KEY is not set (see config)"
        for row in LLM_ROWS:
            show(Check(row, Status.SKIP, why))
        return
    # Waits as long as the bot does: a slow local model that the bot can use must pass.
    client = make_client(settings, max_retries=0)
    try:
        list_models = partial(_list_models, client, settings.model)
        endpoint = await table.waiting(
            ENDPOINT_ROW, "the model server", _probe(ENDPOINT_ROW, list_models, settings, hide)
        )
        show(endpoint)
        if endpoint.status is Status.FAIL:
            # A second request would fail the same way, after a second timeout.
            show(Check(CONTEXT_ROW, Status.SKIP, "skipped: the llm endpoint failed"))
        else:
            show(await _context_check(settings, caps))
        if not caps.tool_calling:
            detail = (
                f"skipped (provider {caps.name} has no tool calling; the summarizer keeps memory)"
            )
            show(Check(TOOL_ROW, Status.OK, detail))
        elif endpoint.status is Status.FAIL:
            show(Check(TOOL_ROW, Status.SKIP, "skipped: the llm endpoint failed"))
        else:
            probe = partial(_tool_call, client, settings, caps)
            call = _probe(TOOL_ROW, probe, settings, hide)
            show(await table.waiting(TOOL_ROW, "the model", call))
    finally:
        await client.close()


async def _probe(
    name: str,
    probe: Callable[[], Awaitable[tuple[Status, str]]],
    settings: Settings,
    hide: Callable[[str], str],
) -> Check:
    started = time.perf_counter()
    try:
        status, detail = await probe()
    except Exception as exc:  # any failure is the finding
        return Check(name, Status.FAIL, _llm_failure(exc, settings, hide))
    return Check(name, status, f"{detail} ({(time.perf_counter() - started) * 1000:.0f} ms)")


def _llm_failure(exc: Exception, settings: Settings, hide: Callable[[str], str]) -> str:
    if isinstance(exc, openai.APITimeoutError):  # its text and causes say only "cancelled"
        return f"no answer within {settings.llm.timeout_seconds:g} s (KIOKU_LLM__TIMEOUT_SECONDS)"
    if isinstance(exc, openai.APIStatusError):
        hint = _status_hint(exc)
        return _status_text(exc) + (f"; {hint}" if hint else "")
    return f"{exc.__class__.__name__}: {exc}{_cause(exc, hide)}"


def _status_text(exc: openai.APIStatusError) -> str:
    """``NotFoundError (HTTP 404): <what the server said>``, the status given once."""
    said = _server_said(exc)
    return f"{exc.__class__.__name__} (HTTP {exc.status_code})" + (f": {said}" if said else "")


def _http_status(exc: openai.APIStatusError) -> str:
    said = _server_said(exc)
    return f"HTTP {exc.status_code}" + (f": {said}" if said else "")


def _server_said(exc: openai.APIStatusError) -> str:
    body = exc.body
    said = body.get("message") if isinstance(body, Mapping) else body
    if not isinstance(said, str):
        return ""
    said = " ".join(said.split())
    return "" if said.startswith("<") else said  # an HTML error page says nothing useful


def _status_hint(exc: openai.APIStatusError) -> str | None:
    if exc.status_code in (401, 403):
        return API_KEY_HINT
    if exc.status_code == 404:
        # OpenAI, vLLM and Ollama answer 404 for a model they do not have, too.
        return "check KIOKU_MODEL" if "model" in _server_said(exc).lower() else BASE_URL_HINT
    return None


def _cause(exc: BaseException, hide: Callable[[str], str]) -> str:
    """The innermost cause of a connection failure, briefly, its secrets hidden."""
    # openai's "Connection error." does not say a connection was refused or a name does
    # not resolve; the HTTP libraries hide that as a suppressed context, followed anyway.
    if not isinstance(exc, openai.APIConnectionError):
        return ""  # the other errors' own text says what the endpoint answered
    chain: list[BaseException] = [exc]
    while (inner := chain[-1].__cause__ or chain[-1].__context__) is not None:
        if inner in chain:
            break
        chain.append(inner)
    own = str(exc)
    for inner in reversed(chain[1:]):
        # Hidden before it is cut: half a secret is no longer recognised.
        said = " ".join(hide(str(inner)).split())
        if said and said not in own:
            return f" ({said if len(said) <= 120 else said[:117] + '...'})"
    return ""


async def _list_models(client: openai.AsyncOpenAI, model: str) -> tuple[Status, str]:
    try:
        page = await client.models.list()
    except openai.NotFoundError as exc:
        # A gateway without a model list, or a base URL missing its /v1: the tool call
        # tells them apart (it fails too in the second case).
        return (
            Status.WARN,
            f"no model list at this URL ({_http_status(exc)}); {BASE_URL_HINT}, "
            "unless the server has none",
        )
    except openai.PermissionDeniedError as exc:
        # Some keys may chat but not list models.
        return (
            Status.WARN,
            f"not allowed to list models ({_http_status(exc)}); {API_KEY_HINT}, "
            "unless the key may only chat",
        )
    names = [item.id for item in page.data]
    listed = "listed" if model in names else "not listed (may still work)"
    return Status.OK, f"reachable, {len(names)} models, {model} {listed}"


PING_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "ping",
        "description": "Answer a health check.",
        "parameters": {
            "type": "object",
            "properties": {"word": {"type": "string"}},
            "required": ["word"],
        },
    },
}
PING_SYSTEM = (
    "You are Kioku, a Discord bot. You have a ping tool; when the user asks for a health "
    "check, call it."
)


async def _tool_call(
    client: openai.AsyncOpenAI, settings: Settings, caps: ProviderCaps
) -> tuple[Status, str]:
    """Ask as a turn asks (a system message, one tool, tool_choice "auto")."""
    request: dict[str, Any] = {
        "model": settings.model,
        "messages": [
            {"role": "system", "content": PING_SYSTEM},
            {"role": "user", "content": "Health check: call the ping tool with word 'pong'."},
        ],
        "tools": [PING_TOOL],
        "tool_choice": "auto",
        "max_tokens": 64,
    }
    started = time.perf_counter()
    try:
        response = await chat_completion(client, request, strict_roles=settings.strict_roles)
    except openai.BadRequestError as exc:
        if "tool_choice" not in str(exc).replace(" ", "_").lower():
            raise
        del request["tool_choice"]  # a server without tool_choice, as a turn falls back
        response = await chat_completion(client, request, strict_roles=settings.strict_roles)
    message = response.choices[0].message
    if message.tool_calls:
        status, detail = Status.OK, "the model called the tool"
    elif _written_call(message.content):
        status, detail = _written(caps, "the model wrote the call as text")
    elif not (message.content or "").strip() and caps.text_tool_calls:
        # llama-cpp-python's chatml-function-calling answers tool_choice "auto" with an
        # empty message: turns then describe the tools in the prompt, and so does this.
        prompted = [
            request["messages"][0],
            {"role": "system", "content": tool_prompt([PING_TOOL])},
            request["messages"][1],
        ]
        # Entities the template escapes take tokens: room for a call written escaped.
        plain = {"model": settings.model, "messages": prompted, "max_tokens": 128}
        started = time.perf_counter()  # the speed is the second request's
        response = await chat_completion(client, plain, strict_roles=settings.strict_roles)
        if not _written_call(response.choices[0].message.content):
            raise RuntimeError(
                f"the model answered tools with an empty message, and did not call the "
                f"tool described in the prompt either; {tool_fix(caps)}"
            )
        status = Status.OK
        detail = (
            "the server answers tools with an empty message (llama-cpp-python's "
            "chatml-function-calling does); the model called the tool described in the "
            "prompt, as Kioku's turns will describe them"
        )
    else:
        raise RuntimeError(f"the model answered without calling the tool; {tool_fix(caps)}")
    seconds = time.perf_counter() - started
    # A prefix the server kept from an earlier request (llama.cpp) took no time to read:
    # the speed is that of the tokens it read.
    prompt, _, cached = reported_tokens(response)
    slow = _too_slow(settings, seconds, prompt - cached)
    if slow is not None:
        return Status.WARN, f"{detail}; {slow}"
    return status, detail


def _written_call(content: str | None) -> bool:
    return bool(text_tool_calls(unescape_new_entities(content or "", ""), ["ping"], 0).calls)


def _written(caps: ProviderCaps, what: str) -> tuple[Status, str]:
    if caps.text_tool_calls:
        return Status.OK, f"{what} (Kioku reads it)"
    return Status.WARN, (
        f"{what}, which provider {caps.name} does not read; {tool_fix(caps)}, or set "
        "KIOKU_PROVIDER to the server's family"
    )


def _too_slow(settings: Settings, seconds: float, prompt_tokens: int) -> str | None:
    """Which timeouts to raise when a turn at the probe's speed (``prompt_tokens`` read in
    ``seconds``) would outlast them."""
    if prompt_tokens <= 0:
        return None
    turn = seconds * max(1.0, TURN_PROMPT_TOKENS / prompt_tokens)
    llm = settings.llm
    if turn <= llm.timeout_seconds and turn <= llm.turn_timeout_seconds:
        return None
    wanted = math.ceil(turn * 1.5 / 10) * 10
    return (
        f"slow: a {TURN_PROMPT_TOKENS:,}-token turn would take about {turn:.0f} s; set "
        f"KIOKU_LLM__TIMEOUT_SECONDS={max(wanted, int(llm.timeout_seconds))} and "
        f"KIOKU_LLM__TURN_TIMEOUT_SECONDS={max(wanted * 2, int(llm.turn_timeout_seconds))}"
    )


async def _context_check(settings: Settings, caps: ProviderCaps) -> Check:
    """The server's context length, where it reports one, beside the provider row's."""
    served = await served_context(settings)
    row = caps.context_tokens
    if served is None:
        return Check(
            CONTEXT_ROW,
            Status.OK,
            f"not reported by the server; provider {caps.name} assumes {row:,} tokens",
        )
    if served >= row:
        return Check(CONTEXT_ROW, Status.OK, f"{served:,} tokens (provider {caps.name}: {row:,})")
    fix = CONTEXT_FIXES.get(caps.name, "give the server a context of N").replace("N", str(row))
    return Check(
        CONTEXT_ROW,
        Status.WARN,
        f"the server serves {served:,} tokens, provider {caps.name} assumes {row:,}: long "
        f"prompts will be cut or refused; {fix}",
    )


async def served_context(settings: Settings) -> int | None:
    """The context length the server reports: vLLM, LM Studio and OpenRouter in the model
    list, llama.cpp's ``/props``, Ollama's ``/api/ps``; None when none answers."""
    base = settings.llm_base_url.rstrip("/")
    root = base.removesuffix("/v1")
    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else ""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    timeout = aiohttp.ClientTimeout(total=CONTEXT_TIMEOUT_SECONDS)
    async with aiohttp.ClientSession(timeout=timeout, headers=headers) as http:
        for url, read in (
            (f"{base}/models", _listed_context),
            (f"{root}/props", _props_context),
            (f"{root}/api/ps", _ollama_context),
        ):
            try:
                async with http.get(url) as response:
                    body = await response.json(content_type=None) if response.ok else None
            except (aiohttp.ClientError, TimeoutError, ValueError):
                continue
            if (found := read(body, settings.model)) is not None:
                return found
    return None


def _positive(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _listed_context(body: Any, model: str) -> int | None:
    entries = body.get("data") if isinstance(body, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("id") == model:
            for field in ("max_model_len", "loaded_context_length", "context_length"):
                if (found := _positive(entry.get(field))) is not None:
                    return found
    return None


def _props_context(body: Any, model: str) -> int | None:
    settings = body.get("default_generation_settings") if isinstance(body, dict) else None
    return _positive(settings.get("n_ctx")) if isinstance(settings, dict) else None


def _ollama_context(body: Any, model: str) -> int | None:
    entries = body.get("models") if isinstance(body, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and model in (entry.get("name"), entry.get("model")):
            return _positive(entry.get("context_length"))
    return None
