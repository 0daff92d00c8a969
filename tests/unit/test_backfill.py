"""The window cache: a back-fill that fails leaves nothing behind (and a failure that
may pass is tried again), and nothing wiped or deleted gets back in late."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import aiohttp
import discord
import pytest

from bot.cogs.history import backfill, is_refresh_marker
from bot.cogs.refresh import marker_text
from bot.memory.model import RawMessage
from bot.memory.window import WindowCache

CHANNEL = 42


class _Channel:
    id = CHANNEL

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error or aiohttp.ClientConnectionError("connection reset")

    def history(self, **_kwargs: object) -> AsyncIterator[Any]:
        async def fail() -> AsyncIterator[Any]:
            raise self.error
            yield  # an async generator that fails on the first read

        return fail()


class _Response:
    """What discord.py's HTTP errors read from an aiohttp response."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.reason = "refused"


def _bot(windows: WindowCache) -> Any:
    async def nothing_wiped(_channel_id: int, _history: object) -> Any:
        return lambda _message: False

    return SimpleNamespace(
        memory=SimpleNamespace(windows=windows, wiped_history=nothing_wiped),
        user=SimpleNamespace(id=1),
        settings=SimpleNamespace(stm=SimpleNamespace(raw_window=20)),
    )


async def test_a_failed_backfill_stops_recording_what_happens_to_the_channel() -> None:
    windows = WindowCache(per_channel=20, max_channels=10)
    await backfill(_bot(windows), _Channel())  # type: ignore[arg-type]  # the turn goes on
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


async def test_a_discord_server_error_leaves_the_channel_cold_for_a_later_turn() -> None:
    windows = WindowCache(per_channel=20, max_channels=10)
    down = discord.DiscordServerError(_Response(503), "Service Unavailable")  # type: ignore[arg-type]
    await backfill(_bot(windows), _Channel(down))  # type: ignore[arg-type]
    assert windows._fills == {}
    assert not windows.is_primed(CHANNEL), "Discord may answer next time"


@pytest.mark.parametrize("status", [403, 404])
async def test_a_refused_history_read_is_final(status: int) -> None:
    windows = WindowCache(per_channel=20, max_channels=10)
    error = (discord.Forbidden if status == 403 else discord.NotFound)(
        _Response(status),  # type: ignore[arg-type]
        "refused",
    )
    await backfill(_bot(windows), _Channel(error))  # type: ignore[arg-type]
    assert windows.is_primed(CHANNEL), "asking again would be refused again"


def test_a_late_echo_of_a_message_from_before_a_clear_stays_out() -> None:
    windows = WindowCache(per_channel=10)
    before = RawMessage(100, 7, "Alice", "the codename is HERON", datetime.now(UTC))
    windows.append(CHANNEL, replace(before, message_id=101, content="a reply part"))
    windows.clear(CHANNEL)  # a /refresh

    windows.append(CHANNEL, before)  # its gateway echo arrives only now
    windows.prime(CHANNEL, [before])  # nor does a back-fill bring it
    windows.append(CHANNEL, replace(before, message_id=102, content="said after it"))
    assert [m.content for m in windows.get(CHANNEL)] == ["said after it"]


def test_a_deleted_message_whose_echo_arrives_late_stays_out() -> None:
    windows = WindowCache(per_channel=10)
    part = RawMessage(100, 1, "Kioku", "a reply taken back", datetime.now(UTC), is_bot=True)
    windows.delete(CHANNEL, part.message_id)  # before its gateway echo
    windows.append(CHANNEL, part)
    assert windows.get(CHANNEL) == ()
    assert windows.was_deleted(part.message_id)


def test_refresh_markers_of_every_wording_stop_the_backfill() -> None:
    # Markers already posted keep their old wording: the back-fill must still stop there.
    me = SimpleNamespace(id=1, mention="<@1>")
    old = (
        "🧹 **Memory refreshed** by <@5>. "
        "I start fresh here: nothing above this line is part of my memory."
    )
    for content in (old, marker_text(me)):  # type: ignore[arg-type]
        message = SimpleNamespace(author=me, content=content)
        assert is_refresh_marker(message, me), content  # type: ignore[arg-type]
    quoted = SimpleNamespace(author=SimpleNamespace(id=2), content=old)
    assert not is_refresh_marker(quoted, me)  # type: ignore[arg-type]
