"""What tests recorded, gathered for the end-of-session summary sections.

A test records a number by appending ``(name, value)`` to its node's
``user_properties`` (the ``figures`` fixture, the ``fuzz_counter`` fixture). Module
state would not do: under pytest-xdist (``make test``) tests run in worker processes and
only their reports come back to the process that prints the summary.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


def recorded_properties(
    terminalreporter: pytest.TerminalReporter, prefix: str
) -> Iterator[tuple[str, str, Any]]:
    """``(nodeid, name without prefix, value)`` of every user property named with
    ``prefix`` that a test recorded, in the order they were reported. Read from the
    teardown reports (the last of a test's, holding all it recorded), which pytest-xdist
    brings back from its workers."""
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) != "teardown":
                continue
            for name, value in report.user_properties:
                if name.startswith(prefix):
                    yield report.nodeid, name.removeprefix(prefix), value
