"""The spool's file ``<data_dir>/spool/stm.jsonl``: its lock, durable appends and rewrites."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bot.memory.spool.records import line_holds_user, parse

# The spool's logger: the whole spool reports under one name.
log = logging.getLogger("bot.memory.spool.durable")

SPOOL_FILE = Path("spool") / "stm.jsonl"


class SpoolLocked(RuntimeError):
    """Another process owns this data folder's spool."""


def spool_path(data_dir: Path) -> Path:
    return data_dir / SPOOL_FILE


@dataclass(frozen=True, slots=True)
class SpoolStatus:
    pending: int
    # Files of records that could not be read or applied, moved aside for the operator.
    set_aside: tuple[Path, ...]


def inspect_spool(data_dir: Path) -> SpoolStatus:
    """A data folder's spool as ``kioku doctor`` shows it, read without taking it over."""
    path = spool_path(data_dir)
    records = parse(path.read_bytes())[0] if path.exists() else []
    pending = sum(record.get("op") != "blank" for record in records)
    aside = tuple(sorted(path.parent.glob("stm.corrupt-*.jsonl"))) if path.parent.exists() else ()
    return SpoolStatus(pending, aside)


def spool_in_use(data_dir: Path) -> bool:
    """Whether a running process holds this data folder's spool (creates nothing)."""
    try:
        handle = spool_path(data_dir).with_suffix(".lock").open("rb")
    except OSError:  # no lock file: no process ever held it
        return False
    with handle:  # closing lets go of a lock taken here
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
    return False


def fsync_dir(path: Path) -> None:
    """Make a file's creation or rename in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durably(path: Path, lines: Iterable[bytes]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        for line in lines:
            handle.write(line + b"\n")
        handle.flush()
        os.fsync(handle.fileno())


class SpoolFile:
    """One process's spool file (an exclusive lock beside it), appended to line by line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        # Two processes appending to and rewriting one file would lose each other's records.
        self._lock = path.with_suffix(".lock").open("a")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise SpoolLocked(
                f"another Kioku process is using the spool in {path.parent}; give each "
                "process its own KIOKU_DATA_DIR"
            ) from None
        self._fd = -1
        self._closed = False

    def read(self) -> tuple[list[dict[str, Any]], list[bytes], bool]:
        """The file's records, its unreadable lines, and whether its last line is torn."""
        return parse(self.path.read_bytes()) if self.path.exists() else ([], [], False)

    def open(self) -> None:
        """Open the file for appending (again: a rewrite replaces it)."""
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            fsync_dir(self.path.parent)
        except OSError:
            os.close(fd)
            raise
        self._fd = fd

    def append(self, record: dict[str, Any]) -> None:
        """Append one line durably, or raise and leave the file as it was."""
        # A failed write (disk full, fsync error) is reported unsaved, so no byte of it may
        # stay behind to be replayed after a restart: unbuffered, and cut back on failure.
        line = memoryview((json.dumps(record, ensure_ascii=False) + "\n").encode())
        if self._closed:
            raise ValueError("the spool is closed")
        if self._fd < 0:  # a reopen after a replay failed: try again (or raise)
            self.open()
        size = os.fstat(self._fd).st_size
        try:
            while line:
                line = line[os.write(self._fd, line) :]
            os.fsync(self._fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, size)
                os.fsync(self._fd)
            raise

    def rewrite(self, records: Sequence[dict[str, Any]]) -> None:
        """Replace the file with ``records`` (atomically, durably)."""
        tmp = self.path.with_suffix(".tmp")
        _write_durably(tmp, (json.dumps(r, ensure_ascii=False).encode() for r in records))
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)

    def settle(self, records: Sequence[dict[str, Any]]) -> None:
        """Rewrite the file with the records still pending and reopen it; never raises."""
        # The number is never kept after closing: reused by the next file the process
        # opens, it would take the spool's lines.
        self._close_fd()
        try:
            self.rewrite(records)
        except OSError as exc:
            # Replayed again after a restart, the records left in the file change nothing.
            log.error(
                "spool: could not rewrite %s after a replay (%s); its replayed records stay "
                "in it until the next replay rewrites it",
                self.path,
                exc.__class__.__name__,
            )
        try:
            self.open()
        except OSError as exc:  # the next append tries again (or is refused, unsaved)
            log.error("spool: could not reopen %s (%s)", self.path, exc.__class__.__name__)

    def set_aside(self, lines: Sequence[bytes], why: str) -> None:
        """Move ``lines`` to a new ``stm.corrupt-<time>.jsonl`` for the operator."""
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
        aside = self.path.with_name(f"stm.corrupt-{stamp}.jsonl")
        fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(b"".join(line + b"\n" for line in lines))
            handle.flush()
            os.fsync(handle.fileno())
        fsync_dir(self.path.parent)
        log.error("spool: %d record(s) %s; moved to %s", len(lines), why, aside)

    def forget_set_aside(self, user_id: int) -> int:
        """Drop the user's lines from the set-aside files; return how many went."""
        # A line that cannot be read is dropped if it names the user at all.
        dropped = 0
        for aside in sorted(self.path.parent.glob("stm.corrupt-*.jsonl")):
            lines = aside.read_bytes().splitlines()
            kept = [line for line in lines if not line_holds_user(line, user_id)]
            if len(kept) == len(lines):
                continue
            dropped += len(lines) - len(kept)
            if not kept:
                aside.unlink()
            else:
                tmp = aside.with_suffix(".tmp")
                _write_durably(tmp, kept)
                os.replace(tmp, aside)
            fsync_dir(self.path.parent)
        return dropped

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        self._closed = True
        self._close_fd()
        self._lock.close()  # releases the lock
