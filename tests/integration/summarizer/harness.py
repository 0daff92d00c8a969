"""What the summarizer tests share: messages posted into the window, a seeded summary, the rows
and events stored, the prompts the model was sent, one run."""

from __future__ import annotations

import asyncio

from sqlalchemy import select

from bot.config import Settings
from bot.conversation.summarizer import Summarizer, SummaryOutcome
from bot.db.engine import Database
from bot.db.models import ShortTermMemory, StmEvent
from bot.memory.service import MemoryService
from bot.memory.spool.durable import DurableSpool
from bot.memory.turn.types import TurnState
from bot.vocabulary.model import Category, Marker, RawMessage, ScopeKey
from tests.helpers.builders import ALICE, BOB, CHANNEL, GUILD, make_service, message
from tests.helpers.fake_llm import ScriptedLLM, openai_client

EXISTING = "The team is planning a launch party."
SERVER_KEY = ScopeKey.server(GUILD, CHANNEL)


def post(
    service: MemoryService, count: int, prefix: str, channel: int = CHANNEL
) -> list[RawMessage]:
    """``count`` messages, alternating Alice and Bob, into the channel's raw window."""
    posted = []
    for i in range(1, count + 1):
        raw = message(ALICE if i % 2 else BOB, f"{prefix} {i}")
        service.observe_message(channel, raw)
        posted.append(raw)
    return posted


async def channel_turn(service: MemoryService, user: int = ALICE) -> TurnState:
    """``user``'s turn state in the test channel, as of now (no turn was prepared)."""
    return TurnState(
        channel_id=CHANNEL,
        user_id=user,
        guild_id=GUILD,
        config=await service.guild_config(GUILD),
        epoch=service.channel_epoch(CHANNEL),
    )


async def seed_summary(
    service: MemoryService, covered: RawMessage | None = None, summary: str = EXISTING
) -> None:
    """A summary written by an admin, covering the channel up to ``covered``."""
    turn = await channel_turn(service)
    marker = Marker.of(covered) if covered is not None else None
    result = await service.update_stm(turn, summary=summary, origin="admin", marker=marker)
    assert result.ok, str(result)


async def rows(db: Database, channel: int = CHANNEL) -> list[ShortTermMemory]:
    async with db.sessions() as session:
        query = (
            select(ShortTermMemory)
            .where(ShortTermMemory.channel_id == channel)
            .order_by(ShortTermMemory.scope_kind)
        )
        return list(await session.scalars(query))


async def events(db: Database) -> list[StmEvent]:
    async with db.sessions() as session:
        return list(await session.scalars(select(StmEvent).order_by(StmEvent.id)))


def user_prompt(llm: ScriptedLLM, i: int) -> str:
    messages = llm.messages(i)
    assert [m["role"] for m in messages] == ["system", "user"]
    content = messages[1]["content"]
    assert isinstance(content, str)
    return content


async def stored(db: Database) -> list[tuple[object, ...]]:
    """What the test channel's rows hold: memory, marker, origin and version."""
    return [
        (
            r.scope_kind,
            r.summary,
            dict(r.categories),
            r.covered_through_message_id,
            r.covered_through_hash,
            r.origin,
            r.version,
        )
        for r in await rows(db)
    ]


async def summarize(
    summarizer: Summarizer, channel: int = CHANNEL, user: int = ALICE
) -> SummaryOutcome:
    return await summarizer.summarize(
        guild_id=GUILD, channel_id=channel, actor_user_id=user, reason="test"
    )


# ------------------------------------------------------------------- category mode

CATEGORIES = [
    Category(0, "decisions", "Decisions", "what the group decided"),
    Category(1, "open_questions", "Open questions", "what is still unsettled"),
]


def summarizing(
    db: Database, settings: Settings, llm: ScriptedLLM, spool: DurableSpool | None = None
) -> tuple[MemoryService, Summarizer]:
    """A memory service on the test database (spooling to ``spool``, if given) and its
    summarizer on the scripted LLM, both under ``settings``."""
    service = make_service(db.sessions, settings, spool=spool)
    return service, Summarizer(service, openai_client(llm), settings)


async def answer_held(
    summarizer: Summarizer, llm: ScriptedLLM, answer: str
) -> tuple[asyncio.Task[SummaryOutcome], asyncio.Event]:
    """A run of ``summarizer`` under way, the model's ``answer`` held until the returned
    gate is set."""
    gate = llm.hold()
    llm.reply_text(answer)
    task = asyncio.create_task(summarize(summarizer))
    await llm.wait_for_requests(1)
    return task, gate
