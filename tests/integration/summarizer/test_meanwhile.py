"""What changes while the model answers wins over the summary built before it: a refresh, an
edit, a model write, memory turned off, new categories, a forget elsewhere; a database gone
meanwhile spools it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL

from bot.config import Settings
from bot.conversation.summarizer import (
    CATEGORIES_CHANGED_MEANWHILE,
    CHANGED_MEANWHILE,
    CLEARED_MEANWHILE,
    Summarizer,
)
from bot.db.engine import Database
from bot.db.storage import faults
from bot.memory.service import MemoryService
from bot.memory.spool.durable import DurableSpool, spool_path
from bot.memory.stm.change import WriteResult
from bot.memory.turn.types import TurnState
from bot.vocabulary.model import Category, Marker, ScopeKey
from tests.helpers.builders import ALICE, BOB, CAROL, CHANNEL, GUILD, message, prepare, two_services
from tests.helpers.fake_llm import ScriptedLLM, openai_client
from tests.helpers.faults import back
from tests.helpers.listening import start_process
from tests.integration.summarizer.harness import (
    EXISTING,
    SERVER_KEY,
    answer_held,
    channel_turn,
    post,
    rows,
    seed_summary,
    summarize,
    summarizing,
)


async def test_a_refresh_during_summarization_wins(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    await seed_summary(service)
    post(service, 4, "new")
    task, gate = await answer_held(summarizer, llm, "A summary that must never be stored.")

    await service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
    gate.set()
    outcome = await task

    assert (outcome.status, outcome.error) == ("failed", CLEARED_MEANWHILE)
    assert await rows(db) == []
    entry = await service.entry(SERVER_KEY)
    assert not entry.has_content and entry.marker is None


async def test_an_update_during_summarization_wins(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    await seed_summary(service)
    post(service, 4, "new")
    task, gate = await answer_held(summarizer, llm, "Built on the old summary.")

    edited = await service.admin_edit(
        guild_id=GUILD, channel_id=CHANNEL, actor_user_id=BOB, summary="Edited meanwhile."
    )
    assert edited.ok
    gate.set()
    outcome = await task

    assert (outcome.status, outcome.error) == ("failed", CHANGED_MEANWHILE)
    server = [r for r in await rows(db) if r.scope_kind == "server"]
    assert [r.summary for r in server] == ["Edited meanwhile."]


async def test_a_guild_with_memory_off_is_not_summarized(
    service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    await service.update_guild_settings(GUILD, ALICE, short_term_memory_enabled=False)
    post(service, 3, "new")

    assert (await summarize(summarizer)).status == "disabled"
    assert llm.requests == []


async def test_a_summary_finished_after_memory_was_turned_off_is_not_stored(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    post(service, 3, "new")
    task, gate = await answer_held(
        summarizer, llm, "A summary made while memory was being turned off."
    )
    await service.update_guild_settings(GUILD, BOB, short_term_memory_enabled=False)
    gate.set()
    outcome = await task

    assert (outcome.status, outcome.calls) == ("disabled", 1)
    assert await rows(db) == []


async def test_a_summary_finished_after_memory_was_turned_off_elsewhere_is_not_stored(
    db: Database, pg_url: URL, quick_settings: Settings, llm: ScriptedLLM
) -> None:
    a = await start_process(db, quick_settings, pg_url)
    b = await start_process(db, quick_settings, pg_url)
    try:
        summarizer = Summarizer(b.memory, openai_client(llm), quick_settings)
        b.memory.observe_message(CHANNEL, message(ALICE, "my new address is 12 Elm Street"))
        task, gate = await answer_held(summarizer, llm, "Alice moved to 12 Elm Street.")
        # The admin (served by process A) turns short-term memory off.
        await a.memory.update_guild_settings(GUILD, ALICE, short_term_memory_enabled=False)
        while (await b.next_notice()).get("t") != "guild":
            pass
        gate.set()
        outcome = await task
        assert outcome.status == "disabled"
        assert await rows(db) == []
    finally:
        await a.listener.close()
        await b.listener.close()


async def test_a_summary_finished_after_the_categories_changed_is_not_stored(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    await seed_summary(service)
    post(service, 3, "new")
    task, gate = await answer_held(
        summarizer, llm, "A summary, while the admin moved to categories."
    )
    await service.set_categories(GUILD, BOB, [Category(0, "goals", "Goals", "goals")])
    gate.set()
    outcome = await task

    assert (outcome.status, outcome.error) == ("failed", CATEGORIES_CHANGED_MEANWHILE)
    assert [r.summary for r in await rows(db) if r.scope_kind == "server"] == [EXISTING]


async def test_a_model_write_in_flight_when_the_summary_is_checked_is_not_overwritten(
    db: Database, service: MemoryService, summarizer: Summarizer, llm: ScriptedLLM
) -> None:
    """A model write holds the channel's lock (hydrating a key) when the summarizer's
    answer arrives; it commits first. The summary, built on the older memory, must not
    overwrite it (nor move the marker back): the version is checked under the lock."""
    first = post(service, 2, "old")
    await seed_summary(service, covered=first[-1], summary="Old summary.")
    new = post(service, 4, "new")
    task, gate = await answer_held(summarizer, llm, "Summary built on the old memory.")

    # A chat turn of Bob: its write holds the channel lock while Bob's user key is
    # still being loaded from the database.
    newest = post(service, 1, "even newer")
    turn = await channel_turn(service, BOB)
    turn.marker = Marker.of(newest[-1])
    release = asyncio.Event()
    loading = asyncio.Event()
    real_entry = service._reader.entry

    async def slow_entry(key: ScopeKey, **kw: object):  # type: ignore[no-untyped-def]
        if key == ScopeKey.user(BOB, CHANNEL, GUILD) and not release.is_set():
            loading.set()
            await release.wait()
        return await real_entry(key, **kw)  # type: ignore[arg-type]

    service._reader.entry = slow_entry  # type: ignore[method-assign]
    summarizer_writing = asyncio.Event()
    real_update = service.update_stm

    async def spy_update(turn: TurnState, **kw: Any) -> WriteResult:
        if kw.get("origin") == "summarizer":
            summarizer_writing.set()  # it goes on to wait for the channel's lock
        return await real_update(turn, **kw)

    service.update_stm = spy_update  # type: ignore[method-assign]
    model_write = asyncio.create_task(service.update_stm(turn, summary="Model's fresh update."))
    await asyncio.wait_for(loading.wait(), 10)
    gate.set()  # the summarizer's answer arrives while the model write holds the lock
    await asyncio.wait_for(summarizer_writing.wait(), 10)
    release.set()
    written = await model_write
    outcome = await task

    assert written.ok
    assert (outcome.status, outcome.error) == ("failed", CHANGED_MEANWHILE)
    server = [r for r in await rows(db) if r.scope_kind == "server"]
    assert server[0].summary == "Model's fresh update."
    assert server[0].covered_through_message_id == newest[-1].message_id
    assert new[-1].message_id < newest[-1].message_id


async def test_a_summary_made_while_the_database_went_down_is_spooled_not_dropped(
    db: Database,
    quick_settings: Settings,
    llm: ScriptedLLM,
    tmp_path: Path,
) -> None:
    spool = DurableSpool(spool_path(tmp_path / "spool"))
    service, summarizer = summarizing(db, quick_settings, llm, spool)
    await seed_summary(service)  # Alice's turn: the channel's memory is cached
    post(service, 4, "new")
    gate = llm.hold()
    llm.reply_text("The launch party is on Friday.")
    # Bob (a moderator who never spoke here) runs /stm summarize; the database goes
    # away while the model is answering.
    task = asyncio.create_task(summarize(summarizer, user=BOB))
    await llm.wait_for_requests(1)
    faults(service.sessions).fail()
    gate.set()
    outcome = await task

    assert (outcome.status, outcome.pending_sync, outcome.error) == ("updated", True, None)
    await back(service.sessions)
    await spool.replay(db.sessions)
    written = {(r.scope_kind, r.user_id): r.summary for r in await rows(db)}
    assert written[("server", None)] == written[("user", BOB)] == "The launch party is on Friday."


async def test_a_summary_built_on_a_memory_forgotten_elsewhere_unheard_is_not_stored(
    db: Database, quick_settings: Settings, llm: ScriptedLLM
) -> None:
    clock, a, b = two_services(db.sessions, quick_settings)
    summarizer = Summarizer(a, openai_client(llm), quick_settings)
    await seed_summary(a, summary="Alice's sister is Maria.")  # version 1, Alice's words
    a.listener_lost()  # A hears no notices (and reads the database on every use)
    for i in range(3):
        a.observe_message(CHANNEL, message(BOB, f"bob {i}"))
    gate = llm.hold()
    llm.reply_text("Alice's sister is Maria. Bob talked about tea.")
    clock.advance(seconds=1)
    task = asyncio.create_task(summarize(summarizer, user=BOB))
    await llm.wait_for_requests(1)
    # Process B: Alice's /forget-me deletes the row; Carol's turn then writes a new
    # memory there, whose row starts over at version 1.
    clock.advance(seconds=1)
    await b.forget_user(ALICE)
    carol = (await prepare(b, CAROL)).turn
    assert (await b.update_stm(carol, summary="Carol's new topic.")).ok
    gate.set()
    outcome = await task

    assert outcome.status == "failed"
    assert not any("Maria" in r.summary for r in await rows(db))
