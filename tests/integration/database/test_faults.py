"""Nothing acknowledged is lost: a real PostgreSQL stopped and started under load, and a
writer process killed with SIGKILL mid-stream, then a real restart.

Each test owns an embedded PostgreSQL (not the session's), so stopping it disturbs no
other test. The figures (sent, acknowledged, found after recovery…) are printed in the
"figures" section at the end of the run.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.config import Settings
from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.db.engine import Database, EmbeddedPostgres
from bot.db.migrate import upgrade
from bot.db.models import ShortTermMemory, StmEvent
from bot.db.storage import database_failed, faults, outage_number
from bot.memory.service import MemoryService
from bot.memory.spool.durable import DurableSpool, SpoolStatus, inspect_spool, spool_path
from bot.vocabulary.errors import MemoryUnavailable
from tests.conftest import Figures
from tests.helpers.bot import start_kioku, stop_kioku
from tests.helpers.builders import (
    ALICE,
    CHANNEL,
    GUILD,
    ManualClock,
    make_service,
    message,
    prepare,
    turn_for,
)
from tests.helpers.database import make_test_settings
from tests.helpers.fake_llm import ScriptedLLM
from tests.helpers.faults import own_sessions
from tests.helpers.processes import ROOT

PENDING = "saved, pending sync"
# A safety net only: every wait below ends on an event; this turns a hang into a failure.
RECOVERY_LIMIT_SECONDS = 90


@dataclass
class OwnPostgres:
    server: EmbeddedPostgres
    url: URL
    database: Database


@pytest.fixture
async def own_postgres(tmp_path: Path) -> AsyncIterator[OwnPostgres]:
    server = EmbeddedPostgres(tmp_path / "pg")
    url = await asyncio.to_thread(server.start)
    database = Database(make_test_settings(url, tmp_path / "data"))
    await database.start()
    await upgrade(database.engine)
    try:
        yield OwnPostgres(server, url, database)
    finally:
        await database.close()
        await asyncio.to_thread(server.stop)


async def update_events_found(
    sessions: async_sessionmaker[AsyncSession], message_ids: list[int]
) -> int:
    """How many of ``message_ids`` have an STM update in the audit log."""
    async with sessions() as session:
        found = await session.scalar(
            select(func.count(func.distinct(StmEvent.message_id))).where(
                StmEvent.event == "update", StmEvent.message_id.in_(message_ids)
            )
        )
    return int(found or 0)


async def server_rows(sessions: async_sessionmaker[AsyncSession]) -> list[ShortTermMemory]:
    async with sessions() as session:
        return list(
            await session.scalars(
                select(ShortTermMemory).where(ShortTermMemory.scope_kind == "server")
            )
        )


# ----------------------------------------------------------------- database outage


@dataclass
class ReplayerProbe:
    """Watches the bot's own spool replayer without replacing it."""

    failed_attempts: int = 0
    replays: int = 0
    replayed_at: float = 0.0  # loop time of the last report
    # Set each time the replayer reports that every spooled operation reached the database.
    replayed: asyncio.Event = field(default_factory=asyncio.Event)


def watch_replayer(monkeypatch: pytest.MonkeyPatch) -> ReplayerProbe:
    """Count the replay attempts and report the ``on_replayed`` callback the bot hands
    its background replayer (``MemoryService.spool_replayed``). Patched on the classes
    before the bot starts, so the bot's own task runs the observed methods."""
    probe = ReplayerProbe()
    replay = DurableSpool.replay
    spool_replayed = MemoryService.spool_replayed

    async def counted_replay(
        spool: DurableSpool, sessions: async_sessionmaker[AsyncSession]
    ) -> int:
        try:
            return await replay(spool, sessions)
        except Exception:
            probe.failed_attempts += 1
            raise

    def reported(memory: MemoryService) -> None:
        spool_replayed(memory)
        probe.replays += 1
        probe.replayed_at = asyncio.get_running_loop().time()
        probe.replayed.set()

    monkeypatch.setattr(DurableSpool, "replay", counted_replay)
    monkeypatch.setattr(MemoryService, "spool_replayed", reported)
    return probe


async def test_database_outage_during_500_updates_loses_nothing_acknowledged(
    own_postgres: OwnPostgres,
    llm: ScriptedLLM,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    figures: Figures,
) -> None:
    """500 STM updates over 50 channels; the database is down from update 150 to 349.
    Every update is acknowledged (saved, or saved pending sync), the bot answers every
    message, ``/stm show`` tells how many writes wait, and the bot's own background
    replayer (not a hand-made replay) brings every acknowledged update to the database."""
    pg = own_postgres
    probe = watch_replayer(monkeypatch)
    kioku = await start_kioku(pg.database, llm, pg.url, tmp_path / "bot", channels=50)
    loop = asyncio.get_running_loop()
    statuses: dict[int, str] = {}  # source message id -> what the tool answered
    last_ack: dict[int, str] = {}  # channel id -> summary of its last acknowledged update
    sent = replies = 0
    shown_pending = 0
    shown = ""
    back_at = loop.time()
    try:
        channels = kioku.env.channels
        spool = kioku.bot.spool
        assert spool is not None
        for i in range(500):
            channel = channels[i % 50]
            if i == 150:
                await asyncio.to_thread(pg.server.stop)
            if i == 350:
                # Just before the database comes back: /stm show tells what waits.
                shown_pending = kioku.bot.memory.pending_changes_in(channel.id).writes
                result = await kioku.interactions.slash("stm show", channel=channel)
                shown = "\n".join(result.texts()) if result.ephemeral else "(not ephemeral)"
                await asyncio.to_thread(pg.server.start)
                back_at = loop.time()
            summary = f"update {i} in {channel.name}"
            llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": summary})]).reply_text(f"reply {i}")
            message = await kioku.env.send(f"message {i}", channel=channel, mention_bot=True)
            sent += 1
            replies += kioku.env.last_sent().content == f"reply {i}"
            (status,) = [m["content"] for m in llm.messages(-1) if m.get("role") == "tool"]
            statuses[message.id] = status
            if status in ("saved", PENDING):
                last_ack[channel.id] = summary

        # Recovery is the bot's background replayer's job (woken by the cache listener's
        # reconnect, or at the end of its backoff): wait for it to report.
        pending_after_traffic = spool.pending
        if spool.pending:
            probe.replayed.clear()
            async with asyncio.timeout(RECOVERY_LIMIT_SECONDS):
                await probe.replayed.wait()
        left_in_spool = spool.pending
    finally:
        await stop_kioku(kioku)

    acknowledged = [mid for mid, status in statuses.items() if status in ("saved", PENDING)]
    pending = sum(1 for status in statuses.values() if status == PENDING)
    found = await update_events_found(pg.database.sessions, acknowledged)
    rows = {r.channel_id: r.summary for r in await server_rows(pg.database.sessions)}
    figures["sent"] = sent
    figures["acknowledged"] = len(acknowledged)
    figures["acknowledged pending sync"] = pending
    figures["found after recovery"] = found
    figures["replies"] = replies
    figures["pending shown by /stm show (that channel)"] = shown_pending
    figures["pending when traffic stopped"] = pending_after_traffic
    figures["failed replay attempts"] = probe.failed_attempts
    figures["replayed, s after the database came back"] = round(probe.replayed_at - back_at, 2)

    assert replies == sent == 500, "the bot answered every message, outage or not"
    refused = {i: s for i, s in enumerate(statuses.values()) if s not in ("saved", PENDING)}
    assert len(acknowledged) == sent, f"updates not acknowledged (index: answer): {refused}"
    assert found == sent
    assert pending > 0, "the outage must have been exercised"
    assert shown_pending > 0
    assert f"{shown_pending} changes to this channel's memory are waiting for the database" in shown
    assert probe.failed_attempts > 0, "the replayer retried while the database was down"
    assert probe.replays > 0, "the bot's own replayer brought the spool back"
    assert left_in_spool == 0 and inspect_spool(tmp_path / "bot").pending == 0
    assert rows == last_ack


# ----------------------------------------------------------------- SIGKILL, restart


@dataclass(frozen=True)
class Ack:
    message_id: int
    channel: int
    version: int
    status: str


class Child:
    """A ``tests.helpers.crash_writer`` process spoken to line by line."""

    def __init__(self, process: asyncio.subprocess.Process, log: IO[bytes]) -> None:
        self.process = process
        self._log = log

    @classmethod
    async def start(cls, *args: str, log_path: Path) -> Child:
        log = log_path.open("wb")  # its warnings, kept for debugging
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.helpers.crash_writer",
            *args,
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
            env={**os.environ, "KIOKU_ENV_FILE": str(log_path.with_suffix(".env"))},
        )
        return cls(process, log)

    async def expect(self, word: str) -> list[str]:
        """Read the next line; it must start with ``word``; return the rest."""
        assert self.process.stdout is not None
        line = await self.process.stdout.readline()
        fields = line.decode().split()
        assert fields and fields[0] == word, f"expected {word}, got {line!r}"
        return fields[1:]

    async def say(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode() + b"\n")
        await self.process.stdin.drain()

    async def acks_until(self, pending: int) -> list[Ack]:
        """Read acknowledgements until ``pending`` of them said "pending sync"."""
        acks: list[Ack] = []
        while sum(a.status == PENDING for a in acks) < pending:
            message_id, channel, version, status = await self.expect("ACK")
            acks.append(Ack(int(message_id), int(channel), int(version), status.replace("_", " ")))
        return acks

    async def acked_until_killed(self, server: EmbeddedPostgres, pending: int) -> list[Ack]:
        """Warm up with the database up, then stop it and read acknowledgements until
        ``pending`` said "pending sync"; then SIGKILL."""
        await self.say("WARM")
        await self.expect("READY")
        await asyncio.to_thread(server.stop)
        await self.say("DOWN")
        acks = await self.acks_until(pending=pending)
        assert await self.kill() == -signal.SIGKILL
        return acks

    async def kill(self) -> int:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)
        code = await self.process.wait()
        self._log.close()
        return code

    async def wait(self) -> int:
        code = await self.process.wait()
        self._log.close()
        return code


def spool_lines(data_dir: Path) -> tuple[int, bool]:
    """Complete lines in the spool file, and whether a torn (unfinished) line follows."""
    raw = spool_path(data_dir).read_bytes()
    return raw.count(b"\n"), not raw.endswith(b"\n") and raw != b""


def tear_the_last_line(data_dir: Path) -> None:
    """Append the first half of the last record, with no newline: what a crash in the
    middle of writing a line leaves. (A SIGKILL rarely tears one by itself: a record goes
    out in one write(); a large record or a power cut can.)"""
    path = spool_path(data_dir)
    raw = path.read_bytes()
    last = raw[: raw.rfind(b"\n")].rsplit(b"\n", 1)[-1]
    with path.open("ab") as handle:
        handle.write(last[: len(last) // 2])


async def test_sigkill_mid_stream_loses_nothing_acknowledged(
    own_postgres: OwnPostgres, tmp_path: Path, figures: Figures
) -> None:
    """A writer acknowledges updates "pending sync" while the database is down and is
    SIGKILLed; its spool is left with a torn last line. A second writer starts on that
    spool and the database goes down again right after it connected: its start-up replay
    fails, the torn tail must be cut, and it appends more before it is SIGKILLed too.
    Then the real bot starts (``build_bot`` + ``setup_hook``, in a fresh process): every
    update either writer acknowledged is in the database."""
    pg = own_postgres
    url = pg.url.render_as_string(hide_password=False)
    data_dir = tmp_path / "writer"
    children: list[Child] = []

    async def launch(*args: str, name: str) -> Child:
        child = await Child.start(*args, log_path=tmp_path / f"{name}.log")
        children.append(child)
        return child

    try:
        async with asyncio.timeout(RECOVERY_LIMIT_SECONDS):
            # 1. Warm up with the database up; write only once it is down.
            first = await launch("write", url, str(data_dir), name="first")
            await first.expect("CONNECTED")
            await first.say("OPEN")
            assert await first.expect("OPENED") == ["0"]
            first_acks = await first.acked_until_killed(pg.server, pending=100)
            durable, killed_mid_line = spool_lines(data_dir)
            tear_the_last_line(data_dir)

            # 2. A restart, and the database goes away again right after it connected:
            # the start-up replay fails, the torn tail is cut, and what it appends next
            # (with nothing rewritten in between) must survive.
            await asyncio.to_thread(pg.server.start)
            second = await launch(
                "write", url, str(data_dir), "--first-id", "1000000", name="second"
            )
            await second.expect("CONNECTED")
            await asyncio.to_thread(pg.server.stop)
            await second.say("OPEN")
            (opened_with,) = await second.expect("OPENED")
            assert spool_lines(data_dir) == (durable, False), "the torn tail was cut"
            # Cut silently: an unfinished line was never acknowledged, it is not damage.
            assert inspect_spool(data_dir).set_aside == ()
            await asyncio.to_thread(pg.server.start)
            second_acks = await second.acked_until_killed(pg.server, pending=50)
            before_restart, _ = spool_lines(data_dir)

            # 3. The database is back and the real bot starts on the data folder.
            await asyncio.to_thread(pg.server.start)
            restart = await launch("restart", url, str(data_dir), name="restart")
            pending_before, pending_after = await restart.expect("RESTARTED")
            assert await restart.wait() == 0
    finally:
        for child in children:
            await child.kill()

    await pg.database.engine.dispose()  # its connections died with the server
    acks = first_acks + second_acks
    found = await update_events_found(pg.database.sessions, [a.message_id for a in acks])
    versions = {r.channel_id: r.version for r in await server_rows(pg.database.sessions)}
    newest: dict[int, int] = {}
    for ack in acks:
        newest[ack.channel] = max(ack.version, newest.get(ack.channel, 0))
    behind = sorted(c for c, v in newest.items() if versions.get(c, 0) < v)
    first_newest = {a.channel: a.version for a in first_acks}
    figures["acknowledged before the first SIGKILL"] = len(first_acks)
    figures["records in the spool after it"] = durable
    figures["the SIGKILL itself tore a line"] = killed_mid_line
    figures["acknowledged before the second SIGKILL"] = len(second_acks)
    figures["records replayed by the restarted bot"] = int(pending_before)
    figures["acknowledged in all"] = len(acks)
    figures["found after restart"] = found
    figures["channels whose row is older than an acknowledged write"] = len(behind)

    assert all(a.status == PENDING for a in acks), "the database was down for every write"
    assert durable >= len(first_acks), "every acknowledged write had been fsynced"
    assert int(opened_with) == durable, "nothing complete was dropped with the torn tail"
    assert all(a.version > first_newest.get(a.channel, 0) for a in second_acks), (
        "the second writer continued from the spooled versions"
    )
    assert int(pending_before) == before_restart >= durable + len(second_acks)
    assert int(pending_after) == 0
    assert inspect_spool(data_dir) == SpoolStatus(pending=0, set_aside=())
    assert found == len(acks)
    assert behind == []


# ----------------------------------------------------- a hung database, a long outage


# A hung database: a step waits this long, then fails as its own timeout would (5 s).
HUNG_SECONDS = 0.2


def without_probes(steps: list[str]) -> list[str]:
    """The steps the memory service itself opened, not the breaker's probe (a background
    task finding out when the database is back)."""
    return [step for step in steps if step != "probing the database"]


async def test_a_hung_database_costs_one_timeout_not_one_per_read(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """The database stops answering (a partition, a hung server) while the cache listener
    is down: the first read waits for its timeout and the database is marked down; then
    reads with a cached value use it at once, the window is filtered as with the database
    down, and the write goes to the spool, instead of every read of every turn waiting
    for the timeout (5 s each, about 40 s a turn)."""
    clock = ManualClock()
    service = make_service(
        own_sessions(db), settings, clock, spool=DurableSpool(spool_path(tmp_path))
    )
    assert str(await service.update_stm(await turn_for(service), summary="warm")) == "saved"
    service.observe_message(CHANNEL, message(ALICE, "said before the outage"))
    plan = faults(service.sessions)
    plan.hang(timeout=HUNG_SECONDS)
    service.listener_lost()  # what the listener's failed ping reports
    clock.advance(seconds=10)
    first = await service.update_stm(await turn_for(service), summary="in the outage")
    assert outage_number(service.sessions) is not None
    tried_first = len(without_probes(plan.met))
    clock.advance(seconds=10)
    question = message(ALICE, "still there?", at=clock.now())
    service.observe_message(CHANNEL, question)
    before = len(without_probes(plan.met))
    prepared = await prepare(service, source_message_id=question.message_id)
    shown = prepared.entry.summary
    second = await service.update_stm(prepared.turn, summary="later in the outage")
    tried_second = len(without_probes(plan.met)) - before
    assert (str(first), str(second)) == (PENDING, PENDING)
    assert shown == "in the outage"
    # The wipe times could not be read: only what was said since the first failed read.
    assert [m.content for m in prepared.prompt.window] == ["still there?"]
    # The first turn waited on the database; without the breaker the second would too:
    # guild settings, three entries and the wipe times, a timeout each.
    assert tried_first > 0
    assert tried_second == 0, f"the second turn opened {tried_second} sessions"


@pytest.mark.parametrize("deletion", ["refresh", "forget-me"])
async def test_a_deletion_during_a_known_outage_goes_to_the_spool_without_trying(
    db: Database, settings: Settings, tmp_path: Path, deletion: str
) -> None:
    """The database is known to be down (a read just timed out on it): a /refresh or a
    /forget-me goes to the spool at once, as a write does, instead of opening a session
    and waiting for its own timeout first; it is done when the spool is replayed."""
    spool = DurableSpool(spool_path(tmp_path))
    service = make_service(own_sessions(db), settings, spool=spool)
    assert str(await service.update_stm(await turn_for(service), summary="before")) == "saved"
    plan = faults(service.sessions)
    plan.hang(timeout=HUNG_SECONDS)
    with pytest.raises(MemoryUnavailable):
        await service.recent_events(GUILD)  # times out: the database is marked down
    assert outage_number(service.sessions) is not None
    before = len(without_probes(plan.met))
    if deletion == "refresh":
        pending = await service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=ALICE)
    else:
        pending = await service.forget_user(ALICE)
    tried = len(without_probes(plan.met)) - before
    assert (pending.pending_sync, tried, spool.pending) == (True, 0, 1)
    assert await spool.replay(db.sessions) == 1
    spool.close()
    async with db.sessions() as session:
        assert await session.scalar(select(func.count()).select_from(ShortTermMemory)) == 0


async def test_a_deletion_that_times_out_marks_the_database_down(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """A /refresh that waited its timeout on a hung database reports it: the next read
    with a cached value uses it at once instead of waiting again."""
    spool = DurableSpool(spool_path(tmp_path))
    service = make_service(own_sessions(db), settings, spool=spool)
    faults(service.sessions).hang("clearing a channel", timeout=HUNG_SECONDS)
    receipt = await service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=ALICE)
    down = outage_number(service.sessions)
    spool.close()
    assert receipt.pending_sync and down is not None


@pytest.mark.parametrize("operation", ["write", "refresh", "forget-me"])
async def test_a_write_or_deletion_that_goes_through_ends_the_outage(
    db: Database, settings: Settings, operation: str
) -> None:
    """The database was marked down, and an STM write (a group commit), a /refresh or a
    /forget-me then goes through: it answered, so reads stop standing in for it."""
    sessions = async_sessionmaker(db.engine)  # its own breaker
    service = make_service(sessions, settings)  # no spool: it tries
    turn = await turn_for(service)  # everything the write reads is cached now
    database_failed(sessions, "a read", TimeoutError())
    assert outage_number(sessions) is not None
    if operation == "write":
        assert str(await service.update_stm(turn, summary="through")) == "saved"
    elif operation == "refresh":
        await service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=ALICE)
    else:
        await service.forget_user(ALICE)
    assert outage_number(sessions) is None


async def test_a_long_outage_is_logged_once_not_on_every_turn(
    own_postgres: OwnPostgres,
    llm: ScriptedLLM,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pg = own_postgres
    probe = watch_replayer(monkeypatch)
    kioku = await start_kioku(pg.database, llm, pg.url, tmp_path / "bot")
    statuses = []
    try:
        channel = kioku.env.channels[0]
        llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": "warm"})]).reply_text("warm")
        await kioku.env.send("warm up", channel=channel, mention_bot=True)
        await asyncio.to_thread(pg.server.stop)
        caplog.clear()
        caplog.set_level(logging.INFO)
        for i in range(10):
            llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": f"update {i}"})]).reply_text(f"r{i}")
            await kioku.env.send(f"message {i}", channel=channel, mention_bot=True)
            (status,) = [m["content"] for m in llm.messages(-1) if m.get("role") == "tool"]
            statuses.append(status)
        during = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        probe.replayed.clear()
        await asyncio.to_thread(pg.server.start)
        async with asyncio.timeout(RECOVERY_LIMIT_SECONDS):
            await probe.replayed.wait()
        back = [r.getMessage() for r in caplog.records if "database back after" in r.getMessage()]
    finally:
        await stop_kioku(kioku)
    print(during, back)
    assert statuses == [PENDING] * 10
    # Once when it began (and the cache listener's own report), not per turn or per read.
    assert sum(m.startswith("database unavailable") for m in during) == 1, during
    assert len(during) <= 3, during
    assert len(back) == 1 and "operations failed meanwhile" in back[0], back
