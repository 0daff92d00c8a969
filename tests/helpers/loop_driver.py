"""Drives ``run_tool_loop`` against the scripted server: a two-message prompt, test
settings, and tools that record what they were called with."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import openai

from bot.config import LlmSettings
from bot.llm.tools.base import ToolOutcome
from bot.llm.tools.loop import LoopResult, ToolSpec, run_tool_loop
from tests.helpers.fake_llm import ScriptedLLM, openai_client

USER: list[dict[str, Any]] = [
    {"role": "system", "content": "You are Kioku."},
    {"role": "user", "content": "hi"},
]


def loop_settings(**overrides: Any) -> LlmSettings:
    values: dict[str, Any] = {
        "timeout_seconds": 5.0,
        "max_retries": 0,
        "max_tool_iterations": 6,
        "max_consecutive_tool_errors": 5,
        "temperature": 0.3,
        "max_reply_tokens": 256,
    }
    values.update(overrides)
    return LlmSettings(**values)


def tool_definition(name: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name} tool.",
            "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
        },
    }


class Recorder:
    """A tool that records the raw arguments it receives and answers a fixed outcome."""

    def __init__(self, name: str, content: str = "saved", ok: bool = True) -> None:
        self.name = name
        self.outcome = ToolOutcome(content, ok)
        self.received: list[str | None] = []

    async def run(self, arguments: str | None) -> ToolOutcome:
        self.received.append(arguments)
        return self.outcome

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(definition=tool_definition(self.name), run=self.run)


async def run_loop(
    llm: ScriptedLLM,
    registry: dict[str, ToolSpec] | None = None,
    offered: Sequence[str] | None = None,
    *,
    client: openai.AsyncOpenAI | None = None,
    tool_calling: bool = True,
    **settings: Any,
) -> LoopResult:
    """One loop over :data:`USER`, offering a fixed copy of ``offered`` (all of
    ``registry`` by default); ``settings`` override :func:`loop_settings`."""
    registry = registry or {}
    names = list(registry) if offered is None else list(offered)
    own = client or openai_client(llm)
    try:
        return await _loop_over_user(own, registry, lambda: names, tool_calling, **settings)
    finally:
        await own.close()


async def run_loop_offering(
    llm: ScriptedLLM, registry: dict[str, ToolSpec], offered: list[str]
) -> LoopResult:
    """One loop over :data:`USER` offering what ``offered`` holds at each request: a
    tool that changes the list changes what the next request offers."""
    async with openai_client(llm) as client:
        return await _loop_over_user(client, registry, lambda: offered, True)


async def _loop_over_user(
    client: openai.AsyncOpenAI,
    registry: dict[str, ToolSpec],
    offered: Callable[[], Sequence[str]],
    tool_calling: bool,
    **settings: Any,
) -> LoopResult:
    return await run_tool_loop(
        client,
        model="test-model",
        messages=list(USER),
        registry=registry,
        offered=offered,
        settings=loop_settings(**settings),
        tool_calling=tool_calling,
    )


def withdrawing_tool(name: str, offered: list[str], *withdrawn: str) -> ToolSpec:
    """A tool that saves, then takes ``withdrawn`` (everything, if none are named) out of
    ``offered``, as a successful STM update does for the rest of the turn."""

    async def run(arguments: str | None) -> ToolOutcome:
        if withdrawn:
            for each in withdrawn:
                offered.remove(each)
        else:
            offered.clear()
        return ToolOutcome("saved", ok=True)

    return ToolSpec(tool_definition(name), run)
