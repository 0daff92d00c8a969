"""Capture (seed 002): memory builds while nobody addresses the bot.

Every member's message in a server channel is counted; once ``stm.capture_after_messages`` of them
came since the last look, or a channel with at least :data:`QUIET_MIN_MESSAGES` of them
has been quiet for ``stm.capture_quiet_minutes``, the channel's memory is read and, when
that many are not covered by it, the summarizer folds them in, in the background, with
reason ``capture`` (its facts call makes durable facts of them too). It never delays a
turn, never runs where memory is off (the summarizer checks), and stays within
``stm.capture_daily_tokens`` per server and UTC day.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import date

from bot.config import Settings
from bot.conversation.summarizer.outcome import SummaryOutcome
from bot.conversation.summarizer.run import Summarizer
from bot.memory import MemoryService, count_new_messages
from bot.runtime import TaskRegistry
from bot.vocabulary import ScopeKey

log = logging.getLogger(__name__)

REASON = "capture"
# A quiet spell folds in no fewer new messages than this.
QUIET_MIN_MESSAGES = 4
# How often channels are looked at for a quiet spell.
SWEEP_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class _Heard:
    """A channel's last message: when (monotonic), and what capture needs to run there."""

    at: float
    guild_id: int
    author_id: int
    parent_id: int | None


@dataclass
class Capture:
    """Counts each channel's messages and starts the summarizer when enough are new."""

    summarizer: Summarizer
    memory: MemoryService
    settings: Settings
    tasks: TaskRegistry
    _seen: Counter[int] = field(default_factory=Counter)  # since the last look, by channel
    _spent: Counter[tuple[int, date]] = field(default_factory=Counter)  # server and day
    _told: set[tuple[int, date]] = field(default_factory=set)  # told of a spent budget
    _heard: dict[int, _Heard] = field(default_factory=dict)  # channels not swept yet
    _sweeper: asyncio.Task[None] | None = None

    def observed(
        self, *, guild_id: int | None, channel_id: int, author_id: int, parent_id: int | None
    ) -> None:
        """One message arrived in ``channel_id`` (cheap: a count, now and then a task)."""
        every = self.settings.stm.capture_after_messages
        if guild_id is None or every == 0:
            return  # a DM's memory is its member's, built from their turns
        self._seen[channel_id] += 1
        if self.settings.stm.capture_quiet_minutes > 0:
            now = self.memory.clock.monotonic()
            self._heard[channel_id] = _Heard(now, guild_id, author_id, parent_id)
            if self._sweeper is None:
                self._sweeper = self.tasks.spawn(
                    self._sweep_forever(), name="capture-quiet", endless=True
                )
        if self._seen[channel_id] >= every:
            self._start(channel_id, guild_id, author_id, parent_id, at_least=every)

    def sweep_quiet(self) -> int:
        """Start capture in the channels quiet for ``stm.capture_quiet_minutes`` with at
        least :data:`QUIET_MIN_MESSAGES` messages since the last look; how many started."""
        quiet = self.settings.stm.capture_quiet_minutes * 60
        now = self.memory.clock.monotonic()
        started = 0
        for channel_id, heard in list(self._heard.items()):
            if now - heard.at < quiet:
                continue
            del self._heard[channel_id]
            if self._seen[channel_id] >= QUIET_MIN_MESSAGES:
                started += self._start(
                    channel_id,
                    heard.guild_id,
                    heard.author_id,
                    heard.parent_id,
                    at_least=QUIET_MIN_MESSAGES,
                )
        return started

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            self.sweep_quiet()

    def _start(
        self,
        channel_id: int,
        guild_id: int,
        author_id: int,
        parent_id: int | None,
        *,
        at_least: int,
    ) -> bool:
        """Spawn one capture of the channel unless one runs or the budget is spent."""
        if self.summarizer.is_running(channel_id):
            return False
        self._seen.pop(channel_id, None)
        self._heard.pop(channel_id, None)
        if self.spent(guild_id) >= self.settings.stm.capture_daily_tokens:
            self._tell_spent(guild_id)
            return False
        self.tasks.spawn(
            self._capture(guild_id, channel_id, author_id, parent_id, at_least),
            name=f"capture-{channel_id}",
        )
        return True

    def spent(self, guild_id: int) -> int:
        """Tokens capture used in ``guild_id`` today (UTC)."""
        return self._spent[(guild_id, self._today())]

    async def _capture(
        self, guild_id: int, channel_id: int, author_id: int, parent_id: int | None, at_least: int
    ) -> SummaryOutcome | None:
        memory = self.memory
        key = ScopeKey.server(guild_id, channel_id)
        entry = await memory.entry(key, parent_channel_id=parent_id)
        window = await memory.recent_messages(channel_id)
        if count_new_messages(window, entry.marker) < at_least:
            return None
        outcome = await self.summarizer.summarize(
            guild_id=guild_id,
            channel_id=channel_id,
            actor_user_id=author_id,
            reason=REASON,
            parent_channel_id=parent_id,
        )
        self._spent[(guild_id, self._today())] += outcome.tokens
        return outcome

    def _tell_spent(self, guild_id: int) -> None:
        day = self._today()
        if (guild_id, day) not in self._told:
            self._told.add((guild_id, day))
            log.info("capture in server %s: today's token budget is spent", guild_id)

    def _today(self) -> date:
        return self.memory.clock.now().date()
