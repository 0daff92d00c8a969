"""Recent raw messages per channel (never persisted).

Kept apart from the STM entries on purpose: an STM entry expires 12–24 h after its last
*memory* update, but the live conversation in that channel must not vanish with it.
Bounded per channel (``raw_window``) and in the number of channels (LRU).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from cachetools import LRUCache

from bot.vocabulary import RawMessage

# Deleted message ids remembered (all channels): far more than a turn queue holds.
DELETED_REMEMBERED = 10_000


@dataclass(eq=False)
class Backfill:
    """What happened to a channel while its history was being fetched."""

    cleared: bool = False
    deleted: set[int] = field(default_factory=set)
    edited: dict[int, str] = field(default_factory=dict)
    forgotten: set[int] = field(default_factory=set)


class WindowCache:
    """The last ``per_channel`` messages of up to ``max_channels`` channels."""

    def __init__(self, *, per_channel: int, max_channels: int = 10_000) -> None:
        self._per_channel = per_channel
        self._windows: LRUCache[int, deque[RawMessage]] = LRUCache(max_channels)
        # Channels whose history has been back-filled once (or that need none).
        self._primed: LRUCache[int, bool] = LRUCache(max_channels)
        # Back-fills in flight, per channel: what happened to the channel while Discord
        # was answering, applied to the fetched history when it arrives.
        self._fills: dict[int, list[Backfill]] = {}
        # The newest message id each channel has shown, and, once cleared, that id at the
        # clear: a message at or below it predates the clear (ids grow with time), so a
        # late gateway echo of one cannot bring back what a /refresh wiped.
        self._newest: LRUCache[int, int] = LRUCache(max_channels)
        self._floors: LRUCache[int, int] = LRUCache(max_channels)
        # Messages deleted (or taken out as wiped) lately: a late echo of one is not
        # added back, and a turn whose message is among them has nothing to answer.
        self._deleted: LRUCache[int, bool] = LRUCache(DELETED_REMEMBERED)

    def get(self, channel_id: int) -> Sequence[RawMessage]:
        window = self._windows.get(channel_id)
        return tuple(window) if window is not None else ()

    def is_primed(self, channel_id: int) -> bool:
        # A window the LRU dropped (an idle channel) needs its history again, even if the
        # record of its first back-fill is still here.
        return channel_id in self._primed and channel_id in self._windows

    def begin_backfill(self, channel_id: int) -> Backfill:
        """Start a back-fill: call before fetching history, then :meth:`prime` with it.

        A fetch takes a network round trip; a ``/refresh``, a delete, an edit or a
        ``/forget-me`` landing meanwhile is recorded here and applied to the fetched
        history, which would otherwise bring back what they removed."""
        fill = Backfill()
        self._fills.setdefault(channel_id, []).append(fill)
        return fill

    def prime(
        self, channel_id: int, history: Sequence[RawMessage], fill: Backfill | None = None
    ) -> None:
        """Seed a cold channel from history (oldest first); messages seen live are kept."""
        if fill is not None:
            history = self._end_backfill(channel_id, fill, history)
        history = [m for m in history if self._admits(channel_id, m)]
        window = self._windows.get(channel_id)
        known = {m.message_id for m in window} if window is not None else set()
        merged = sorted(
            [m for m in history if m.message_id not in known] + list(window or ()),
            key=lambda m: m.message_id,
        )
        self._windows[channel_id] = deque(merged[-self._per_channel :], maxlen=self._per_channel)
        self._primed[channel_id] = True
        if merged:
            self._seen(channel_id, merged[-1].message_id)

    def abandon_backfill(self, channel_id: int, fill: Backfill) -> None:
        """The fetch failed: stop recording for it (the channel stays cold)."""
        fills = self._fills.get(channel_id, [])
        if fill in fills:
            fills.remove(fill)
        if not fills:
            self._fills.pop(channel_id, None)

    def _end_backfill(
        self, channel_id: int, fill: Backfill, history: Sequence[RawMessage]
    ) -> list[RawMessage]:
        self.abandon_backfill(channel_id, fill)
        if fill.cleared:
            return []  # everything fetched predates the clear
        return [
            replace(m, content=fill.edited[m.message_id]) if m.message_id in fill.edited else m
            for m in history
            if m.message_id not in fill.deleted and m.author_id not in fill.forgotten
        ]

    def was_deleted(self, message_id: int) -> bool:
        """Whether the message was deleted (or wiped out of its window) lately."""
        return message_id in self._deleted

    def _admits(self, channel_id: int, message: RawMessage) -> bool:
        floor = self._floors.get(channel_id)
        return message.message_id not in self._deleted and (
            floor is None or message.message_id > floor
        )

    def _seen(self, channel_id: int, message_id: int) -> None:
        self._newest[channel_id] = max(self._newest.get(channel_id, 0), message_id)

    def append(self, channel_id: int, message: RawMessage) -> None:
        """Add a message seen live (in id order; duplicates, deleted messages and messages
        from before the channel's last clear are ignored)."""
        if not self._admits(channel_id, message):
            return
        self._seen(channel_id, message.message_id)
        window = self._windows.get(channel_id)
        if window is None:
            window = self._windows[channel_id] = deque(maxlen=self._per_channel)
        if window and window[-1].message_id >= message.message_id:
            if any(m.message_id == message.message_id for m in window):
                return  # a duplicate delivery
            window.append(message)
            ordered = sorted(window, key=lambda m: m.message_id)
            window.clear()
            window.extend(ordered)
            return
        window.append(message)

    def edit(self, channel_id: int, message_id: int, content: str) -> bool:
        for fill in self._fills.get(channel_id, ()):
            fill.edited[message_id] = content
        window = self._windows.get(channel_id)
        if window is None:
            return False
        for index, message in enumerate(window):
            if message.message_id == message_id:
                window[index] = replace(message, content=content)
                return True
        return False

    def delete(self, channel_id: int, message_id: int) -> bool:
        self._deleted[message_id] = True
        for fill in self._fills.get(channel_id, ()):
            fill.deleted.add(message_id)
        window = self._windows.get(channel_id)
        if window is None:
            return False
        for message in window:
            if message.message_id == message_id:
                window.remove(message)
                return True
        return False

    def clear(self, channel_id: int) -> None:
        """Forget a channel's messages; it counts as primed so history is not re-fetched
        from before the clear (the caller's ``/refresh`` marker bounds any back-fill), and
        no message seen before it can be added again (a late echo, a reply being posted)."""
        newest = self._newest.get(channel_id)
        if newest is not None:
            self._floors[channel_id] = newest
        self._windows[channel_id] = deque(maxlen=self._per_channel)  # empty, still primed
        self._primed[channel_id] = True
        for fill in self._fills.get(channel_id, ()):
            fill.cleared = True

    def drop_all(self) -> None:
        """Forget every window (after missed notices: a /refresh or a /forget-me made
        elsewhere may concern them); each channel is back-filled again on its next use,
        through what the database says was wiped."""
        self._windows.clear()
        self._primed.clear()

    def channels_with_author(self, author_id: int) -> set[int]:
        """The channels whose window holds a message by ``author_id``."""
        return {
            channel_id
            for channel_id, window in self._windows.items()
            if any(m.author_id == author_id for m in window)
        }

    def forget_author(self, author_id: int) -> int:
        """Drop every message by ``author_id`` from every window; return how many."""
        for fills in self._fills.values():
            for fill in fills:
                fill.forgotten.add(author_id)
        removed = 0
        for channel_id in list(self._windows.keys()):
            window = self._windows.get(channel_id)
            if window is None:
                continue
            kept = [m for m in window if m.author_id != author_id]
            removed += len(window) - len(kept)
            if len(kept) != len(window):
                window.clear()
                window.extend(kept)
        return removed


def answering(
    window: Sequence[RawMessage], source_message_id: int | None, bot_user_id: int
) -> Sequence[RawMessage]:
    """The window as the turn answering ``source_message_id`` sees it. A turn that waited
    in the channel's queue answers its own message, not what was said after it (those
    messages have turns of their own); the bot's replies to earlier messages, sent while
    it waited, stay, before the message being answered, so the conversation ends with it."""
    if source_message_id is None or not window or window[-1].message_id <= source_message_id:
        return window  # the usual case: nothing was said after the message
    source = [m for m in window if m.message_id == source_message_id]
    if not source:  # deleted, or scrolled out: never past it (the marker would claim it)
        return tuple(m for m in window if m.message_id < source_message_id)
    before = [
        m
        for m in window
        if m.message_id < source_message_id
        or (m.author_id == bot_user_id and m.message_id > source_message_id)
    ]
    return (*before, *source)


def with_trigger(
    window: Sequence[RawMessage], trigger: RawMessage | None, deleted: Callable[[int], bool]
) -> Sequence[RawMessage]:
    """The turn's window, ending with the message being answered even when a busy channel
    pushed it out of the raw window while the turn waited in the queue (then the window
    holds nothing older either). A deleted message stays out. The turn's marker was set
    from ``window`` before: it does not claim the trigger, nor what scrolled out with it."""
    if (
        trigger is None
        or deleted(trigger.message_id)
        or any(m.message_id == trigger.message_id for m in window)
    ):
        return window
    return (*window, trigger)
