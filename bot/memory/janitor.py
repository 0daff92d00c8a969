"""Retention: delete STM rows not updated for ``stm.retention_days`` (default 90).

Runs ``janitor_delay_seconds`` after start (default 60 s, so start-up stays fast), then
every ``janitor_interval_hours`` (default daily). A failed pass is logged and retried at
the next interval; it never stops the bot. A pass that deleted rows tells the other
processes (a ``purge`` notice), so none keeps the version of a deleted row.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from bot.memory.service import MemoryService

log = logging.getLogger(__name__)


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
