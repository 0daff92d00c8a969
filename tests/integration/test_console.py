"""``kioku console``: the same turn pipeline in a terminal, against the scripted LLM."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path

from sqlalchemy.engine import URL

from bot.console import console
from bot.db.engine import Database
from bot.llm.tools.stm import STM_TOOL_NAME
from tests.helpers.database import make_test_settings
from tests.helpers.fake_llm import ScriptedLLM


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
