"""A turn's long-term recall: the facts its prompt shows, read from what the turn says.

Most users never ask the bot to remember anything: a scope found to show no facts is
remembered as empty for a while, so their warm turns make no query.
"""

from __future__ import annotations

from cachetools import TTLCache

from bot.memory.longterm import LongTermService
from bot.memory.turn.types import TurnStart
from bot.vocabulary import MemoryUnavailable

NO_FACTS_TTL_SECONDS = 600

# (user, guild, channel, opted in): where a turn looks for facts.
Scope = tuple[int, int | None, int, bool]


class FactRecall:
    """Recalls the long-term facts a turn shows, skipping scopes known to show none."""

    def __init__(self, longterm: LongTermService) -> None:
        self.longterm = longterm
        self._no_facts: TTLCache[Scope, bool] = TTLCache(maxsize=100_000, ttl=NO_FACTS_TTL_SECONDS)

    async def notes(self, start: TurnStart, opted_in: bool) -> list[str]:
        """The facts visible where ``start`` happens most relevant to what it says (none
        with the database down); ``opted_in``: the user lets a DM show server facts."""
        scope = (start.user_id, start.guild_id, start.channel_id, opted_in)
        if scope in self._no_facts:
            return []
        saves = self.longterm.saves(start.user_id)
        try:
            notes = await self.longterm.recall_notes(
                start.user_id, start.guild_id, start.content, opted_in, may_show=start.may_show
            )
        except MemoryUnavailable:
            return []
        # An opted-in DM shows facts made in servers, and a fact made there (maybe by
        # another shard's process) is not heard of here: it is not remembered as having none.
        # Nor is a scope where the user saved a fact while the query ran (a turn in another
        # channel): the query may have missed it, and the clearing that follows a save
        # (:meth:`saved`) may have run already. A save that ends after this check clears
        # the entry itself.
        if not notes and not opted_in and self.longterm.saves(start.user_id) == saves:
            self._no_facts[scope] = True
        return notes

    def saved(self, user_id: int) -> None:
        """A fact of ``user_id`` may have been stored (also by a save that failed after
        storing it): none of their scopes is known to be empty any more."""
        for scope in [s for s in self._no_facts if s[0] == user_id]:
            self._no_facts.pop(scope, None)
