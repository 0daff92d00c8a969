"""``kioku doctor``'s Discord rows (asked of a local fake of Discord's API), its progress
line while a check waits, and the log records it holds until the table is done."""

from __future__ import annotations

import asyncio
import io
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from bot.db.engine import Database
from bot.ops.table import Table
from tests.helpers.fake_discord_api import MESSAGE_CONTENT_LIMITED, FakeDiscordApi
from tests.helpers.fake_llm import ScriptedLLM
from tests.helpers.kioku_cli import (
    DOCTOR_ROWS,
    DoctorHere,
    doctor_process,
    printed_to_the_end,
    printed_until,
)

PORTAL = "https://discord.com/developers/applications"


# A token in; doctor's exit code, token row and Message Content row out.
DiscordRows = Callable[[str], Awaitable[tuple[int, tuple[str, str], tuple[str, str]]]]


@pytest.fixture
def discord_rows(
    doctor_here: DoctorHere, migrated_database: Database, tmp_path: Path
) -> DiscordRows:
    """Doctor's exit code, token row and Message Content row, the other checks passing."""

    async def rows_for(token: str) -> tuple[int, tuple[str, str], tuple[str, str]]:
        code, rows = await doctor_here(tmp_path, discord_token=token)
        return code, rows["discord token"], rows["message content"]

    return rows_for


async def test_a_valid_token_with_the_intent_passes_and_names_the_bot(
    discord_api: FakeDiscordApi, discord_rows: DiscordRows
) -> None:
    discord_api.user = {"id": "42", "username": "Kioku", "discriminator": "1234"}
    result = await discord_rows("dummy-token")
    assert result == (0, ("ok", "valid: Kioku#1234 (id 42)"), ("ok", "enabled"))
    assert [path for path, _ in discord_api.requests] == [
        "/api/v10/users/@me",
        "/api/v10/applications/@me",
    ]
    assert {auth for _, auth in discord_api.requests} == {"Bot dummy-token"}


async def test_a_token_discord_rejects_fails_and_skips_the_intent(
    discord_api: FakeDiscordApi, discord_rows: DiscordRows
) -> None:
    result = await discord_rows("a-reset-token")
    assert result == (
        1,
        (
            "FAIL",
            f"Discord rejected DISCORD_TOKEN (HTTP 401): copy the bot token again from {PORTAL}",
        ),
        ("skip", "skipped: the token was refused"),
    )
    assert [path for path, _ in discord_api.requests] == ["/api/v10/users/@me"]


async def test_the_message_content_intent_left_off_fails_with_where_to_turn_it_on(
    discord_api: FakeDiscordApi, discord_rows: DiscordRows
) -> None:
    discord_api.flags = (1 << 12) | (1 << 14)  # presence and members, not message content
    code, token_row, intent_row = await discord_rows("dummy-token")
    assert (code, token_row[0]) == (1, "ok")
    assert intent_row == (
        "FAIL",
        "not enabled: turn on Message Content Intent in the Developer Portal → your "
        "application → Bot (without it kioku run cannot connect)",
    )


async def test_the_limited_message_content_intent_of_a_small_bot_passes(
    discord_api: FakeDiscordApi, discord_rows: DiscordRows
) -> None:
    discord_api.flags = MESSAGE_CONTENT_LIMITED
    result = await discord_rows("dummy-token")
    assert result[0] == 0
    assert result[2] == ("ok", "enabled (until the bot is in 100 servers)")


async def test_discord_out_of_reach_fails_the_token_row_with_the_cause(
    discord_api: FakeDiscordApi, discord_rows: DiscordRows
) -> None:
    discord_api.close()  # nothing listens there any more
    code, token_row, intent_row = await discord_rows("dummy-token")
    assert (code, token_row[0]) == (1, "FAIL")
    assert token_row[1].startswith("cannot ask Discord: ClientConnectorError: "), token_row
    assert intent_row == ("skip", "skipped: Discord could not be asked")


class _Terminal(io.StringIO):
    """A stream that says it is a terminal and tells when something is written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.written = asyncio.Event()

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.written.set()
        return super().write(text)


async def test_on_a_terminal_the_progress_line_is_rewritten_then_cleared_for_the_row() -> None:
    out, progress = io.StringIO(), _Terminal()
    table = Table(["llm tool call"], str, out=out, progress=progress)
    answer = asyncio.Event()

    async def slow_check() -> str:
        await answer.wait()
        return "answered"

    waiting = asyncio.create_task(table.waiting("llm tool call", "the model", slow_check()))
    async with asyncio.timeout(30):  # a hang guard, not a measure
        await progress.written.wait()
    assert progress.getvalue() == "\r\x1b[Kllm tool call: waiting for the model (1 s)…"
    assert out.getvalue().count("\n") == 2, "only the header: no row while it waits"
    answer.set()
    assert await waiting == "answered"
    assert progress.getvalue().endswith("\r\x1b[K"), "the line is cleared for the row"


async def test_doctor_says_it_waits_for_the_model_and_keeps_logs_out_of_the_table(
    discord_api: FakeDiscordApi,
    llm: ScriptedLLM,
    pg_url: URL,
    migrated_database: Database,
    tmp_path: Path,
) -> None:
    # A silent minute while the tool call waited; "database ready" landed mid-table.
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    answer = llm.hold()
    # With the fake Discord API (doctor_settings); one stream, as on a terminal.
    async with doctor_process(llm, pg_url, tmp_path, stderr=subprocess.STDOUT) as process:
        shown = await printed_until(process, lambda line: "waiting for the model" in line)
        answer.set()
        rest, returncode = await printed_to_the_end(process)
    lines = "".join(shown).splitlines() + rest.splitlines()
    assert returncode == 0, "\n".join(lines)
    assert "llm tool call: waiting for the model (1 s)…" in lines
    # The table is whole: header, rule, its rows and the progress line, then the logs.
    table_end = max(i for i, line in enumerate(lines) if line.startswith("llm tool call  "))
    inside = [
        line
        for line in lines[: table_end + 1]
        if "waiting for" not in line
        and not line.startswith("---")  # the rule under the header
        and line.split("  ")[0].strip() not in ROW_NAMES
    ]
    assert inside == [], inside
    assert any("database ready" in line for line in lines[table_end + 1 :]), lines


ROW_NAMES = {"check", *DOCTOR_ROWS}
