"""Forgetting and listing: by id or by a query holding every word (never a guess), only what may
be shown here, pages, /memories clear, /forget-me and the audit trail, an outage storing
nothing."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from bot.config import Settings
from bot.db.engine import Database
from bot.db.models import LongTermMemory, StmEvent
from bot.memory.longterm.facts import LongTermService
from bot.vocabulary.errors import MemoryUnavailable
from bot.vocabulary.model import Place
from tests.helpers.builders import ALICE, BOB, GUILD, ManualClock, make_service, recall_notes
from tests.helpers.fake_llm import refused_base_url
from tests.integration.longterm.harness import (
    CAT,
    OTHER_GUILD,
    bulk_insert,
    by_model,
    events,
    remember,
    remember_apart,
    rows,
)

# ------------------------------------------------------------------ forgetting and listing


async def test_forget_by_id_only_deletes_the_owners_fact(
    service: LongTermService, db: Database
) -> None:
    fact = await remember(service, CAT)
    assert not await service.delete(BOB, fact)
    assert len(await rows(db)) == 1
    assert await service.delete(ALICE, fact)
    assert await rows(db) == []
    assert not await service.delete(ALICE, fact)
    assert await recall_notes(service, ALICE, GUILD, "cat", opted_in=False) == []
    forget = (await events(db))[-1]
    assert (forget.event, forget.user_id, forget.origin, forget.chars_after) == (
        "ltm_forget",
        ALICE,
        "user_command",
        0,
    )


async def test_forget_by_query_deletes_the_best_visible_match(
    service: LongTermService, db: Database
) -> None:
    await remember(service, "My cat likes tuna")
    cat = await remember(service, CAT)
    await remember(service, "My cat is called Miso in the other server", guild=OTHER_GUILD)
    result = await service.forget(ALICE, query="cat called miso", guild_id=GUILD)
    assert result.ids == [cat]
    assert len(await rows(db)) == 2
    nothing = await service.forget(ALICE, query="spaceships", guild_id=GUILD)
    assert nothing.deleted == ()
    with pytest.raises(ValueError):
        await service.forget(ALICE)


async def test_forget_by_query_does_not_delete_a_fact_that_shares_one_word(
    service: LongTermService, db: Database
) -> None:
    # "Forget that my sister is Anna": the model calls forget_memory(query="sister Anna").
    # There is no Anna fact (never saved, or already forgotten): another sister's fact,
    # which shares only the word "sister", must not be deleted in its place.
    await remember(service, "My sister is called Maria")
    result = await service.forget(ALICE, query="sister Anna", guild_id=GUILD)
    assert (result.deleted, result.candidates) == ((), ())
    assert len(await rows(db)) == 1


async def test_forget_by_query_prefers_the_fact_holding_every_word_over_a_newer_one(
    service: LongTermService, clock: ManualClock
) -> None:
    facts = ["My sister is called Anna", "My sister Maria lives in Berlin"]
    anna, _ = await remember_apart(service, clock, facts, days=90)
    result = await service.forget(ALICE, query="sister Anna", guild_id=GUILD)
    assert result.ids == [anna]


async def test_forget_by_query_does_not_guess_between_facts_holding_every_word(
    service: LongTermService, db: Database
) -> None:
    maria = await remember(service, "My sister is called Maria")
    anna = await remember(service, "My other sister is called Anna")
    await remember(service, "I live in Lisbon")
    result = await service.forget(ALICE, query="sisters", guild_id=GUILD)
    assert result.deleted == ()
    assert sorted(fact.id for fact in result.candidates) == [maria, anna]
    assert len(await rows(db)) == 3


async def test_a_fact_holding_every_word_ranks_before_a_newer_one_holding_some(
    service: LongTermService, clock: ManualClock
) -> None:
    facts = ["My sister Anna is a nurse", "My sister lives in Berlin and my sister visits often"]
    await remember_apart(service, clock, facts, days=365)
    query = "Where does my sister Anna work?"
    assert (await recall_notes(service, ALICE, GUILD, query, opted_in=False))[0] == (
        "My sister Anna is a nurse"
    )
    found = await service.search(ALICE, GUILD, "sister anna", opted_in=False)
    assert found[0].content == "My sister Anna is a nurse"


PUBLIC, PRIVATE = 1001, 1002


def public_only(channel_id: int) -> bool:
    return channel_id == PUBLIC


async def test_matches_from_channels_not_shown_here_do_not_take_the_visible_ones_places(
    service: LongTermService, db: Database, clock: ManualClock
) -> None:
    # Searching in #general (PUBLIC); the user also keeps many facts said in a staff
    # channel (PRIVATE), which may not be shown there.
    tea = "My favourite tea is sencha"
    await service.remember(ALICE, GUILD, tea, by_model(), channel_id=PUBLIC)
    clock.advance(days=1)
    await bulk_insert(
        db,
        ALICE,
        [f"Staff tea rota slot {n} belongs to shift {n}" for n in range(60)],
        channel_id=PRIVATE,
    )
    found = await service.search(ALICE, GUILD, "tea", opted_in=False, may_show=public_only)
    assert [f.content for f in found] == [tea]
    notes = await recall_notes(
        service, ALICE, GUILD, "which tea?", opted_in=False, may_show=public_only
    )
    assert notes == [tea]
    forgotten = await service.forget(ALICE, query="tea", guild_id=GUILD, may_show=public_only)
    assert [f.content for f in forgotten.deleted] == [tea]


async def test_a_fact_keeps_where_it_was_said(service: LongTermService, db: Database) -> None:
    thread = Place(PRIVATE, parent_channel_id=PUBLIC, private_thread=True)
    await service.remember(ALICE, GUILD, CAT, by_model(), place=thread)
    [row] = await rows(db)
    assert (row.channel_id, row.parent_channel_id, row.private_thread) == (PRIVATE, PUBLIC, True)
    # Restated in a channel every member reads: the fact is now from there.
    channel = Place(PUBLIC, readable_by_everyone=True)
    result = await service.remember(ALICE, GUILD, CAT + "!", by_model(), place=channel)
    assert result.status == "updated" and result.fact is not None
    assert result.fact.place == channel


async def test_list_pages_and_clear(
    service: LongTermService, db: Database, clock: ManualClock
) -> None:
    ids = []
    for i in range(12):
        ids.append(await remember(service, f"fact number {i} about topic {i}"))
        clock.advance(minutes=1)
    await remember(service, "Bob's", user=BOB)
    first = await service.list_facts(ALICE, 1, 5)
    assert (first.page, first.pages, first.total) == (1, 3, 12)
    assert [fact.id for fact in first.facts] == ids[::-1][:5]
    last = await service.list_facts(ALICE, 99, 5)
    assert last.page == 3 and [fact.id for fact in last.facts] == ids[::-1][10:]
    assert [f.id for f in await service.suggest(ALICE, f"#{ids[11]}")] == [ids[11]]
    assert len(await service.suggest(ALICE, "topic")) == 12

    assert await service.clear(ALICE) == 12
    assert await service.count(ALICE) == 0
    assert await service.count(BOB) == 1
    assert (await events(db))[-1].event == "ltm_clear"
    empty = await service.list_facts(ALICE)
    assert (empty.facts, empty.page, empty.pages, empty.total) == ((), 1, 1, 0)


async def test_list_pages_by_cursor_when_every_fact_has_the_same_time(
    service: LongTermService,
) -> None:
    # The clock never moves: only the id orders the facts, and paging by (updated_at,
    # id) must still skip none and repeat none, forward, back, and after new facts.
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima"
    ids = [await remember(service, f"fact {word} about {word}") for word in words.split()]
    newest_first = ids[::-1]
    p1 = await service.list_facts(ALICE, 1, 5)
    assert [f.id for f in p1.facts] == newest_first[:5]
    p2 = await service.list_facts(ALICE, page_size=5, older_than=p1.last)
    assert [f.id for f in p2.facts] == newest_first[5:10] and p2.page == 2
    p3 = await service.list_facts(ALICE, page_size=5, older_than=p2.last)
    assert [f.id for f in p3.facts] == newest_first[10:] and (p3.page, p3.pages) == (3, 3)
    back2 = await service.list_facts(ALICE, page_size=5, newer_than=p3.first)
    assert [f.id for f in back2.facts] == newest_first[5:10] and back2.page == 2
    back1 = await service.list_facts(ALICE, page_size=5, newer_than=back2.first)
    assert [f.id for f in back1.facts] == newest_first[:5]
    assert back1.page == 1 and not back1.has_previous
    # Two newer facts arrive; Previous from the old page 2 shows the five just newer.
    for word in ("mike", "november"):
        await remember(service, f"fact {word} about {word}")
    back = await service.list_facts(ALICE, page_size=5, newer_than=p2.first)
    assert [f.id for f in back.facts] == newest_first[:5]
    assert back.has_previous and (back.page, back.pages) == (2, 4)
    top = await service.list_facts(ALICE, page_size=5, newer_than=back.first)
    assert top.page == 1 and not top.has_previous and len(top.facts) == 5


async def test_forget_me_deletes_the_facts_and_takes_the_user_out_of_their_audit_events(
    service: LongTermService, db: Database, settings: Settings, clock: ManualClock
) -> None:
    await remember(service, CAT)
    await remember(service, "Bob likes jazz", user=BOB)
    before = await events(db)
    receipt = await make_service(db.sessions, settings, clock).forget_user(ALICE)
    assert (receipt.long_term, receipt.events) == (1, 1)
    assert [(row.user_id, row.content) for row in await rows(db)] == [(BOB, "Bob likes jazz")]
    # The log is append-only: Alice's event stays, naming nobody.
    after = {event.id: event for event in await events(db)}
    assert set(after) >= {event.id for event in before}
    assert ALICE not in {e.user_id for e in after.values()} | {
        e.actor_user_id for e in after.values()
    }
    assert BOB in {event.user_id for event in after.values()}


async def test_audit_events_never_hold_the_text(service: LongTermService, db: Database) -> None:
    fact = await remember(service, "my secret pelican")
    await service.delete(ALICE, fact)
    async with db.sessions() as session:
        dumped = [
            str(value)
            for event in await session.scalars(select(StmEvent))
            for value in vars(event).values()
        ]
    assert not any("pelican" in value for value in dumped)


async def test_a_database_outage_is_memory_unavailable_and_stores_nothing(
    settings: Settings, db: Database, clock: ManualClock
) -> None:
    broken = create_async_engine(
        refused_base_url().replace("http://", "postgresql+asyncpg://u:p@") + "db"
    )
    service = LongTermService(async_sessionmaker(broken), settings, clock)
    try:
        with pytest.raises(MemoryUnavailable):
            await service.remember(ALICE, GUILD, CAT, by_model())
        with pytest.raises(MemoryUnavailable):
            await recall_notes(service, ALICE, GUILD, "cat", opted_in=False)
        with pytest.raises(MemoryUnavailable):
            await service.list_facts(ALICE)
    finally:
        await broken.dispose()
    async with db.sessions() as session:
        assert await session.scalar(select(func.count()).select_from(LongTermMemory)) == 0


async def test_forget_by_query_finds_a_word_in_a_language_written_without_spaces(
    service: LongTermService, db: Database
) -> None:
    await remember(service, "私の猫の名前はミソです")
    await remember(service, "私の犬の名前はポチです")
    forgotten = await service.forget(ALICE, query="猫", guild_id=GUILD)
    assert [fact.content for fact in forgotten.deleted] == ["私の猫の名前はミソです"]
    assert [row.content for row in await rows(db)] == ["私の犬の名前はポチです"]


@pytest.mark.parametrize(
    ("fact", "query"),
    [
        ("My email is ann@example.com", "email ann@example.com"),
        ("My email is Ann@Example.COM", "my email ann@example.com"),
        ("My shoe size is 10.5", "shoe size 10.5"),
        ("My website is kioku.example.org", "website kioku.example.org"),
        ("I use Python 3.11.4 at work", "python 3.11.4"),
        ("I was born on 12/05/1990", "born 12/05/1990"),
    ],
)
async def test_forget_by_query_finds_the_words_of_an_email_a_host_a_number_or_a_date(
    service: LongTermService, db: Database, fact: str, query: str
) -> None:
    # The parser keeps "ann@example.com", "10.5", "3.11.4", "12/05/1990" as one token:
    # quoting the fact must still hold every word of the query.
    saved = await remember(service, fact)
    await remember(service, "I live in Lisbon")
    found = await service.search(ALICE, GUILD, query, opted_in=False)
    result = await service.forget(ALICE, query=query, guild_id=GUILD)
    assert [f.id for f in found] == [saved]
    assert result.ids == [saved]
    assert [row.content for row in await rows(db)] == ["I live in Lisbon"]


async def test_forget_by_query_holds_whole_words_of_a_token_never_parts_of_one(
    service: LongTermService, db: Database
) -> None:
    # "ann" is a word of "ann@example.com" but only a part of "annabel@example.com", and
    # "10" only a part of "100.5": neither fact holds every word of the query.
    await remember(service, "My email is annabel@example.com")
    await remember(service, "My shoe size is 100.5")
    for query in ("email ann@example.com", "shoe size 10"):
        result = await service.forget(ALICE, query=query, guild_id=GUILD)
        assert (result.deleted, result.candidates) == ((), ()), query
    assert len(await rows(db)) == 2
