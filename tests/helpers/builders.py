"""Small builders shared by tests: a movable clock, raw messages, a memory service."""

from __future__ import annotations

import itertools
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.config import Settings
from bot.memory.longterm.facts import LongTermService
from bot.memory.service import MemoryService
from bot.memory.spool.durable import DurableSpool
from bot.memory.turn.types import LabelFor, PreparedTurn, TurnStart, TurnState
from bot.vocabulary.model import RawMessage
from tests.helpers.faults import outage

EPOCH = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
GUILD = 111_111_111_111_111_111
CHANNEL = 222_222_222_222_222_222
OTHER_CHANNEL = 222_222_222_222_222_333
ALICE = 333_333_333_333_333_001
BOB = 333_333_333_333_333_002
CAROL = 333_333_333_333_333_003
BOT = 999_999_999_999_999_999

_message_ids = itertools.count(500_000_000_000_000_000)


class ManualClock:
    """A clock tests move by hand (cache TTLs are hours long)."""

    def __init__(self, start: datetime = EPOCH) -> None:
        self._now = start
        self._mono = 1_000.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, **delta: float) -> None:
        step = timedelta(**delta)
        self._now += step
        self._mono += step.total_seconds()

    def catch_up(self) -> None:
        """Move to the real time (which dpytest's message snowflakes carry)."""
        self.advance(seconds=max(0.0, (datetime.now(UTC) - self._now).total_seconds()))


class RealTimeClock(ManualClock):
    """Wall time for code that measures itself (benchmarks)."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


def message(
    author_id: int = ALICE,
    content: str = "hello",
    *,
    name: str | None = None,
    message_id: int | None = None,
    is_bot: bool = False,
    at: datetime = EPOCH,
) -> RawMessage:
    return RawMessage(
        message_id=message_id if message_id is not None else next(_message_ids),
        author_id=author_id,
        author_name=name or {ALICE: "Alice", BOB: "Bob", BOT: "Kioku"}.get(author_id, "User"),
        content=content,
        created_at=at,
        is_bot=is_bot,
    )


def make_service(
    sessions: async_sessionmaker[AsyncSession],
    settings: Settings,
    clock: ManualClock | None = None,
    spool: DurableSpool | None = None,
) -> MemoryService:
    return MemoryService(sessions, settings, clock=clock or ManualClock(), spool=spool)


def two_services(
    sessions: async_sessionmaker[AsyncSession], settings: Settings
) -> tuple[ManualClock, MemoryService, MemoryService]:
    """Processes A and B on one database and one clock (their own caches), and the clock."""
    clock = ManualClock()
    return clock, make_service(sessions, settings, clock), make_service(sessions, settings, clock)


def make_longterm(memory: MemoryService) -> LongTermService:
    """Long-term memory on ``memory``'s database, clock and spool (as the bot builds it)."""
    return LongTermService(memory.sessions, memory.settings, memory.clock, spool=memory.spool)


async def recall_notes(longterm: LongTermService, *args: Any, **kwargs: Any) -> list[str]:
    """The notes of :meth:`LongTermService.recall` (a turn's recall, for assertions)."""
    return (await longterm.recall(*args, **kwargs)).notes


async def prepare(
    service: MemoryService,
    user: int = ALICE,
    *,
    channel: int = CHANNEL,
    label_for: LabelFor | None = None,
    guild: int | None = GUILD,
    **start: Any,
) -> PreparedTurn:
    """A turn of ``user`` in ``guild``'s ``channel`` (the test guild's; None for a DM),
    prepared as a message would; ``start`` sets TurnStart's other fields."""
    return await service.prepare_turn(
        TurnStart(
            channel_id=channel,
            user_id=user,
            guild_id=guild,
            bot_user_id=BOT,
            label_for=label_for,
            **start,
        )
    )


async def turn_for(service: MemoryService, user: int = ALICE) -> TurnState:
    """The turn state of :func:`prepare` (what a write needs)."""
    return (await prepare(service, user)).turn


async def spooled_then_cleared_elsewhere(
    sessions: async_sessionmaker[AsyncSession], settings: Settings, spool: DurableSpool
) -> tuple[MemoryService, MemoryService]:
    """Process A spools a write of CHANNEL's memory during a database blip ("wiped by the
    refresh"); the database comes back before A's replayer runs; process B then clears
    the channel. Returns (A, B); A has not heard B's clear notice yet."""
    a = make_service(sessions, settings, ManualClock(), spool=spool)
    turn = await turn_for(a)
    async with outage(a.sessions):
        result = await a.update_stm(turn, summary="wiped by the refresh")
    assert str(result) == "saved, pending sync"
    clock_b = ManualClock()
    clock_b.advance(seconds=5)  # the clear comes after A's turn began
    b = make_service(sessions, settings, clock_b)
    await b.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    return a, b


def settings_changed_elsewhere(memory: MemoryService, guild_id: int) -> None:
    """Drop the guild's cached settings, as another process's notice does."""
    memory.apply_notice({"o": "another process", "t": "guild", "g": guild_id})
