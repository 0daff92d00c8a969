"""Wipe records: when channels were cleared (``stm_clears``), users forgotten (``stm_forgets``)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import (
    ARRAY,
    BigInteger,
    LargeBinary,
    any_,
    bindparam,
    cast,
    delete,
    func,
    null,
    select,
    union_all,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

import bot.db.driver as driver
from bot.db.driver import DriverStatement
from bot.db.models import StmClear, StmForget


async def record_clear(session: AsyncSession, channel_id: int, at: datetime) -> None:
    statement = insert(StmClear).values(channel_id=channel_id, cleared_at=at)
    await session.execute(
        statement.on_conflict_do_update(
            index_elements=[StmClear.channel_id],
            set_={"cleared_at": func.greatest(StmClear.cleared_at, statement.excluded.cleared_at)},
        )
    )


async def clear_times(session: AsyncSession, channel_ids: Sequence[int]) -> dict[int, datetime]:
    rows = await session.execute(
        select(StmClear.channel_id, StmClear.cleared_at).where(
            StmClear.channel_id.in_(sorted(set(channel_ids)))
        )
    )
    return {channel_id: cleared_at for channel_id, cleared_at in rows.all()}


async def purge_clears(session: AsyncSession, before: datetime) -> int:
    result = await session.execute(
        delete(StmClear).where(StmClear.cleared_at < before).returning(StmClear.channel_id)
    )
    return len(result.all())


def user_hash(user_id: int) -> bytes:
    """What ``stm_forgets`` keeps of a forgotten user: a hash, not their id."""
    return hashlib.sha256(f"kioku-forget:{user_id}".encode()).digest()


async def record_forget(session: AsyncSession, user_id: int, at: datetime) -> None:
    await record_forget_digest(session, user_hash(user_id), at)


async def record_forget_digest(session: AsyncSession, digest: bytes, at: datetime) -> None:
    """Keep that the user of ``digest`` was forgotten at ``at`` (the later time wins)."""
    statement = insert(StmForget).values(user_hash=digest, forgotten_at=at)
    await session.execute(
        statement.on_conflict_do_update(
            index_elements=[StmForget.user_hash],
            set_={
                "forgotten_at": func.greatest(
                    StmForget.forgotten_at, statement.excluded.forgotten_at
                )
            },
        )
    )


async def forget_records(session: AsyncSession) -> list[tuple[bytes, datetime]]:
    """Every forgotten user's hash, with when they were forgotten."""
    rows = await session.execute(select(StmForget.user_hash, StmForget.forgotten_at))
    return [(bytes(digest), at) for digest, at in rows.all()]


async def forget_times(session: AsyncSession, user_ids: Iterable[int]) -> dict[int, datetime]:
    """When each of ``user_ids`` was last forgotten (those never forgotten are absent)."""
    by_hash = {user_hash(user_id): user_id for user_id in set(user_ids)}
    if not by_hash:
        return {}
    rows = await session.execute(
        select(StmForget.user_hash, StmForget.forgotten_at).where(
            StmForget.user_hash.in_(sorted(by_hash))
        )
    )
    return {by_hash[bytes(digest)]: at for digest, at in rows.all()}


# Built once, with arrays for parameters: one statement text whatever the number of
# channels and users, so it is compiled once and prepared once per connection (an
# expanding IN would be neither), and it runs on every STM write.
_WIPE_TIMES = union_all(
    select(
        StmClear.channel_id.label("channel"),
        cast(null(), LargeBinary).label("digest"),
        StmClear.cleared_at.label("at"),
    ).where(StmClear.channel_id == any_(bindparam("channels", type_=ARRAY(BigInteger)))),
    select(
        cast(null(), BigInteger).label("channel"),
        StmForget.user_hash.label("digest"),
        StmForget.forgotten_at.label("at"),
    ).where(StmForget.user_hash == any_(bindparam("digests", type_=ARRAY(LargeBinary)))),
)


_WIPE_TIMES_FOR_DRIVER = DriverStatement.compile(_WIPE_TIMES)


async def wipe_times(
    session: AsyncSession, channel_ids: set[int], user_ids: set[int]
) -> tuple[dict[int, datetime], dict[int, datetime]]:
    """:func:`clear_times` and :func:`forget_times` in one round trip."""
    by_hash = {user_hash(user_id): user_id for user_id in user_ids}
    rows = await driver.fetch(
        session,
        _WIPE_TIMES_FOR_DRIVER,
        {"channels": sorted(channel_ids), "digests": sorted(by_hash)},
    )
    cleared: dict[int, datetime] = {}
    forgotten: dict[int, datetime] = {}
    for channel, digest, at in rows:
        if digest is None:
            cleared[channel] = at
        else:
            forgotten[by_hash[bytes(digest)]] = at
    return cleared, forgotten


async def purge_forgets(session: AsyncSession, before: datetime) -> int:
    result = await session.execute(
        delete(StmForget).where(StmForget.forgotten_at < before).returning(StmForget.user_hash)
    )
    return len(result.all())
