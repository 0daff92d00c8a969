"""Recall: scoped to its guild (or DMs), within the character budget, ordered by full-text
relevance then recency, safe for any query text, finding a word in either number and in any
script."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from bot.db.engine import Database
from bot.memory.longterm.facts import LongTermService
from bot.vocabulary.search_words import SearchWords, query_words
from tests.helpers.builders import ALICE, BOB, GUILD, ManualClock, recall_notes
from tests.integration.longterm.harness import (
    CAT,
    OTHER_GUILD,
    by_model,
    limited,
    remember,
    remember_apart,
    rows,
)

# ------------------------------------------------------------------ recall


async def test_days_later_the_fact_is_recalled_in_its_guild_and_not_in_another(
    service: LongTermService, db: Database, clock: ManualClock
) -> None:
    await service.remember(ALICE, GUILD, "Remember that " + CAT, by_model())
    clock.advance(days=12)

    notes = await recall_notes(service, ALICE, GUILD, "what is my cat called?", opted_in=False)
    assert notes == ["Remember that " + CAT]
    assert await recall_notes(service, ALICE, OTHER_GUILD, "my cat?", opted_in=True) == []
    assert await recall_notes(service, BOB, GUILD, "my cat?", opted_in=False) == []

    [row] = await rows(db)
    assert (row.recall_count, row.last_recalled_at) == (1, clock.now())


async def test_facts_unrelated_to_the_message_are_still_recalled_after_the_matches(
    service: LongTermService, clock: ManualClock
) -> None:
    await remember_apart(service, clock, [CAT, "I live in Lisbon"], hours=1)
    notes = await recall_notes(service, ALICE, GUILD, "hello there", opted_in=False)
    assert notes == ["I live in Lisbon", CAT]  # no match: newest first
    notes = await recall_notes(service, ALICE, GUILD, "any cat news?", opted_in=False)
    assert notes == [CAT, "I live in Lisbon"]  # the match first


async def test_dm_facts_stay_in_dms_and_server_facts_reach_dms_only_when_opted_in(
    service: LongTermService,
) -> None:
    await remember(service, "server fact about llamas", guild=GUILD)
    await remember(service, "other server fact about llamas", guild=OTHER_GUILD)
    await remember(service, "dm fact about llamas", guild=None)

    assert await recall_notes(service, ALICE, None, "llamas", opted_in=False) == [
        "dm fact about llamas"
    ]
    assert sorted(await recall_notes(service, ALICE, None, "llamas", opted_in=True)) == [
        "dm fact about llamas",
        "other server fact about llamas",
        "server fact about llamas",
    ]
    # A DM fact never appears in a server, opted in or not.
    assert await recall_notes(service, ALICE, GUILD, "llamas", opted_in=True) == [
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
    notes = await recall_notes(service, ALICE, GUILD, "gardens", opted_in=False)
    assert len(notes) == 4 and sum(map(len, notes)) == 1200

    small = LongTermService(
        db.sessions, limited(pg_url, tmp_path / "small", recall_char_budget=650), clock
    )
    notes = await recall_notes(small, ALICE, GUILD, "gardens", opted_in=False)
    assert len(notes) == 2
    off = LongTermService(
        db.sessions, limited(pg_url, tmp_path / "off", recall_char_budget=0), clock
    )
    assert await recall_notes(off, ALICE, GUILD, "gardens", opted_in=False) == []


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

    notes = await recall_notes(service, ALICE, GUILD, "gardens", opted_in=False)

    # The two long facts do not fit together (700 characters); the short one still does.
    assert len(notes) == 2
    assert any("water twice a week" in note for note in notes)


async def test_full_text_relevance_orders_the_facts(
    service: LongTermService, clock: ManualClock
) -> None:
    facts = [
        "My cat likes tuna and naps on the tuna tin",
        CAT,
        "I go hiking in the Alps every summer",
        "My sister has a cat too",
    ]
    await remember_apart(service, clock, facts, days=1)

    notes = await recall_notes(service, ALICE, GUILD, "Does my cat like tuna?", opted_in=False)
    assert notes[0] == "My cat likes tuna and naps on the tuna tin"
    assert set(notes[1:3]) == {CAT, "My sister has a cat too"}
    assert notes[3] == "I go hiking in the Alps every summer"

    hits = await service.search(ALICE, GUILD, "hiking alps", opted_in=False)
    assert [fact.content for fact in hits] == ["I go hiking in the Alps every summer"]
    assert await service.search(ALICE, GUILD, "the and of", opted_in=False) == []


async def test_recency_orders_equally_relevant_facts(
    service: LongTermService, clock: ManualClock
) -> None:
    await remember_apart(service, clock, ["I play the cello", "I play the drums"], days=60)
    notes = await recall_notes(service, ALICE, GUILD, "what do I play", opted_in=False)
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
    notes = await recall_notes(service, ALICE, GUILD, query, opted_in=False)
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
    notes = await recall_notes(service, ALICE, GUILD, story, opted_in=False)
    assert notes[0] == CAT


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
    await remember_apart(service, clock, ["My cat eats tuna", CAT], days=20)
    notes = await recall_notes(service, ALICE, GUILD, "cat tuna", opted_in=False)
    assert notes == ["My cat eats tuna", CAT]


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
    notes = await recall_notes(service, ALICE, GUILD, "猫 犬", opted_in=False)
    assert notes[-1] == "私の猫はミソです"
    assert set(notes[:2]) == {"猫x犬は仲良し", "猫_犬のメモ"}


async def test_a_word_inside_an_email_is_found_without_the_fact_naming_it(
    service: LongTermService,
) -> None:
    email = "My email is ann@example.com"
    await remember(service, email)
    await remember(service, "I live in Lisbon")
    found = await service.search(ALICE, GUILD, "ann@example.com", opted_in=False)
    assert [f.content for f in found] == [email]


def test_one_character_of_a_script_without_spaces_is_a_query_word() -> None:
    assert query_words("猫") == ["猫"]
    assert query_words("a 猫 é") == ["猫"]
