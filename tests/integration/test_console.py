"""``kioku console``: the same turn pipeline in a terminal, against the scripted LLM."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL

from bot.console import console
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


async def test_console_chats_remembers_shows_and_refreshes(
    db: Database, llm: ScriptedLLM, pg_url: URL, tmp_path: Path
) -> None:
    settings = make_test_settings(pg_url, tmp_path, openai_base_url=llm.base_url, model="m")
    llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": "Operator likes green tea."})])
    llm.reply_text("Noted, green tea it is.")
    llm.reply_text("You like green tea.")
    out = io.StringIO()
    code = await console(
        settings,
        read_line=lines("I like green tea", "/show", "what do I like?", "/refresh", "/show"),
        out=out,
    )
    text = out.getvalue()
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
    settings = make_test_settings(pg_url, tmp_path, openai_base_url=llm.base_url, model="m")
    llm.reply_tool_calls([(REMEMBER_TOOL_NAME, {"fact": "My cat is called Miso"})])
    llm.reply_text("I'll remember that.")
    llm.reply_text("Miso.")
    out = io.StringIO()
    code = await console(
        settings,
        read_line=lines("remember that my cat is called Miso", "what is my cat called?"),
        out=out,
    )
    assert code == 0, out.getvalue()
    saved = next(m for m in llm.messages(1) if m["role"] == "tool")
    assert saved["content"].startswith("saved"), saved
    # The next turn's prompt recalls the fact.
    assert "My cat is called Miso" in prompt_text(llm, 2)
    assert "kioku> Miso." in out.getvalue()


async def test_the_second_console_message_reaches_the_model(
    db: Database, llm: ScriptedLLM, pg_url: URL, tmp_path: Path
) -> None:
    """Message ids come from one counter stepping by 1, and the bot's reply takes
    ``message_id + 1``: the next typed line gets the reply's id and the raw window drops
    it as a duplicate delivery."""
    settings = make_test_settings(pg_url, tmp_path, openai_base_url=llm.base_url, model="m")
    llm.reply_text("Hello!").reply_text("Blue.")
    out = io.StringIO()
    code = await console(
        settings, read_line=lines("hello there", "my favourite colour is BLUE"), out=out
    )
    assert code == 0
    assert "my favourite colour is BLUE" in prompt_text(llm, 1)


async def test_an_unknown_console_command_is_not_sent_to_the_model(
    db: Database, llm: ScriptedLLM, pg_url: URL, tmp_path: Path
) -> None:
    settings = make_test_settings(pg_url, tmp_path, openai_base_url=llm.base_url, model="m")
    out = io.StringIO()
    code = await console(settings, read_line=lines("/refrsh", "/SHOW"), out=out)
    assert code == 0
    assert llm.requests == [], out.getvalue()


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
