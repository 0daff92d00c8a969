"""Processes for the SIGKILL test (``python -m tests.helpers.crash_writer MODE URL DATA_DIR``).

``write``: a memory-writing process, built like the bot (the database, the data folder's
spool, the start-up replay of ``bot.services.replay_spool_at_start``, a ``MemoryService``
on that spool). It talks to the test one line at a time:

1. connects to the database (it must be up, as for the bot) and prints ``CONNECTED``;
2. waits for ``OPEN`` on stdin, opens the spool (a torn last line is cut there), runs the
   start-up replay if anything is pending (it fails if the test stopped the database
   meanwhile) and prints ``OPENED <pending>``: what is still waiting;
3. waits for ``WARM`` (the database must be up), loads the guild settings and the
   memories of ``--channels`` channels as the first turns would, prints ``READY``;
4. waits for ``DOWN`` (the test has stopped the database), then writes STM updates
   round robin forever, printing ``ACK <message id> <channel> <version> <status>`` only
   after the service acknowledged each one — exactly what a user would have been told.
   Message ids start at ``--first-id``; each update's audit events carry its id.

The test SIGKILLs it: nothing is flushed or closed.

``restart``: the bot's services starting on that data folder (``start_services``, which
replays the spool before the first turn), without Discord. Prints ``RESTARTED <pending
before> <pending after>`` and closes them.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from bot.config import Settings, load_settings
from bot.db.engine import Database
from bot.memory.service import MemoryService
from bot.memory.spool.durable import DurableSpool, inspect_spool, spool_path
from bot.memory.turn.types import TurnStart
from bot.services import replay_spool_at_start, start_services

GUILD = 42
USER = 7
FIRST_CHANNEL = 1000


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(
        database_url=args.database_url,
        data_dir=args.data_dir,
        openai_base_url="http://127.0.0.1:9/v1",  # never called: no turn runs here
        openai_api_key="unused",
    )


async def _expect(line: str) -> None:
    got = (await asyncio.to_thread(sys.stdin.readline)).strip()
    if got != line:
        raise SystemExit(f"crash_writer: expected {line!r} on stdin, got {got!r}")


async def write(args: argparse.Namespace) -> None:
    settings = _settings(args)
    database = Database(settings)
    await database.start()
    print("CONNECTED", flush=True)

    await _expect("OPEN")
    spool = DurableSpool(spool_path(args.data_dir))
    if spool.pending:
        await replay_spool_at_start(spool, database.sessions)  # as the bot does
    memory = MemoryService(database.sessions, settings, spool=spool)
    print(f"OPENED {spool.pending}", flush=True)

    await _expect("WARM")
    channels = [FIRST_CHANNEL + c for c in range(args.channels)]
    for channel in channels:
        prepared = await memory.prepare_turn(
            TurnStart(channel_id=channel, user_id=USER, guild_id=GUILD, bot_user_id=1)
        )
        if not prepared.turn.storage_available:
            raise SystemExit("crash_writer: WARM needs the database up")
    print("READY", flush=True)

    await _expect("DOWN")
    i = 0
    while True:
        channel = channels[i % len(channels)]
        message_id = args.first_id + i
        prepared = await memory.prepare_turn(
            TurnStart(
                channel_id=channel,
                user_id=USER,
                guild_id=GUILD,
                bot_user_id=1,
                source_message_id=message_id,
            )
        )
        result = await memory.update_stm(prepared.turn, summary=f"update {message_id}")
        if result.ok:
            version = prepared.entry.version
            status = result.status.replace(" ", "_")
            print(f"ACK {message_id} {channel} {version} {status}", flush=True)
        i += 1


async def restart(args: argparse.Namespace) -> None:
    before = inspect_spool(args.data_dir).pending
    settings = _settings(args)
    services = await start_services(settings, Database(settings), owns_database=True, janitor=False)
    try:
        assert services.spool is not None
        print(f"RESTARTED {before} {services.spool.pending}", flush=True)
    finally:
        await services.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["write", "restart"])
    parser.add_argument("database_url")
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--channels", type=int, default=50)
    parser.add_argument("--first-id", type=int, default=1)
    args = parser.parse_args()
    asyncio.run(write(args) if args.mode == "write" else restart(args))


if __name__ == "__main__":
    main()
