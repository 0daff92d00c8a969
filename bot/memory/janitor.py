"""Housekeeping loops of a running bot.

Retention: delete STM rows not updated for ``stm.retention_days`` (default 90). Runs
``janitor_delay_seconds`` after start (default 60 s, so start-up stays fast), then
every ``janitor_interval_hours`` (default daily). A failed pass is logged and retried at
the next interval; it never stops the bot. A pass that deleted rows tells the other
processes (a ``purge`` notice), so none keeps the version of a deleted row.

Turn counts: every ``TURN_COUNTS_SAVE_SECONDS`` the cadence counters that turns moved
are stored in their rows (one statement), so a restart does not start them over; a
turn itself never waits on the database for them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from bot.memory.service import MemoryService
from bot.vocabulary import MemoryUnavailable

log = logging.getLogger(__name__)

# A restart (or an eviction) forgets at most this much of the cadence's count.
TURN_COUNTS_SAVE_SECONDS = 60.0


async def run_janitor(
    service: MemoryService, *, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
) -> None:
    """Loop forever (until cancelled) purging expired rows. ``sleep`` waits between
    passes (tests hold it to step through the schedule)."""
    stm = service.settings.stm
    await sleep(stm.janitor_delay_seconds)
    while True:
        try:
            deleted = await service.purge_expired_rows()
            log.info("janitor: deleted %d STM rows older than %d days", deleted, stm.retention_days)
        except Exception as exc:
            log.warning("janitor pass failed: %s", exc.__class__.__name__)
        await sleep(stm.janitor_interval_hours * 3600)


async def run_turn_count_saver(
    service: MemoryService, *, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
) -> None:
    """Loop forever (until cancelled) storing the turn counts turns moved; the last
    ones are stored by the bot's ``close``. A failed save keeps them for the next."""
    while True:
        await sleep(TURN_COUNTS_SAVE_SECONDS)
        try:
            saved = await service.save_turn_counts()
        except MemoryUnavailable:
            continue  # the outage is logged once, by the storage layer
        log.debug("turn counts of %d memories saved", saved)
