"""What the long-term tests share: a fact, a token, a provenance, facts remembered or inserted in
bulk, the rows and events stored."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import insert, select
from sqlalchemy.engine import URL

from bot.config import Settings
from bot.db.engine import Database
from bot.db.models import LongTermMemory, StmEvent
from bot.memory.longterm.facts import LongTermService
from bot.vocabulary.model import Provenance
from tests.helpers.builders import ALICE, GUILD, ManualClock
from tests.helpers.database import make_test_settings

OTHER_GUILD = GUILD + 1
MESSAGE_ID = 444_444_444_444_444_444
DISCORD_TOKEN = "MTA4NzY1NDMyMTA5ODc2NTQzMg.GhJkLm.abcdefghijklmnopqrstuvwxyz0123456789AB"
CAT = "My cat is called Miso"


def by_model(message_id: int | None = MESSAGE_ID, user: int = ALICE) -> Provenance:
    return Provenance("model_tool", "test-model", user, message_id)


async def remember(
    service: LongTermService, text: str, *, guild: int | None = GUILD, user: int = ALICE
) -> int:
    result = await service.remember(user, guild, text, by_model(user=user))
    return result.id


async def rows(db: Database) -> list[LongTermMemory]:
    async with db.sessions() as session:
        return list(await session.scalars(select(LongTermMemory).order_by(LongTermMemory.id)))


async def events(db: Database) -> list[StmEvent]:
    async with db.sessions() as session:
        return list(await session.scalars(select(StmEvent).order_by(StmEvent.id)))


async def bulk_insert(db: Database, user: int, contents: list[str], **values: object) -> None:
    async with db.sessions() as session, session.begin():
        await session.execute(
            insert(LongTermMemory),
            [
                {"user_id": user, "guild_id": GUILD, "content": c, "origin": "import", **values}
                for c in contents
            ],
        )


def limited(pg_url: URL, tmp_path: Path, **longterm: int) -> Settings:
    return make_test_settings(pg_url, tmp_path, longterm=longterm)


async def remember_apart(
    service: LongTermService, clock: ManualClock, facts: list[str], **gap: float
) -> list[int]:
    """Alice's ``facts`` remembered in turn, the clock moved by ``gap`` between two: their
    ids."""
    ids = []
    for n, fact in enumerate(facts):
        if n:
            clock.advance(**gap)
        ids.append(await remember(service, fact))
    return ids


async def only_remember_event(db: Database) -> StmEvent:
    """The one audit event stored, which must be Alice's remember of the test message."""
    [event] = await events(db)
    assert (event.event, event.user_id, event.actor_user_id, event.message_id) == (
        "ltm_remember",
        ALICE,
        ALICE,
        MESSAGE_ID,
    )
    return event
