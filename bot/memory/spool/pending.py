"""What waits in the spool, as reads see it: pending records and each key's newest state."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bot.db import EventRecord
from bot.memory.spool.records import (
    Carried,
    Chain,
    entry_from_json,
    entry_to_json,
    event_to_json,
    extend_chain,
    key_from_json,
    record_holds_user,
)
from bot.vocabulary import ScopeKey, StmEntry

# How far apart two spooled writes of one key are put at least (see upsert_record).
SPOOLED_STEP = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class PendingChanges:
    """What waits in the spool for one channel's memory (for ``/stm show``)."""

    # Writes of its memory queued after its last clear (those before it are moot).
    writes: int
    # A /refresh of the channel waits to reach the database.
    cleared: bool


class PendingOperations:
    """The records waiting for the database, and what they mean for reads of the memory."""

    def __init__(self, records: list[dict[str, Any]]) -> None:
        self._records = records
        self._blanks: int = sum(record.get("op") == "blank" for record in records)
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
        for record in records:
            self._track(record)

    @property
    def pending(self) -> int:
        """Operations waiting for the database (local 'blank' records are none)."""
        return len(self._records) - self._blanks

    def pending_changes_in(self, channel_id: int) -> PendingChanges:
        """The channel's pending writes and whether a clear of it waits."""
        # A write queued before a clear of the channel (or before a clear another process
        # made, a local 'blank' record) is counted with neither: the clear undoes it.
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
        """Whether ``entry`` (read from the database) holds words of a user whose forget waits."""
        return any(entry.derived_from(user_id) for user_id in self._forgetting)

    def forgetting(self, user_id: int) -> bool:
        """Whether a /forget-me of the user waits to be replayed."""
        return user_id in self._forgetting

    def carried_row(self, key: ScopeKey) -> tuple[datetime, set[int] | None] | None:
        """The stored row (creation time, users or None) whose text the state of ``key`` carries."""
        # None when it carries no stored text (only this process's own spooled writes).
        carried = self._from_row.get(key) if key in self._latest else None
        if carried is None:
            return None
        at, users = carried
        return datetime.fromisoformat(at), (set(users) if users is not None else None)

    def holds_user(self, user_id: int) -> bool:
        """Whether a pending write holds something of the user's."""
        return any(
            record.get("op") == "upsert" and record_holds_user(record, user_id)
            for record in self._records
        )

    def drop_states_of(self, user_id: int) -> None:
        """Drop the spooled states derived from a user another process forgot."""
        # Called once no pending write of theirs is left (holds_user): the states shown
        # (their records replayed by a replay cut short) would stand in for deleted rows.
        for key, entry in list(self._latest.items()):
            if entry.derived_from(user_id):
                self._drop(key)

    def upsert_record(
        self,
        entries: Sequence[StmEntry],
        events: Sequence[EventRecord],
        started_at: datetime | None,
        bases: Sequence[StmEntry],
    ) -> dict[str, Any]:
        """The record of a write of ``entries``, each built on its ``bases`` (the entry before)."""
        encoded = [entry_to_json(e) for e in entries]
        for data, entry in zip(encoded, entries, strict=True):
            # The replay lets the later of two writes win, and this process's own are in
            # the order spooled: one at the same instant as (or, clock stepped back, before)
            # the one before it goes a microsecond after it (versions cannot settle it).
            before = self._latest.get(entry.key)
            if before is not None and entry.updated_at <= before.updated_at:
                data["updated_at"] = (before.updated_at + SPOOLED_STEP).isoformat()
        for data, base in zip(encoded, bases, strict=False):
            # What the write carries lets its replay tell whether that was wiped since.
            carried = self._carries(base)
            if carried is not None:
                data["from_row"], data["from_users"] = carried
            chain = self._chain.get(base.key) if self._on_spooled(base) else None
            if chain is not None:
                # A wipe that refuses one of those writes refuses this one too.
                data["chain"] = chain
        record: dict[str, Any] = {
            "op": "upsert",
            "entries": encoded,
            "events": [event_to_json(e) for e in events],
        }
        if started_at is not None:
            record["started"] = started_at.isoformat()
        return record

    def _carries(self, base: StmEntry) -> Carried | None:
        """The stored row (and its users) whose text a write built on ``base`` carries."""
        if self._on_spooled(base):
            return self._from_row.get(base.key)  # built on this spool's own last state
        if base.has_content and base.created_at is not None:
            return base.created_at.isoformat(), sorted(base.derived_from_users())
        return None  # nothing stored in it: a new memory, or one read back expired

    def _on_spooled(self, base: StmEntry) -> bool:
        """Whether ``base`` is this spool's own last state of its key, text and all."""
        # Not an empty stand-in keeping its version (expired, or withheld).
        pending = self._latest.get(base.key)
        return pending is not None and pending.version == base.version and base.has_content

    def _added(self, record: dict[str, Any]) -> None:
        """Count in ``record``, just appended to the file."""
        self._records.append(record)
        self._blanks += int(record.get("op") == "blank")
        self._track(record)

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
                self._drop(key)
        elif op == "forget":
            user = record["user"]
            self._forgetting.add(user)
            for key, entry in list(self._latest.items()):
                if key.user_id == user or user in entry.contributor_ids:
                    self._drop(key)

    def _drop(self, key: ScopeKey) -> None:
        del self._latest[key]
        self._from_row.pop(key, None)
        self._chain.pop(key, None)

    def _recount(self) -> None:
        """Bring the counts and wipe sets in line with the records still pending."""
        self._blanks = sum(record.get("op") == "blank" for record in self._records)
        self._clearing = {int(r["channel"]) for r in self._records if r.get("op") == "clear"}
        self._forgetting = {int(r["user"]) for r in self._records if r.get("op") == "forget"}

    def _replayed(self, touched: set[ScopeKey], cleared: set[int]) -> None:
        """Everything pending reached the database: note what the owner must read again."""
        # What the replay stored may differ from the spooled states (a record refused or
        # skipped as older, or deleted by a /forget-me behind it).
        self.replayed_keys = frozenset(touched | set(self._latest))
        self.replayed_clears = frozenset(cleared | self._clearing)
        self._latest.clear()
        self._from_row.clear()
        self._chain.clear()
        self._clearing.clear()
        self._forgetting.clear()

    def _forget_behind(self, index: int, record: dict[str, Any]) -> bool:
        """Whether a /forget-me queued after ``self._records[index]`` covers ``record``."""
        return any(
            later.get("op") == "forget" and record_holds_user(record, int(later["user"]))
            for later in self._records[index + 1 :]
        )
