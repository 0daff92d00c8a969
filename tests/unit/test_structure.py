"""Cheap structural checks over the whole package."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "bot"
CORE = ["memory", "db", "llm", "fetch"]


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


# Each layer imports only from layers below it (and from itself); see docs/architecture.md.
LAYERS: dict[str, int] = {
    "bot.vocabulary": 0,
    "bot.config": 1,
    "bot.db": 2,
    "bot.llm": 2,
    "bot.fetch": 2,
    "bot.runtime": 3,
    "bot.memory": 4,
    "bot.conversation": 5,
}
EDGE = 6  # cogs, console, ops, cli, app, services: they may use anything below
# Imports inside functions hide cycles; only the CLI defers them (for start-up time).
LAZY_IMPORTS_ALLOWED = ("bot.__main__", "bot.cli")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> tuple[str, int]:
    for prefix, rank in sorted(LAYERS.items(), key=lambda item: -len(item[0])):
        if module == prefix or module.startswith(prefix + "."):
            return prefix, rank
    return module, EDGE


def bot_imports(path: Path, *, nested_only: bool = False) -> set[str]:
    """The bot modules ``path`` imports (only those inside functions, if asked)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    scopes = [
        node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    found: set[str] = set()
    for scope in scopes if nested_only else [tree]:
        for node in ast.walk(scope):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name in MODULES}


MODULES = {module_name(path): path for path in ROOT.rglob("*.py")}


def test_layers_import_only_downwards() -> None:
    upward = []
    for module, path in MODULES.items():
        own, rank = layer_of(module)
        for imported in bot_imports(path):
            other, other_rank = layer_of(imported)
            if rank < EDGE and (other_rank > rank or (other_rank == rank and other != own)):
                upward.append(f"{module} -> {imported}")
    assert upward == []


def test_no_import_cycles() -> None:
    graph = {module: bot_imports(path) - {module} for module, path in MODULES.items()}
    cycles = []
    for start in graph:
        # A cycle through ``start``: ``start`` is reachable from one of its imports.
        stack, seen = list(graph[start]), set()
        while stack:
            current = stack.pop()
            if current == start:
                cycles.append(start)
                break
            if current not in seen:
                seen.add(current)
                stack.extend(graph.get(current, ()))
    assert cycles == []


def test_no_imports_hidden_inside_functions() -> None:
    hidden = {
        module: sorted(bot_imports(path, nested_only=True))
        for module, path in MODULES.items()
        if not module.startswith(LAZY_IMPORTS_ALLOWED)
    }
    assert {module: names for module, names in hidden.items() if names} == {}


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
