"""``kioku console``: chat with the bot in a terminal, through the same turn pipeline.

No Discord: the terminal is one synthetic guild channel (fixed ids, so the memory
persists between console sessions in the same database), the operator is its only
member, and the configured LLM answers. Commands: ``/show`` (the channel's memory),
``/refresh`` (wipe it), ``/quit``.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TextIO

from bot.config import Settings
from bot.db.engine import Database
from bot.db.migrate import upgrade
from bot.llm.client import make_client
from bot.memory.model import RawMessage, ScopeKey
from bot.memory.prompt import relative_time, render_memory_text
from bot.memory.service import MemoryService
from bot.memory.storage import MemoryUnavailable
from bot.turn import TurnRequest, TurnRunner

CONSOLE_GUILD_ID = 1
CONSOLE_CHANNEL_ID = 2
CONSOLE_USER_ID = 3
CONSOLE_BOT_ID = 4
HELP = (
    "Type a message to chat. /show shows the memory, /refresh wipes it, /quit leaves "
    "(a line starting with / is a command)."
)


async def console(
    settings: Settings,
    *,
    read_line: Callable[[], str] = input,
    out: TextIO = sys.stdout,
    database: Database | None = None,
) -> int:
    """Run the console until ``/quit`` or end of input; return the exit code. A
    ``database`` handed in is already started and migrated (the CLI does that, so a
    database problem is one line, as for ``kioku run``); it is closed at the end."""
    if database is None:
        database = Database(settings)
        await database.start()
        await upgrade(database.engine)
    client = make_client(settings)
    memory = MemoryService(database.sessions, settings)
    runner = TurnRunner(memory, client, settings)
    ids = itertools.count(int(datetime.now(UTC).timestamp() * 1000) << 22)
    memory.windows.prime(CONSOLE_CHANNEL_ID, [])

    def say(text: str) -> None:
        print(text, file=out, flush=True)

    say(f"Kioku console — model {settings.model} via {settings.provider}. {HELP}")
    try:
        while True:
            try:
                line = (await asyncio.to_thread(read_line)).strip()
            except EOFError:
                break
            if not line:
                continue
            command = line.split()[0].lower() if line.startswith("/") else None
            if command in ("/quit", "/exit"):
                break
            if command == "/help":
                say(HELP)
            elif command == "/show":
                say(await _show(memory))
            elif command == "/refresh":
                try:
                    receipt = await memory.clear_channel(
                        CONSOLE_CHANNEL_ID,
                        guild_id=CONSOLE_GUILD_ID,
                        actor_user_id=CONSOLE_USER_ID,
                    )
                except MemoryUnavailable as exc:
                    say(f"Nothing was refreshed: {exc}.")
                else:
                    say(f"Memory refreshed ({receipt.rows} rows removed).")
            elif command is not None:
                say(f"Unknown command {command}. {HELP}")
            else:
                await _turn(memory, runner, line, ids, say)
    finally:
        await runner.drain()  # a background summary finishes before the database goes
        await client.close()
        await database.close()
    return 0


async def _turn(
    memory: MemoryService,
    runner: TurnRunner,
    line: str,
    ids: Iterator[int],
    say: Callable[[str], None],
) -> None:
    now = datetime.now(UTC)
    message_id = next(ids)
    memory.observe_message(
        CONSOLE_CHANNEL_ID, RawMessage(message_id, CONSOLE_USER_ID, "you", line, now)
    )
    reply = await runner.run(
        TurnRequest(
            channel_id=CONSOLE_CHANNEL_ID,
            user_id=CONSOLE_USER_ID,
            message_id=message_id,
            content=line,
            bot_user_id=CONSOLE_BOT_ID,
            guild_id=CONSOLE_GUILD_ID,
            user_name="you",
            channel_name="#console",
            guild_name="console",
        )
    )
    if not reply.failed:  # an error notice is not part of the conversation
        memory.observe_message(
            CONSOLE_CHANNEL_ID,
            RawMessage(next(ids), CONSOLE_BOT_ID, "Kioku", reply.text, now, is_bot=True),
        )
    say(f"kioku> {reply.text}")
    for result in reply.stm_results:
        say(f"  (memory: {result})")


async def _show(memory: MemoryService) -> str:
    entry = await memory.entry(ScopeKey.server(CONSOLE_GUILD_ID, CONSOLE_CHANNEL_ID))
    if not entry.has_content:
        return "Nothing remembered in this channel yet."
    config = await memory.guild_config(CONSOLE_GUILD_ID)
    when = relative_time(entry.updated_at, memory.clock.now())
    text = render_memory_text(entry, config, with_sizes=True)
    return f"Memory (updated {when}, version {entry.version}):\n{text}"
