"""What the slash-command tests on the real bot share: a channel memory given through
the service, the rows, events and markers it leaves, and a database that fails."""

from __future__ import annotations

import discord
from sqlalchemy import func, insert, select

from bot.cogs.refresh import REFRESH_MARKER_PREFIX
from bot.db.models import LongTermMemory, ShortTermMemory, StmEvent
from bot.db.storage import faults
from bot.vocabulary.model import Category
from tests.helpers.bot import KiokuHarness
from tests.helpers.interaction_responses import InteractionResult

SUMMARY = "Team picked Friday for the launch."
DISCORD_CONTENT_LIMIT = 2000
# A /stm categories set form filled in with two categories and a blank row between them.
TWO_CATEGORIES_TYPED = {
    "category_1": "Decisions: what we decided",
    "category_2": "",
    "category_3": "Open Questions: what is unsettled",
}


async def seed(
    kioku: KiokuHarness,
    *,
    channel: discord.abc.Snowflake | None = None,
    author: discord.abc.User | None = None,
    dm: bool = False,
    summary: str = SUMMARY,
    categories: dict[str, str] | None = None,
) -> None:
    """Give a channel a memory through the service (origin admin)."""
    channel_id = (channel or kioku.env.channel).id
    result = await kioku.bot.memory.admin_edit(
        guild_id=None if dm else kioku.env.guild.id,
        channel_id=channel_id,
        actor_user_id=(author or kioku.env.member).id,
        summary=None if categories is not None else summary,
        categories=categories,
    )
    assert result.ok, str(result)


async def stm_rows(kioku: KiokuHarness, channel_id: int | None = None) -> list[ShortTermMemory]:
    query = select(ShortTermMemory).order_by(ShortTermMemory.scope_kind)
    if channel_id is not None:
        query = query.where(ShortTermMemory.channel_id == channel_id)
    async with kioku.database.sessions() as session:
        return list(await session.scalars(query))


async def count(kioku: KiokuHarness, model: type[object]) -> int:
    async with kioku.database.sessions() as session:
        return int(await session.scalar(select(func.count()).select_from(model)) or 0)


async def events(kioku: KiokuHarness) -> list[StmEvent]:
    async with kioku.database.sessions() as session:
        return list(await session.scalars(select(StmEvent).order_by(StmEvent.id)))


async def use_categories(kioku: KiokuHarness, *labels: str) -> None:
    await kioku.bot.memory.set_categories(
        kioku.env.guild.id,
        kioku.env.member.id,
        [Category(i, label.lower(), label, f"{label} so far") for i, label in enumerate(labels)],
    )


def markers(kioku: KiokuHarness, channel: object) -> list[str]:
    return [
        sent.content
        for sent in kioku.env.sent_to(channel)
        if sent.content.startswith(REFRESH_MARKER_PREFIX)
    ]


def break_database(kioku: KiokuHarness) -> None:
    """The bot's database refuses every connection (until ``back``), and the bot's spool
    replayer stops: it would replay what the test spools once the database is back,
    racing the test's checks of what is pending (tests replay by hand, with
    ``kioku.bot.spool.replay``)."""
    faults(kioku.bot.memory.sessions).fail()
    for task in kioku.bot.tasks:
        if task.get_name() == "spool-replayer":
            task.cancel()


async def seed_user_data(kioku: KiokuHarness, user: discord.Member) -> None:
    await seed(kioku, author=user)
    async with kioku.database.sessions() as session, session.begin():
        await session.execute(
            insert(LongTermMemory).values(
                user_id=user.id, guild_id=None, content="likes tea", origin="model_tool"
            )
        )


async def forget_me_asked(kioku: KiokuHarness) -> tuple[discord.Member, InteractionResult]:
    """The harness's member, with memories of every kind (:func:`seed_user_data`), has run
    /forget-me: the member and the confirmation they were asked."""
    user = kioku.env.member
    await seed_user_data(kioku, user)
    return user, await kioku.interactions.slash("forget-me", user=user)
