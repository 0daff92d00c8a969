"""The window cache: a channel the LRU dropped is back-filled again, nothing wiped or
deleted gets back in late, and the back-fill stops at every wording of the refresh
marker. A failing back-fill is tested on the real bot, in tests/discord/test_window.py."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from types import SimpleNamespace

from bot.cogs.history import is_refresh_marker
from bot.cogs.refresh import marker_text
from bot.memory.stm.window import WindowCache
from bot.vocabulary.model import RawMessage

CHANNEL = 42


def test_a_channel_whose_window_the_lru_dropped_is_back_filled_again() -> None:
    windows = WindowCache(per_channel=20, max_channels=2)
    windows.prime(2, [])
    windows.prime(CHANNEL, [])
    assert windows.is_primed(CHANNEL)
    windows.get(2)  # channel 2 is busier
    windows.append(1, RawMessage(10, 7, "Alice", "hi", datetime.now(UTC)))  # a third one
    assert windows.get(CHANNEL) == ()  # the idle channel's window was dropped

    assert not windows.is_primed(CHANNEL), "an empty window would hide the history"


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
