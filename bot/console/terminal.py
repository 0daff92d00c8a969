"""The console's terminal: a prompt with line editing and history (readline), a "thinking…"
line while the model answers, and the logs kept in a file away from the conversation."""

from __future__ import annotations

import contextlib
import logging
import readline  # importing it gives input() line editing and history on a terminal
import sys
import termios
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

PROMPT = "you> "
THINKING = "thinking…"
HISTORY_FILE = "console_history"
LOG_FILE = "console.log"
HISTORY_LENGTH = 1000
_CLEAR_LINE = "\r\x1b[K"
_LOG_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def interactive() -> bool:
    """Whether a person types at this console (standard input and output are a terminal)."""
    # Python's input() uses readline only then; a pipe or a file is read line by line.
    try:
        return sys.stdin.isatty() and sys.stdout.isatty()
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


class Terminal:
    """Line editing and history for :func:`input`, saved in the data folder at close."""

    def __init__(self, data_dir: Path) -> None:
        self.history = data_dir / HISTORY_FILE
        readline.set_history_length(HISTORY_LENGTH)
        with contextlib.suppress(OSError):  # the first session has none yet
            readline.read_history_file(self.history)
        # Ctrl-C may end the console while readline holds the terminal in its own mode.
        self._saved_mode = _terminal_mode()

    def read_line(self) -> str:
        """The next line typed after the prompt (``EOFError`` at Ctrl-D)."""
        return input(PROMPT)

    def close(self) -> None:
        """Save the history and give the terminal back as it was."""
        try:
            self.history.parent.mkdir(parents=True, exist_ok=True)
            readline.write_history_file(self.history)
        except OSError as exc:  # a read-only data folder costs the history only
            logging.getLogger(__name__).warning("console history not saved: %s", exc.strerror)
        _restore_terminal_mode(self._saved_mode)


@contextlib.contextmanager
def thinking(out: TextIO, shown: bool) -> Iterator[None]:
    """Show "thinking…" on ``out`` while the block runs, then clear it (only if ``shown``)."""
    if not shown:
        yield
        return
    out.write(THINKING)
    out.flush()
    try:
        yield
    finally:
        out.write(_CLEAR_LINE)
        out.flush()


@contextlib.contextmanager
def logs_to_file(path: Path) -> Iterator[Path | None]:
    """Send the root logger's records to ``path`` while the console runs (``None`` is
    yielded, and logs stay where they were, when the file cannot be opened)."""
    root = logging.getLogger()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(path, encoding="utf-8")
    except OSError:
        yield None
        return
    handler.setFormatter(logging.Formatter(_LOG_FORMAT))
    before = root.handlers[:]
    root.handlers[:] = [handler]
    try:
        yield path
    finally:
        root.handlers[:] = before
        handler.close()


def _terminal_mode() -> list[Any] | None:
    try:
        return termios.tcgetattr(sys.stdin.fileno())
    except (termios.error, OSError, ValueError):
        return None


def _restore_terminal_mode(mode: list[Any] | None) -> None:
    if mode is None:
        return
    with contextlib.suppress(termios.error, OSError, ValueError):
        termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, mode)
