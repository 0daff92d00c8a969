"""``kioku doctor``'s table: rows printed as checks complete, a progress line while a slow
check waits, and log records held until the table is done."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TextIO, TypeVar

T = TypeVar("T")

# On a terminal the progress line is rewritten this often; elsewhere (a pipe, docker logs)
# a plain line is written after the first tick, then every PLAIN_EVERY_TICKS ticks.
TICK_SECONDS = 1.0
PLAIN_EVERY_TICKS = 10
_CLEAR_LINE = "\r\x1b[K"


class Status(StrEnum):
    OK = "ok"
    WARN = "WARN"  # works, but look: it does not fail the run
    FAIL = "FAIL"
    SKIP = "skip"  # could not run, because a check it needs failed


@dataclass
class Check:
    name: str
    status: Status
    detail: str


class Table:
    """The table, printed row by row (flushed: stdout is a pipe under docker or CI)."""

    def __init__(
        self,
        names: Sequence[str],
        hide: Callable[[str], str],
        *,
        out: TextIO | None = None,
        progress: TextIO | None = None,
    ) -> None:
        self._hide = hide
        self._out = out or sys.stdout
        self._progress = progress or sys.stderr
        self._width = max(len(name) for name in names)
        self.failed = False
        self._print(f"{'check':<{self._width}}  status  detail")
        self._print(f"{'-' * self._width}  ------  ------")

    def _print(self, line: str) -> None:
        print(line, file=self._out, flush=True)

    def show(self, check: Check) -> None:
        self.failed = self.failed or check.status is Status.FAIL
        detail = self._hide(check.detail)
        self._print(f"{check.name:<{self._width}}  {check.status:<6}  {detail}")

    async def waiting(self, name: str, what: str, work: Awaitable[T]) -> T:
        """``work``'s result; meanwhile a line says the ``name`` row waits for ``what``."""
        ticker = asyncio.create_task(self._tick(name, what))
        try:
            return await work
        finally:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker

    async def _tick(self, name: str, what: str) -> None:
        terminal = self._progress.isatty()
        ticks = 0
        try:
            while True:
                await asyncio.sleep(TICK_SECONDS)
                ticks += 1
                line = f"{name}: waiting for {what} ({ticks * TICK_SECONDS:.0f} s)…"
                if terminal:
                    self._progress.write(f"{_CLEAR_LINE}{line}")
                elif ticks == 1 or ticks % PLAIN_EVERY_TICKS == 0:
                    self._progress.write(f"{line}\n")
                self._progress.flush()
        finally:
            if terminal and ticks:
                self._progress.write(_CLEAR_LINE)  # the row takes the line's place
                self._progress.flush()


class _Held(logging.Handler):
    """Keeps every record for later."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def logs_held() -> Iterator[None]:
    """Hold the root logger's records while the table prints, then let them out after it."""
    # Logs go to stderr, the table to stdout: on one terminal a line landed mid-table.
    root = logging.getLogger()
    handlers = root.handlers[:]
    held = _Held()
    root.handlers[:] = [held]
    try:
        yield
    finally:
        root.handlers[:] = handlers
        for record in held.records:
            for handler in handlers:
                if record.levelno >= handler.level:
                    handler.handle(record)
