"""The durable spool: memory operations the database refused, kept until it is back.

SPEC §2: a write that fails is never reported as success and never lost. When the
database refuses or times out, the operation (an STM upsert with its audit events, a
channel clear, a user's deletion) is appended to ``<data_dir>/spool/stm.jsonl`` and
fsynced *before* the caller is told "saved, pending sync". A background task replays the
log in order, with backoff, once the database answers again:

- upserts carry their versions, and the repository never lets an older version overwrite
  a newer row, so replaying a stale write is harmless;
- a clear or a deletion recorded after a write is replayed after it, so nothing the user
  wiped while the database was down comes back.

A crash can leave a torn last line; it was never acknowledged, so it is skipped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from tenacity import AsyncRetrying, retry_if_exception_type, wait_exponential

from bot.db.notify import send_notice, stm_notice
from bot.db.repositories import guilds as guild_repo
from bot.db.repositories import stm as stm_repo
from bot.db.repositories.stm import EventRecord
from bot.memory.model import Marker, Provenance, ScopeKey, StmEntry

log = logging.getLogger(__name__)

SPOOL_FILE = Path("spool") / "stm.jsonl"
REPLAY_BATCH = 100


def spool_path(data_dir: Path) -> Path:
    return data_dir / SPOOL_FILE


def count_pending(data_dir: Path) -> int:
    """Operations waiting in a data folder's spool (for ``kioku doctor``), without
    opening it for writing."""
    path = spool_path(data_dir)
    if not path.exists():
        return 0
    return sum(1 for _ in _read_records(path))


def _read_records(path: Path) -> list[dict[str, Any]]:
    records = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            try:
                records.append(json.loads(line))
            except ValueError:
                log.warning("skipping a torn spool line (never acknowledged)")
    return records


# ------------------------------------------------------------------- encoding


def _key_to_json(key: ScopeKey) -> dict[str, Any]:
    return {"kind": key.kind, "channel": key.channel_id, "guild": key.guild_id, "user": key.user_id}


def _key_from_json(data: dict[str, Any]) -> ScopeKey:
    if data["kind"] == "server":
        return ScopeKey("server", int(data["channel"]), data.get("guild"), None)
    return ScopeKey("user", int(data["channel"]), data.get("guild"), data.get("user"))


def entry_to_json(entry: StmEntry) -> dict[str, Any]:
    provenance = entry.provenance
    return {
        "key": _key_to_json(entry.key),
        "updated_at": entry.updated_at.isoformat(),
        "parent": entry.parent_channel_id,
        "summary": entry.summary,
        "categories": entry.categories,
        "turns": entry.turns_since_refresh,
        "refreshed": entry.last_refreshed_turn,
        "marker": [entry.marker.message_id, entry.marker.content_hash] if entry.marker else None,
        "contributors": entry.contributor_ids,
        "provenance": [
            provenance.origin,
            provenance.detail,
            provenance.actor_user_id,
            provenance.source_message_id,
        ]
        if provenance
        else None,
        "version": entry.version,
    }


def entry_from_json(data: dict[str, Any]) -> StmEntry:
    marker = data.get("marker")
    provenance = data.get("provenance")
    return StmEntry(
        key=_key_from_json(data["key"]),
        updated_at=datetime.fromisoformat(data["updated_at"]),
        parent_channel_id=data.get("parent"),
        summary=data.get("summary", ""),
        categories=dict(data.get("categories") or {}),
        turns_since_refresh=int(data.get("turns", 0)),
        last_refreshed_turn=int(data.get("refreshed", 0)),
        marker=Marker(int(marker[0]), str(marker[1])) if marker else None,
        contributor_ids=[int(c) for c in data.get("contributors") or ()],
        provenance=Provenance(provenance[0], provenance[1], provenance[2], provenance[3])
        if provenance
        else None,
        version=int(data["version"]),
    )


def _event_to_json(event: EventRecord) -> dict[str, Any]:
    return {
        "event": event.event,
        "key": _key_to_json(event.key) if event.key else None,
        "origin": event.origin,
        "actor": event.actor_user_id,
        "message": event.message_id,
        "before": event.chars_before,
        "after": event.chars_after,
        "guild": event.guild_id,
        "channel": event.channel_id,
    }


def _event_from_json(data: dict[str, Any]) -> EventRecord:
    return EventRecord(
        data["event"],
        key=_key_from_json(data["key"]) if data.get("key") else None,
        origin=data.get("origin"),
        actor_user_id=data.get("actor"),
        message_id=data.get("message"),
        chars_before=data.get("before"),
        chars_after=data.get("after"),
        guild_id=data.get("guild"),
        channel_id=data.get("channel"),
    )


# ---------------------------------------------------------------------- spool


class DurableSpool:
    """An append-only, fsynced operation log with in-order replay."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._records: list[dict[str, Any]] = _read_records(path) if path.exists() else []
        self._latest: dict[ScopeKey, StmEntry] = {}
        for record in self._records:
            self._track(record)
        self._handle = path.open("a", encoding="utf-8")
        self._wake: asyncio.Event | None = None
        # One replay at a time: two would both drop the same batch from the log.
        self._replaying = asyncio.Lock()

    @property
    def pending(self) -> int:
        return len(self._records)

    def latest(self, key: ScopeKey) -> StmEntry | None:
        """The newest spooled (not yet replayed) state of ``key``: newer than its row."""
        return self._latest.get(key)

    # -- appending (synchronous: the caller must not be told "saved" before fsync)

    def append(self, entries: Sequence[StmEntry], events: Sequence[EventRecord] = ()) -> None:
        self._write(
            {
                "op": "upsert",
                "entries": [entry_to_json(e) for e in entries],
                "events": [_event_to_json(e) for e in events],
            }
        )

    def append_clear(
        self, channel_id: int, guild_id: int | None, actor_user_id: int | None
    ) -> None:
        self._write(
            {"op": "clear", "channel": channel_id, "guild": guild_id, "actor": actor_user_id}
        )

    def append_forget(self, user_id: int) -> None:
        self._write({"op": "forget", "user": user_id})

    def _write(self, record: dict[str, Any]) -> None:
        self._handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._records.append(record)
        self._track(record)
        if self._wake is not None:
            self._wake.set()

    def _track(self, record: dict[str, Any]) -> None:
        op = record.get("op")
        if op == "upsert":
            for data in record["entries"]:
                entry = entry_from_json(data)
                self._latest[entry.key] = entry
        elif op == "clear":
            for key in [k for k in self._latest if k.channel_id == record["channel"]]:
                del self._latest[key]
        elif op == "forget":
            user = record["user"]
            for key, entry in list(self._latest.items()):
                if key.user_id == user or user in entry.contributor_ids:
                    del self._latest[key]

    # -- replaying

    async def replay(self, sessions: async_sessionmaker[AsyncSession]) -> int:
        """Apply every pending operation in order; return how many. Raises on the first
        database failure, leaving the rest (and the failed batch) pending."""
        done = 0
        async with self._replaying:
            while self._records:
                batch = self._records[:REPLAY_BATCH]
                async with sessions() as session, session.begin():
                    for record in batch:
                        await _apply(session, record)
                del self._records[: len(batch)]
                self._rewrite()
                done += len(batch)
            self._latest.clear()
        return done

    def _rewrite(self) -> None:
        """Replace the file with the records still pending (atomically)."""
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("w", encoding="utf-8") as handle:
            for record in self._records:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self._handle.close()
        os.replace(tmp, self.path)
        self._handle = self.path.open("a", encoding="utf-8")

    async def run_replayer(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        on_replayed: Any = None,
        max_wait_seconds: float = 60.0,
    ) -> None:
        """Forever: wait for pending operations, replay them, back off while the
        database is unavailable (exponential, capped at ``max_wait_seconds``)."""
        self._wake = asyncio.Event()
        while True:
            if not self._records:
                self._wake.clear()
                await self._wake.wait()
            async for attempt in AsyncRetrying(
                retry=retry_if_exception_type(Exception),
                wait=wait_exponential(multiplier=0.5, max=max_wait_seconds),
                reraise=True,
            ):
                with attempt:
                    replayed = await self.replay(sessions)
            log.info("spool: replayed %d pending memory operations", replayed)
            if on_replayed is not None:
                on_replayed()

    def close(self) -> None:
        self._handle.close()


async def _apply(session: AsyncSession, record: dict[str, Any]) -> None:
    op = record.get("op")
    if op == "upsert":
        # A stale version is skipped by the repository: replay never overwrites newer.
        entries = [entry_from_json(e) for e in record["entries"]]
        await stm_repo.upsert_entries(session, entries)
        await stm_repo.add_events(session, [_event_from_json(e) for e in record["events"]])
        await send_notice(session, stm_notice("spool", entries))
    elif op == "clear":
        await stm_repo.delete_channel(session, int(record["channel"]))
        await send_notice(session, {"o": "spool", "t": "clear", "c": int(record["channel"])})
        await stm_repo.add_events(
            session,
            [
                EventRecord(
                    "refresh",
                    guild_id=record.get("guild"),
                    channel_id=int(record["channel"]),
                    actor_user_id=record.get("actor"),
                )
            ],
        )
    elif op == "forget":
        user_id = int(record["user"])
        await stm_repo.delete_user(session, user_id)
        await guild_repo.delete_long_term_of_user(session, user_id)
        await guild_repo.delete_user_settings(session, user_id)
        await stm_repo.delete_events_of_user(session, user_id)
        await stm_repo.add_events(session, [EventRecord("forget")])
        await send_notice(session, {"o": "spool", "t": "forget", "u": user_id})
    else:
        log.error("spool: unknown operation %r skipped", op)
