"""Nothing acknowledged is lost: a real PostgreSQL stopped and started under load, and a
writer process killed with SIGKILL mid-stream.

Each test owns an embedded PostgreSQL (not the session's), so stopping it disturbs no
other test.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import URL

from bot.db.engine import Database, EmbeddedPostgres
from bot.db.migrate import upgrade
from bot.db.models import ShortTermMemory, StmEvent
from bot.llm.tools.stm import STM_TOOL_NAME
from bot.memory.spool import DurableSpool, spool_path
from tests.helpers.bot import start_kioku, stop_kioku
from tests.helpers.database import make_test_settings
from tests.helpers.fake_llm import ScriptedLLM

ROOT = Path(__file__).resolve().parents[2]


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


async def test_database_outage_during_500_updates_loses_nothing_acknowledged(
    own_postgres: OwnPostgres, llm: ScriptedLLM, tmp_path: Path
) -> None:
    pg = own_postgres
    kioku = await start_kioku(pg.database, llm, pg.url, tmp_path / "bot", channels=50)
    acknowledged: dict[int, str] = {}  # source message id -> status
    last_ack: dict[int, str] = {}  # channel id -> summary of its last acknowledged update
    replies = 0
    try:
        channels = kioku.env.channels
        for i in range(500):
            channel = channels[i % 50]
            if i == 150:
                await asyncio.to_thread(pg.server.stop)
            if i == 350:
                await asyncio.to_thread(pg.server.start)
            summary = f"update {i} in {channel.name}"
            llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": summary})]).reply_text(f"reply {i}")
            message = await kioku.env.send(f"message {i}", channel=channel, mention_bot=True)
            replies += kioku.env.last_sent().content == f"reply {i}"
            (result,) = [m["content"] for m in llm.messages(-1) if m.get("role") == "tool"]
            if result in ("saved", "saved, pending sync"):
                acknowledged[message.id] = result
                last_ack[channel.id] = summary
        await kioku.bot.spool.replay(pg.database.sessions)
    finally:
        await stop_kioku(kioku)

    pending = sum(1 for status in acknowledged.values() if status == "saved, pending sync")
    async with pg.database.sessions() as session:
        rows = {
            r.channel_id: r.summary
            for r in await session.scalars(
                select(ShortTermMemory).where(ShortTermMemory.scope_kind == "server")
            )
        }
        found = await session.scalar(
            select(func.count(func.distinct(StmEvent.message_id))).where(
                StmEvent.event == "update", StmEvent.message_id.in_(list(acknowledged))
            )
        )
    print(
        f"\nupdates sent 500, acknowledged {len(acknowledged)} ({pending} pending sync), "
        f"found after recovery {found}, replies {replies}"
    )
    assert replies == 500, "the bot answered every message, outage or not"
    assert pending > 0, "the outage must have been exercised"
    assert found == len(acknowledged)
    assert rows == last_ack


async def test_sigkill_mid_stream_loses_nothing_acknowledged(
    own_postgres: OwnPostgres, tmp_path: Path
) -> None:
    pg = own_postgres
    data_dir = tmp_path / "writer"
    log_file = (tmp_path / "writer.log").open("wb")  # its warnings, kept for debugging
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.helpers.crash_writer",
        pg.url.render_as_string(hide_password=False),
        str(data_dir),
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=log_file,
        env={**os.environ, "KIOKU_ENV_FILE": str(tmp_path / "none.env")},
    )
    assert process.stdin is not None and process.stdout is not None
    acks: list[tuple[int, int, str]] = []  # (channel, version, status)
    try:
        async with asyncio.timeout(60):
            assert (await process.stdout.readline()).strip() == b"READY"
            process.stdin.write(b"GO\n")
            await process.stdin.drain()
            while len(acks) < 300:
                if len(acks) == 100:
                    await asyncio.to_thread(pg.server.stop)
                fields = (await process.stdout.readline()).decode().split()
                assert fields and fields[0] == "ACK", fields
                acks.append((int(fields[2]), int(fields[3]), fields[4]))
    finally:
        process.send_signal(signal.SIGKILL)
        await process.wait()
        log_file.close()
    assert process.returncode == -signal.SIGKILL

    # "Restart": the database comes back and the spool left behind is replayed, as the
    # bot's start-up does before its first turn.
    await asyncio.to_thread(pg.server.start)
    await pg.database.engine.dispose()
    spool = DurableSpool(spool_path(data_dir))
    await spool.replay(pg.database.sessions)
    spool.close()
    async with pg.database.sessions() as session:
        versions = {
            r.channel_id: r.version
            for r in await session.scalars(
                select(ShortTermMemory).where(ShortTermMemory.scope_kind == "server")
            )
        }
    newest_ack: dict[int, int] = {}
    for channel, version, _ in acks:
        newest_ack[channel] = max(version, newest_ack.get(channel, 0))
    lost = [c for c, v in newest_ack.items() if versions.get(c, 0) < v]
    pending = sum(1 for *_, status in acks if status == "saved,_pending_sync")
    print(f"\nacknowledged {len(acks)} ({pending} pending sync) before SIGKILL, lost {len(lost)}")
    assert pending > 0
    assert lost == []
