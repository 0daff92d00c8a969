"""A turn's long-term recall: the facts its prompt shows, read from what the turn says.

The user's own facts visible here and, in a server, the facts capture distilled from this
channel (and a thread's parent) are ranked together. Most users never ask the bot to
remember anything and most channels have no captured facts yet: whether there are any is
asked first, in batches shared by the turns starting together, and a scope or channel found
to hold none is remembered as empty for a while, so their warm turns make no query.
"""

from __future__ import annotations

from cachetools import TTLCache

from bot.memory.longterm import LongTermService, Recalled
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
        # Channel -> the capture count (LongTermService.captures) when it held none.
        self._no_captured: TTLCache[int, int] = TTLCache(maxsize=100_000, ttl=NO_FACTS_TTL_SECONDS)

    def _channels(self, start: TurnStart) -> tuple[int, ...]:
        """The channels whose captured facts this turn may show, less those known empty."""
        if start.guild_id is None:
            return ()
        places = (start.channel_id, start.parent_channel_id)
        return tuple(
            channel
            for channel in places
            if channel is not None
            and self._no_captured.get(channel) != self.longterm.captured.captures(channel)
        )

    async def notes(self, start: TurnStart, opted_in: bool) -> list[str]:
        """The facts visible where ``start`` happens most relevant to what it says (none
        with the database down); ``opted_in``: the user lets a DM show server facts."""
        scope = (start.user_id, start.guild_id, start.channel_id, opted_in)
        own = scope not in self._no_facts
        channels = self._channels(start)
        if not own and not channels:
            return []
        saves = self.longterm.saves(start.user_id)
        captures = {channel: self.longterm.captured.captures(channel) for channel in channels}
        try:
            # Whether there are any facts at all first, asked in batches (a burst of cold
            # turns shares a few queries): the search runs only where some exist.
            has_own, holding = await self.longterm.holders.holding(
                start.user_id if own else None, channels
            )
            recalled = Recalled([])
            if has_own or holding:
                recalled = await self.longterm.recall(
                    start.user_id,
                    start.guild_id,
                    start.content,
                    opted_in,
                    may_show=start.may_show,
                    channel_ids=tuple(channel for channel in channels if channel in holding),
                    own=has_own,
                )
        except MemoryUnavailable:
            return []
        # An opted-in DM shows facts made in servers, and a fact made there (maybe by
        # another shard's process) is not heard of here: it is not remembered as having none.
        # Nor is a scope where the user saved a fact while the query ran (a turn in another
        # channel): the query may have missed it, and the clearing that follows a save
        # (:meth:`saved`) may have run already. A save that ends after this check clears
        # the entry itself.
        unchanged = self.longterm.saves(start.user_id) == saves
        if own and not recalled.own_facts and not opted_in and unchanged:
            self._no_facts[scope] = True
        for channel, count in captures.items():
            if channel not in recalled.channels_with_facts:
                self._no_captured[channel] = count  # stale once a capture stores there
        return recalled.notes

    def saved(self, user_id: int) -> None:
        """A fact of ``user_id`` may have been stored (also by a save that failed after
        storing it): none of their scopes is known to be empty any more."""
        for scope in [s for s in self._no_facts if s[0] == user_id]:
            self._no_facts.pop(scope, None)
