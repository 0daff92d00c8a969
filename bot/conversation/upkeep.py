"""Memory upkeep: after an answered turn whose cadence is due, a call that may only write.

The nudge is never part of the answering prompt: small models answered it in the reply
("Sure, here are the updated notes: …"). After the reply, one more request carries the
conversation, the reply and the nudge as the last message, with the memory tool forced
where the server can force it. Nothing it says is shown. The cog runs it once the reply
is posted, before the channel's next turn: that turn reads the memory it wrote. A model
that ignores it a few times in a channel is not asked again there for a while: the
summarizer keeps that channel's memory instead.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import openai
from cachetools import TTLCache

from bot.config import Settings
from bot.conversation.tools import STM_TOOL_NAME, run_stm_tool, stm_tool_definition
from bot.llm import LlmUnavailable, ToolOutcome, ToolSpec, run_tool_loop
from bot.memory import MemoryService, TurnState
from bot.runtime import Metrics
from bot.vocabulary import ProviderCaps

log = logging.getLogger(__name__)

# Ignored upkeeps in a row after which a channel's memory is left to the summarizer.
IGNORED_LIMIT = 3
# How long a channel whose model ignored upkeep is not asked again.
GIVEN_UP_SECONDS = 6 * 3600
UPKEEP_PREFIX = "(From Kioku, not from the user.) "


@dataclass
class Upkeep:
    """Makes the upkeep call of a turn; one per :class:`TurnRunner`."""

    memory: MemoryService
    client: openai.AsyncOpenAI
    settings: Settings
    metrics: Metrics
    # Ignored upkeeps in a row, by channel (forgotten after GIVEN_UP_SECONDS).
    _ignored: TTLCache[int, int] = field(init=False)

    def __post_init__(self) -> None:
        self._ignored = TTLCache(
            maxsize=100_000, ttl=GIVEN_UP_SECONDS, timer=self.memory.clock.monotonic
        )

    def given_up(self, channel_id: int) -> bool:
        """Whether the model ignored upkeep here too often: the summarizer keeps it."""
        return self._ignored.get(channel_id, 0) >= IGNORED_LIMIT

    def after(
        self,
        turn: TurnState,
        messages: list[dict[str, Any]],
        reply: str,
        nudge: str,
        *,
        caps: ProviderCaps,
        model: str,
    ) -> Callable[[], Awaitable[None]] | None:
        """The upkeep of ``turn``, to run after its reply; None when the memory was
        written this turn or may not be."""
        if turn.stm_block_reason() is not None or self.given_up(turn.channel_id):
            return None
        conversation = [
            *messages,
            {"role": "assistant", "content": reply},
            {"role": "user", "content": UPKEEP_PREFIX + nudge},
        ]
        return functools.partial(self._upkeep, turn, conversation, caps, model)

    async def _upkeep(
        self, turn: TurnState, conversation: list[dict[str, Any]], caps: ProviderCaps, model: str
    ) -> None:
        async def stm_tool(raw: str | None) -> ToolOutcome:
            outcome = await run_stm_tool(self.memory, turn, raw)
            self.metrics.stm_tool_called(outcome.content)
            return outcome

        offered: Callable[[], list[str]] = lambda: (  # noqa: E731
            [STM_TOOL_NAME] if turn.stm_block_reason() is None else []
        )
        try:
            await run_tool_loop(
                self.client,
                model=model,
                messages=conversation,
                registry={STM_TOOL_NAME: ToolSpec(stm_tool_definition(turn.config), stm_tool)},
                offered=offered,
                settings=self.settings.llm,
                tool_calling=caps.tool_calling,
                text_tool_calls=caps.text_tool_calls,
                tools_in_prompt=caps.tools_in_prompt,
                force_tool=STM_TOOL_NAME,
                answer_after_tools=False,
                strict_roles=self.settings.strict_roles,
                observe=self.metrics.llm_request,
            )
        except LlmUnavailable as exc:
            # An outage is not the model ignoring upkeep: the next due turn asks again.
            log.info("upkeep in channel %s: model unavailable (%s)", turn.channel_id, exc)
            return
        channel = turn.channel_id
        if turn.stm_updated:
            self._ignored.pop(channel, None)
            return
        ignored = self._ignored[channel] = self._ignored.get(channel, 0) + 1
        if ignored >= IGNORED_LIMIT:
            log.info(
                "upkeep in channel %s: ignored %d times in a row; the summarizer keeps this "
                "channel's memory for now",
                channel,
                ignored,
            )
