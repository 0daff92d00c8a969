"""Remembering a fact: its provenance and audit event, its limits, redaction, the cap per user,
and a near-duplicate updating the fact instead of adding one."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from bot.db.engine import Database
from bot.memory.longterm.facts import FactRefused, LongTermService
from bot.memory.longterm.near_duplicates import is_near_duplicate
from tests.helpers.builders import ALICE, BOB, EPOCH, GUILD, ManualClock
from tests.integration.longterm.harness import (
    CAT,
    DISCORD_TOKEN,
    MESSAGE_ID,
    OTHER_GUILD,
    bulk_insert,
    by_model,
    events,
    limited,
    only_remember_event,
    remember,
    rows,
)

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

    event = await only_remember_event(db)
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
