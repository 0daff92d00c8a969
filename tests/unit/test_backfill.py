"""A back-fill that fails leaves nothing behind in the window cache."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import aiohttp

from bot.cogs.history import backfill
from bot.memory.model import RawMessage
from bot.memory.window import WindowCache

CHANNEL = 42


class _Channel:
    id = CHANNEL

    def history(self, **_kwargs: object) -> AsyncIterator[Any]:
        async def fail() -> AsyncIterator[Any]:
            raise aiohttp.ClientConnectionError("connection reset")
            yield  # an async generator that fails on the first read

        return fail()


async def test_a_failed_backfill_stops_recording_what_happens_to_the_channel() -> None:
    windows = WindowCache(per_channel=20, max_channels=10)
    bot = SimpleNamespace(
        memory=SimpleNamespace(windows=windows),
        user=SimpleNamespace(id=1),
        settings=SimpleNamespace(stm=SimpleNamespace(raw_window=20)),
    )
    await backfill(bot, _Channel())  # type: ignore[arg-type]  # the turn goes on
    windows.edit(CHANNEL, 7, "Alice's edited words")  # would be kept for a fill forever
    windows.forget_author(1234)
    assert windows._fills == {}
    assert not windows.is_primed(CHANNEL), "still cold: the next turn tries again"


def test_a_channel_whose_window_the_lru_dropped_is_back_filled_again() -> None:
    windows = WindowCache(per_channel=20, max_channels=2)
    windows.prime(2, [])
    windows.prime(CHANNEL, [])
    assert windows.is_primed(CHANNEL)
    windows.get(2)  # channel 2 is busier
    windows.append(1, RawMessage(10, 7, "Alice", "hi", datetime.now(UTC)))  # a third one
    assert windows.get(CHANNEL) == ()  # the idle channel's window was dropped

    assert not windows.is_primed(CHANNEL), "an empty window would hide the history"
