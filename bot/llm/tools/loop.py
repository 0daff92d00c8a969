"""The tool loop: ask the model, run the tools it calls, repeat until it answers in text."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai
from openai.types.chat import ChatCompletionMessage

from bot.config import LlmSettings
from bot.llm.client import RequestObserver
from bot.llm.escaping import unescape_new_entities
from bot.llm.failures import (
    CONFIGURATION_MESSAGE,
    FALLBACK_REPLY,
    FRIENDLY_ERRORS,
    RATE_LIMIT_MESSAGE,
    TIMEOUT_MESSAGE,
    UNAVAILABLE_MESSAGE,
    ImagesRefused,
    LlmUnavailable,
    ToolCallFailed,
    ToolsRefused,
)
from bot.llm.leaks import strip_leaked_tool_syntax
from bot.llm.model_call import Ask, Asker, HistoryTools, ToolChoice
from bot.llm.reply_text import content_text, plain, reply_text
from bot.llm.stream_assembly import StreamAssembly
from bot.llm.tools.calls import (
    ToolCall,
    ToolSpec,
    assistant_message,
    run_tool_call,
    tool_calls_in,
)
from bot.llm.tools.text_calls import text_tool_calls, tool_prompt

# Told, while an answer streams in, how to read the reply so far (read only when shown).
ReplyPreview = Callable[[Callable[[], str]], Awaitable[None]]

__all__ = [
    "CONFIGURATION_MESSAGE",
    "FALLBACK_REPLY",
    "FRIENDLY_ERRORS",
    "RATE_LIMIT_MESSAGE",
    "TIMEOUT_MESSAGE",
    "UNAVAILABLE_MESSAGE",
    "ImagesRefused",
    "LlmUnavailable",
    "LoopResult",
    "ReplyPreview",
    "ToolSpec",
    "complete_without_tools",
    "run_tool_loop",
]

log = logging.getLogger(__name__)

STOPPED_MAX_ITERATIONS = "max_iterations"
STOPPED_TOOL_ERRORS = "too_many_tool_errors"
# Answers the server refused as bad tool calls (ToolCallFailed) before the turn stops
# offering tools: the first is asked again, the second ends the loop.
MAX_FAILED_GENERATIONS = 2
# What answers a call written as text: a user message, as the server took none.
TEXT_CALL_RESULTS = "(Tool results, from Kioku, not from the user.)\n"
UNREADABLE_TEXT_CALL = (
    "(From Kioku, not from the user.) error: your tool call could not be read; nothing was "
    'run or stored. Call the tool with JSON {"name": …, "arguments": {…}}, or answer the '
    "user without it."
)


@dataclass
class LoopResult:
    """What one turn produced."""

    # The cleaned reply; "" when the model said nothing usable (the caller decides).
    text: str
    # Model answers received, the final no-tools call included.
    iterations: int
    # (tool name, result content), in call order.
    tool_calls: list[tuple[str, str]] = field(default_factory=list)
    errors: int = 0  # failed tool calls
    # Why the loop ended early ("max_iterations", "too_many_tool_errors"), or None.
    stopped: str | None = None
    # The last answer hit `max_tokens`: fine to show in chat, not to store as a memory.
    truncated: bool = False
    # The loop stopped early and the final call failed too: `text` is the fallback
    # notice, not an answer (it is not part of the conversation).
    gave_up: bool = False
    # The server refused tools (the model cannot call them); the turn went on without.
    tools_refused: bool = False
    # The server could not take tools through the API (it refused them, or answered them
    # with an empty message): they were described in the prompt and read from the text.
    tools_in_prompt: bool = False


async def run_tool_loop(
    client: openai.AsyncOpenAI,
    *,
    model: str,
    messages: list[dict[str, Any]],
    registry: Mapping[str, ToolSpec],
    offered: Callable[[], Sequence[str]],
    settings: LlmSettings,
    tool_calling: bool = True,
    text_tool_calls: bool = False,
    tools_in_prompt: bool = False,
    force_tool: str | None = None,
    answer_after_tools: bool = True,
    without_tools_notes: Sequence[str] = (),
    strict_roles: bool = False,
    observe: RequestObserver | None = None,
    preview: ReplyPreview | None = None,
    deadline: float | None = None,
) -> LoopResult:
    """Run one turn of the bot's reply (SPEC §3) on a copy of ``messages``."""
    # Raises LlmUnavailable when a model call fails, unless the model already answered
    # beside a tool call (that answer is the reply) or it is the final call after an
    # early stop (FALLBACK_REPLY).  The client retries 429/5xx/timeouts itself
    # (`settings.max_retries`); nothing here retries again.  `text_tool_calls` reads calls
    # the model wrote as text (the provider row allows it), and then a server that cannot
    # take tools gets them described in the prompt (`tools_in_prompt`: from the start);
    # `force_tool` names the tool the first answer must call, and without
    # `answer_after_tools` the loop ends once the calls ran (no answer is wanted);
    # `without_tools_notes` tell
    # the model what it can no longer do when the server refuses tools; `strict_roles`
    # sends every request in the role order strict chat templates accept.  With a
    # `preview` the answers are streamed, and it hears of the reply as it grows.
    # `deadline` (event-loop time) is the turn's when it began before the loop (its image
    # downloads); else the loop's calls get `turn_timeout_seconds` from now.
    loop = _Loop(
        registry=registry,
        conversation=list(messages),
        settings=settings,
        tool_calling=tool_calling,
        text_tool_calls=text_tool_calls,
        without_tools_notes=without_tools_notes,
        prompted=tools_in_prompt and text_tool_calls,
        force_tool=force_tool,
        answer_after_tools=answer_after_tools,
    )
    loop.ask = Asker(
        client.with_options(max_retries=settings.max_retries),
        model,
        settings,
        loop.history,
        strict_roles,
        observe,
        # All the model calls of a turn share `turn_timeout_seconds`, retries included.
        deadline=asyncio.get_running_loop().time() + settings.turn_timeout_seconds
        if deadline is None
        else deadline,
        on_text=loop.previewer(preview) if preview is not None else None,
    )
    return await loop.run(offered)


async def complete_without_tools(
    client: openai.AsyncOpenAI,
    *,
    model: str,
    messages: list[dict[str, Any]],
    settings: LlmSettings,
    strict_roles: bool = False,
    observe: RequestObserver | None = None,
) -> LoopResult:
    """One answer with no tools offered, cleaned and its errors mapped as a turn's."""
    # With one round, a plain answer is one request; an answer that calls a tool anyway
    # gets the final no-tools call (a second request), and `tool_calls` say so.
    return await run_tool_loop(
        client,
        model=model,
        messages=messages,
        registry={},
        offered=list,
        settings=settings.model_copy(update={"max_tool_iterations": 1}),
        tool_calling=False,
        strict_roles=strict_roles,
        observe=observe,
    )


@dataclass
class _Loop:
    """One turn's tool loop: the conversation so far and what the answers did."""

    registry: Mapping[str, ToolSpec]
    conversation: list[dict[str, Any]]
    settings: LlmSettings
    tool_calling: bool
    text_tool_calls: bool
    without_tools_notes: Sequence[str]
    prompted: bool = False  # tools described in the prompt, not sent through the API
    force_tool: str | None = None
    answer_after_tools: bool = True
    ask: Ask = field(init=False)
    result: LoopResult = field(default_factory=lambda: LoopResult(text="", iterations=0))
    interim: list[str] = field(default_factory=list)  # text written beside tool calls
    consecutive_errors: int = 0
    failed_generations: int = 0
    called: list[str] = field(default_factory=list)  # tools the conversation holds calls to
    history: HistoryTools = field(default_factory=HistoryTools)

    def previewer(self, preview: ReplyPreview) -> Callable[[StreamAssembly], Awaitable[None]]:
        async def streamed(assembly: StreamAssembly) -> None:
            def shown() -> str:
                text = self._unescaped(assembly.text())
                return reply_text(text, self.interim, self.registry.keys())

            await preview(shown)

        return streamed

    async def run(self, offered: Callable[[], Sequence[str]]) -> LoopResult:
        result = self.result
        while result.iterations < self.settings.max_tool_iterations:
            # Re-read every time: a tool can stop being offered mid-turn (the STM tool
            # after a successful update).
            names = _offered_names(offered, self.registry) if self.tool_calling else []
            message = await self._answer(names)
            if message is None:
                if result.stopped is not None or result.text:
                    break
                continue
            result.iterations += 1
            content = self._unescaped(content_text(getattr(message, "content", None)))
            calls, unreadable = tool_calls_in(message, result.iterations), 0
            if not calls and not content.strip() and self._may_prompt(names):
                # llama-cpp-python's chatml-function-calling answers every message beside
                # tool_choice "auto" with an empty one.
                self._to_prompt("answered tools with an empty message")
                continue
            as_text = not calls and self.text_tool_calls and bool(names)
            if as_text:
                written = text_tool_calls(content, self.registry.keys(), result.iterations)
                calls, unreadable = written.calls, written.unreadable
            if calls:
                replied = await self._run_calls(content, calls, names, as_text=as_text)
                if not self.answer_after_tools:
                    return result
                if replied:
                    # No second request: its answer would only close the turn after "saved".
                    result.text = reply_text("", self.interim, self.registry.keys())
                    return result
            elif unreadable:
                self._refuse_unreadable(content)
            else:
                result.text = reply_text(content, self.interim, self.registry.keys())
                return result
            if self.consecutive_errors >= self.settings.max_consecutive_tool_errors:
                result.stopped = STOPPED_TOOL_ERRORS
                break
        else:
            result.stopped = STOPPED_MAX_ITERATIONS
        if result.text:
            return result
        return await _final_answer(
            self.ask,
            result,
            self.conversation,
            registry=self.registry,
            called=self.called,
            interim=self.interim,
            tool_calling=self.tool_calling and not self.prompted,
            without_tools_notes=self.without_tools_notes,
        )

    async def _answer(self, names: Sequence[str]) -> ChatCompletionMessage | None:
        """The model's next answer; None when the request failed in a way the loop handles
        (``result.stopped`` or ``result.text`` is then set when the loop must end)."""
        result = self.result
        tools, tool_choice = _request_tools(
            self.registry, names, self.called, tool_calling=self.tool_calling
        )
        if self.force_tool in names and not self.called and tool_choice == "auto":
            tool_choice = {"type": "function", "function": {"name": self.force_tool}}
        messages = self.conversation
        if self.prompted:
            tools, tool_choice = [], None
            if names:
                definitions = [self.registry[name].definition for name in names]
                messages = _after_system(messages, tool_prompt(definitions))
        try:
            message, result.truncated = await self.ask(
                messages=messages, tools=tools, tool_choice=tool_choice
            )
        except ToolsRefused:
            if self._may_prompt(names):
                self._to_prompt("refused tools")
                return None
            _go_tool_less(result, self.conversation, self.without_tools_notes)
            self.tool_calling = False
            return None
        except ToolCallFailed:
            # One bad generation (arguments the server's schema check refused): a failed
            # tool call of this turn, not a sign that the model cannot take tools.
            self.failed_generations += 1
            self.consecutive_errors += 1
            result.errors += 1
            if (
                self.failed_generations >= MAX_FAILED_GENERATIONS
                or self.consecutive_errors >= self.settings.max_consecutive_tool_errors
            ):
                result.stopped = STOPPED_TOOL_ERRORS
            else:
                log.warning(
                    "the server refused the model's tool call (tool_use_failed): asking again"
                )
            return None
        except LlmUnavailable as exc:
            if not self.interim:
                raise
            # The model already answered beside its tool call: the member gets that
            # answer rather than the outage notice.
            log.warning(
                "model call failed after an answer written beside a tool call (%s); "
                "finishing with that answer",
                exc,
            )
            result.text = "\n\n".join(self.interim)
            return None
        return message

    def _may_prompt(self, names: Sequence[str]) -> bool:
        """Whether tools sent through the API may move into the prompt instead."""
        return bool(names) and self.text_tool_calls and self.tool_calling and not self.prompted

    def _to_prompt(self, why: str) -> None:
        log.warning(
            "the server %s: describing the tools in the prompt and reading the calls from "
            "the model's text",
            why,
        )
        self.prompted = self.result.tools_in_prompt = True

    def _unescaped(self, text: str) -> str:
        """``text`` with the entities a server's template escaped undone (see escaping)."""
        if "&" not in text:  # the usual answer: nothing to look up
            return text
        sent = "\n".join(str(m.get("content") or "") for m in self.conversation)
        return unescape_new_entities(text, sent)

    def _refuse_unreadable(self, content: str) -> None:
        """Answer tool calls written as text that could not be read: nothing runs."""
        log.warning(
            "the model wrote a tool call as text that could not be read (not JSON with a "
            "name and arguments): nothing was run or stored"
        )
        self._keep_interim(content)
        self.conversation.append({"role": "assistant", "content": content})
        self.conversation.append({"role": "user", "content": UNREADABLE_TEXT_CALL})
        self.consecutive_errors += 1
        self.result.errors += 1

    def _keep_interim(self, content: str) -> str:
        """Keep the text written beside tool calls (once); that text, cleaned."""
        cleaned = strip_leaked_tool_syntax(content, self.registry.keys())
        if cleaned and plain(cleaned) not in {plain(said) for said in self.interim}:
            self.interim.append(cleaned)  # a model repeating its answer beside a retried call
        return cleaned

    async def _run_calls(
        self, content: str, calls: Sequence[ToolCall], names: Sequence[str], *, as_text: bool
    ) -> bool:
        """Run ``calls``; each result answers its call (as text, for calls written as text).
        Whether the text written beside them is the reply: every call succeeded, to a tool
        whose result the model need not see (``ToolSpec.answer_needs_result``)."""
        beside = self._keep_interim(content)
        replied = bool(beside) and not self.result.truncated
        if as_text:
            self.conversation.append({"role": "assistant", "content": content})
        else:
            self.conversation.append(assistant_message(content, calls))
        said: list[str] = []
        for call in calls:
            if call.routed_name not in self.called and not as_text:
                self.called.append(call.routed_name)
            outcome = await run_tool_call(self.registry, call, names)
            if as_text:
                said.append(f"{call.routed_name}: {outcome.content}")
            else:
                self.conversation.append(
                    {"role": "tool", "tool_call_id": call.id, "content": outcome.content}
                )
            self.result.tool_calls.append((call.routed_name, outcome.content))
            spec = self.registry.get(call.routed_name)
            replied = replied and outcome.ok and spec is not None and not spec.answer_needs_result
            if outcome.ok:
                self.consecutive_errors = 0
            else:
                self.consecutive_errors += 1
                self.result.errors += 1
        if as_text:
            log.info("the model wrote %d tool call(s) as text: ran them", len(calls))
            # Servers that did not parse the call may not take `tool` results either.
            self.conversation.append(
                {"role": "user", "content": TEXT_CALL_RESULTS + "\n".join(said)}
            )
        return replied


async def _final_answer(
    ask: Ask,
    result: LoopResult,
    conversation: list[dict[str, Any]],
    *,
    registry: Mapping[str, ToolSpec],
    called: Sequence[str],
    interim: Sequence[str],
    tool_calling: bool,
    without_tools_notes: Sequence[str],
) -> LoopResult:
    """After an early stop, one last call in which no tool may be called."""
    # Its failure gives the text written beside the tool calls, or FALLBACK_REPLY
    # (`result.gave_up`).
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
    final = content_text(getattr(message, "content", None))
    result.text = reply_text(final, interim, registry.keys())
    return result


def _request_tools(
    registry: Mapping[str, ToolSpec],
    offered: Sequence[str],
    called: Sequence[str],
    *,
    tool_calling: bool,
) -> tuple[list[dict[str, Any]], ToolChoice | None]:
    """The ``tools`` and ``tool_choice`` of the next request."""
    # The offered tools with tool_choice "auto", if any.  Otherwise, once the conversation
    # holds tool calls, the definitions of the tools called with tool_choice "none":
    # Bedrock (and servers in front of it) refuse a history of tool calls in a request
    # that defines no tools.  Only the latter treats any refusal as one of tool_choice, so
    # a wrong model name or URL in a turn's first request stays a configuration problem.
    if not tool_calling:
        return [], None
    if offered:
        # "auto" said outright: llama-cpp-python renders no tools without it.
        return [registry[name].definition for name in offered], "auto"
    if not called:
        return [], None
    names = [name for name in called if name in registry] or list(registry)
    definitions = [registry[name].definition for name in names]
    return definitions, ("none" if definitions else None)


def _go_tool_less(
    result: LoopResult, conversation: list[dict[str, Any]], notes: Sequence[str]
) -> None:
    """Go on without tools, the ``notes`` placed after the leading system messages."""
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


def _after_system(messages: list[dict[str, Any]], note: str) -> list[dict[str, Any]]:
    """A copy of ``messages`` with ``note`` after the leading system messages."""
    leading = next((i for i, m in enumerate(messages) if m.get("role") != "system"), len(messages))
    return [*messages[:leading], {"role": "system", "content": note}, *messages[leading:]]


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
