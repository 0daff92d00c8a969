"""The durable spool: memory operations the database refused, kept until it is back.

SPEC §2: a write that fails is never reported as success and never lost. When the
database refuses or times out, the operation (an STM upsert with its audit events, a
channel clear, a user's deletion) is appended to ``<data_dir>/spool/stm.jsonl`` and
fsynced *before* the caller is told "saved, pending sync". A background task replays the
log in order, with backoff, once the database answers again.

Ordering is the whole point, so the rules are few:

- while anything is pending, the memory service sends *every* later operation through
  the spool too (it queues behind what is already waiting); a clear or ``/forget-me``
  can therefore never be overtaken by an older write, and no write by an older one;
- upserts carry their versions and the repository never lets an older version
  overwrite a newer row, so replaying a stale write is harmless;
- a ``/refresh`` or a ``/forget-me`` deletes, when replayed, everything of the channel
  (or derived from the user) up to the replay, not only what was written before it was
  asked for: other processes, which could not know of it, may have written since (this
  process's own later writes wait behind it here). It is recorded (``stm_clears``,
  ``stm_forgets``) in the same transaction, so replayed twice (a crash between the
  commit and the rewrite of this file) it finds its record and deletes nothing newer.

One process owns a spool (an exclusive lock beside the file): two processes appending
to and rewriting one file would lose each other's records. A crash can leave a torn last
line; it was never acknowledged, so it is cut off when the spool is opened. A line that
cannot be read (a damaged file) is moved aside to ``stm.corrupt-<time>.jsonl`` and
reported, instead of stopping the bot; so is a record the database refuses as wrong
(SQLSTATE class 22, a data exception, or 23, an integrity violation: the record itself
can never be stored). Any other failure is the database's, not the record's (a lost
connection, a timeout, a deadlock, a read-only standby, a full disk…): the replay stops
and is retried with backoff, and nothing is set aside. A batch of several records that
the database refuses every one of is taken for the server's fault too (more likely than
each record's) and retried, but only :data:`ALL_REFUSED_RETRIES` times in a row: then
its records are set aside, so they cannot block the spool for good. A refused record
that is alone in its batch, or whose batch-mates were stored, is set aside at once.

A set-aside file holds memory text: a ``/forget-me`` removes the user's lines from it,
also when the forget is replayed from the spool, and a refused record that a forget
queued behind it covers is dropped, not set aside. To re-queue set-aside records once
their cause is fixed, stop the bot and append the file's lines to ``stm.jsonl`` (see
docs/reliability.md).

This module keeps the file, its in-memory index and the replay driver; the record format
is :mod:`bot.memory.spool_records`, and applying a record to the database
:mod:`bot.memory.spool_replay`.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.db.repositories.stm import EventRecord
from bot.db.storage import database_answered, sqlstate
from bot.memory.spool_records import (
    Carried,
    Chain,
    entry_from_json,
    entry_to_json,
    event_to_json,
    extend_chain,
    key_from_json,
    key_to_json,
    line_holds_user,
    parse,
    record_holds_user,
)
from bot.memory.spool_replay import apply_all, refused_record
from bot.vocabulary.model import ScopeKey, StmEntry

log = logging.getLogger(__name__)

SPOOL_FILE = Path("spool") / "stm.jsonl"
REPLAY_BATCH = 100
# How far apart two spooled writes of one key are put at least (see DurableSpool.append).
SPOOLED_STEP = timedelta(microseconds=1)


class SpoolLocked(RuntimeError):
    """Another process owns this data folder's spool."""


# How many times in a row a batch whose every record the database refused is retried
# before its records are set aside as wrong (with the replayer's backoff, 0.5 s doubling:
# about 15 s; long enough for a momentary fault of the server, short enough not to hold
# every write queued behind them).
ALL_REFUSED_RETRIES = 5


class ReplayRefused(RuntimeError):
    """The database refused every record of a batch: treated as an outage (retried)."""


def spool_path(data_dir: Path) -> Path:
    return data_dir / SPOOL_FILE


@dataclass(frozen=True, slots=True)
class PendingChanges:
    """What waits in the spool for one channel's memory (for ``/stm show``)."""

    # Writes of its memory queued after its last clear (those before it are moot).
    writes: int
    # A /refresh of the channel waits to reach the database.
    cleared: bool


@dataclass(frozen=True, slots=True)
class SpoolStatus:
    pending: int
    # Files of records that could not be read or applied, moved aside for the operator.
    set_aside: tuple[Path, ...]


def inspect_spool(data_dir: Path) -> SpoolStatus:
    """Pending operations and set-aside files of a data folder's spool (for ``kioku
    doctor``), read without taking the spool over."""
    path = spool_path(data_dir)
    records = parse(path.read_bytes())[0] if path.exists() else []
    pending = sum(record.get("op") != "blank" for record in records)
    aside = tuple(sorted(path.parent.glob("stm.corrupt-*.jsonl"))) if path.parent.exists() else ()
    return SpoolStatus(pending, aside)


def spool_in_use(data_dir: Path) -> bool:
    """Whether a running process holds this data folder's spool, found without creating
    anything (the lock is only tried, then let go)."""
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


def count_pending(data_dir: Path) -> int:
    return inspect_spool(data_dir).pending


def _fsync_dir(path: Path) -> None:
    """Make a file's creation or rename in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------- spool


class DurableSpool:
    """An append-only, fsynced operation log with in-order replay."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = path.with_suffix(".lock").open("a")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise SpoolLocked(
                f"another Kioku process is using the spool in {path.parent}; give each "
                "process its own KIOKU_DATA_DIR"
            ) from None
        self._records: list[dict[str, Any]] = []
        bad: list[bytes] = []
        if path.exists():
            self._records, bad, torn = parse(path.read_bytes())
            if bad:
                self._set_aside(bad, "could not be read")
            if bad or torn:
                if torn:
                    log.warning("spool: cut off a torn last line (it was never acknowledged)")
                self._rewrite()
        self._latest: dict[ScopeKey, StmEntry] = {}
        # Per key of _latest: the stored row whose text that state carries (written on a
        # copy of it, directly or through earlier spooled states): its creation time (ISO)
        # and the users that copy was derived from.
        self._from_row: dict[ScopeKey, Carried | None] = {}
        # Per key of _latest: the chain of this spool's writes that state is made of.
        self._chain: dict[ScopeKey, Chain] = {}
        # Channels with a clear, and users with a forget, still to replay: their rows in
        # the database are as good as deleted (also after a restart).
        self._clearing: set[int] = set()
        self._forgetting: set[int] = set()
        # The keys whose spooled state the last complete replay settled, and the channels
        # whose spooled clears it settled.
        self.replayed_keys: frozenset[ScopeKey] = frozenset()
        self.replayed_clears: frozenset[int] = frozenset()
        for record in self._records:
            self._track(record)
        if bad:
            # A line set aside just now may hold the words of a user whose /forget-me
            # waits here: it never reaches the database, so nothing else removes them.
            self._purge_set_aside(self._forgetting)
        self._blanks: int = sum(record.get("op") == "blank" for record in self._records)
        self._fd = self._open_for_append()
        self._closed = False
        # Set when an operation is appended (work to do) ...
        self._wake = asyncio.Event()
        # Batches in a row whose every record was refused (see _apply_one_by_one).
        self._all_refused = 0
        # ... and when the database is known to be back (ends a backoff wait early; new
        # work does not, or every write during an outage would cost a failed attempt).
        self._back = asyncio.Event()
        # One replay at a time: two would both drop the same batch from the log.
        self._replaying = asyncio.Lock()
        # Names the process in the notices a replay sends, so it ignores its own (the
        # memory service that owns the spool sets it to its instance id).
        self.notice_origin = "spool"

    def _open_for_append(self) -> int:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            _fsync_dir(self.path.parent)
        except OSError:
            os.close(fd)
            raise
        return fd

    @property
    def pending(self) -> int:
        """Operations waiting for the database (local 'blank' records are none)."""
        return len(self._records) - self._blanks

    def pending_changes_in(self, channel_id: int) -> PendingChanges:
        """The channel's pending writes and whether a clear of it waits, read-only.
        A write queued before a clear of the channel (or before a clear another process
        made, a local 'blank' record) is counted with neither: the clear undoes it."""
        writes, cleared = 0, False
        for record in self._records:
            op = record.get("op")
            if (
                op in ("clear", "blank")
                and "key" not in record  # one key's copy blanked: not the channel's writes
                and record.get("channel") == channel_id
            ):
                writes, cleared = 0, cleared or op == "clear"
            elif op == "upsert" and any(
                data["key"].get("channel") == channel_id for data in record.get("entries", ())
            ):
                writes += 1
        return PendingChanges(writes, cleared)

    def latest(self, key: ScopeKey) -> StmEntry | None:
        """The newest spooled (not yet replayed) state of ``key``."""
        return self._latest.get(key)

    def clearing(self, channel_id: int) -> bool:
        """Whether a clear of the channel waits to be replayed."""
        return channel_id in self._clearing

    def withholds(self, entry: StmEntry) -> bool:
        """Whether ``entry`` (a row read from the database) holds something of a user
        whose forget waits to be replayed: it is as good as deleted."""
        return any(entry.derived_from(user_id) for user_id in self._forgetting)

    def forgetting(self, user_id: int) -> bool:
        """Whether a /forget-me of the user waits to be replayed."""
        return user_id in self._forgetting

    def blank_channel(self, channel_id: int) -> None:
        """Another process cleared the channel: its spooled states are shown empty from
        now on (their replay is refused if their turn began before the clear), keeping
        their version, so the next write here still supersedes whatever the replay does.
        Recorded in the spool (a local record the replay skips), so a restart before the
        replay does not show them again."""
        if not any(key.channel_id == channel_id for key in self._latest):
            return
        self._blank({"op": "blank", "channel": channel_id})

    def carried_row(self, key: ScopeKey) -> tuple[datetime, set[int] | None] | None:
        """The stored row whose text the spooled state of ``key`` carries (its creation
        time), and the users that text is derived from (None: not recorded); None when it
        carries no stored text (only this process's own spooled writes, or none)."""
        carried = self._from_row.get(key) if key in self._latest else None
        if carried is None:
            return None
        at, users = carried
        return datetime.fromisoformat(at), (set(users) if users is not None else None)

    def blank_copy(self, key: ScopeKey, created_at: datetime) -> None:
        """The stored row (created at ``created_at``) whose text the spooled state of
        ``key`` carries was wiped (a /refresh or /forget-me this process learnt of from
        the database, not by notice): that state is shown empty from now on, keeping its
        version, as :meth:`blank_channel` does for one key. Its replay, and that of every
        write built on it, is skipped (see ``spool_replay._carries_wiped``)."""
        carried = self.carried_row(key)
        if carried is None or carried[0] != created_at:
            return  # replayed, blanked or written over meanwhile: nothing of it is shown
        self._blank({"op": "blank", "channel": key.channel_id, "key": key_to_json(key)})

    def _blank(self, record: dict[str, Any]) -> None:
        try:
            self._write(record)
        except (OSError, ValueError):
            log.exception("spool: could not record that a spooled state was wiped")
            self._track(record)  # still applied in memory (lost only by a restart)

    # -- appending (synchronous: the caller must not be told "saved" before fsync)

    def append(
        self,
        entries: Sequence[StmEntry],
        events: Sequence[EventRecord] = (),
        *,
        started_at: datetime | None = None,
        bases: Sequence[StmEntry] = (),
    ) -> None:
        """Spool a write of ``entries``; ``bases``: what each was built on (the entries
        before the write), so its replay can tell whether the stored text it carries
        was wiped meanwhile (see spool_replay._apply)."""
        encoded = [entry_to_json(e) for e in entries]
        for data, entry in zip(encoded, entries, strict=True):
            # The replay lets the later of two writes win (see stm_repo.replay_entries),
            # and this process's own are in the order spooled: a write at the same
            # instant as the one before it (a coarse clock), or earlier (a clock stepped
            # back), goes a microsecond after it. Their version numbers cannot settle it:
            # a replay lifts a row's version past those another process gave it.
            before = self._latest.get(entry.key)
            if before is not None and entry.updated_at <= before.updated_at:
                data["updated_at"] = (before.updated_at + SPOOLED_STEP).isoformat()
        for data, base in zip(encoded, bases, strict=False):
            carried = self._carries(base)
            if carried is not None:
                data["from_row"], data["from_users"] = carried
            chain = self._chain.get(base.key) if self._on_spooled(base) else None
            if chain is not None:
                # The text of those writes is carried: a wipe that refuses one of them
                # refuses this one too (see spool_replay._chain_wiped).
                data["chain"] = chain
        record: dict[str, Any] = {
            "op": "upsert",
            "entries": encoded,
            "events": [event_to_json(e) for e in events],
        }
        if started_at is not None:
            record["started"] = started_at.isoformat()
        self._write(record)

    def _carries(self, base: StmEntry) -> Carried | None:
        """The stored row whose text a write built on ``base`` carries, and the users
        that text is derived from: the row ``base`` was read from when it holds text, or
        what the spooled state it is carries (the words this process added on top are
        its own writes', checked as such)."""
        if self._on_spooled(base):
            return self._from_row.get(base.key)  # built on this spool's own last state
        if base.has_content and base.created_at is not None:
            return base.created_at.isoformat(), sorted(base.derived_from_users())
        return None  # nothing stored in it: a new memory, or one read back expired

    def _on_spooled(self, base: StmEntry) -> bool:
        """Whether ``base`` is this spool's own last state of its key, text and all (not
        an empty stand-in keeping its version: expired, or withheld)."""
        pending = self._latest.get(base.key)
        return pending is not None and pending.version == base.version and base.has_content

    def append_clear(
        self, channel_id: int, guild_id: int | None, actor_user_id: int | None, at: datetime
    ) -> None:
        self._write(
            {
                "op": "clear",
                "channel": channel_id,
                "guild": guild_id,
                "actor": actor_user_id,
                "at": at.isoformat(),
            }
        )

    def append_forget(self, user_id: int, at: datetime) -> None:
        self._write({"op": "forget", "user": user_id, "at": at.isoformat()})

    def _write(self, record: dict[str, Any]) -> None:
        """Append one line durably, or raise and leave the file as it was: a write that
        failed (disk full, fsync error) is reported unsaved, so no byte of it may stay
        behind to be replayed after a restart (unbuffered, and cut back on failure)."""
        line = memoryview((json.dumps(record, ensure_ascii=False) + "\n").encode())
        if self._closed:
            raise ValueError("the spool is closed")
        if self._fd < 0:  # a reopen after a replay failed: try again (or raise)
            self._fd = self._open_for_append()
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
        self._records.append(record)
        self._blanks += int(record.get("op") == "blank")
        self._track(record)
        self._wake.set()

    def holds_user(self, user_id: int) -> bool:
        """Whether a pending write holds something of the user's (their own key, or a
        memory they contributed to or acted on)."""
        return any(
            record.get("op") == "upsert" and record_holds_user(record, user_id)
            for record in self._records
        )

    def drop_states_of(self, user_id: int) -> None:
        """Another process forgot the user, and no pending write of theirs is left here
        (:meth:`holds_user`): the spooled states of theirs this process still shows (their
        records replayed by a replay cut short) go, or they would stand in for the rows
        that /forget-me deleted while the database is unreachable."""
        for key, entry in list(self._latest.items()):
            if entry.derived_from(user_id):
                del self._latest[key]
                self._from_row.pop(key, None)
                self._chain.pop(key, None)

    def _track(self, record: dict[str, Any]) -> None:
        op = record.get("op")
        if op == "upsert":
            for data in record["entries"]:
                entry = entry_from_json(data)
                self._latest[entry.key] = entry
                at, users = data.get("from_row"), data.get("from_users")
                self._from_row[entry.key] = (at, users) if at is not None else None
                chain = extend_chain(
                    data.get("chain"), entry.derived_from_users(), record.get("started")
                )
                if chain is None:
                    self._chain.pop(entry.key, None)
                else:
                    self._chain[entry.key] = chain
        elif op == "blank":
            only = key_from_json(record["key"]) if "key" in record else None
            for key, entry in list(self._latest.items()):
                if key == only or (only is None and key.channel_id == record["channel"]):
                    self._from_row[key] = None  # shown empty: its text no longer carried
                    self._chain.pop(key, None)
                    self._latest[key] = StmEntry(
                        key=key,
                        updated_at=entry.updated_at,
                        version=entry.version,
                        parent_channel_id=entry.parent_channel_id,
                        created_at=entry.created_at,
                    )
        elif op == "clear":
            self._clearing.add(record["channel"])
            for key in [k for k in self._latest if k.channel_id == record["channel"]]:
                del self._latest[key]
                self._from_row.pop(key, None)
                self._chain.pop(key, None)
        elif op == "forget":
            user = record["user"]
            self._forgetting.add(user)
            for key, entry in list(self._latest.items()):
                if key.user_id == user or user in entry.contributor_ids:
                    del self._latest[key]
                    self._from_row.pop(key, None)
                    self._chain.pop(key, None)

    def database_back(self) -> None:
        """The database answers again (e.g. the cache listener reconnected): replay now
        instead of at the end of the current backoff."""
        self._back.set()
        self._wake.set()

    # -- replaying

    async def replay(self, sessions: async_sessionmaker[AsyncSession]) -> int:
        """Apply every pending operation in order; return how many. Raises on the first
        database failure, leaving the rest (and the failed batch) pending. A record the
        database refuses as wrong (see the module's docstring) is set aside and reported,
        so one bad record cannot hold every later one back forever."""
        done = 0
        touched: set[ScopeKey] = set()
        cleared: set[int] = set()
        async with self._replaying:
            while self._records:
                batch = self._records[:REPLAY_BATCH]
                touched.update(
                    key_from_json(data["key"])
                    for record in batch
                    if record.get("op") == "upsert"
                    for data in record["entries"]
                )
                cleared.update(int(r["channel"]) for r in batch if r.get("op") == "clear")
                try:
                    await apply_all(sessions, batch, self.notice_origin)
                    handled, applied = len(batch), batch
                    self._all_refused = 0  # the row of all-refused batches ends here
                except Exception as exc:
                    if not refused_record(exc):
                        raise
                    handled, applied = await self._apply_one_by_one(sessions, batch)
                if handled == 0:  # nothing stored: the file and the bookkeeping stand
                    raise ConnectionError("the database went away during the spool replay")
                if applied:
                    database_answered(sessions)
                del self._records[:handled]
                # From here on what was handled is in the database: the bookkeeping
                # follows whatever happens to the file.
                self._after_batch(applied)
                done += handled
                if handled < len(batch):
                    raise ConnectionError("the database went away during the spool replay")
            # What the replay stored may differ from the spooled states (a record refused
            # or skipped as older, or deleted by a /forget-me behind it): the owner reads
            # these keys again (see MemoryService.spool_replayed).
            self.replayed_keys = frozenset(touched | set(self._latest))
            self.replayed_clears = frozenset(cleared | self._clearing)
            self._latest.clear()
            self._from_row.clear()
            self._chain.clear()
            self._clearing.clear()
            self._forgetting.clear()
        return done

    def _after_batch(self, applied: Sequence[dict[str, Any]]) -> None:
        """Bring the bookkeeping and the file in line with the records still pending,
        after a batch reached the database. Never raises: those records are stored, and
        a failure to rewrite the file (a read-only file system, an I/O error) must not
        leave clears or forgets looking pending (their channels would read as wiped)."""
        self._blanks = sum(record.get("op") == "blank" for record in self._records)
        self._clearing = {int(r["channel"]) for r in self._records if r.get("op") == "clear"}
        self._forgetting = {int(r["user"]) for r in self._records if r.get("op") == "forget"}
        # The number is never kept after closing: reused by the next file the process
        # opens, it would take the spool's lines.
        fd, self._fd = self._fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
        try:
            self._rewrite()
        except OSError as exc:
            # The replayed records stay in the file until the next rewrite; replayed
            # again after a restart they change nothing (see the module's docstring).
            log.error(
                "spool: could not rewrite %s after a replay (%s); its replayed records stay "
                "in it until the next replay rewrites it",
                self.path,
                exc.__class__.__name__,
            )
        try:
            self._fd = self._open_for_append()
        except OSError as exc:  # the next append tries again (or is refused, unsaved)
            log.error("spool: could not reopen %s (%s)", self.path, exc.__class__.__name__)
        self._purge_set_aside(int(r["user"]) for r in applied if r.get("op") == "forget")

    def _purge_set_aside(self, users: Iterable[int]) -> None:
        for user_id in sorted(set(users)):
            try:
                self.forget_set_aside(user_id)
            except Exception:  # never fails the replay or the start (the file is the operator's)
                log.exception("spool: could not remove a user's records from set-aside files")

    async def _apply_one_by_one(
        self, sessions: async_sessionmaker[AsyncSession], batch: list[dict[str, Any]]
    ) -> tuple[int, list[dict[str, Any]]]:
        """Apply ``batch`` record by record, setting aside those the database refuses as
        wrong; return how many were handled before the database stopped answering (if it
        did), and the records applied."""
        refused: list[tuple[int, dict[str, Any], str | None]] = []
        applied: list[dict[str, Any]] = []
        handled = 0
        for index, record in enumerate(batch):
            try:
                await apply_all(sessions, [record], self.notice_origin)
            except Exception as exc:
                if not refused_record(exc):
                    break  # the database's failure: retried with the rest, later
                refused.append((index, record, sqlstate(exc)))
            else:
                applied.append(record)
            handled += 1
        sent = sum(record.get("op") != "blank" for record in batch)
        if sent > 1 and len(refused) == sent:
            # Every record at once is more likely the server's fault than each record's:
            # retried, a few times. Records that really are all wrong must not block the
            # spool (and every write queued behind them) for good: then they go aside.
            self._all_refused += 1
            if self._all_refused <= ALL_REFUSED_RETRIES:
                raise ReplayRefused(
                    f"the database refused every record of a batch of {len(batch)} "
                    f"(SQLSTATE {refused[0][2]}); retried later, nothing set aside"
                )
        self._all_refused = 0
        aside: list[bytes] = []
        for index, record, code in refused:
            if self._forget_behind(index, record):
                log.warning(
                    "spool: the database refused a %s record (SQLSTATE %s); dropped, a "
                    "/forget-me queued behind it deletes what it holds",
                    record.get("op"),
                    code,
                )
                continue
            log.error(
                "spool: the database refused a %s record (SQLSTATE %s)", record.get("op"), code
            )
            aside.append(json.dumps(record, ensure_ascii=False).encode())
        if aside:
            self._set_aside(aside, "were refused by the database")
        return handled, applied

    def _forget_behind(self, index: int, record: dict[str, Any]) -> bool:
        """Whether a /forget-me queued after ``self._records[index]`` covers ``record``."""
        return any(
            later.get("op") == "forget" and record_holds_user(record, int(later["user"]))
            for later in self._records[index + 1 :]
        )

    def _set_aside(self, lines: Sequence[bytes], why: str) -> None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
        aside = self.path.with_name(f"stm.corrupt-{stamp}.jsonl")
        fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(b"".join(line + b"\n" for line in lines))
            handle.flush()
            os.fsync(handle.fileno())
        _fsync_dir(self.path.parent)
        log.error("spool: %d record(s) %s; moved to %s", len(lines), why, aside)

    def forget_set_aside(self, user_id: int) -> int:
        """Drop the user's records from the set-aside files (``/forget-me`` reaches them
        too); a line that cannot be read is dropped if it names the user at all. Return
        how many lines were dropped."""
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
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(b"".join(line + b"\n" for line in kept))
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, aside)
            _fsync_dir(self.path.parent)
        return dropped

    def _rewrite(self) -> None:
        """Replace the file with the records still pending (atomically, durably)."""
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            for record in self._records:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)
        _fsync_dir(self.path.parent)

    async def run_replayer(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        on_replayed: Callable[[], None] | None = None,
        on_retry: Callable[[Exception], None] | None = None,
        first_wait_seconds: float = 0.5,
        max_wait_seconds: float = 30.0,
    ) -> None:
        """Forever: wait for pending operations and replay them. While the database is
        unavailable, retry with exponential backoff (capped at ``max_wait_seconds``),
        or at once when :meth:`database_back` is called."""
        wait = first_wait_seconds
        while True:
            if not self._records:
                self._wake.clear()
                await self._wake.wait()
            # A "database is back" that arrives during this attempt still cuts the wait.
            self._back.clear()
            try:
                replayed = await self.replay(sessions)
            except Exception as exc:
                log.info(
                    "spool: %d operations wait for the database (%s); retrying in %.1f s",
                    self.pending,
                    exc.__class__.__name__,
                    wait,
                )
                if on_retry is not None:
                    on_retry(exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._back.wait(), wait)
                wait = min(wait * 2, max_wait_seconds)
                continue
            wait = first_wait_seconds
            if replayed:
                log.info("spool: replayed %d pending memory operations", replayed)
                if on_replayed is not None:
                    on_replayed()

    def close(self) -> None:
        self._closed = True
        fd, self._fd = self._fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._lock.close()  # releases the lock
