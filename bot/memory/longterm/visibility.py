"""Where a long-term fact may be shown (SPEC §6), one rule for the service and the tools.

A server's facts in that server, DM facts in DMs, a server's in DMs only when the user
opted in; never in a channel more public than where the fact was said.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

from sqlalchemy.ext.asyncio import AsyncSession

from bot.db.repositories import longterm as repo
from bot.vocabulary import Fact, Place

__all__ = ["ChannelFilter", "ChannelView", "hidden_fact_ids", "may_show_place", "visible_here"]

# Whether what was said in a channel (by id) may be shown where the turn happens.
ChannelFilter = Callable[[int], bool]


class ChannelView(ABC):
    """A :data:`ChannelFilter` that can also judge a fact by its recorded :class:`Place`
    (for a thread since archived, which Discord no longer caches, or a deleted channel)."""

    here: Place | None = None  # where the turn happens, recorded with the facts saved in it

    @abstractmethod
    def __call__(self, channel_id: int, /) -> bool:
        """Whether what was said in ``channel_id`` may be shown here."""

    def shows(self, guild_id: int | None, place: Place) -> bool:
        """Whether a fact said at ``place`` in ``guild_id`` may be shown here."""
        return self(place.channel_id)


def may_show_place(may_show: ChannelFilter | None, guild_id: int | None, place: Place) -> bool:
    """``may_show``'s verdict on a fact said at ``place`` (anything, without a filter)."""
    if may_show is None:
        return True
    if isinstance(may_show, ChannelView):
        return may_show.shows(guild_id, place)
    return may_show(place.channel_id)


def visible_here(
    fact: Fact, guild_id: int | None, *, opted_in: bool, may_show: ChannelFilter | None
) -> bool:
    """Whether ``fact`` may be shown where the turn happens."""
    if guild_id is not None and fact.guild_id != guild_id:
        return False
    if guild_id is None and fact.guild_id is not None and not opted_in:
        return False
    place = fact.place
    return place is None or may_show_place(may_show, fact.guild_id, place)


async def hidden_fact_ids(
    session: AsyncSession,
    user_id: int,
    guild_id: int | None,
    opted_in: bool,
    may_show: ChannelFilter | None,
) -> list[int]:
    """The ids of the user's facts in scope that ``may_show`` hides here.

    Found before searching, so ten hidden matches cannot fill the limit of a search."""
    if may_show is None:
        return []
    verdicts: dict[tuple[int | None, Place], bool] = {}
    hidden: list[int] = []
    for fact_id, fact_guild, place in await repo.fact_places(
        session, user_id, guild_id, opted_in=opted_in
    ):
        shown = verdicts.get((fact_guild, place))
        if shown is None:
            shown = verdicts[(fact_guild, place)] = may_show_place(may_show, fact_guild, place)
        if not shown:
            hidden.append(fact_id)
    return hidden
