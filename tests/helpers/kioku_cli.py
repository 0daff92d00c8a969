"""Running ``kioku`` as tests do: in a subprocess, through main() in this process without
Discord, and doctor's table read back."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

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
