"""Applying spooled records to the database, never bringing back what a wipe removed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.db import (
    delete_channel_rows,
    delete_user_rows,
    open_session,
    send_notice,
    sqlstate,
    stm_notice,
)
from bot.db.repositories import stm as stm_repo
from bot.memory.spool.records import (
    carried_row_created,
    carried_users,
    entry_from_json,
    event_from_json,
    record_time,
)
from bot.vocabulary import ScopeKey, StmEntry

# The spool's logger: its replay reports under one name with the rest of the spool.
log = logging.getLogger("bot.memory.spool.durable")


# SQLSTATE classes that blame the record, not the server: data exception (a value out of
# range, invalid text…) and integrity constraint violation. Only these are set aside.
RECORD_SQLSTATE_CLASSES = frozenset({"22", "23"})
REPLAY_TIMEOUT_SECONDS = 30.0


def refused_record(exc: BaseException) -> bool:
    """Whether ``exc`` says this record can never be stored (anything else is an outage)."""
    if isinstance(exc, TimeoutError | OSError | ConnectionError):
        return False
    code = sqlstate(exc)
    return code is not None and code[:2] in RECORD_SQLSTATE_CLASSES


def _channels(records: Sequence[dict[str, Any]]) -> list[int]:
    channels: set[int] = set()
    for record in records:
        if record.get("op") == "upsert":
            channels.update(int(e["key"]["channel"]) for e in record["entries"])
        elif record.get("op") == "clear":
            channels.add(int(record["channel"]))
    return sorted(channels)


async def apply_all(
    sessions: async_sessionmaker[AsyncSession],
    records: Sequence[dict[str, Any]],
    origin: str,
) -> None:
    """Apply ``records`` in order in one transaction (all or none); raise on a failure."""
    async with asyncio.timeout(REPLAY_TIMEOUT_SECONDS):
        async with open_session(sessions, "replaying the spool") as session, session.begin():
            # The forget lock, then every channel of the batch, up front and in order (as
            # live writes take them): two processes replaying at once (both after the same
            # outage), or a replay and a live write or /forget-me, cannot deadlock.
            forgets = any(record.get("op") == "forget" for record in records)
            await stm_repo.lock_forgets(session, shared=not forgets)
            await stm_repo.lock_channels(session, _channels(records), shared=False)
            for record in records:
                await _apply(session, record, origin)


async def _carries_wiped(
    session: AsyncSession, entries: Sequence[StmEntry], encoded: Sequence[dict[str, Any]]
) -> bool:
    """Whether an entry of a spooled write carries a stored row's text a wipe removed since."""
    # A row gone for another user's /forget-me (words another process added to it,
    # unheard here: this copy holds none of them) does not count.
    for entry, data in zip(entries, encoded, strict=True):
        created_at = carried_row_created(data)
        if created_at is None:
            continue
        row = await stm_repo.load_entry(session, entry.key)
        if await carried_row_wiped(session, entry.key, row, created_at, carried_users(data)):
            return True
    return False


async def _chain_wiped(
    session: AsyncSession, entries: Sequence[StmEntry], encoded: Sequence[dict[str, Any]]
) -> bool:
    """Whether a wipe refuses one of the spooled writes an entry was built on (its ``chain``)."""
    # As stm_repo.writes_refused would each: a clear after the earliest of their turns
    # began, a forget at or after the earliest turn derived from that user began.
    chains = [
        (entry, data["chain"])
        for entry, data in zip(entries, encoded, strict=True)
        if data.get("chain")
    ]
    if not chains:
        return False
    cleared, forgotten = await stm_repo.wipe_times(
        session,
        {entry.key.channel_id for entry, _ in chains},
        {int(user) for _, chain in chains for user in chain["users"]},
    )
    for entry, chain in chains:
        at = cleared.get(entry.key.channel_id)
        if at is not None and at > datetime.fromisoformat(chain["started"]):
            return True
        for user, started in chain["users"].items():
            at = forgotten.get(int(user))
            if at is not None and at >= datetime.fromisoformat(started):
                return True
    return False


async def carried_row_wiped(
    session: AsyncSession,
    key: ScopeKey,
    row: StmEntry | None,
    created_at: datetime,
    users: set[int] | None,
) -> bool:
    """Whether the row of ``key`` made at ``created_at`` is gone, and a wipe of it came since."""
    # ``row``: what the database holds now; ``users``: whom the carried text is derived
    # from (None: not recorded, judged by the row alone).
    if row is not None and row.created_at == created_at:
        return False
    if users is None:  # recorded by an older version: judged as before, by the row
        return True
    cleared, forgotten = await stm_repo.wipe_times(session, {key.channel_id}, users)
    return any(at >= created_at for at in (*cleared.values(), *forgotten.values()))


async def _apply(session: AsyncSession, record: dict[str, Any], origin: str) -> None:
    op = record.get("op")
    if op == "blank":
        return  # local bookkeeping only (see DurableSpool.blank_channel)
    if op == "upsert":
        entries = [entry_from_json(e) for e in record["entries"]]
        # Never writes back what a /refresh or a /forget-me (in any process, also one
        # this process never heard of) wiped after the turn started.
        if await stm_repo.writes_refused(session, [(entries, record_time(record, "started"))]):
            return
        # Nor what was wiped before the turn began, where this process had not heard of
        # it (cut off from the database and the notices, it wrote on its cached copy).
        # (A live write is refused by its version for the same reason.)
        if await _carries_wiped(session, entries, record["entries"]):
            log.info("spool: a write was skipped, the memory it was built on was wiped since")
            return
        # Nor the text of earlier spooled writes whose own replay a wipe refuses (this
        # process wrote on top of them before it heard of the wipe).
        if await _chain_wiped(session, entries, record["entries"]):
            log.info("spool: a write was skipped, it carries spooled writes wiped since")
            return
        # Nor overwrites a row updated after it was spooled (by another process).
        stored = await stm_repo.replay_entries(session, entries)
        if not stored:
            log.info("spool: a write was skipped, its memory was updated since elsewhere")
            return
        await stm_repo.add_events(session, [event_from_json(e) for e in record["events"]])
        await send_notice(session, stm_notice(origin, stored))
    elif op == "clear":
        channel_id = int(record["channel"])
        at = record_time(record)
        # The channel's lock is held (see apply_all): the clear time cannot move meanwhile.
        if await _covered(stm_repo.clear_times, session, channel_id, at):
            return
        # This process queued its own later writes behind the clear in the spool.
        await delete_channel_rows(
            session,
            channel_id,
            at,
            guild_id=record.get("guild"),
            actor_user_id=record.get("actor"),
            origin=origin,
        )
    elif op == "forget":
        user_id = int(record["user"])
        at = record_time(record)
        # The forget lock is held exclusively (see apply_all): no other /forget-me is
        # recorded meanwhile.
        if await _covered(stm_repo.forget_times, session, user_id, at):
            return
        # This process queued its own later writes behind it in the spool.
        await delete_user_rows(session, user_id, at, origin=origin)


async def _covered(
    recorded_times: Callable[[AsyncSession, list[int]], Awaitable[dict[int, datetime]]],
    session: AsyncSession,
    wiped_id: int,
    at: datetime | None,
) -> bool:
    """Whether the deletion the database recorded of ``wiped_id`` (a channel cleared, a
    user forgotten: ``recorded_times`` reads when) covers one made at ``at``."""
    recorded = (await recorded_times(session, [wiped_id])).get(wiped_id)
    # Replayed already (a crash before the spool was rewritten), or a later wipe deleted
    # everything before it, so what is there now came after. No time: always applied.
    return at is not None and recorded is not None and recorded >= at
