"""Running ``kioku`` as tests do: in a subprocess, through main() in this process without
Discord, and doctor's table read back."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import IO

import discord
import pytest
from sqlalchemy.engine import URL

from bot.ops.discord_probe import DISCORD_API_VARIABLE
from tests.helpers.fake_llm import DEFAULT_MODEL_ID, ScriptedLLM
from tests.helpers.processes import ROOT, kioku_env


def fake_discord_api_env() -> dict[str, str]:
    """Where the ``discord_api`` fixture's fake listens, for a ``kioku`` subprocess (whose
    environment is cleaned of ``KIOKU_*``)."""
    url = os.environ.get(DISCORD_API_VARIABLE)
    return {DISCORD_API_VARIABLE: url} if url else {}


def kioku(
    *args: str, data_dir: Path, cwd: Path = ROOT, **env: str
) -> subprocess.CompletedProcess[str]:
    # `run` and `console` refuse OpenAI's endpoint without a key: a test names none only
    # to see that refusal (OPENAI_API_KEY="").
    env.setdefault("OPENAI_API_KEY", "test-key")
    env = {**fake_discord_api_env(), **env}
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        cwd=cwd,
        env=kioku_env(data_dir, **env),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,  # `console` must not wait on the terminal running the tests
    )


def doctor_rows(table: str) -> dict[str, tuple[str, str]]:
    """``kioku doctor``'s table as check name → (status, detail)."""
    rows: dict[str, tuple[str, str]] = {}
    for line in table.splitlines()[2:]:
        name, status, detail = re.split(r" {2,}", line.strip(), maxsplit=2)
        rows[name] = (status, detail)
    return rows


# The doctor_here fixture: a data folder and settings of the test's own in, doctor's exit
# code and its rows out.
DoctorHere = Callable[..., Awaitable[tuple[int, dict[str, tuple[str, str]]]]]

# The run_here fixture: the environment in, `kioku run`'s exit code and stderr out.
RunHere = Callable[..., tuple[int, str]]

# Doctor's rows, in the order it prints them.
DOCTOR_ROWS = (
    "config",
    "discord token",
    "message content",
    "database",
    "migrations",
    "clock",
    "spool",
    "backup",
    "persona",
    "llm endpoint",
    "llm context",
    "llm tool call",
    "embeddings",
)


def row_of(result: subprocess.CompletedProcess[str], name: str, *, code: int) -> tuple[str, str]:
    """The (status, detail) of ``kioku doctor``'s ``name`` row, once it exited with ``code``."""
    assert result.returncode == code, result.stdout + result.stderr
    return doctor_rows(result.stdout)[name]


def doctor_settings(llm: ScriptedLLM, pg_url: URL, **env: str) -> dict[str, str]:
    """The variables of ``kioku doctor`` on the test database and the scripted LLM."""
    return {
        "DATABASE_URL": pg_url.render_as_string(hide_password=False),
        "DISCORD_TOKEN": "dummy-token",
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": "test-key",
        "KIOKU_MODEL": DEFAULT_MODEL_ID,
        **fake_discord_api_env(),
        **env,  # a test's own values win
    }


async def doctor_against(
    llm: ScriptedLLM, pg_url: URL, data_dir: Path, cwd: Path = ROOT, **env: str
) -> subprocess.CompletedProcess[str]:
    """``kioku doctor`` on the migrated test database and the scripted LLM. In a thread:
    the scripted server answers on this test's event loop, which must keep running."""
    return await asyncio.to_thread(
        kioku, "doctor", data_dir=data_dir, cwd=cwd, **doctor_settings(llm, pg_url, **env)
    )


CONFIG_FILE_READ = f"config file {ROOT / 'config' / 'kioku.toml'}"


NOT_UTF8_PERSONA = "Tu es {bot_name}, l'assistant du café.\n".encode("latin-1")


def run_without_discord(
    monkeypatch: pytest.MonkeyPatch, pg_url: URL, tmp_path: Path, no_key: bool = False, **env: str
) -> int:
    """``kioku run`` through main(), Discord accepting the token (login runs setup_hook)."""
    import bot.cli.main as cli

    async def login(self: discord.Client, token: str) -> None:
        await self.setup_hook()  # what discord.py does once Discord accepted the token

    async def connect(self: discord.Client, *, reconnect: bool = True) -> None:
        return None

    monkeypatch.setattr(discord.Client, "login", login)
    monkeypatch.setattr(discord.Client, "connect", connect)
    cli_environment(
        monkeypatch,
        tmp_path,
        DISCORD_TOKEN="dummy-token",
        DATABASE_URL=pg_url.render_as_string(hide_password=False),
        **env,
    )
    if no_key:
        monkeypatch.delenv("OPENAI_API_KEY")
    return cli.main(["run"])  # an uncaught exception here is the traceback wall


def cli_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **env: str) -> None:
    """This process's environment for an in-process ``main()``: no ``KIOKU_*``, database
    or token of the developer's, no ``.env``; then ``env``."""
    for name in list(os.environ):
        if name.startswith("KIOKU_") or name in ("DATABASE_URL", "DISCORD_TOKEN"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("KIOKU_ENV_FILE", str(tmp_path / "absent.env"))
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")  # `run` refuses OpenAI's without one
    for name, value in env.items():
        monkeypatch.setenv(name, value)


@contextlib.asynccontextmanager
async def doctor_process(
    llm: ScriptedLLM, pg_url: URL, data_dir: Path, *, stderr: int | IO[bytes]
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``kioku doctor`` in a subprocess on the test database and the scripted LLM, its
    output a pipe read as it prints; killed if it still runs at the end."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "doctor",
        cwd=ROOT,
        env=kioku_env(data_dir, **doctor_settings(llm, pg_url)),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=stderr,
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def printed_until(
    process: asyncio.subprocess.Process, last: Callable[[str], bool]
) -> list[str]:
    """The lines ``process`` prints, up to the first that is ``last``."""
    assert process.stdout is not None
    shown: list[str] = []
    async with asyncio.timeout(60):  # a hang guard, not a measure
        while not shown or not last(shown[-1]):
            line = (await process.stdout.readline()).decode()
            assert line, f"doctor ended early: {shown}"
            shown.append(line)
    return shown


async def printed_to_the_end(process: asyncio.subprocess.Process) -> tuple[str, int]:
    """What ``process`` prints from here on, and its exit code."""
    assert process.stdout is not None
    async with asyncio.timeout(60):
        rest = (await process.stdout.read()).decode()
        return rest, await process.wait()
