"""The package docstrings of ``bot.memory`` and ``bot.llm`` map their modules: every
module is named there, and nothing named is missing (the map cannot drift)."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest

import bot.conversation
import bot.llm
import bot.memory
import bot.vocabulary


@pytest.mark.parametrize(
    "package", [bot.memory, bot.llm, bot.conversation, bot.vocabulary], ids=lambda p: p.__name__
)
def test_the_package_docstring_maps_every_module(package: ModuleType) -> None:
    folder = Path(package.__file__ or "").parent
    modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    modules |= {p.parent.name + "/" for p in folder.glob("*/__init__.py")}
    named = set(re.findall(r"^ *([\w/]+) {2,}\S", package.__doc__ or "", re.M))
    assert named == modules
