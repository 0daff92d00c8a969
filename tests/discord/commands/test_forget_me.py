"""/forget-me on the real bot: the confirmation, what it deletes, and a deletion queued
while the database is down."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import func, select

from bot.cogs.privacy import CANCELLED, NOT_YOURS
from bot.db.models import LongTermMemory, StmEvent
from bot.vocabulary.model import ScopeKey
from tests.helpers.bot import KiokuHarness
from tests.helpers.faults import back
from tests.helpers.stm_commands import (
    break_database,
    count,
    events,
    forget_me_asked,
    seed,
    seed_user_data,
    stm_rows,
)


async def test_forget_me_confirm_deletes_everything_and_shows_the_receipt(
    kioku: KiokuHarness,
) -> None:
    user, asked = await forget_me_asked(kioku)
    assert asked.ephemeral
    assert asked.content is not None and asked.content.startswith("**Forget me**")
    assert [b["label"] for b in asked.response.buttons] == ["Delete my memories", "Cancel"]  # type: ignore[union-attr]
    assert [b["style"] for b in asked.response.buttons] == [4, 2]  # type: ignore[union-attr]

    done = await kioku.interactions.click(asked, label="Delete my memories", user=user)

    assert done.content == (
        "**Done.** I deleted everything derived from your messages:\n"
        "• 1 memory of yours\n"
        "• 1 shared memory built from your messages\n"
        "• 1 long-term memory\n"
        "• 2 audit entries no longer naming you\n"
        "• 0 cached messages and 2 cached memories"
    )
    assert asked.components == []  # the buttons are gone
    assert await stm_rows(kioku) == []
    assert await count(kioku, LongTermMemory) == 0
    assert (
        kioku.bot.memory.cache.get(ScopeKey.server(kioku.env.guild.id, kioku.env.channel.id))
        is None
    )


async def test_a_double_click_on_forget_me_deletes_once_and_keeps_the_receipt(
    kioku: KiokuHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    user, asked = await forget_me_asked(kioku)
    calls = 0
    forget = kioku.bot.memory.forget_user

    async def counted(user_id: int) -> Any:
        nonlocal calls
        calls += 1
        return await forget(user_id)

    monkeypatch.setattr(kioku.bot.memory, "forget_user", counted)

    await asyncio.gather(
        kioku.interactions.click(asked, label="Delete my memories", user=user),
        kioku.interactions.click(asked, label="Delete my memories", user=user),
    )

    assert calls == 1
    assert asked.content is not None and asked.content.startswith("**Done.**")
    assert "• 1 memory of yours" in asked.content
    async with kioku.database.sessions() as session:
        forgets = await session.scalar(
            select(func.count())
            .select_from(StmEvent)
            .where(StmEvent.event == "forget", StmEvent.channel_id.is_(None))
        )
    assert forgets == 1  # one request recorded, not two


async def test_forget_me_cancel_deletes_nothing(kioku: KiokuHarness) -> None:
    user, asked = await forget_me_asked(kioku)

    cancelled = await kioku.interactions.click(asked, label="Cancel", user=user)

    assert cancelled.content == CANCELLED
    assert asked.components == []
    assert len(await stm_rows(kioku)) == 2
    assert await count(kioku, LongTermMemory) == 1


async def test_forget_me_buttons_refuse_another_user(kioku: KiokuHarness) -> None:
    user = kioku.env.member
    other = await kioku.env.create_member("other")
    await seed_user_data(kioku, user)
    asked = await kioku.interactions.slash("forget-me", user=user)

    refused = await kioku.interactions.click(asked, label="Delete my memories", user=other)

    assert refused.ephemeral and refused.content == NOT_YOURS
    assert len(await stm_rows(kioku)) == 2
    assert await count(kioku, LongTermMemory) == 1
    assert asked.custom_ids  # still there for its owner
    done = await kioku.interactions.click(asked, label="Delete my memories", user=user)
    assert done.content is not None and done.content.startswith("**Done.**")


async def test_forget_me_works_in_a_dm(kioku: KiokuHarness) -> None:
    user = kioku.env.member
    await seed(kioku, channel=kioku.env.dm_channel(user), dm=True, author=user)
    asked = await kioku.interactions.slash("forget-me", user=user, dm=True)
    done = await kioku.interactions.click(asked, label="Delete my memories", user=user)
    assert done.content is not None and "• 1 memory of yours" in done.content
    assert await stm_rows(kioku) == []


async def test_forget_me_with_the_database_down_is_spooled_and_says_so(
    kioku: KiokuHarness,
) -> None:
    user, asked = await forget_me_asked(kioku)
    break_database(kioku)
    assert len(await stm_rows(kioku)) == 2 and await count(kioku, LongTermMemory) == 1
    done = await kioku.interactions.click(asked, label="Delete my memories", user=user)
    assert "the stored copies are deleted as soon as it is back" in done.content
    await back(kioku.bot.memory.sessions)
    await kioku.bot.spool.replay(kioku.bot.memory.sessions)
    assert await stm_rows(kioku) == []
    assert await count(kioku, LongTermMemory) == 0, "the long-term fact goes too"
    assert [e for e in await events(kioku) if e.actor_user_id == user.id] == []
    assert kioku.bot.memory.pending_sync == 0
