"""The spool's record format, one JSON object a line: ``upsert``, ``clear``, ``forget``, ``blank``.

Defined in one place because a line written by one version of the bot may be replayed by
a later one; a line that does not validate here is never replayed (it is set aside).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from bot.db import EventRecord
from bot.vocabulary import Marker, Provenance, ScopeKey, StmEntry


def parse(raw: bytes) -> tuple[list[dict[str, Any]], list[bytes], bool]:
    """Valid records, unreadable complete lines, and whether the last line was torn."""
    # A torn line (no newline) never finished, so it was never acknowledged.
    lines = raw.split(b"\n")
    torn = lines.pop() != b""  # text after the last newline
    records: list[dict[str, Any]] = []
    bad: list[bytes] = []
    for line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line.decode("utf-8"))
            _validate(record)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError):
            bad.append(line)
            continue
        records.append(record)
    return records, bad, torn


def _validate(record: Any) -> None:
    """Raise unless ``record`` is an operation the spool can replay."""
    op = record["op"]
    if op == "upsert":
        for data in record["entries"]:
            entry_from_json(data)
            carried_row_created(data)
        for data in record["events"]:
            event_from_json(data)
        record_time(record, "started")
    elif op == "clear":
        int(record["channel"])
        record_time(record)
    elif op == "forget":
        int(record["user"])
        record_time(record)
    elif op == "blank":
        int(record["channel"])
        if "key" in record:  # one key's state only (see DurableSpool.blank_copy)
            key_from_json(record["key"])
    else:
        raise ValueError(f"unknown spool operation {op!r}")


def record_time(record: dict[str, Any], field: str = "at") -> datetime | None:
    """The time in ``record[field]`` (ISO), or None when it has none."""
    at = record.get(field)
    return datetime.fromisoformat(at) if at is not None else None


# A stored row whose text a spooled state carries: its creation time (ISO) and the
# users the copy of it was derived from (None: not recorded, by an older version).
Carried = tuple[str, list[int] | None]


# The spooled writes a spooled state is made of, since it was last built on a stored row
# or on nothing (see DurableSpool.append): per user they are derived from, the earliest
# start of one of their turns; and the earliest start of all ("users", "started"; ISO).
Chain = dict[str, Any]


def extend_chain(chain: Chain | None, users: set[int], started: str | None) -> Chain | None:
    """``chain`` with one more spooled write, derived from ``users``, begun at ``started``."""
    # ``started`` None: not recorded, nothing to add.
    if started is None:
        return chain
    at = datetime.fromisoformat(started)
    earliest: dict[str, str] = dict(chain["users"]) if chain else {}
    for user in map(str, users):
        if user not in earliest or at < datetime.fromisoformat(earliest[user]):
            earliest[user] = started
    if chain and datetime.fromisoformat(chain["started"]) <= at:
        started = chain["started"]
    return {"users": earliest, "started": started}


def carried_row_created(data: dict[str, Any]) -> datetime | None:
    """The stored row (its creation time) whose text a spooled entry carries, if any."""
    return record_time(data, "from_row")


def carried_users(data: dict[str, Any]) -> set[int] | None:
    """The users the carried text is derived from (None: not recorded, any forget counts)."""
    users = data.get("from_users")
    return {int(user) for user in users} if isinstance(users, list) else None


# ------------------------------------------------------------------- encoding


def key_to_json(key: ScopeKey) -> dict[str, Any]:
    """A memory's key as a record holds it."""
    return {"kind": key.kind, "channel": key.channel_id, "guild": key.guild_id, "user": key.user_id}


def key_from_json(data: dict[str, Any]) -> ScopeKey:
    """The memory's key a record holds."""
    if data["kind"] == "server":
        return ScopeKey("server", int(data["channel"]), data.get("guild"), None)
    return ScopeKey("user", int(data["channel"]), data.get("guild"), data.get("user"))


def entry_to_json(entry: StmEntry) -> dict[str, Any]:
    provenance = entry.provenance
    return {
        "key": key_to_json(entry.key),
        "updated_at": entry.updated_at.isoformat(),
        "parent": entry.parent_channel_id,
        "summary": entry.summary,
        # Copies: the record outlives this moment, the live cache entry does not stand
        # still (a later write of this process mutates its dict and list in place).
        "categories": dict(entry.categories),
        "turns": entry.turns_since_refresh,
        "refreshed": entry.last_refreshed_turn,
        "marker": [entry.marker.message_id, entry.marker.content_hash] if entry.marker else None,
        "contributors": list(entry.contributor_ids),
        "provenance": [
            provenance.origin,
            provenance.detail,
            provenance.actor_user_id,
            provenance.source_message_id,
        ]
        if provenance
        else None,
        "version": entry.version,
        "created": entry.created_at.isoformat() if entry.created_at else None,
    }


def entry_from_json(data: dict[str, Any]) -> StmEntry:
    marker = data.get("marker")
    provenance = data.get("provenance")
    return StmEntry(
        key=key_from_json(data["key"]),
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
        created_at=datetime.fromisoformat(data["created"]) if data.get("created") else None,
    )


def event_to_json(event: EventRecord) -> dict[str, Any]:
    """An audit event as a spooled write holds it."""
    return {
        "event": event.event,
        "key": key_to_json(event.key) if event.key else None,
        "origin": event.origin,
        "actor": event.actor_user_id,
        "message": event.message_id,
        "before": event.chars_before,
        "after": event.chars_after,
        "guild": event.guild_id,
        "channel": event.channel_id,
    }


def event_from_json(data: dict[str, Any]) -> EventRecord:
    """The audit event a spooled write holds."""
    return EventRecord(
        data["event"],
        key=key_from_json(data["key"]) if data.get("key") else None,
        origin=data.get("origin"),
        actor_user_id=data.get("actor"),
        message_id=data.get("message"),
        chars_before=data.get("before"),
        chars_after=data.get("after"),
        guild_id=data.get("guild"),
        channel_id=data.get("channel"),
    )


# ----------------------------------------------------------------- /forget-me


def line_holds_user(line: bytes, user_id: int) -> bool:
    """:func:`record_holds_user` for a line of a set-aside file, readable or not."""
    try:
        record = json.loads(line)
        if not isinstance(record, dict):
            raise ValueError
        return record_holds_user(record, user_id)
    except (ValueError, TypeError, AttributeError, IndexError, KeyError):
        return str(user_id).encode() in line  # unreadable: judged by the id alone


def record_holds_user(record: dict[str, Any], user_id: int) -> bool:
    """Whether a record holds the user's key, a memory they shaped, or their forget."""
    if record.get("op") == "forget":
        return bool(record.get("user") == user_id)
    for data in record.get("entries") or ():
        provenance = data.get("provenance") or [None, None, None, None]
        if (
            data.get("key", {}).get("user") == user_id
            or user_id in (data.get("contributors") or ())
            or provenance[2] == user_id
        ):
            return True
    return False
