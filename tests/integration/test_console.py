"""``kioku console``: the same turn pipeline in a terminal, against the scripted LLM."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import subprocess
import sys
import termios
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL

from bot.console.session import console
from bot.console.terminal import HISTORY_FILE, LOG_FILE, PROMPT, THINKING
from bot.conversation.tools.longterm import REMEMBER_TOOL_NAME
from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.conversation.turn import DEFAULT_PERSONA
from bot.db.engine import Database
from bot.db.migrate import upgrade
from tests.helpers.database import make_test_settings, scratch_database
from tests.helpers.fake_llm import ScriptedLLM
from tests.helpers.processes import ROOT, kioku_env


def lines(*typed: str) -> Callable[[], str]:
    feed: Iterator[str] = iter(typed)

    def read() -> str:
        try:
            return next(feed)
        except StopIteration:
            raise EOFError from None

    return read


async def console_typing(
    llm: ScriptedLLM, pg_url: URL, data_dir: Path, *typed: str
) -> tuple[int, str]:
    """The console in this process on the test database and the scripted LLM, the operator
    typing ``typed``: its exit code and what it showed."""
    settings = make_test_settings(pg_url, data_dir, openai_base_url=llm.base_url, model="m")
    out = io.StringIO()
    code = await console(settings, read_line=lines(*typed), out=out)
    return code, out.getvalue()


async def test_console_chats_remembers_shows_and_refreshes(
    db: Database, llm: ScriptedLLM, pg_url: URL, tmp_path: Path
) -> None:
    llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": "Operator likes green tea."})])
    llm.reply_text("Noted, green tea it is.")
    llm.reply_text("You like green tea.")
    code, text = await console_typing(
        llm, pg_url, tmp_path, "I like green tea", "/show", "what do I like?", "/refresh", "/show"
    )
    assert code == 0
    first_turn, after_show = text.split("Memory (updated", 1)
    assert "kioku> Noted, green tea it is." in first_turn
    assert "(memory: saved)" in first_turn
    assert after_show.splitlines()[1:3] == ["Summary (25/1500 chars):", "Operator likes green tea."]
    # The next turn's prompt carries the memory.
    assert any("Operator likes green tea." in str(m.get("content")) for m in llm.messages(2))
    assert "kioku> You like green tea." in after_show
    assert "Memory refreshed (2 rows removed)." in after_show
    assert text.rstrip().endswith("Nothing remembered in this channel yet.")


def prompt_text(llm: ScriptedLLM, i: int) -> str:
    return "\n".join(str(m.get("content") or "") for m in llm.messages(i))


async def test_console_keeps_a_fact_in_long_term_memory_and_recalls_it(
    db: Database, llm: ScriptedLLM, pg_url: URL, tmp_path: Path
) -> None:
    llm.reply_tool_calls([(REMEMBER_TOOL_NAME, {"fact": "My cat is called Miso"})])
    llm.reply_text("I'll remember that.")
    llm.reply_text("Miso.")
    code, shown = await console_typing(
        llm, pg_url, tmp_path, "remember that my cat is called Miso", "what is my cat called?"
    )
    assert code == 0, shown
    saved = next(m for m in llm.messages(1) if m["role"] == "tool")
    assert saved["content"].startswith("saved"), saved
    # The next turn's prompt recalls the fact.
    assert "My cat is called Miso" in prompt_text(llm, 2)
    assert "kioku> Miso." in shown


async def test_the_second_console_message_reaches_the_model(
    db: Database, llm: ScriptedLLM, pg_url: URL, tmp_path: Path
) -> None:
    """Message ids come from one counter stepping by 1, and the bot's reply takes
    ``message_id + 1``: the next typed line gets the reply's id and the raw window drops
    it as a duplicate delivery."""
    llm.reply_text("Hello!").reply_text("Blue.")
    code, _ = await console_typing(
        llm, pg_url, tmp_path, "hello there", "my favourite colour is BLUE"
    )
    assert code == 0
    assert "my favourite colour is BLUE" in prompt_text(llm, 1)


async def test_an_unknown_console_command_is_not_sent_to_the_model(
    db: Database, llm: ScriptedLLM, pg_url: URL, tmp_path: Path
) -> None:
    code, shown = await console_typing(llm, pg_url, tmp_path, "/refrsh", "/SHOW")
    assert code == 0
    assert llm.requests == [], shown


async def test_console_reads_no_line_ahead_of_the_one_it_answers(
    db: Database, llm: ScriptedLLM, pg_url: URL, tmp_path: Path
) -> None:
    # Each line is read once the previous one was answered (stdin is read on a thread).
    settings = make_test_settings(pg_url, tmp_path, openai_base_url=llm.base_url, model="m")
    llm.reply_text("One.").reply_text("Two.")
    out = io.StringIO()
    read_after: list[str] = []
    feed = iter(["first", "second"])

    def read() -> str:
        read_after.append(out.getvalue().splitlines()[-1])
        try:
            return next(feed)
        except StopIteration:
            raise EOFError from None

    assert await console(settings, read_line=read, out=out) == 0
    assert read_after[1:] == ["kioku> One.", "kioku> Two."]


async def test_a_persona_file_that_turned_not_utf8_falls_back_to_the_built_in_one(
    db: Database, llm: ScriptedLLM, pg_url: URL, tmp_path: Path
) -> None:
    # `kioku console` refuses such a file up front; one changed since is not a crash.
    persona = tmp_path / "persona.md"
    persona.write_bytes("Tu es l'assistant du café.\n".encode("latin-1"))
    settings = make_test_settings(
        pg_url, tmp_path, openai_base_url=llm.base_url, model="m", persona_file=persona
    )
    llm.reply_text("Hello!")
    out = io.StringIO()
    assert await console(settings, read_line=lines("hello"), out=out) == 0
    assert "kioku> Hello!" in out.getvalue()
    assert DEFAULT_PERSONA.split("{")[0] in prompt_text(llm, 0)


async def test_show_and_refresh_with_the_database_gone_say_so_and_go_on(
    migrated_database: Database, llm: ScriptedLLM, pg_url: URL, tmp_path: Path
) -> None:
    gone = await scratch_database(pg_url, "kioku_console_gone")
    settings = make_test_settings(
        gone,
        tmp_path,
        openai_base_url=llm.base_url,
        model="m",
    )
    database = Database(settings)
    await database.start()
    await upgrade(database.engine)
    # The database goes away once the console is running (FORCE ends its connections).
    async with migrated_database.engine.connect() as connection:
        await connection.execution_options(isolation_level="AUTOCOMMIT")
        await connection.execute(text(f"DROP DATABASE {gone.database} WITH (FORCE)"))
    out = io.StringIO()
    code = await console(
        settings, read_line=lines("/show", "/refresh", "/quit"), out=out, database=database
    )
    # /show let MemoryUnavailable out of console(): `kioku console` ended in a traceback.
    assert code == 0
    assert out.getvalue().splitlines()[1:] == [
        "Nothing to show: memory storage is unavailable right now.",
        "Nothing was refreshed: the database is unavailable; try again shortly.",
    ]
    assert llm.requests == []


def test_ctrl_c_at_the_console_prompt_leaves_the_console(
    pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # asyncio.to_thread(input) kept the process until Enter: its worker is waited for.
    primary, secondary = os.openpty()
    env = kioku_env(
        tmp_path,
        DATABASE_URL=pg_url.render_as_string(hide_password=False),
        OPENAI_API_KEY="test-key",
        PYTHONUNBUFFERED="1",
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "bot", "console"],
        cwd=ROOT,
        env=env,
        stdin=secondary,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith("Kioku console")  # at the prompt
        process.send_signal(signal.SIGINT)  # the operator presses Ctrl-C
        try:
            _, err = process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail("Ctrl-C at the prompt did not end kioku console (it waits for Enter)")
        assert process.returncode == 0, err
        assert "Traceback" not in err and "Fatal Python error" not in err, err
    finally:
        os.write(primary, b"\n")
        process.kill()
        process.wait(10)
        os.close(primary)
        os.close(secondary)


class _Pty:
    """The operator's side of a pseudo-terminal: what the console wrote, and typing."""

    def __init__(self, primary: int) -> None:
        self._primary = primary
        self.shown = ""
        self._changed = asyncio.Event()
        asyncio.get_running_loop().add_reader(primary, self._read)

    def _read(self) -> None:
        try:
            data = os.read(self._primary, 4096)
        except OSError:  # the console ended and closed its side
            data = b""
        if not data:
            asyncio.get_running_loop().remove_reader(self._primary)
        self.shown += data.decode(errors="replace")
        self._changed.set()

    async def wait_for(self, text: str, after: int = 0) -> int:
        """Where ``text`` appears in the output from ``after`` on (waits for it)."""
        async with asyncio.timeout(60):  # a hang guard, not a measure
            while (found := self.shown.find(text, after)) < 0:
                self._changed.clear()
                await self._changed.wait()
        return found + len(text)

    def type(self, keys: bytes) -> None:
        os.write(self._primary, keys)

    def close(self) -> None:
        asyncio.get_running_loop().remove_reader(self._primary)


async def console_on(
    terminal: int, llm: ScriptedLLM, pg_url: URL, data_dir: Path, **env: str
) -> asyncio.subprocess.Process:
    """``kioku console`` on a terminal (a pty's secondary end), on the test database and
    the scripted LLM."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "console",
        cwd=ROOT,
        env=kioku_env(
            data_dir,
            DATABASE_URL=pg_url.render_as_string(hide_password=False),
            OPENAI_BASE_URL=llm.base_url,
            OPENAI_API_KEY="test-key",
            TERM="xterm",
            **env,
        ),
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
    )


UP = b"\x1b[A"


async def test_console_on_a_terminal_has_a_prompt_history_a_thinking_line_and_no_logs(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # No prompt, Up then Enter sent "\x1b[A" to the model, no sign it was thinking, and
    # log lines landed in the conversation.
    llm.reply_text("Hello from Kioku.")
    llm.reply_text("Hello again.")
    answer = llm.hold()
    primary, secondary = os.openpty()
    process = await console_on(secondary, llm, pg_url, tmp_path, KIOKU_MODEL="m")
    os.close(secondary)
    pty = _Pty(primary)
    try:
        seen = await pty.wait_for(PROMPT)
        pty.type(b"hello there\r")
        seen = await pty.wait_for(THINKING, seen)
        await llm.wait_for_requests(1)
        answer.set()
        seen = await pty.wait_for("kioku> Hello from Kioku.", seen)
        seen = await pty.wait_for(PROMPT, seen)
        pty.type(UP + b"\r")  # the line before, recalled
        seen = await pty.wait_for("kioku> Hello again.", seen)
        await pty.wait_for(PROMPT, seen)
        pty.type(b"/quit\r")
        async with asyncio.timeout(60):
            returncode = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        pty.close()
        os.close(primary)
    assert returncode == 0, pty.shown
    typed = [m["content"] for m in llm.messages(1) if m.get("role") == "user"]
    assert typed[-1].endswith("hello there") and "\x1b" not in typed[-1], typed
    assert (tmp_path / HISTORY_FILE).read_text().splitlines()[-2:] == ["hello there", "/quit"]
    log = (tmp_path / LOG_FILE).read_text()
    assert "database ready" in log
    assert "database ready" not in pty.shown, "a log line reached the conversation"
    assert f"(logs go to {tmp_path / LOG_FILE})" in pty.shown


async def test_ctrl_c_at_the_terminal_prompt_leaves_and_gives_the_terminal_back(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # readline holds the terminal in its own mode (no echo, no line buffering) while it
    # waits at the prompt: a console ended there must put the operator's mode back.
    primary, secondary = os.openpty()
    before = termios.tcgetattr(secondary)
    process = await console_on(secondary, llm, pg_url, tmp_path)
    pty = _Pty(primary)
    try:
        await pty.wait_for(PROMPT)
        during = termios.tcgetattr(secondary)
        process.send_signal(signal.SIGINT)  # the operator presses Ctrl-C
        async with asyncio.timeout(60):
            returncode = await process.wait()
        after = termios.tcgetattr(secondary)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        pty.close()
        os.close(primary)
        os.close(secondary)
    assert returncode == 0, pty.shown
    assert "Traceback" not in pty.shown, pty.shown
    local_modes = 3  # termios' lflag: ECHO and ICANON among them
    assert during[local_modes] != before[local_modes], "readline did not take the terminal"
    assert after[local_modes] == before[local_modes]
    assert llm.requests == []
