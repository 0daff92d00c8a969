"""Long-term memory on real PostgreSQL: provenance, limits, near-duplicates, scoping,
recall within the budget, full-text relevance, redaction and the audit trail."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from bot.config import Settings
from bot.conversation.turn import TurnRequest, TurnRunner
from bot.db.engine import Database
from bot.db.models import LongTermMemory, ShortTermMemory, StmEvent
from bot.memory.longterm.facts import FactRefused, LongTermService
from bot.memory.longterm.near_duplicates import is_near_duplicate
from bot.vocabulary.errors import MemoryUnavailable
from bot.vocabulary.model import Place, Provenance
from bot.vocabulary.search_words import SearchWords, query_words
from tests.helpers.builders import (
    ALICE,
    BOB,
    BOT,
    CHANNEL,
    EPOCH,
    GUILD,
    OTHER_CHANNEL,
    ManualClock,
    make_longterm,
    make_service,
)
from tests.helpers.database import make_test_settings
from tests.helpers.fake_llm import ScriptedLLM, openai_client, refused_base_url

OTHER_GUILD = GUILD + 1
MESSAGE_ID = 444_444_444_444_444_444
DISCORD_TOKEN = "MTA4NzY1NDMyMTA5ODc2NTQzMg.GhJkLm.abcdefghijklmnopqrstuvwxyz0123456789AB"
CAT = "My cat is called Miso"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def service(db: Database, settings: Settings, clock: ManualClock) -> LongTermService:
    return LongTermService(db.sessions, settings, clock)


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


# ------------------------------------------------------------------ storing


async def test_remember_stores_the_fact_with_its_provenance_and_an_audit_event(
    service: LongTermService, db: Database
) -> None:
    result = await service.remember(ALICE, GUILD, "Remember: " + CAT, by_model())
    assert result.created and result.status == "created" and result.evicted_ids == ()

    [row] = await rows(db)
    assert row.id == result.id
    assert (row.user_id, row.guild_id, row.content) == (ALICE, GUILD, "Remember: " + CAT)
    assert (row.origin, row.origin_detail, row.source_message_id) == (
        "model_tool",
        "test-model",
        MESSAGE_ID,
    )
    assert row.created_at == row.updated_at == EPOCH
    assert (row.recall_count, row.last_recalled_at) == (0, None)

    [event] = await events(db)
    assert (event.event, event.user_id, event.actor_user_id, event.message_id) == (
        "ltm_remember",
        ALICE,
        ALICE,
        MESSAGE_ID,
    )
    assert (event.origin, event.chars_before, event.chars_after) == (
        "model_tool",
        None,
        len("Remember: " + CAT),
    )
    assert event.guild_id is None  # a server's /stm history does not list personal facts


async def test_a_fact_is_capped_at_500_characters(service: LongTermService, db: Database) -> None:
    result = await service.remember(ALICE, GUILD, "Tofu " * 200, by_model())
    assert result.truncated
    [row] = await rows(db)
    assert len(row.content) <= 500 and row.content.startswith("Tofu Tofu")
    exact = await service.remember(BOB, GUILD, "x" * 500, by_model(user=BOB))
    assert not exact.truncated


async def test_a_fact_shortened_at_a_grapheme_boundary_is_reported_as_shortened(
    service: LongTermService, db: Database
) -> None:
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # one grapheme, 5 code points
    result = await service.remember(ALICE, GUILD, "a" * 498 + family, by_model())
    [row] = await rows(db)
    assert row.content == "a" * 498  # the emoji does not fit whole, so it is dropped
    assert result.truncated
    fits = await service.remember(BOB, GUILD, "a" * 495 + family, by_model(user=BOB))
    assert not fits.truncated


async def test_a_password_stated_in_words_is_stored_redacted(
    service: LongTermService, db: Database
) -> None:
    await service.remember(ALICE, GUILD, "My wifi password is Tr0ub4dor&3", by_model())
    await service.remember(ALICE, GUILD, "The wifi password is on the fridge", by_model())
    assert [row.content for row in await rows(db)] == [
        "My wifi password is [REDACTED:credential]",
        "The wifi password is on the fridge",
    ]


async def test_a_discord_token_in_a_fact_is_stored_redacted(
    service: LongTermService, db: Database
) -> None:
    await service.remember(ALICE, GUILD, f"my token is {DISCORD_TOKEN}", by_model())
    [row] = await rows(db)
    assert DISCORD_TOKEN not in row.content
    assert "GhJkLm" not in row.content and "MTA4NzY1" not in row.content
    assert row.content.startswith("my token is [REDACTED")


async def test_a_fact_empty_after_sanitizing_is_refused(
    service: LongTermService, db: Database
) -> None:
    with pytest.raises(FactRefused, match="empty"):
        await service.remember(ALICE, GUILD, "\x00\x01  \u200b ", by_model())
    assert await rows(db) == []
    assert await events(db) == []


async def test_the_200th_fact_fits_and_the_201st_evicts_the_least_recalled_oldest(
    service: LongTermService, db: Database
) -> None:
    # 199 facts recalled once, then two never recalled: the older of those goes first.
    await bulk_insert(db, ALICE, [f"old thing {i}" for i in range(199)], recall_count=1)
    await bulk_insert(db, ALICE, ["the never recalled older fact"], created_at=EPOCH)
    assert len(await rows(db)) == 200
    older = (await rows(db))[-1].id

    result = await service.remember(ALICE, GUILD, "a brand new fact about kayaks", by_model())

    assert result.created and result.evicted_ids == (older,)
    stored = await rows(db)
    assert len(stored) == 200
    assert older not in {row.id for row in stored}
    assert "a brand new fact about kayaks" in {row.content for row in stored}
    evict, remember_event = (await events(db))[-2:]
    assert (evict.event, evict.user_id, evict.chars_before) == (
        "ltm_evict",
        ALICE,
        len("the never recalled older fact"),
    )
    assert remember_event.event == "ltm_remember"
    # Another user's memory is never touched.
    assert (await service.remember(BOB, GUILD, "Bob's first fact", by_model(user=BOB))).created


async def test_the_cap_comes_from_the_settings(
    db: Database, pg_url: URL, tmp_path: Path, clock: ManualClock
) -> None:
    service = LongTermService(db.sessions, limited(pg_url, tmp_path, max_facts_per_user=3), clock)
    ids = []
    for fact in ("likes tea", "owns a bike", "speaks Dutch"):
        ids.append(await remember(service, fact))
        clock.advance(minutes=1)
    await service.search(ALICE, GUILD, "bike", opted_in=False)  # a recall spares a fact
    await service.search(ALICE, GUILD, "dutch", opted_in=False)
    result = await service.remember(ALICE, GUILD, "plays chess", by_model())
    assert result.evicted_ids == (ids[0],)
    assert {row.content for row in await rows(db)} == {"owns a bike", "speaks Dutch", "plays chess"}


# ------------------------------------------------------------------ near-duplicates


NEAR_DUPLICATES = [
    ("My cat is called Miso.", "my cat is called miso!"),
    ("My cat is called Miso", "My cat is named Tofu"),
    ("my favourite colour is blue", "My favorite color is green"),
    ("My name is Robert", "my name is Bob"),
    ("I work at Acme Corp as a senior engineer", "I work at Acme Corp as senior engineer"),
    ("🐱  🐶", "🐱 🐶"),
    # One value extending the other, for a subject that names one value.
    ("My timezone is UTC", "My timezone is UTC+2"),
    ("My timezone is UTC+2", "My timezone is UTC"),
    ("My name is Ann", "My name is Ann Smith"),
    ("My name is Ann", "My name is Ann-Marie"),
    ("My favorite food is sushi", "My favorite food is sushi."),
]
DIFFERENT = [
    ("My cat is black", "My cat is fat"),
    ("My cat is called Miso", "My dog is called Rex"),
    ("I like tea", "I like coffee in the morning with milk"),
    ("My cat is called Miso", "My cat is called Miso and she loves tuna and chasing laser dots"),
    ("🐱", "🐶"),
    ("🐱", "cat"),
    # Job and address are described, not named: two statements are two facts.
    ("My job is boring", "My job is remote"),
    ("My address is in Lyon", "My address is easy to find"),
    # An extension that starts another statement is more than a longer value.
    ("My name is Ann", "My name is Ann and I like cats"),
    ("My timezone is UTC", "My timezone is UTC in winter"),
    # ... and so is one after a separator: restating part of a fact must not overwrite
    # the rest of it (the allergy, the diet, the phone number), nor the reverse.
    ("My favorite food is sushi, allergic to peanuts", "my favorite food is sushi"),
    ("My age is 34, vegan since 2019", "my age is 34"),
    ("My email is ann@x.com, phone 555 1234", "my email is ann@x.com"),
    ("my email is ann@x.com", "My email is ann@x.com, phone 555 1234"),
    ("My favorite food is sushi. Allergic to peanuts", "my favorite food is sushi"),
    ("My name is Ann - she/her", "my name is Ann"),
    # A subject with no value yet is not a value.
    ("My email is", "My email is ann@example.com"),
]


@pytest.mark.parametrize(("old", "new"), NEAR_DUPLICATES)
def test_near_duplicates_are_recognised(old: str, new: str) -> None:
    assert is_near_duplicate(new, old)


@pytest.mark.parametrize(("old", "new"), DIFFERENT)
def test_different_facts_are_not_near_duplicates(old: str, new: str) -> None:
    assert not is_near_duplicate(new, old)


async def test_a_near_duplicate_updates_the_fact_instead_of_adding_one(
    service: LongTermService, db: Database, clock: ManualClock
) -> None:
    first = await remember(service, CAT)
    clock.advance(days=1)
    result = await service.remember(
        ALICE, GUILD, "My cat is named Tofu", by_model(message_id=MESSAGE_ID + 1)
    )
    assert (result.id, result.status, result.created) == (first, "updated", False)
    [row] = await rows(db)
    assert row.content == "My cat is named Tofu"
    assert row.source_message_id == MESSAGE_ID + 1
    assert row.created_at == EPOCH and row.updated_at == clock.now()
    update = (await events(db))[-1]
    assert (update.event, update.chars_before, update.chars_after) == (
        "ltm_remember",
        len(CAT),
        len("My cat is named Tofu"),
    )
    # A different fact about the cat is a new row.
    assert (await service.remember(ALICE, GUILD, "My cat is black", by_model())).created
    assert len(await rows(db)) == 2


async def test_a_single_valued_fact_restated_with_a_longer_value_replaces_the_old_one(
    service: LongTermService, db: Database
) -> None:
    first = await service.remember(ALICE, GUILD, "My timezone is UTC", by_model())
    second = await service.remember(ALICE, GUILD, "My timezone is UTC+2", by_model())
    assert (second.status, second.id) == ("updated", first.id)
    assert [row.content for row in await rows(db)] == ["My timezone is UTC+2"]


async def test_two_descriptions_of_ones_job_are_two_facts(
    service: LongTermService, db: Database
) -> None:
    await service.remember(ALICE, GUILD, "My job is boring", by_model())
    result = await service.remember(ALICE, GUILD, "My job is remote", by_model())
    assert result.status == "created"
    assert [row.content for row in await rows(db)] == ["My job is boring", "My job is remote"]


async def test_the_same_fact_in_another_place_is_a_separate_fact(
    service: LongTermService, db: Database
) -> None:
    a = await remember(service, CAT, guild=GUILD)
    b = await remember(service, CAT, guild=OTHER_GUILD)
    c = await remember(service, CAT, guild=None)
    d = await remember(service, CAT, guild=GUILD, user=BOB)
    assert len({a, b, c, d}) == 4
    assert len(await rows(db)) == 4


# ------------------------------------------------------------------ recall


async def test_days_later_the_fact_is_recalled_in_its_guild_and_not_in_another(
    service: LongTermService, db: Database, clock: ManualClock
) -> None:
    await service.remember(ALICE, GUILD, "Remember that " + CAT, by_model())
    clock.advance(days=12)

    notes = await service.recall_notes(ALICE, GUILD, "what is my cat called?", opted_in=False)
    assert notes == ["Remember that " + CAT]
    assert await service.recall_notes(ALICE, OTHER_GUILD, "my cat?", opted_in=True) == []
    assert await service.recall_notes(BOB, GUILD, "my cat?", opted_in=False) == []

    [row] = await rows(db)
    assert (row.recall_count, row.last_recalled_at) == (1, clock.now())


async def test_facts_unrelated_to_the_message_are_still_recalled_after_the_matches(
    service: LongTermService, clock: ManualClock
) -> None:
    await remember(service, CAT)
    clock.advance(hours=1)
    await remember(service, "I live in Lisbon")
    notes = await service.recall_notes(ALICE, GUILD, "hello there", opted_in=False)
    assert notes == ["I live in Lisbon", CAT]  # no match: newest first
    notes = await service.recall_notes(ALICE, GUILD, "any cat news?", opted_in=False)
    assert notes == [CAT, "I live in Lisbon"]  # the match first


async def test_dm_facts_stay_in_dms_and_server_facts_reach_dms_only_when_opted_in(
    service: LongTermService,
) -> None:
    await remember(service, "server fact about llamas", guild=GUILD)
    await remember(service, "other server fact about llamas", guild=OTHER_GUILD)
    await remember(service, "dm fact about llamas", guild=None)

    assert await service.recall_notes(ALICE, None, "llamas", opted_in=False) == [
        "dm fact about llamas"
    ]
    assert sorted(await service.recall_notes(ALICE, None, "llamas", opted_in=True)) == [
        "dm fact about llamas",
        "other server fact about llamas",
        "server fact about llamas",
    ]
    # A DM fact never appears in a server, opted in or not.
    assert await service.recall_notes(ALICE, GUILD, "llamas", opted_in=True) == [
        "server fact about llamas"
    ]


async def test_recall_stops_before_the_character_budget_would_be_exceeded(
    db: Database, pg_url: URL, tmp_path: Path, clock: ManualClock
) -> None:
    service = LongTermService(db.sessions, limited(pg_url, tmp_path), clock)
    assert service.limits.recall_char_budget == 1200
    head = "Fact {} about gardens "
    facts = [head.format(i) + "x" * (300 - len(head.format(i))) for i in range(5)]
    for fact in facts:
        assert len(fact) == 300
        await remember(service, fact)
        clock.advance(minutes=1)
    notes = await service.recall_notes(ALICE, GUILD, "gardens", opted_in=False)
    assert len(notes) == 4 and sum(map(len, notes)) == 1200

    small = LongTermService(
        db.sessions, limited(pg_url, tmp_path / "small", recall_char_budget=650), clock
    )
    notes = await small.recall_notes(ALICE, GUILD, "gardens", opted_in=False)
    assert len(notes) == 2
    off = LongTermService(
        db.sessions, limited(pg_url, tmp_path / "off", recall_char_budget=0), clock
    )
    assert await off.recall_notes(ALICE, GUILD, "gardens", opted_in=False) == []


async def test_a_fact_too_long_for_the_rest_of_the_budget_does_not_crowd_out_short_ones(
    db: Database, pg_url: URL, tmp_path: Path, clock: ManualClock
) -> None:
    service = LongTermService(db.sessions, limited(pg_url, tmp_path, recall_char_budget=700), clock)
    # The short fact is the oldest and the least relevant, so it ranks last.
    await remember(service, "Gardens: water twice a week.")
    clock.advance(days=3)
    await remember(service, "Gardens and gardens: tomatoes in the south gardens. " + "x" * 300)
    clock.advance(minutes=1)
    await remember(service, "Gardens and gardens: roses in the gardens in March. " + "y" * 300)

    notes = await service.recall_notes(ALICE, GUILD, "gardens", opted_in=False)

    # The two long facts do not fit together (700 characters); the short one still does.
    assert len(notes) == 2
    assert any("water twice a week" in note for note in notes)


async def test_full_text_relevance_orders_the_facts(
    service: LongTermService, clock: ManualClock
) -> None:
    await remember(service, "My cat likes tuna and naps on the tuna tin")
    clock.advance(days=1)
    await remember(service, CAT)
    clock.advance(days=1)
    await remember(service, "I go hiking in the Alps every summer")
    clock.advance(days=1)
    await remember(service, "My sister has a cat too")

    notes = await service.recall_notes(ALICE, GUILD, "Does my cat like tuna?", opted_in=False)
    assert notes[0] == "My cat likes tuna and naps on the tuna tin"
    assert set(notes[1:3]) == {CAT, "My sister has a cat too"}
    assert notes[3] == "I go hiking in the Alps every summer"

    hits = await service.search(ALICE, GUILD, "hiking alps", opted_in=False)
    assert [fact.content for fact in hits] == ["I go hiking in the Alps every summer"]
    assert await service.search(ALICE, GUILD, "the and of", opted_in=False) == []


async def test_recency_orders_equally_relevant_facts(
    service: LongTermService, clock: ManualClock
) -> None:
    await remember(service, "I play the cello")
    clock.advance(days=60)
    await remember(service, "I play the drums")
    notes = await service.recall_notes(ALICE, GUILD, "what do I play", opted_in=False)
    assert notes == ["I play the drums", "I play the cello"]


@pytest.mark.parametrize(
    "query",
    [
        "'); DROP TABLE long_term_memories; --",
        '"unbalanced quote or -minus & | ! <-> :* \\',
        "",
        "   ",
        "🐱🐱🐱",
        "a" * 10_000,
    ],
)
async def test_any_query_text_is_safe(service: LongTermService, db: Database, query: str) -> None:
    await remember(service, CAT)
    notes = await service.recall_notes(ALICE, GUILD, query, opted_in=False)
    assert notes == [CAT]
    assert len(await rows(db)) == 1


def test_query_words_are_plain_words() -> None:
    assert query_words("What's my CAT's name? cats & dogs | -x") == [
        "cat",
        "name",
        "cats",
        "dogs",
        "dog",
    ]
    assert query_words(" ".join(f"word{i}" for i in range(100))) == [
        f"word{i}" for i in range(68, 100)
    ]


def test_query_words_keep_the_end_of_a_long_text_and_singulars_do_not_count() -> None:
    # A long message usually ends with its question.
    words = query_words(" ".join(f"plans{i}" for i in range(40)) + " what is my cat called?")
    assert words[-2:] == ["cat", "called"]
    # 30 plurals and their 30 singulars: all kept, the added forms take no place.
    plurals = [f"boat{i}s" for i in range(30)]
    words = query_words(" ".join(plurals))
    assert words[::2] == plurals and len(words) == 60


def test_search_words_group_each_query_word_with_its_forms() -> None:
    # What the repository's search is handed: the words, the full-text terms, and per
    # word its forms split into substring-matched (another script) and Latin ones.
    found = SearchWords.of("my cats' 猫 box")
    assert found.words == ("cats", "cat", "猫", "box")
    assert found.terms == ("cats", "cat", "猫", "box", "boxes")
    assert [group.forms for group in found.groups] == [("cats", "cat"), ("猫",), ("box", "boxes")]
    assert [group.substrings for group in found.groups] == [(), ("猫",), ()]
    assert [group.latin for group in found.groups] == [("cats", "cat"), (), ("box", "boxes")]
    assert SearchWords.of("is it the") == SearchWords((), (), ())


async def test_a_long_message_still_recalls_the_fact_its_question_is_about(
    service: LongTermService, clock: ManualClock
) -> None:
    await remember(service, CAT)
    for n in range(40):
        clock.advance(hours=1)
        await remember(service, f"Reminder {n}: project deadline number {n} is important")
    # A long Discord message (about 400 characters) that ends with the question.
    story = (
        "Long day today. Woke up early, walked downtown, grabbed breakfast burritos, "
        "argued with coworkers regarding quarterly budgets, fixed three flaky builds, "
        "reviewed pull requests, answered emails, skipped lunch, drove home through "
        "heavy traffic, watched football highlights, cooked pasta, washed dishes, "
        "folded laundry. Anyway, what was my cat called again?"
    )
    notes = await service.recall_notes(ALICE, GUILD, story, opted_in=False)
    assert notes[0] == CAT


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
    assert await service.recall_notes(ALICE, GUILD, "cat", opted_in=False) == []
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
    anna = await remember(service, "My sister is called Anna")
    clock.advance(days=90)
    await remember(service, "My sister Maria lives in Berlin")
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
    await remember(service, "My sister Anna is a nurse")
    clock.advance(days=365)
    await remember(service, "My sister lives in Berlin and my sister visits often")
    query = "Where does my sister Anna work?"
    assert (await service.recall_notes(ALICE, GUILD, query, opted_in=False))[0] == (
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
    notes = await service.recall_notes(
        ALICE, GUILD, "which tea?", opted_in=False, may_show=public_only
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
            await service.recall_notes(ALICE, GUILD, "cat", opted_in=False)
        with pytest.raises(MemoryUnavailable):
            await service.list_facts(ALICE)
    finally:
        await broken.dispose()
    async with db.sessions() as session:
        assert await session.scalar(select(func.count()).select_from(LongTermMemory)) == 0


# ------------------------------------------------------------------ singular and plural


@pytest.mark.parametrize(
    ("words", "terms"),
    [
        pytest.param(["cat"], ["cat", "cats"], id="adds-plural"),
        pytest.param(["cats", "cat"], ["cats", "cat"], id="plural-query-unchanged"),
        pytest.param(["box"], ["box", "boxes"], id="x-es"),
        pytest.param(["glass"], ["glass", "glasses"], id="ss-es"),
        pytest.param(["church"], ["church", "churches"], id="ch-es"),
        pytest.param(["city"], ["city", "cities"], id="y-ies"),
        pytest.param(["day"], ["day", "days"], id="vowel-y-s"),
        pytest.param(["cities", "citie"], ["cities", "city", "citie"], id="ies-y"),
        pytest.param(["boxes", "boxe"], ["boxes", "box", "boxe"], id="xes-x"),
        pytest.param(["tomato"], ["tomato", "tomatos", "tomatoes"], id="o-s-oes"),
        pytest.param(["tomatoes", "tomatoe"], ["tomatoes", "tomato", "tomatoe"], id="oes-o"),
        pytest.param(["photos", "photo"], ["photos", "photo", "photoes"], id="os-o"),
        pytest.param(["42", "v2", "foo_bar", "猫"], ["42", "v2", "foo_bar", "猫"], id="not-words"),
    ],
)
def test_search_terms_add_the_other_number(words: list[str], terms: list[str]) -> None:
    from bot.vocabulary.search_words import search_terms

    assert search_terms(words) == terms


PLURAL_CATS = "I have two cats, Miso and Tofu"


@pytest.mark.parametrize(
    ("fact", "query", "found"),
    [
        pytest.param(PLURAL_CATS, "cat", True, id="singular-query-plural-fact"),
        pytest.param(PLURAL_CATS, "cats", True, id="plural-query-plural-fact"),
        pytest.param(CAT, "cats", True, id="plural-query-singular-fact"),
        pytest.param("I keep my letters in boxes", "box", True, id="box-boxes"),
        pytest.param("My favourite city is Porto", "cities", True, id="cities-city"),
        pytest.param("I lived in three cities", "city", True, id="city-cities"),
        pytest.param("I am allergic to tomatoes", "allergic tomato", True, id="tomato-tomatoes"),
        pytest.param("My tomato plant died", "tomatoes", True, id="tomatoes-tomato"),
        pytest.param("I keep my photos on a NAS", "photo", True, id="photo-photos"),
        pytest.param("I work in catering", "cat", False, id="no-prefix-match"),
        pytest.param(PLURAL_CATS, "cat'):* | !cats --", True, id="query-syntax-is-plain"),
    ],
)
async def test_a_query_finds_the_fact_in_either_number(
    service: LongTermService, db: Database, fact: str, query: str, found: bool
) -> None:
    await remember(service, fact)
    hits = await service.search(ALICE, GUILD, query, opted_in=False)
    assert [hit.content for hit in hits] == ([fact] if found else [])
    forgotten = await service.forget(ALICE, query=query, guild_id=GUILD)
    assert [fact.content for fact in forgotten.deleted] == ([fact] if found else [])
    assert len(await rows(db)) == (0 if found else 1)


async def test_added_word_forms_do_not_let_recency_outweigh_relevance(
    service: LongTermService, clock: ManualClock
) -> None:
    # Both words match the older fact, one matches the newer: relevance must still win
    # (ts_rank averages over the query's terms, so the added plurals must not halve it).
    await remember(service, "My cat eats tuna")
    clock.advance(days=20)
    await remember(service, CAT)
    notes = await service.recall_notes(ALICE, GUILD, "cat tuna", opted_in=False)
    assert notes == ["My cat eats tuna", CAT]


# ------------------------------------------------- near-duplicates, non-English words

DISTINCT = [
    (
        "My cat likes to sleep on the warm laptop keyboard in the evening",
        "My dog likes to sleep on the warm laptop keyboard in the evening",
    ),
    (
        "My sister works as a nurse at the city hospital on weekdays",
        "My brother works as a nurse at the city hospital on weekdays",
    ),
    (
        "my son tom is allergic to peanuts and tree nuts",
        "my son ben is allergic to peanuts and tree nuts",
    ),
    (
        "She works at the city hospital on weekends as a nurse",
        "He works at the city hospital on weekends as a nurse",
    ),
    ("I get up before sunrise on workdays", "I get up after sunrise on workdays"),
]


@pytest.mark.parametrize(("old", "new"), DISTINCT)
def test_facts_about_different_subjects_are_not_near_duplicates(old: str, new: str) -> None:
    assert not is_near_duplicate(new, old)


async def test_remembering_the_dog_does_not_erase_the_cat(
    service: LongTermService, db: Database
) -> None:
    await remember(service, DISTINCT[0][0])
    result = await service.remember(ALICE, GUILD, DISTINCT[0][1], by_model())
    assert result.created, "the dog fact replaced the cat fact"
    assert len(await rows(db)) == 2


# Trivial restatements of one fact.
VARIANTS = [
    ("I am allergic to peanuts", "I'm allergic to peanuts"),
    ("I am vegan", "I'm vegan"),
    ("User's cat is called Miso", "The user's cat is called Miso."),
]


@pytest.mark.parametrize(("old", "new"), VARIANTS)
def test_trivial_variants_are_near_duplicates(old: str, new: str) -> None:
    assert is_near_duplicate(new, old)


@pytest.mark.parametrize(
    ("fact", "query"),
    [
        ("Ich wohne in der Hauptstraße 5", "Hauptstraße"),
        ("Mein Lieblingsessen ist Grießbrei", "grießbrei"),
        ("Η γάτα μου λέγεται Μίσος", "Μίσος"),
        # Scripts written without spaces: a word inside a run is found as a substring.
        ("私の猫の名前はミソです", "猫"),
        ("私の猫の名前はミソです", "猫の名前"),
        ("我的猫叫米索", "猫"),
        ("แมวของฉันชื่อมิโซะ", "แมว"),
    ],
)
async def test_a_non_english_word_finds_its_fact(
    service: LongTermService, fact: str, query: str
) -> None:
    await remember(service, fact)
    await remember(service, "I live in Lisbon")
    found = await service.search(ALICE, GUILD, query, opted_in=False)
    assert [f.content for f in found] == [fact]


async def test_forget_by_query_finds_a_word_in_a_language_written_without_spaces(
    service: LongTermService, db: Database
) -> None:
    await remember(service, "私の猫の名前はミソです")
    await remember(service, "私の犬の名前はポチです")
    forgotten = await service.forget(ALICE, query="猫", guild_id=GUILD)
    assert [fact.content for fact in forgotten.deleted] == ["私の猫の名前はミソです"]
    assert [row.content for row in await rows(db)] == ["私の犬の名前はポチです"]


async def test_a_substring_match_is_ranked_and_its_wildcards_are_plain_characters(
    service: LongTermService,
) -> None:
    await remember(service, "猫x犬は仲良し")  # "_" must not match the "x"
    await remember(service, "猫_犬のメモ")
    assert [f.content for f in await service.search(ALICE, GUILD, "猫_犬", opted_in=False)] == [
        "猫_犬のメモ"
    ]
    await remember(service, "私の猫はミソです")
    # Both words are in the first fact, one in the second: relevance orders them.
    notes = await service.recall_notes(ALICE, GUILD, "猫 犬", opted_in=False)
    assert notes[-1] == "私の猫はミソです"
    assert set(notes[:2]) == {"猫x犬は仲良し", "猫_犬のメモ"}


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


async def test_a_word_inside_an_email_is_found_without_the_fact_naming_it(
    service: LongTermService,
) -> None:
    email = "My email is ann@example.com"
    await remember(service, email)
    await remember(service, "I live in Lisbon")
    found = await service.search(ALICE, GUILD, "ann@example.com", opted_in=False)
    assert [f.content for f in found] == [email]


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


def test_one_character_of_a_script_without_spaces_is_a_query_word() -> None:
    assert query_words("猫") == ["猫"]
    assert query_words("a 猫 é") == ["猫"]


# ------------------------------------------------------------------ forget-me


async def test_a_remember_from_a_turn_that_started_before_forget_me_is_refused(
    db: Database, settings: Settings
) -> None:
    clock = ManualClock()
    memory = make_service(db.sessions, settings, clock)
    service = LongTermService(db.sessions, settings, clock)
    started = clock.now()
    clock.advance(seconds=1)
    await memory.forget_user(ALICE)  # /forget-me while the model was thinking
    clock.advance(seconds=5)

    with pytest.raises(FactRefused, match="forget-me"):
        await service.remember(ALICE, GUILD, "My cat is Miso", by_model(), started_at=started)
    assert (await service.list_facts(ALICE)).total == 0
    # A turn that starts after the /forget-me may save facts again.
    result = await service.remember(
        ALICE, GUILD, "My cat is Miso", by_model(), started_at=clock.now()
    )
    assert result.created


@pytest.mark.parametrize(
    ("wipe", "said"),
    [
        (lambda runner: runner.memory.forget_user(ALICE), "forget-me"),
        (lambda runner: runner.longterm.clear(ALICE), "memories clear"),
    ],
    ids=["forget-me", "memories-clear"],
)
async def test_a_remember_in_flight_during_a_wipe_does_not_survive_it(
    db: Database,
    settings: Settings,
    llm: ScriptedLLM,
    wipe: Callable[[TurnRunner], Awaitable[object]],
    said: str,
) -> None:
    memory = make_service(db.sessions, settings)
    runner = TurnRunner(
        memory, openai_client(llm), settings, longterm=make_longterm(memory), persona="p"
    )
    llm.reply_tool_calls([("remember", {"fact": "My cat is called Miso"})]).reply_text("Noted!")
    held = llm.hold()
    request = TurnRequest(
        channel_id=CHANNEL,
        user_id=ALICE,
        source_message_id=10,
        content="remember that my cat is called Miso",
        bot_user_id=BOT,
        guild_id=GUILD,
    )
    turn = asyncio.create_task(runner.run(request))
    await llm.wait_for_requests(1)  # the model is thinking about the request
    await wipe(runner)  # confirmed by the user meanwhile
    held.set()
    await turn

    assert (await runner.longterm.list_facts(ALICE)).total == 0
    tool_result = next(m for m in llm.messages(1) if m["role"] == "tool")
    assert said in tool_result["content"]


# ------------------------------------------------------------------ /memories clear


async def test_a_remember_from_a_turn_that_started_before_memories_clear_is_refused(
    db: Database, settings: Settings
) -> None:
    clock = ManualClock()
    service = LongTermService(db.sessions, settings, clock)
    await service.remember(ALICE, GUILD, "My dog is Rex", by_model())
    started = clock.now()
    clock.advance(seconds=1)
    assert await service.clear(ALICE) == 1  # /memories clear while the model was thinking
    clock.advance(seconds=5)

    with pytest.raises(FactRefused, match="memories clear"):
        await service.remember(ALICE, GUILD, "My cat is Miso", by_model(), started_at=started)
    assert (await service.list_facts(ALICE)).total == 0
    # Another user's turn of the same age is not concerned.
    other = await service.remember(BOB, GUILD, "I like tea", by_model(), started_at=started)
    assert other.created
    # A turn that starts after the clear may save facts again.
    result = await service.remember(
        ALICE, GUILD, "My cat is Miso", by_model(), started_at=clock.now()
    )
    assert result.created


async def test_a_clear_with_nothing_to_delete_still_refuses_an_older_turns_fact(
    db: Database, settings: Settings
) -> None:
    clock = ManualClock()
    service = LongTermService(db.sessions, settings, clock)
    started = clock.now()
    clock.advance(seconds=1)
    assert await service.clear(ALICE) == 0

    with pytest.raises(FactRefused, match="memories clear"):
        await service.remember(ALICE, GUILD, "My cat is Miso", by_model(), started_at=started)
    assert (await service.list_facts(ALICE)).total == 0


# ------------------------------------------------------------------ recall cache


class HeldRecall(LongTermService):
    """The real service; a test may hold one recall after its query ran and committed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hold: asyncio.Event | None = None
        self.queried = asyncio.Event()

    async def recall_notes(self, *args: Any, **kwargs: Any) -> list[str]:
        notes = await super().recall_notes(*args, **kwargs)
        hold, self.hold = self.hold, None
        if hold is not None:
            self.queried.set()
            await hold.wait()
        return notes


def turn_request(channel: int, content: str, message_id: int) -> TurnRequest:
    return TurnRequest(
        channel_id=channel,
        user_id=ALICE,
        source_message_id=message_id,
        content=content,
        bot_user_id=BOT,
        guild_id=GUILD,
    )


async def test_a_fact_remembered_while_another_channel_recalls_is_not_hidden_there(
    db: Database, settings: Settings, llm: ScriptedLLM
) -> None:
    memory = make_service(db.sessions, settings)
    longterm = HeldRecall(db.sessions, settings, memory.clock)
    runner = TurnRunner(memory, openai_client(llm), settings, persona="p", longterm=longterm)
    chatting = turn_request(OTHER_CHANNEL, "what should I feed my cat", 1)
    asking = turn_request(CHANNEL, "remember that my cat is called Miso", 2)

    # Alice's turn in one channel recalls (nothing yet) while, in another (another channel
    # lock), her "remember that…" turn stores a fact.
    longterm.hold = release = asyncio.Event()
    recall = asyncio.create_task(runner.recall.notes(chatting, False))
    await longterm.queried.wait()
    remember_tool = runner._long_term_tools(asking, False, None)["remember"]
    assert (await remember_tool.run('{"fact": "My cat is called Miso"}')).ok
    release.set()
    assert await recall == []  # that turn started before the fact existed

    # Her next turn there sees the fact: "no facts here" was not cached by the first.
    assert await runner.recall.notes(chatting, False) == [CAT]


async def test_a_scope_without_facts_is_not_queried_again(
    db: Database, settings: Settings, llm: ScriptedLLM
) -> None:
    memory = make_service(db.sessions, settings)
    runner = TurnRunner(
        memory, openai_client(llm), settings, longterm=make_longterm(memory), persona="p"
    )
    chatting = turn_request(CHANNEL, "what should I feed my cat", 1)
    assert await runner.recall.notes(chatting, False) == []
    # A fact that did not come through this process's remember (another shard's): the
    # scope is remembered as empty, so the query is not run again.
    await bulk_insert(db, ALICE, [CAT])
    assert await runner.recall.notes(chatting, False) == []
    # A save through this process clears that.
    remember_tool = runner._long_term_tools(chatting, False, None)["remember"]
    assert (await remember_tool.run('{"fact": "My cat eats tuna"}')).ok
    assert sorted(await runner.recall.notes(chatting, False)) == sorted([CAT, "My cat eats tuna"])


async def test_facts_recalled_before_forget_me_cannot_be_stored_again_by_that_turn(
    db: Database, settings: Settings, llm: ScriptedLLM
) -> None:
    clock = ManualClock()
    memory = make_service(db.sessions, settings, clock)
    longterm = HeldRecall(db.sessions, settings, clock)
    runner = TurnRunner(memory, openai_client(llm), settings, persona="p", longterm=longterm)
    await longterm.remember(ALICE, GUILD, CAT, by_model())
    # The model copies the fact it was shown into the channel's short-term memory.
    llm.reply_tool_calls(
        [("update_short_term_memory", {"summary": "Alice's cat is called Miso"})]
    ).reply_text("Tuna is fine.")

    # Alice's turn has recalled her facts when her /forget-me (another channel, another
    # lock) deletes them; the turn goes on to build its prompt and call the model.
    longterm.hold = release = asyncio.Event()
    turn = asyncio.create_task(runner.run(turn_request(CHANNEL, "what should I feed my cat", 1)))
    await longterm.queried.wait()
    clock.advance(seconds=1)
    await memory.forget_user(ALICE)
    clock.advance(seconds=1)
    release.set()
    reply = await turn

    assert CAT in str(llm.messages(0))  # the recall was made before the /forget-me
    async with db.sessions() as session:
        summaries = list(await session.scalars(select(ShortTermMemory.summary)))
    assert not any("Miso" in summary for summary in summaries), summaries
    assert reply.stm_results and reply.stm_results[0].startswith("rejected")
