"""Operations waiting for the database: when a write or a deletion goes to the spool
instead, and what the spool's replay changes in this process."""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.db import database_failed
from bot.memory.spool import DurableSpool, PendingChanges
from bot.memory.stm.coherence import FORGET_NOTICED
from bot.memory.stm.state import MemoryState
from bot.vocabulary import MemoryUnavailable

log = logging.getLogger(__name__)


class NotTried(Exception):
    """Not tried: earlier operations wait in the spool and this one must follow them, or
    the database is known to be down (see :meth:`Pending.skip_database`)."""


def deletion_deferred(
    sessions: async_sessionmaker[AsyncSession], what: str, exc: Exception
) -> None:
    """A deletion was not done now (spooled, or refused): a failure of the database it
    was tried on is reported to its breaker (an outage is logged once, not per call)."""
    if not isinstance(exc, NotTried):
        database_failed(sessions, what, exc)
    log.info("%s deferred: %s", what, exc.__class__.__name__)


class Pending:
    """The spool as the rest of the service sees it."""

    def __init__(self, state: MemoryState) -> None:
        self._state = state

    @property
    def count(self) -> int:
        """Operations waiting in the spool for the database."""
        spool = self._state.spool
        return spool.pending if spool is not None else 0

    def skip_database(self) -> bool:
        """An operation goes to the spool without trying the database: earlier ones wait
        there (it must queue behind them, or could be overtaken: a wiped memory replayed
        over, an older version), or the database is known to be down (see ``storage``)
        and it would only wait for its timeout to land in the spool anyway."""
        spool = self._state.spool
        return spool is not None and (spool.pending > 0 or self._state.ledger.database_down())

    def queue_or_raise(self, exc: Exception, append: Callable[[DurableSpool], None]) -> None:
        """Queue a deletion the database did not take (or must not take yet) in the spool;
        without a spool, or if it cannot be written, the caller hears it failed."""
        try:
            if self._state.spool is None:
                raise OSError("no spool")
            append(self._state.spool)
        except (OSError, ValueError) as spool_error:
            if not isinstance(exc, NotTried):
                spool_error.__cause__ = exc
            raise MemoryUnavailable("the database is unavailable; try again shortly") from (
                spool_error
            )

    def changes_in(self, channel_id: int) -> PendingChanges:
        """The channel's writes and clear waiting in the spool (``/stm show``)."""
        spool = self._state.spool
        if spool is None:
            return PendingChanges(0, False)
        return spool.pending_changes_in(channel_id)

    def replayed(self) -> None:
        """Every spooled operation reached the database: clears are now real deletions,
        and the keys it wrote are read again (a write refused or skipped by the replay,
        e.g. a newer row of another process, must not stay cached as if stored)."""
        state = self._state
        state.tombstones.clear()
        # A replayed /forget-me deleted rows it does not name (this process ignores its
        # own notice): the versions held for expired rows go, as in forget_user.
        state.ledger.note(FORGET_NOTICED)
        state.drop_stand_ins()
        if state.spool is None:
            return
        for key in state.spool.replayed_keys:
            if key not in state.writing:
                state.ledger.note(key)
                state.cache.pop(key)
        # While a clear waited, the channel was shown empty without reading its rows. Its
        # replay may have been skipped (a later /refresh covered it) and rows written
        # since: those entries are read again too.
        for channel_id in state.spool.replayed_clears:
            for key in state.cache.keys_of_channel(channel_id):
                if key not in state.writing:
                    state.ledger.note(key)
                    state.cache.pop(key)
