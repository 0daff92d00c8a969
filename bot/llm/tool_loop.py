"""The tool loop: ask the model, run the tools it calls, repeat until it answers in text.

One call of :func:`run_tool_loop` is one turn of the bot's reply (SPEC §3):

* every model call re-reads ``offered()``, so a tool can stop being offered mid-turn (the
  STM tool after a successful update). When nothing is offered, ``tools`` is omitted
  until the conversation holds a tool call; from then on the definitions of the tools
  called go along with ``tool_choice`` ``"none"`` (servers in front of Bedrock refuse a
  history of tool calls without them). Without tool calling (the provider's, or after
  the server refused tools) no request carries tools, nor tool calls in its history;
* every tool call is answered with a ``tool`` message (an id repeated within one answer
  gets ``_2``, ``_3``, ... so each result answers exactly one call). Calls are routed by
  name to the registry even when the tool is not offered right now (its own guards refuse
  it with a message the model can read); unknown names, and tools that raise, get an
  error result;
* at most ``max_tool_iterations`` model calls with tools; ``max_consecutive_tool_errors``
  failed tool calls in a row end the loop early. Either way one last call is made in
  which no tool may be called, so the model can still answer the user;
* a 400 (or OpenRouter's 404) that refuses tools themselves ("does not support tools")
  makes the turn go on without them (:attr:`LoopResult.tools_refused`); a 400 that
  refuses one generation's tool call (Groq's ``tool_use_failed``) is a failed tool call
  of this turn: asked again once, then the loop ends early;
* a request whose tools only define the calls in its history (``tool_choice`` ``"none"``)
  that the server refuses with a 400, 404 or 422 (OpenRouter: 404 "No endpoints found
  that support the provided 'tool_choice' value") is asked again with the definitions
  alone, then with neither tools nor tool calls in the history; the turn remembers what
  worked. The first request of a turn never carries ``tool_choice``, so a wrong model
  name or URL is still a configuration problem;
* transport problems surface as :class:`LlmUnavailable` carrying a short message safe to
  show in Discord, unless the model already answered beside a tool call: that answer
  ends the turn. Retries (429/5xx/timeouts, honouring ``retry-after``) are the
  ``openai`` client's own, with ``settings.max_retries``; nothing here retries again;
* all the model calls of one run share ``settings.turn_timeout_seconds``, retries and
  their waits included: past it the call under way is a timeout (tools are never cut).

The reply text has leaked tool-call syntax and ``<think>`` blocks removed
(:func:`bot.llm.leaks.strip_leaked_tool_syntax`). This module imports nothing from Discord
or the database.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import openai
from openai.types.chat import ChatCompletionMessage

from bot.config import LlmSettings
from bot.llm.client import LlmRequest, RequestObserver, chat_completion
from bot.llm.leaks import clean_tool_name, strip_leaked_tool_syntax
from bot.llm.tools.base import ToolOutcome

__all__ = [
    "CONFIGURATION_MESSAGE",
    "FALLBACK_REPLY",
    "FRIENDLY_ERRORS",
    "RATE_LIMIT_MESSAGE",
    "TIMEOUT_MESSAGE",
    "UNAVAILABLE_MESSAGE",
    "LlmUnavailable",
    "LoopResult",
    "ToolSpec",
    "run_tool_loop",
]

log = logging.getLogger(__name__)

TIMEOUT_MESSAGE = "The model took too long to answer. Please try again in a moment."
RATE_LIMIT_MESSAGE = "The model is busy right now (rate limited). Please try again in a minute."
UNAVAILABLE_MESSAGE = "I can't reach the language model right now. Please try again later."
CONFIGURATION_MESSAGE = (
    "I can't use the language model because of a configuration problem. "
    "Please contact the bot operator."
)
FALLBACK_REPLY = "Sorry, I couldn't finish my answer this time. Please try again."
"""Returned when the loop stopped early and even the final no-tools call failed."""

# What the bot says instead of an answer: never part of the conversation the model sees
# next (it would read its own outage notice as something it said, and may memorise it).
FRIENDLY_ERRORS = frozenset(
    (
        TIMEOUT_MESSAGE,
        RATE_LIMIT_MESSAGE,
        UNAVAILABLE_MESSAGE,
        CONFIGURATION_MESSAGE,
        FALLBACK_REPLY,
    )
)

STOPPED_MAX_ITERATIONS = "max_iterations"
STOPPED_TOOL_ERRORS = "too_many_tool_errors"
# Answers the server refused as bad tool calls (ToolCallFailed) before the turn stops
# offering tools: the first is asked again, the second ends the loop.
MAX_FAILED_GENERATIONS = 2

UnavailableKind = Literal["timeout", "rate_limited", "unavailable", "configuration"]


@dataclass(frozen=True)
class ToolSpec:
    """A tool the loop can run: its Chat Completions definition and its executor, which
    receives the model's raw argument string (possibly malformed, possibly ``None``)."""

    definition: dict[str, Any]
    run: Callable[[str | None], Awaitable[ToolOutcome]]


@dataclass
class LoopResult:
    """What one turn produced.

    ``text`` is the cleaned reply; it may be ``""`` (the model said nothing usable) and
    the caller decides what to show then. ``iterations`` counts model answers received,
    the final no-tools call included. ``tool_calls`` lists ``(tool name, result content)``
    in call order; ``errors`` counts failed tool calls; ``stopped`` says why the loop
    ended early (``"max_iterations"``, ``"too_many_tool_errors"``) or is ``None``.
    """

    text: str
    iterations: int
    tool_calls: list[tuple[str, str]] = field(default_factory=list)
    errors: int = 0
    stopped: str | None = None
    # The last answer ended because it hit ``max_tokens`` (finish_reason "length"): the
    # text is cut off, fine to show in chat but not to store as a memory.
    truncated: bool = False
    # The loop stopped early and the final call failed too: ``text`` is the fallback
    # notice, not an answer (it is not part of the conversation).
    gave_up: bool = False
    # The server refused tools (the model cannot call them); the turn went on without.
    tools_refused: bool = False


class ToolsRefused(Exception):
    """The server refused a request because it offered tools (the model cannot call
    them): the loop asks again without tools."""


class LlmUnavailable(Exception):
    """The model could not be used for this turn (after the client's own retries).

    ``user_message`` is short, friendly and safe to post in Discord: it never contains
    secrets, URLs or response bodies. ``kind`` is one of ``timeout``, ``rate_limited``,
    ``unavailable``, ``configuration``; ``status`` is the HTTP status when there was one.
    """

    def __init__(
        self, kind: UnavailableKind, user_message: str, *, status: int | None = None
    ) -> None:
        detail = f" (HTTP {status})" if status is not None else ""
        super().__init__(f"language model unavailable: {kind}{detail}")
        self.kind: UnavailableKind = kind
        self.user_message = user_message
        self.status = status


class ToolCallFailed(LlmUnavailable):
    """The server refused the model's own answer: a tool call whose arguments failed the
    server's schema check (Groq's 400 ``tool_use_failed``). A failed tool call of this
    turn, not a sign that the model cannot take tools; where it is not handled as such
    it is the ordinary unavailable notice."""

    def __init__(self) -> None:
        super().__init__("unavailable", UNAVAILABLE_MESSAGE, status=400)


# --------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------


async def run_tool_loop(
    client: openai.AsyncOpenAI,
    *,
    model: str,
    messages: list[dict[str, Any]],
    registry: Mapping[str, ToolSpec],
    offered: Callable[[], Sequence[str]],
    settings: LlmSettings,
    tool_calling: bool = True,
    without_tools_notes: Sequence[str] = (),
    strict_roles: bool = False,
    observe: RequestObserver | None = None,
) -> LoopResult:
    """Run one turn; see the module docstring. ``messages`` is not modified (the loop
    works on a copy). Raises :class:`LlmUnavailable` when a model call fails, except when
    the model already answered beside a tool call (that answer is the reply) and the
    final no-tools call after an early stop, whose failure yields :data:`FALLBACK_REPLY`.
    ``without_tools_notes``: system notes for the model when the server refuses tools
    and the turn goes on without them (what it can no longer do this turn).
    ``strict_roles`` (``Settings.strict_roles``): every request is sent in the role order
    strict chat templates accept (:mod:`bot.llm.roles`); otherwise exactly as built.
    ``observe`` is told how each request went (see :func:`chat_completion`).
    """
    api = client.with_options(max_retries=settings.max_retries)
    deadline = asyncio.get_running_loop().time() + settings.turn_timeout_seconds
    conversation: list[dict[str, Any]] = list(messages)
    result = LoopResult(text="", iterations=0)
    interim: list[str] = []  # text the model wrote alongside its tool calls
    consecutive_errors = 0
    failed_generations = 0
    called: list[str] = []  # registry tools the conversation holds calls to
    history = _HistoryTools()
    ask = functools.partial(
        _ask,
        api,
        model=model,
        settings=settings,
        history=history,
        strict_roles=strict_roles,
        observe=observe,
        deadline=deadline,
    )

    while result.iterations < settings.max_tool_iterations:
        names = _offered_names(offered, registry) if tool_calling else []
        tools, tool_choice = _request_tools(registry, names, called, tool_calling=tool_calling)
        try:
            message, result.truncated = await ask(
                messages=conversation, tools=tools, tool_choice=tool_choice
            )
        except ToolsRefused:
            _go_tool_less(result, conversation, without_tools_notes)
            tool_calling = False
            continue
        except ToolCallFailed:
            # One bad generation (arguments the server's schema check refused): a failed
            # tool call of this turn, not a sign that the model cannot take tools.
            failed_generations += 1
            consecutive_errors += 1
            result.errors += 1
            if (
                failed_generations >= MAX_FAILED_GENERATIONS
                or consecutive_errors >= settings.max_consecutive_tool_errors
            ):
                result.stopped = STOPPED_TOOL_ERRORS
                break
            log.warning("the server refused the model's tool call (tool_use_failed): asking again")
            continue
        except LlmUnavailable as exc:
            if not interim:
                raise
            # The model already answered beside its tool call: the member gets that
            # answer rather than the outage notice.
            log.warning(
                "model call failed after an answer written beside a tool call (%s); "
                "finishing with that answer",
                exc,
            )
            result.text = "\n\n".join(interim)
            return result
        result.iterations += 1
        calls = _function_calls(message, result.iterations)
        content = _content_text(getattr(message, "content", None))
        if not calls:
            result.text = _final_text(content, interim, registry.keys())
            return result

        cleaned = strip_leaked_tool_syntax(content, registry.keys())
        if cleaned and _plain(cleaned) not in {_plain(said) for said in interim}:
            interim.append(cleaned)  # a model repeating its answer beside a retried call
        conversation.append(
            {
                "role": "assistant",
                "content": content or None,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.history_arguments},
                    }
                    for call in calls
                ],
            }
        )
        for call in calls:
            if call.routed_name not in called:
                called.append(call.routed_name)
            outcome = await _run_call(registry, call, names)
            conversation.append(
                {"role": "tool", "tool_call_id": call.id, "content": outcome.content}
            )
            result.tool_calls.append((call.routed_name, outcome.content))
            if outcome.ok:
                consecutive_errors = 0
            else:
                consecutive_errors += 1
                result.errors += 1
        if consecutive_errors >= settings.max_consecutive_tool_errors:
            result.stopped = STOPPED_TOOL_ERRORS
            break
    else:
        result.stopped = STOPPED_MAX_ITERATIONS
    return await _final_answer(
        ask,
        result,
        conversation,
        registry=registry,
        called=called,
        interim=interim,
        tool_calling=tool_calling,
        without_tools_notes=without_tools_notes,
    )


class _Ask(Protocol):
    """:func:`_ask` with the turn's client, model, settings and history fallbacks bound."""

    def __call__(
        self,
        *,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        tool_choice: str | None = None,
    ) -> Awaitable[tuple[ChatCompletionMessage, bool]]: ...


async def _final_answer(
    ask: _Ask,
    result: LoopResult,
    conversation: list[dict[str, Any]],
    *,
    registry: Mapping[str, ToolSpec],
    called: Sequence[str],
    interim: Sequence[str],
    tool_calling: bool,
    without_tools_notes: Sequence[str],
) -> LoopResult:
    """The loop stopped early (``result.stopped``): one last call in which no tool may be
    called, so the model can still answer the user. Its failure gives the text written
    beside the tool calls, or :data:`FALLBACK_REPLY` (``result.gave_up``)."""
    log.info(
        "tool loop stopped early (%s) after %d model call(s); asking for a final answer "
        "without tools",
        result.stopped,
        result.iterations,
    )
    # The history may hold tool calls: their definitions go along, with tool_choice
    # "none" (any call that still comes is ignored below).
    tools, tool_choice = _request_tools(registry, [], called, tool_calling=tool_calling)
    try:
        try:
            message, result.truncated = await ask(
                messages=conversation, tools=tools, tool_choice=tool_choice
            )
        except ToolsRefused:
            _go_tool_less(result, conversation, without_tools_notes)
            message, result.truncated = await ask(messages=conversation, tools=[])
        except ToolCallFailed:
            # The server refused a tool call in the call that must allow none (Groq:
            # "Tool choice is none, but model called a tool"): once more, with no tools
            # at all, so no call can come.
            log.warning("the model called a tool in the final call: asking again without tools")
            message, result.truncated = await ask(messages=conversation, tools=[])
    except LlmUnavailable as exc:
        log.warning("final no-tools call failed (%s); using the fallback reply", exc)
        result.text = "\n\n".join(interim) or FALLBACK_REPLY
        result.gave_up = not interim
        return result
    result.iterations += 1
    # Any tool calls in this answer are ignored: none may be made.
    final = _content_text(getattr(message, "content", None))
    result.text = _final_text(final, interim, registry.keys())
    return result


def _request_tools(
    registry: Mapping[str, ToolSpec],
    offered: Sequence[str],
    called: Sequence[str],
    *,
    tool_calling: bool,
) -> tuple[list[dict[str, Any]], str | None]:
    """The ``tools`` and ``tool_choice`` of the next request.

    The offered tools, when there are any. Otherwise, once the conversation holds tool
    calls, the definitions of the tools called (the registry's when none of them is in
    it) with ``tool_choice`` ``"none"``: Bedrock, and LiteLLM or Anthropic-compatible
    servers in front of it, refuse a history with tool calls and results in a request
    that defines no tools. A provider without tool calling never gets any.
    """
    if not tool_calling:
        return [], None
    if offered:
        return [registry[name].definition for name in offered], None
    if not called:
        return [], None
    names = [name for name in called if name in registry] or list(registry)
    definitions = [registry[name].definition for name in names]
    return definitions, ("none" if definitions else None)


def _go_tool_less(
    result: LoopResult, conversation: list[dict[str, Any]], notes: Sequence[str]
) -> None:
    """The server refused tools: the turn goes on without them, the model told what it
    can no longer do (``notes``, placed after the leading system messages)."""
    log.warning(
        "the model refused a request with tools (it cannot call them): asking "
        "without tools; set provider to one without tool calling to stop offering them"
    )
    result.tools_refused = True
    leading = next(
        (i for i, m in enumerate(conversation) if m.get("role") != "system"),
        len(conversation),
    )
    conversation[leading:leading] = [{"role": "system", "content": note} for note in notes]


def _offered_names(
    offered: Callable[[], Sequence[str]], registry: Mapping[str, ToolSpec]
) -> list[str]:
    names: list[str] = []
    for name in offered():
        if name in registry and name not in names:
            names.append(name)
        elif name not in registry:
            log.debug("offered tool %r is not in the registry; not offered", name)
    return names


def _final_text(content: str, interim: Sequence[str], tool_names: Collection[str]) -> str:
    """The cleaned final answer, after what the model wrote next to its tool calls: some
    models answer there (as the nudge asks: answer, then update the memory) and close the
    turn with a line or nothing; a final answer that repeats it is not doubled.

    The final is compared with each interim text on its own. An interim text the final
    restates (holds as whole sentences, see :func:`_restates`) is dropped: nothing of it
    is lost. The final is dropped when one interim text covers it (holds it at word
    boundaries, and it is most of that text). Never an answer for being short: "Monday."
    after "Let me check my notes on Friday vs Monday." stays, and so does "No." before
    "I have no other notes."
    """
    text = strip_leaked_tool_syntax(content, tool_names)
    if not text:
        return "\n\n".join(interim)
    kept = [said for said in interim if not _restates(text, said)]
    if any(_covers(said, text) for said in kept):
        # What was dropped above is inside the final, so inside the text covering it.
        return "\n\n".join(kept)
    return "\n\n".join([*kept, text])


# How much of an interim text the final must be to be dropped as its repeat.
_REPEAT_SHARE = 0.8


def _covers(said: str, final: str) -> bool:
    """Whether ``final`` is found in ``said`` at word boundaries and is most of it (case,
    spacing and closing punctuation aside, see :func:`_plain`)."""
    outer, inner = _plain(said), _plain(final)
    if not inner or len(inner) < _REPEAT_SHARE * len(outer):
        return False
    return re.search(rf"(?<!\w){re.escape(inner)}(?!\w)", outer) is not None


# Where a restated answer may start and end in the final: its start or end, a line's, or
# a sentence's (an ending comma too: "Paris, yes.").
_SENTENCE_START = r"(?:^|(?<=[.!?:;\n])|(?<=[.!?:;] ))"
_SENTENCE_END = r"(?=$|[.!?,;:\n])"


def _restates(final: str, said: str) -> bool:
    """Whether ``final`` holds all of ``said`` as whole sentences (case, spacing and
    ``said``'s closing punctuation aside): "The capital of France is Paris. Anything
    else?" restates "The capital of France is Paris."; "I have no other notes." does not
    restate "No.", nor "Paris it is." "Paris."
    """
    inner = _squash(said).rstrip(".!? ")
    if not inner:
        return False
    pattern = rf"{_SENTENCE_START}{re.escape(inner)}{_SENTENCE_END}"
    return re.search(pattern, _squash(final)) is not None


def _squash(text: str) -> str:
    """``text`` casefolded, each run of whitespace one space or, holding a line break,
    one line break."""
    text = re.sub(r"\s*\n\s*", "\n", text.casefold().strip())
    return re.sub(r"[^\S\n]+", " ", text)


def _plain(text: str) -> str:
    """``text`` for comparing answers: case, spacing and closing punctuation aside."""
    return " ".join(text.casefold().split()).rstrip(".!?")


def _content_text(content: object) -> str:
    """Message content as text; some servers send a list of ``{"type": "text"}`` parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            part.get("text") if isinstance(part, dict) else getattr(part, "text", None)
            for part in content
        ]
        return "".join(part for part in parts if isinstance(part, str))
    return ""


# --------------------------------------------------------------------------------------------
# Model calls and their errors
# --------------------------------------------------------------------------------------------


@dataclass
class _HistoryTools:
    """What this turn learned about requests whose tools only define the calls in their
    history: each fallback that was needed once is used from the start next time."""

    # How many of the requests :func:`_ask` tries in turn the server refused: 1, it
    # refused ``tool_choice``; 2, the definitions too.
    refused: int = 0


class _HistoryToolsRefused(Exception):
    """The server refused a request whose tools are only there for the history."""


async def _ask(
    api: openai.AsyncOpenAI,
    *,
    model: str,
    messages: list[dict[str, Any]],
    settings: LlmSettings,
    tools: list[dict[str, Any]],
    history: _HistoryTools,
    strict_roles: bool,
    observe: RequestObserver | None,
    deadline: float,
    tool_choice: str | None = None,
) -> tuple[ChatCompletionMessage, bool]:
    """:func:`_complete`, except that a request with ``tool_choice`` (tools defined only
    for the calls in the history, none may be called) the server refuses is asked again
    without ``tool_choice``, then without tools (and tool calls in the history): OpenRouter
    answers 404 when no provider it routes to takes the ``tool_choice`` value."""
    complete = functools.partial(
        _complete,
        api,
        model=model,
        messages=messages,
        settings=settings,
        strict_roles=strict_roles,
        observe=observe,
        deadline=deadline,
    )
    if tool_choice is None:
        return await complete(tools=tools)
    # With tool_choice, then the definitions alone; those refused before are skipped.
    for keep_choice in (True, False)[history.refused :]:
        try:
            return await complete(
                tools=tools,
                tool_choice=tool_choice if keep_choice else None,
                history_only=True,
            )
        except _HistoryToolsRefused:
            history.refused += 1
            if keep_choice:
                log.warning("LLM refused tool_choice %r: asking again without it", tool_choice)
            else:
                log.warning(
                    "LLM refused the tool definitions of a follow-up: asking again with the "
                    "tool calls taken out of the history"
                )
    return await complete(tools=[])


async def _complete(
    api: openai.AsyncOpenAI,
    *,
    model: str,
    messages: list[dict[str, Any]],
    settings: LlmSettings,
    tools: list[dict[str, Any]],
    strict_roles: bool,
    observe: RequestObserver | None,
    deadline: float,
    tool_choice: str | None = None,
    history_only: bool = False,
) -> tuple[ChatCompletionMessage, bool]:
    """One Chat Completions call; returns the first choice's message and whether it was
    cut off at ``max_tokens``. Without ``tools`` the request carries no tool calls or
    results either (servers refuse them without definitions): an answer written beside
    a call stays, as a plain assistant message. ``history_only``: the tools are there
    only for the calls in the history; a 400/404/422 that is not about the tools
    themselves or one generation raises :class:`_HistoryToolsRefused`.

    ``deadline`` (event-loop time) ends the turn's model calls, the client's retries and
    its waits between them included: past it the call is a timeout. Only model calls are
    cut, never a tool's run (a write is not abandoned half-way)."""
    remaining = deadline - asyncio.get_running_loop().time()
    if remaining <= 0:
        raise _past_deadline(settings, observe, 0.0)
    request: dict[str, Any] = {
        "model": model,
        "messages": messages if tools else _without_tool_calls(messages),
        "timeout": min(settings.timeout_seconds, remaining),
    }
    if tools:
        request["tools"] = tools
        if tool_choice is not None:
            request["tool_choice"] = tool_choice
    # Only send what is set: some servers reject explicit nulls.
    if settings.temperature is not None:
        request["temperature"] = settings.temperature
    if settings.max_reply_tokens:
        request["max_tokens"] = settings.max_reply_tokens
    began = time.perf_counter()
    try:
        async with asyncio.timeout_at(deadline):
            completion = await chat_completion(
                api, request, strict_roles=strict_roles, observe=observe
            )
    except TimeoutError as exc:
        raise _past_deadline(settings, observe, time.perf_counter() - began) from exc
    except openai.APIStatusError as exc:
        raise _refusal(
            exc, tools=bool(tools), tool_choice=tool_choice, history_only=history_only
        ) from exc
    except openai.OpenAIError as exc:
        raise _unavailable(exc) from exc
    except ValueError as exc:  # a 200 whose JSON body does not parse (a proxy's fault)
        log.warning("LLM answer was not valid JSON (%s)", type(exc).__name__)
        raise LlmUnavailable("unavailable", UNAVAILABLE_MESSAGE) from exc
    choices = getattr(completion, "choices", None)
    if not choices or getattr(choices[0], "message", None) is None:
        log.warning("LLM answer had no choices (%s)", type(completion).__name__)
        raise LlmUnavailable("unavailable", UNAVAILABLE_MESSAGE)
    message: ChatCompletionMessage = choices[0].message
    return message, getattr(choices[0], "finish_reason", None) == "length"


# Statuses with which servers refuse what a request asks for (400; OpenRouter's 404 when
# no provider takes it; 422 from some gateways' validation), rather than the caller.
_REFUSAL_STATUSES = frozenset((400, 404, 422))


def _refusal(
    exc: openai.APIStatusError, *, tools: bool, tool_choice: str | None, history_only: bool
) -> Exception:
    """What a refused request means, in this order: one generation's tool call the server
    refused (also when it names tool choice: Groq's "Tool choice is none, but model called
    a tool"); ``tool_choice`` refused; tools refused; a request whose tools are only for
    the history refused; otherwise the model is unavailable (a 404 that is none of these,
    a wrong model name or URL, is a configuration problem)."""
    if exc.status_code not in _REFUSAL_STATUSES:
        return _unavailable(exc)
    text = _error_text(exc)
    if exc.status_code == 400 and _failed_generation(exc):
        log.warning(
            "LLM refused the model's tool call (HTTP 400 tool_use_failed)%s",
            f" request_id={exc.request_id}" if exc.request_id else "",
        )
        return ToolCallFailed()
    if tool_choice is not None and _TOOL_CHOICE.search(text):
        return _HistoryToolsRefused()
    if tools and _TOOLS_REFUSED.search(text):
        return ToolsRefused()
    if history_only:
        log.warning("LLM refused a follow-up defining the tools called (HTTP %d)", exc.status_code)
        return _HistoryToolsRefused()
    return _unavailable(exc)


def _without_tool_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` without tool results, and assistant tool calls reduced to their text."""
    kept: list[dict[str, Any]] = []
    for message in messages:
        if message.get("role") == "tool":
            continue
        if message.get("role") == "assistant" and message.get("tool_calls"):
            if message.get("content"):
                kept.append({"role": "assistant", "content": message["content"]})
            continue
        kept.append(message)
    return kept


# What servers say when the loaded model cannot take ``tools`` at all: Ollama's "… does
# not support tools", "tools are not supported", "function calling is not supported",
# "tool_choice … is not supported", vLLM without a tool parser, llama.cpp without
# --jinja. Other bad requests that mention tools (a schema check of one generation, a
# malformed history) are not a refusal: one of them must not make the process tool-less.
_TOOL_WORDS = r"(?:tools?|tool[ _-]?(?:use|calls?|calling)|function[ _-]?call(?:s|ing)?)"
_TOOLS_REFUSED = re.compile(
    "|".join(
        (
            rf"\bdoes(?: not|n't) support {_TOOL_WORDS}\b",
            rf"\b{_TOOL_WORDS} (?:is|are) not supported\b",
            r"\btool[ _-]?choice\b[^.\n]{0,80}?\bnot supported\b",
            r"--enable-auto-tool-choice",
            r"\btools param requires --jinja\b",
            # OpenRouter, as a 404, for a model none of its providers runs with tools.
            r"\bno endpoints found that support tool use\b",
        )
    ),
    re.IGNORECASE,
)
_TOOL_CHOICE = re.compile(r"\btool[ _-]?choice\b", re.IGNORECASE)
# A generation the server refused: its tool call did not match the tool's schema (Groq:
# code "tool_use_failed", "tool call validation failed: …", "Failed to call a function").
_FAILED_GENERATION = re.compile(
    r"\btool_use_failed\b|\btool call validation failed\b|\bfailed to call a function\b",
    re.IGNORECASE,
)


def _error_text(exc: openai.APIStatusError) -> str:
    return str(getattr(exc, "message", "") or exc)


def _failed_generation(exc: openai.APIStatusError) -> bool:
    return exc.code == "tool_use_failed" or bool(_FAILED_GENERATION.search(_error_text(exc)))


def _past_deadline(
    settings: LlmSettings, observe: RequestObserver | None, seconds: float
) -> LlmUnavailable:
    """The turn's time for model calls ran out (``turn_timeout_seconds``): a timeout,
    counted as one (a call cut here never reached the client's own accounting)."""
    log.warning(
        "LLM gave no answer within the turn's %g s (KIOKU_LLM__TURN_TIMEOUT_SECONDS)",
        settings.turn_timeout_seconds,
    )
    if observe is not None:
        observe(LlmRequest("timeout", seconds))
    return LlmUnavailable("timeout", TIMEOUT_MESSAGE)


def _unavailable(exc: openai.OpenAIError) -> LlmUnavailable:
    """Map a client error to a friendly :class:`LlmUnavailable`; log what the operator
    needs (error class, status, request id) but never the response body."""
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    request_id = getattr(exc, "request_id", None)
    log.warning(
        "LLM request failed: %s%s%s",
        type(exc).__name__,
        f" (HTTP {status})" if status is not None else "",
        f" request_id={request_id}" if request_id else "",
    )
    if isinstance(exc, openai.APITimeoutError):
        return LlmUnavailable("timeout", TIMEOUT_MESSAGE)
    if isinstance(exc, openai.RateLimitError) or status == 429:
        return LlmUnavailable("rate_limited", RATE_LIMIT_MESSAGE, status=status)
    if status in (401, 403, 404):
        # Bad key, no access, or a wrong model name / base URL: the operator must act.
        return LlmUnavailable("configuration", CONFIGURATION_MESSAGE, status=status)
    return LlmUnavailable("unavailable", UNAVAILABLE_MESSAGE, status=status)


# --------------------------------------------------------------------------------------------
# Tool calls
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Call:
    id: str
    name: str  # as the model wrote it (echoed back in the history)
    routed_name: str  # the registry key it is routed to (or the cleaned name if unknown)
    arguments: str | None  # raw, exactly as received (what the tool parses)
    history_arguments: str  # always valid JSON: some servers re-parse the history


def _function_calls(message: ChatCompletionMessage, iteration: int) -> list[_Call]:
    raw_calls = getattr(message, "tool_calls", None) or []
    calls: list[_Call] = []
    used: set[str] = set()
    for index, raw in enumerate(raw_calls):
        function = getattr(raw, "function", None)
        if function is None:  # e.g. a "custom" tool call: route by its name, no arguments
            function = getattr(raw, "custom", None)
        name = getattr(function, "name", None)
        name = name if isinstance(name, str) else ""
        arguments = getattr(function, "arguments", None)
        if arguments is not None and not isinstance(arguments, str):
            # Non-conforming servers sometimes send the arguments as an object.
            try:
                arguments = json.dumps(arguments, ensure_ascii=False)
            except (TypeError, ValueError):
                arguments = str(arguments)
        call_id = getattr(raw, "id", None)
        if not isinstance(call_id, str) or not call_id:
            call_id = f"call_{iteration}_{index}"
        call_id = _unique_id(call_id, used)
        used.add(call_id)
        calls.append(
            _Call(
                id=call_id,
                name=name,
                routed_name=clean_tool_name(name),
                arguments=arguments,
                history_arguments=_history_arguments(arguments),
            )
        )
    return calls


def _unique_id(call_id: str, used: set[str]) -> str:
    """``call_id``, or ``call_id_2``, ``call_id_3``, ... when it is already taken in this
    assistant message: every ``tool`` result must answer exactly one call, and servers
    reject or mis-associate repeated ids."""
    if call_id not in used:
        return call_id
    suffix = 2
    while f"{call_id}_{suffix}" in used:
        suffix += 1
    return f"{call_id}_{suffix}"


def _history_arguments(arguments: str | None) -> str:
    if arguments is None or not arguments.strip():
        return "{}"
    try:
        json.loads(arguments)
    except ValueError:
        return "{}"
    return arguments


async def _run_call(
    registry: Mapping[str, ToolSpec], call: _Call, available: Sequence[str]
) -> ToolOutcome:
    spec = registry.get(call.routed_name)
    if spec is None:
        shown = json.dumps(call.routed_name[:64], ensure_ascii=True)
        if available:
            listed = ", ".join(json.dumps(name, ensure_ascii=True) for name in available)
            return ToolOutcome.error(f"error: unknown tool {shown}; available tools: {listed}")
        return ToolOutcome.error(
            f"error: unknown tool {shown}; no tools are available now, answer the user directly"
        )
    try:
        return await spec.run(call.arguments)
    except Exception as exc:
        log.warning(
            "tool %s raised %s; answered as a tool error",
            call.routed_name,
            type(exc).__name__,
            exc_info=True,
        )
        return ToolOutcome.error(
            f"error: the tool {call.routed_name} failed unexpectedly ({type(exc).__name__}); "
            "do not retry it this turn, answer the user"
        )
