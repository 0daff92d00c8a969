"""The ``kioku`` system: the real bot on dpytest, fed the conversation, asked in the channel.

Each sample gets a text channel of its own and its two speakers as members; a third
member, the questioner, asks. Every turn is posted at its session's date (one minute
apart), the bot's clock moved there first; the bot is not addressed, so its memory does
whatever it does on its own. After the last session the harness waits for the bot's
background work, then copies the database (the post-ingest state).

Each question starts from that state: the copy is put back and the bot drops what it
loaded from the database and its raw windows (as after missed notices), so it reads
its memory again and back-fills the channel from Discord's history; the question is
asked by mentioning the bot, an hour after the last session; then the question and the
reply are deleted through Discord, so no later question can see them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import discord

from benchmarks.recall.dataset import Sample, Session
from benchmarks.recall.posting import delete_messages, post_message, snowflake_at
from benchmarks.recall.proxy import Phase, RecordingProxy
from benchmarks.recall.snapshot import Snapshot, restore_snapshot, take_snapshot
from bot.app import KiokuBot, build_bot
from bot.cogs.history import BOT_NOTICES
from bot.config import Settings
from bot.db.engine import Database
from tests.helpers.dpytest_env import DpytestEnv, attach_dpytest, detach

TURN_GAP = timedelta(minutes=1)
QUESTION_DELAY = timedelta(hours=1)
QUESTIONER = "Questioner"
GUILD_NAME = "LoCoMo"


class SessionClock:
    """The bot's clock: real time flowing on from the dates the harness moves it to
    (forward only, as a clock goes)."""

    def __init__(self, start: datetime) -> None:
        self._anchor = start
        self._anchored_at = time.monotonic()
        self._jumped = 0.0

    def now(self) -> datetime:
        return self._anchor + timedelta(seconds=time.monotonic() - self._anchored_at)

    def monotonic(self) -> float:
        return time.monotonic() + self._jumped

    def move_to(self, at: datetime) -> None:
        ahead = (at - self.now()).total_seconds()
        if ahead > 0:
            self._jumped += ahead
            self._anchor, self._anchored_at = at, time.monotonic()


@dataclass
class Answer:
    text: str
    seconds: float
    failed: bool = False
    cut: bool = False  # the prompt left out part of the conversation (``full``)


@dataclass
class _Channel:
    channel: discord.TextChannel
    ask_at: datetime
    snapshot: Snapshot


def channel_name(sample_id: str) -> str:
    """The sample's channel: ``locomo-`` and its id as a Discord channel name."""
    slug = re.sub(r"[^a-z0-9-]+", "-", sample_id.lower()).strip("-")[:90] or "sample"
    return f"locomo-{slug}"


@dataclass
class KiokuSystem:
    """The bot, started on :meth:`start`, closed on :meth:`close`."""

    settings: Settings
    database: Database
    proxy: RecordingProxy
    clock: SessionClock
    name: str = "kioku"
    bot: KiokuBot | None = None
    env: DpytestEnv | None = None
    _members: dict[str, discord.Member] = field(default_factory=dict)
    _channels: dict[str, _Channel] = field(default_factory=dict)

    async def start(self) -> None:
        bot = build_bot(
            self.settings,
            database=self.database,
            clock=self.clock,
            janitor=False,
            serve_metrics=False,
        )
        # A turn on a slow local model takes minutes: the event wait must outlast it.
        timeout = self.settings.llm.turn_timeout_seconds + 120
        self.env = await attach_dpytest(
            bot,
            guilds=[GUILD_NAME],
            text_channels=[],
            members=[],
            run_setup_hook=True,
            event_timeout=timeout,
        )
        self.bot = bot

    async def close(self) -> None:
        if self.bot is not None:
            await detach(self.bot)
            self.bot = None

    async def _member(self, name: str) -> discord.Member:
        assert self.env is not None
        if name not in self._members:
            self._members[name] = await self.env.create_member(name)
        return self._members[name]

    async def _settle(self) -> None:
        """Wait for the bot's background work (summaries, captures) and its writes."""
        assert self.bot is not None
        await self.bot.tasks.wait()
        await self.bot.memory.save_turn_counts()
        await self.bot.memory.writes_settled()

    async def ingest(
        self,
        sample: Sample,
        sessions: tuple[Session, ...],
        on_turn: Callable[[], None] | None = None,
    ) -> None:
        """Post every turn of ``sessions`` in a new channel, then copy the database."""
        assert self.env is not None
        channel = await self.env.create_text_channel(channel_name(sample.sample_id))
        at = sessions[0].start
        for session in sessions:
            for position, turn in enumerate(session.turns):
                at = session.start + TURN_GAP * position
                self.clock.move_to(at)
                self.proxy.phase = Phase(self.name, "ingest", sample.sample_id)
                author = await self._member(turn.speaker)
                await post_message(self.env, channel, author, turn.posted, at)
                if on_turn is not None:
                    on_turn()
            await self._settle()
        self.proxy.phase = None
        await self._member(QUESTIONER)
        snapshot = await take_snapshot(self.database.engine)
        self._channels[sample.sample_id] = _Channel(channel, at + QUESTION_DELAY, snapshot)

    async def answer(self, sample: Sample, key: str, asked: str) -> Answer:
        """Ask ``asked`` in the sample's channel from the post-ingest state; take it back."""
        assert self.env is not None and self.bot is not None
        place = self._channels[sample.sample_id]
        await restore_snapshot(self.database.engine, place.snapshot)
        self.bot.memory.drop_all()
        self.clock.move_to(place.ask_at)
        sent_before = len(self.env.sent)
        self.proxy.phase = Phase(self.name, "answer", key)
        asked_at = self.clock.now()
        message_id = snowflake_at(asked_at)
        started = time.perf_counter()
        problem: str | None = None
        try:
            await post_message(
                self.env,
                place.channel,
                await self._member(QUESTIONER),
                asked,
                asked_at,
                mention_bot=True,
                message_id=message_id,
            )
        except Exception as exc:  # the bot's handler raised or hung: this answer failed
            problem = f"(turn failed: {type(exc).__name__})"
        seconds = time.perf_counter() - started
        replies = [
            record
            for record in self.env.sent[sent_before:]
            if record.message.channel.id == place.channel.id and not record.deleted
        ]
        await self._settle()  # a summary after the answer is this question's cost too
        self.proxy.phase = None
        text = problem or "\n".join(record.message.content for record in replies)
        failed = bool(problem) or not replies
        failed = failed or any(r.message.content in BOT_NOTICES for r in replies)
        question = place.channel.get_partial_message(message_id)
        await delete_messages([*(record.message for record in replies), question])
        return Answer(text, seconds, failed=failed)
