"""Cheap structural checks over the whole package."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "bot"
CORE = ["memory", "db", "llm"]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("layer", CORE)
def test_core_layers_import_nothing_from_discord(layer: str) -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            m for m in imported_modules(path) if m.startswith("discord")
        )
        for path in (ROOT / layer).rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_memory_core_does_not_reach_into_cogs_or_the_app() -> None:
    for path in (ROOT / "memory").rglob("*.py"):
        modules = imported_modules(path)
        assert not any(
            m.startswith(("bot.cogs", "bot.app", "bot.conversation.turn")) for m in modules
        ), path


async def test_no_two_commands_share_a_name(tmp_path: Path) -> None:
    from discord import app_commands

    from bot.app import EXTENSIONS, build_bot
    from bot.config import load_settings

    bot = build_bot(load_settings(data_dir=tmp_path))
    for extension in EXTENSIONS:
        await bot.load_extension(extension)
    names: list[str] = []
    for command in bot.tree.walk_commands():
        if isinstance(command, app_commands.Command):
            names.append(command.qualified_name)
    assert len(names) == len(set(names))
    assert {"refresh", "forget-me", "stm show", "stm summarize", "memories list"} <= set(names)
    for extension in list(bot.extensions):
        await bot.unload_extension(extension)
