"""Capture (seed 002): memory builds while nobody addresses the bot.

Every member's message in a server channel is counted; once ``stm.capture_after_messages`` of them
came since the last look, the channel's memory is read and, when that many are not
covered by it, the summarizer folds them in, in the background, with reason ``capture``.
It never delays a turn, never runs where memory is off (the summarizer checks), and stays
within ``stm.capture_daily_tokens`` per server and UTC day.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import date

from bot.config import Settings
from bot.conversation.summarizer.run import Summarizer, SummaryOutcome
from bot.memory import MemoryService, count_new_messages
from bot.runtime import TaskRegistry
from bot.vocabulary import ScopeKey

log = logging.getLogger(__name__)

REASON = "capture"


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

    def observed(
        self, *, guild_id: int | None, channel_id: int, author_id: int, parent_id: int | None
    ) -> None:
        """One message arrived in ``channel_id`` (cheap: a count, now and then a task)."""
        every = self.settings.stm.capture_after_messages
        if guild_id is None or every == 0:
            return  # a DM's memory is its member's, built from their turns
        self._seen[channel_id] += 1
        if self._seen[channel_id] < every or self.summarizer.is_running(channel_id):
            return
        del self._seen[channel_id]
        if self.spent(guild_id) >= self.settings.stm.capture_daily_tokens:
            self._tell_spent(guild_id)
            return
        self.tasks.spawn(
            self._capture(guild_id, channel_id, author_id, parent_id),
            name=f"capture-{channel_id}",
        )

    def spent(self, guild_id: int) -> int:
        """Tokens capture used in ``guild_id`` today (UTC)."""
        return self._spent[(guild_id, self._today())]

    async def _capture(
        self, guild_id: int, channel_id: int, author_id: int, parent_id: int | None
    ) -> SummaryOutcome | None:
        memory = self.memory
        key = ScopeKey.server(guild_id, channel_id)
        entry = await memory.entry(key, parent_channel_id=parent_id)
        window = await memory.recent_messages(channel_id)
        if count_new_messages(window, entry.marker) < self.settings.stm.capture_after_messages:
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
