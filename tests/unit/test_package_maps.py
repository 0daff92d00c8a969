"""Each feature package's docstring maps its modules: every
module is named there, and nothing named is missing (the map cannot drift)."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest

import bot.cogs.chat
import bot.cogs.kioku
import bot.cogs.stm
import bot.console
import bot.conversation
import bot.fetch
import bot.llm
import bot.llm.tools
import bot.memory
import bot.memory.longterm
import bot.memory.spool
import bot.memory.stm
import bot.memory.turn
import bot.ops
import bot.runtime
import bot.vocabulary

MAPPED = [
    bot.memory,
    bot.memory.turn,
    bot.memory.stm,
    bot.memory.spool,
    bot.memory.longterm,
    bot.llm,
    bot.llm.tools,
    bot.conversation,
    bot.fetch,
    bot.vocabulary,
    bot.runtime,
    bot.ops,
    bot.console,
    bot.cogs.chat,
    bot.cogs.stm,
    bot.cogs.kioku,
]


@pytest.mark.parametrize("package", MAPPED, ids=lambda p: p.__name__)
def test_the_package_docstring_maps_every_module(package: ModuleType) -> None:
    folder = Path(package.__file__ or "").parent
    modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    modules |= {p.parent.name + "/" for p in folder.glob("*/__init__.py")}
    named = set(re.findall(r"^ *([\w/]+) {2,}\S", package.__doc__ or "", re.M))
    assert named == modules
