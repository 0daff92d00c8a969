"""``kioku console``: chat with the bot in a terminal, through the same turn pipeline."""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from bot.config import Settings
from bot.console.terminal import Terminal, interactive, thinking
from bot.conversation import TurnReply, TurnRequest, TurnRunner
from bot.db import Database, upgrade
from bot.memory import MemoryService, relative_time, render_memory_text
from bot.services import start_services
from bot.vocabulary import MemoryUnavailable, RawMessage, ScopeKey

# The terminal is one guild channel with fixed ids, so its memory outlives the session.
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
    read_line: Callable[[], str] | None = None,
    out: TextIO = sys.stdout,
    database: Database | None = None,
    log_file: Path | None = None,
) -> int:
    """Chat until ``/quit`` or the end of ``read_line``'s input; return the exit code.

    Without ``read_line`` it reads standard input: with a prompt, line editing and
    history when that is a terminal. ``log_file``, if given, is where the logs go (said
    at the start)."""
    # A database handed in is started and migrated (by the command line, which reports
    # its failures in one line); either way the console closes it.
    if database is None:
        database = Database(settings)
        try:
            await database.start()
            await upgrade(database.engine)
        except BaseException:
            await database.close()
            raise
    # Alone in its terminal: no spool, notices, housekeeping loops or metrics endpoint.
    services = await start_services(
        settings,
        database,
        owns_database=True,
        spool=False,
        listen=False,
        janitor=False,
        serve_metrics=False,
    )
    terminal = Terminal(settings.data_dir) if read_line is None and interactive() else None
    if read_line is None:
        read_line = terminal.read_line if terminal is not None else stdin_line_reader()
    chat = _Chat(services.memory, services.turns, out, thinking_shown=terminal is not None)
    try:
        await chat.run(settings, read_line, log_file)
    finally:
        try:
            await services.close(grace=None)  # a background summary finishes first
        finally:
            if terminal is not None:
                terminal.close()
    return 0


class _Chat:
    """The conversation loop: lines in, commands or turns, answers out."""

    def __init__(
        self, memory: MemoryService, runner: TurnRunner, out: TextIO, *, thinking_shown: bool
    ) -> None:
        self._memory = memory
        self._runner = runner
        self._out = out
        self._thinking_shown = thinking_shown
        self._ids = itertools.count(int(datetime.now(UTC).timestamp() * 1000) << 22)

    def say(self, text: str) -> None:
        print(text, file=self._out, flush=True)

    async def run(
        self, settings: Settings, read_line: Callable[[], str], log_file: Path | None
    ) -> None:
        memory = self._memory
        memory.windows.prime(CONSOLE_CHANNEL_ID, [])
        say = self.say
        say(f"Kioku console — model {settings.model} via {settings.provider}. {HELP}")
        if log_file is not None:
            say(f"(logs go to {log_file})")
        reader = LineReader(read_line)
        while True:
            typed = await reader.next_line()
            if typed is None:
                break
            line = typed.strip()
            if not line:
                continue
            command = line.split()[0].lower() if line.startswith("/") else None
            if command in ("/quit", "/exit"):
                break
            if command == "/help":
                say(HELP)
            elif command == "/show":
                try:
                    say(await _show(memory))
                except MemoryUnavailable as exc:  # the database went away: say so, go on
                    say(f"Nothing to show: {exc}.")
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
                with thinking(self._out, self._thinking_shown):
                    reply = await _turn(memory, self._runner, line, self._ids)
                say(f"kioku> {reply.text}")
                for result in reply.stm_results:
                    say(f"  (memory: {result})")
                if reply.upkeep is not None:
                    with thinking(self._out, self._thinking_shown):
                        await reply.upkeep()


def stdin_line_reader() -> Callable[[], str]:
    """Lines of standard input, read from its file descriptor rather than ``sys.stdin``."""
    # A daemon thread blocked in sys.stdin.readline() holds its buffer's lock, and the
    # interpreter aborts at exit when it cannot take it ("could not acquire lock for <stdin>").
    try:
        fd = os.dup(sys.stdin.fileno())
    except (AttributeError, OSError, ValueError):  # no real standard input: input() says so
        return input
    # Never closed: the thread may still be blocked reading it when the console ends.
    raw = open(fd, "rb", buffering=0)  # noqa: SIM115
    encoding = sys.stdin.encoding or "utf-8"

    def read_line() -> str:
        line = raw.readline()
        if not line:
            raise EOFError
        return line.decode(encoding, errors="replace").rstrip("\r\n")

    return read_line


class LineReader:
    """Lines of a blocking ``read_line``, one per :meth:`next_line`, read on a daemon thread."""

    def __init__(self, read_line: Callable[[], str]) -> None:
        self._read_line = read_line
        self._loop = asyncio.get_running_loop()
        self._lines: asyncio.Queue[tuple[str | None, BaseException | None]] = asyncio.Queue()
        self._wanted = threading.Semaphore(0)
        self._thread: threading.Thread | None = None

    async def next_line(self) -> str | None:
        """The next line, or ``None`` at the end of input."""
        if self._thread is None:
            # Not asyncio.to_thread: its worker is waited for at exit, so Ctrl-C at the
            # prompt would end the console only once Enter is pressed.
            self._thread = threading.Thread(target=self._pump, name="console-input", daemon=True)
            self._thread.start()
        # One line read per line wanted: nothing is read ahead of the prompt it answers.
        self._wanted.release()
        line, error = await self._lines.get()
        if error is not None:
            raise error
        return line

    def _pump(self) -> None:
        while True:
            self._wanted.acquire()
            line: str | None = None
            error: BaseException | None = None
            try:
                line = self._read_line()
            except EOFError:
                pass
            except Exception as exc:
                error = exc
            try:
                self._loop.call_soon_threadsafe(self._lines.put_nowait, (line, error))
            except RuntimeError:  # the loop is closed: the console has ended
                return
            if line is None:
                return


async def _turn(
    memory: MemoryService, runner: TurnRunner, line: str, ids: Iterator[int]
) -> TurnReply:
    now = datetime.now(UTC)
    message_id = next(ids)
    memory.observe_message(
        CONSOLE_CHANNEL_ID, RawMessage(message_id, CONSOLE_USER_ID, "you", line, now)
    )
    reply = await runner.run(
        TurnRequest(
            channel_id=CONSOLE_CHANNEL_ID,
            user_id=CONSOLE_USER_ID,
            source_message_id=message_id,
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
    return reply


async def _show(memory: MemoryService) -> str:
    entry = await memory.entry(ScopeKey.server(CONSOLE_GUILD_ID, CONSOLE_CHANNEL_ID))
    if not entry.has_content:
        return "Nothing remembered in this channel yet."
    config = await memory.guild_config(CONSOLE_GUILD_ID)
    when = relative_time(entry.updated_at, memory.clock.now())
    text = render_memory_text(entry, config, with_sizes=True)
    return f"Memory (updated {when}, version {entry.version}):\n{text}"
