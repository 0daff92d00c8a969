"""Recall with an embeddings endpoint (scripted ``/v1/embeddings``, real pgvector): vector
similarity ranked together with full-text search; without it, or with it down, recall is
full-text search alone."""

from __future__ import annotations

import logging

import pytest

from bot.config import Settings
from bot.db.engine import Database
from bot.llm import Embedder
from bot.memory import Distilled, LongTermService
from bot.vocabulary import Place, Provenance
from tests.helpers.builders import ALICE, BOB, CHANNEL, GUILD, ManualClock, recall_notes
from tests.helpers.fake_llm import EMBEDDING_DIMS, ScriptedLLM

PUPPY = "Caroline adopted a puppy called Biscuit"
BAKING = "Melanie bakes sourdough every Sunday"
# Shares no word with PUPPY: only its meaning is near.
QUESTION = "which pet does she have now?"
BY_CAPTURE = Provenance("summarizer", "test-model, capture", ALICE, 1)


def meaning(text: str) -> list[float]:
    """A scripted embedding that knows dogs are pets: one axis for animals, one for food."""
    words = text.casefold()
    animal = any(word in words for word in ("puppy", "pet", "dog"))
    food = any(word in words for word in ("bake", "sourdough", "bread"))
    return [1.0 if animal else 0.0, 1.0 if food else 0.0, 0.1] + [0.0] * (EMBEDDING_DIMS - 3)


def with_embeddings(settings: Settings, llm: ScriptedLLM) -> Settings:
    section = settings.embeddings.model_copy(update={"base_url": llm.base_url, "model": "emb"})
    return settings.model_copy(update={"embeddings": section})


async def capture(longterm: LongTermService, *facts: str) -> None:
    stored = await longterm.captured.store(
        [Distilled(fact) for fact in facts],
        guild_id=GUILD,
        place=Place(CHANNEL),
        sources=[ALICE, BOB],
        provenance=BY_CAPTURE,
        started_at=longterm.clock.now(),
    )
    assert len(stored.created) == len(facts)


def recall(longterm: LongTermService, text: str) -> object:
    return recall_notes(longterm, BOB, GUILD, text, False, channel_ids=[CHANNEL])


async def test_a_fact_near_in_meaning_is_recalled_with_embeddings(
    db: Database, settings: Settings, llm: ScriptedLLM
) -> None:
    llm.embed = meaning
    configured = with_embeddings(settings, llm)
    embedder = Embedder(configured)
    longterm = LongTermService(db.sessions, configured, ManualClock(), embedder=embedder)
    await capture(longterm, PUPPY, BAKING)
    assert llm.embedded == [[PUPPY, BAKING]]  # embedded as they were stored

    # Near in meaning; the far one (cosine distance about 1) is no match.
    assert await recall(longterm, QUESTION) == [PUPPY]
    # Full-text hits and vector hits ranked together: a word match counts as well.
    assert sorted(await recall(longterm, "sourdough for my pet")) == sorted([PUPPY, BAKING])
    await embedder.close()


async def test_without_embeddings_recall_is_full_text_only(
    db: Database, settings: Settings, llm: ScriptedLLM
) -> None:
    longterm = LongTermService(db.sessions, settings, ManualClock())
    await capture(longterm, PUPPY, BAKING)

    assert await recall(longterm, QUESTION) == []
    assert await recall(longterm, "the puppy?") == [PUPPY]
    assert llm.embedded == []


async def test_an_embeddings_endpoint_that_is_down_falls_back_to_full_text_with_a_log_line(
    db: Database, settings: Settings, llm: ScriptedLLM, caplog: pytest.LogCaptureFixture
) -> None:
    llm.embed = None  # answers 503
    configured = with_embeddings(settings, llm)
    embedder = Embedder(configured)
    longterm = LongTermService(db.sessions, configured, ManualClock(), embedder=embedder)

    with caplog.at_level(logging.WARNING, logger="bot.llm.embeddings"):
        await capture(longterm, PUPPY, BAKING)  # stored, without embeddings
        assert await recall(longterm, "the puppy?") == [PUPPY]
        assert await recall(longterm, QUESTION) == []

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # one line per outage, not one per call
    assert "full-text search only" in warnings[0]
    assert len(llm.embedded) == 1  # resting after the failure: not asked again at once
    await embedder.close()


async def test_nonsense_from_the_embeddings_endpoint_is_a_failure_not_a_vector(
    db: Database, settings: Settings, llm: ScriptedLLM
) -> None:
    llm.embed = lambda text: []  # an empty vector
    configured = with_embeddings(settings, llm)
    embedder = Embedder(configured)

    assert await embedder.embed([PUPPY]) is None
    assert not embedder.enabled
    await embedder.close()
