"""A progress bar on stderr: steps done of the run's total, what is being done, time spent."""

from __future__ import annotations

import sys
import time
from typing import TextIO

_WIDTH = 24


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total = max(total, 1)
        self.done = 0
        self._stream = stream if stream is not None else sys.stderr
        self._started = time.monotonic()
        self._label = ""
        self._shown = -1.0

    def step(self, label: str | None = None, count: int = 1) -> None:
        """``count`` more steps done; ``label`` says what is being done now."""
        self.done = min(self.done + count, self.total)
        relabelled = label is not None and label != self._label
        if label is not None:
            self._label = label
        now = time.monotonic()
        # At most ten redraws a second (ingesting posts hundreds of turns a second),
        # and one whenever the work in hand changes.
        if not relabelled and self.done < self.total and now - self._shown < 0.1:
            return
        self._shown = now
        filled = _WIDTH * self.done // self.total
        bar = "#" * filled + "-" * (_WIDTH - filled)
        elapsed = now - self._started
        self._stream.write(
            f"\rlocomo [{bar}] {self.done}/{self.total} {elapsed:5.0f}s {self._label[:40]:<40}"
        )
        self._stream.flush()

    def finish(self) -> None:
        self._stream.write("\n")
        self._stream.flush()
