"""A memory-writing process for the SIGKILL test (``python -m tests.helpers.crash_writer``).

It warms the cache for N channels while the database is up, prints ``READY``, waits for
``GO`` on stdin (the test stops the database meanwhile), then writes STM updates round
robin forever, printing ``ACK <i> <channel> <version> <status>`` only after the service
acknowledged each one — exactly what a user would have been told.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from bot.config import load_settings
from bot.db.engine import Database
from bot.memory.service import MemoryService
from bot.memory.spool import DurableSpool, spool_path

GUILD = 42
USER = 7


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("database_url")
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--channels", type=int, default=50)
    args = parser.parse_args()
    settings = load_settings(database_url=args.database_url, data_dir=args.data_dir)
    database = Database(settings)
    await database.start()
    spool = DurableSpool(spool_path(args.data_dir))
    memory = MemoryService(database.sessions, settings, spool=spool)
    channels = [1000 + c for c in range(args.channels)]
    for channel in channels:
        await memory.prepare_turn(channel_id=channel, user_id=USER, guild_id=GUILD, bot_user_id=1)
    print("READY", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    i = 0
    while True:
        channel = channels[i % len(channels)]
        prepared = await memory.prepare_turn(
            channel_id=channel, user_id=USER, guild_id=GUILD, bot_user_id=1
        )
        result = await memory.update_stm(prepared.turn, summary=f"update {i}")
        if result.ok:
            version = prepared.entry.version
            print(f"ACK {i} {channel} {version} {result.status.replace(' ', '_')}", flush=True)
        i += 1


if __name__ == "__main__":
    asyncio.run(main())
