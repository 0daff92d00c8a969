"""Shared fixtures: each harness lives in its own module under tests/helpers/.

Also the ``figures`` reporter: a test records the numbers it measured (messages sent,
acknowledged, found after recovery, matrix cells checked…) and they are printed in a
"figures" section at the end of the run, even under ``pytest -q`` (which captures
``print``)::

    async def test_outage(figures: Figures) -> None:
        ...
        figures.record("acknowledged", len(acknowledged))
        figures["found after recovery"] = found   # the same thing

Record before asserting, so a failing test still shows what it measured. Values are
shown with ``str()``; recording a name twice keeps the last value. Each figure is kept
in the test's ``user_properties`` (so JUnit XML reports carry them too), which is also
how they reach the summary from pytest-xdist's workers.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import pytest

from tests.helpers.summary import recorded_properties

pytest_plugins = [
    "tests.helpers.fake_llm",  # before database, which imports it
    "tests.helpers.database",
    "tests.helpers.bot",
    "tests.helpers.fuzz",
    "tests.helpers.fake_discord_api",
    "pytester",  # tests of the summary sections run pytest itself
]

FIGURE = "figure: "  # the user_properties name of a figure: this, then its name


class Figures:
    """The figures of one test (the ``figures`` fixture)."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._node = request.node

    def record(self, name: str, value: Any) -> None:
        self._node.user_properties.append((f"{FIGURE}{name}", value))

    def __setitem__(self, name: str, value: Any) -> None:
        self.record(name, value)


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Figures:
    """Record numbers a test measured; printed in the "figures" summary section."""
    return Figures(request)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (``make test``): one worker per CPU this process may run on, 2 to 4.
    xdist's own count is the machine's physical cores, which is 1 on a CI runner whose 2
    vCPUs are one core's hyper-threads; each worker starts its own embedded PostgreSQL,
    so more than 4 would mostly add start-ups."""
    usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None  # Linux
    cpus = len(usable) if usable is not None else (os.cpu_count() or 2)
    return max(2, min(4, cpus))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    recorded: dict[str, dict[str, Any]] = {}
    for nodeid, name, value in recorded_properties(terminalreporter, FIGURE):
        recorded.setdefault(nodeid, {})[name] = value
    if not recorded:
        return
    terminalreporter.section("figures")
    for nodeid, values in recorded.items():
        terminalreporter.write_line(nodeid)
        for name, value in values.items():
            terminalreporter.write_line(f"    {name}: {value}")


_OWN_BASETEMP = "_kioku_own_basetemp"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # pytest keeps only the newest three of its rotating temp folders: three other pytest
    # sessions started meanwhile on the machine would delete this one's data folders
    # mid-run. A folder of its own instead (xdist's workers get subfolders of it).
    if config.option.basetemp is None and not hasattr(config, "workerinput"):
        config.option.basetemp = tempfile.mkdtemp(prefix="kioku-tests-")
        setattr(config, _OWN_BASETEMP, config.option.basetemp)


def pytest_unconfigure(config: pytest.Config) -> None:
    own = getattr(config, _OWN_BASETEMP, None)
    if own is not None:
        shutil.rmtree(own, ignore_errors=True)
