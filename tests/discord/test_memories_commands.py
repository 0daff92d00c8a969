"""``/memories list / forget / clear / cross-context`` on the real bot: a user's own
long-term facts, and whether DMs may use what the bot remembers from servers."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

import discord
import pytest
from sqlalchemy import select

from bot.cogs.errors import UNAVAILABLE
from bot.cogs.privacy import (
    CLEAR_CANCELLED,
    MEMORIES_NOT_YOURS,
    NO_MEMORIES,
    NOTHING_TO_CLEAR,
)
from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.db.models import LongTermMemory, StmEvent, UserSettings
from bot.memory.longterm.facts import LongTermService
from bot.vocabulary.model import Provenance
from tests.helpers.bot import KiokuHarness
from tests.helpers.builders import recall_notes
from tests.helpers.chat_world import KiokuStarter
from tests.helpers.faults import outage
from tests.helpers.interaction_responses import InteractionResult


@pytest.fixture
def longterm(kioku: KiokuHarness) -> LongTermService:
    """The bot's service, as ``setup_hook`` creates it."""
    return kioku.bot.longterm


async def remember(
    kioku: KiokuHarness,
    service: LongTermService,
    text: str,
    *,
    user: discord.abc.User | None = None,
    dm: bool = False,
) -> int:
    who = user or kioku.env.member
    result = await service.remember(
        who.id,
        None if dm else kioku.env.guild.id,
        text,
        Provenance("model_tool", "test-model", who.id, 1),
    )
    return result.id


async def remember_many(kioku: KiokuHarness, longterm: LongTermService, count: int) -> list[int]:
    """``count`` facts remembered a minute apart; their ids, newest first."""
    ids = []
    for i in range(count):
        ids.append(await remember(kioku, longterm, f"fact number {i} about topic {i}"))
        kioku.clock.advance(minutes=1)
    return ids[::-1]


async def listed_after_remembering(
    kioku: KiokuHarness, longterm: LongTermService, count: int
) -> tuple[list[int], InteractionResult]:
    """:func:`remember_many`, then the harness's member runs /memories list: the ids,
    newest first, and the list."""
    newest_first = await remember_many(kioku, longterm, count)
    return newest_first, await kioku.interactions.slash("memories list", user=kioku.env.member)


async def fact_ids(kioku: KiokuHarness) -> list[int]:
    async with kioku.database.sessions() as session:
        return list(await session.scalars(select(LongTermMemory.id).order_by(LongTermMemory.id)))


def walk(components: list[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    for component in components:
        yield component
        yield from walk(component.get("components") or [])


def buttons(result: InteractionResult) -> dict[str, bool]:
    """Label → disabled, for the buttons now on the command's message."""
    return {
        b["label"]: bool(b.get("disabled")) for b in walk(result.components) if b.get("type") == 2
    }


def description(result: InteractionResult) -> str:
    [embed] = result.embeds
    return embed.description or ""


def footer(result: InteractionResult) -> str:
    [embed] = result.embeds
    return embed.footer.text or ""


# ------------------------------------------------------------------ /memories list


async def test_list_without_memories_says_how_to_make_one(
    kioku: KiokuHarness, longterm: LongTermService
) -> None:
    result = await kioku.interactions.slash("memories list")
    assert result.ephemeral and result.content == NO_MEMORIES


async def test_list_shows_id_text_place_time_and_origin(
    kioku: KiokuHarness, longterm: LongTermService
) -> None:
    cat = await remember(kioku, longterm, "My cat is called Miso")
    dm = await remember(kioku, longterm, "I *love* tea", dm=True)
    other = await kioku.env.create_member("other")
    await remember(kioku, longterm, "Other's secret hobby", user=other)

    result = await kioku.interactions.slash("memories list")

    assert result.ephemeral
    text = description(result)
    assert f"**#{cat}** My cat is called Miso" in text
    assert f"in {kioku.env.guild.name}" in text
    assert f"**#{dm}** I \\*love\\* tea\n-# in our DMs" in text
    assert "you asked in chat" in text
    timestamp = int(kioku.clock.now().timestamp())
    assert f"<t:{timestamp}:R>" in text
    assert "Other's secret hobby" not in text
    assert footer(result).startswith("Page 1/1 · 2 memories")
    assert buttons(result) == {}  # one page: no pager


async def test_a_page_of_long_markdown_heavy_facts_fits_in_one_embed(
    kioku: KiokuHarness, longterm: LongTermService
) -> None:
    # Escaping doubles such a fact: five of them would pass Discord's 4,096 characters.
    for n in range(5):
        await remember(kioku, longterm, f"{n} " + "*_" * 249)

    result = await kioku.interactions.slash("memories list")

    text = description(result)
    assert len(text) <= 4096
    assert text.count("**#") == 5 and text.count("…") == 5


async def test_list_pages_with_previous_and_next(
    kioku: KiokuHarness, longterm: LongTermService
) -> None:
    user = kioku.env.member
    newest_first, result = await listed_after_remembering(kioku, longterm, 12)

    assert footer(result).startswith("Page 1/3 · 12 memories")
    assert buttons(result) == {"Previous": True, "Next": False}
    assert all(f"**#{i}**" in description(result) for i in newest_first[:5])
    assert f"**#{newest_first[5]}**" not in description(result)

    await kioku.interactions.click(result, label="Next", user=user)
    assert footer(result).startswith("Page 2/3")
    assert all(f"**#{i}**" in description(result) for i in newest_first[5:10])
    assert buttons(result) == {"Previous": False, "Next": False}

    await kioku.interactions.click(result, label="Next", user=user)
    assert footer(result).startswith("Page 3/3")
    assert all(f"**#{i}**" in description(result) for i in newest_first[10:])
    assert buttons(result) == {"Previous": False, "Next": True}

    await kioku.interactions.click(result, label="Previous", user=user)
    assert footer(result).startswith("Page 2/3")

    other = await kioku.env.create_member("other")
    refused = await kioku.interactions.click(result, label="Next", user=other)
    assert refused.ephemeral and refused.content == MEMORIES_NOT_YOURS
    assert footer(result).startswith("Page 2/3")


async def test_a_page_turn_with_the_database_down_answers_unavailable(
    kioku: KiokuHarness, longterm: LongTermService
) -> None:
    # A button's error bypasses the tree's handler: the view routes it there itself.
    user = kioku.env.member
    _, result = await listed_after_remembering(kioku, longterm, 6)
    async with outage(kioku.database.sessions, "long-term memory"):
        clicked = await kioku.interactions.click(result, label="Next", user=user)
    [reported] = clicked.followups
    assert reported.ephemeral and reported.content == UNAVAILABLE
    assert footer(result).startswith("Page 1/2")


async def test_next_after_forgetting_a_shown_fact_skips_none(
    kioku: KiokuHarness, longterm: LongTermService
) -> None:
    user = kioku.env.member
    newest_first, listed = await listed_after_remembering(kioku, longterm, 10)
    assert all(f"**#{i}**" in description(listed) for i in newest_first[:5])

    # The user deletes a fact of the page they are looking at, then clicks Next.
    gone = newest_first[2]
    forgot = await kioku.interactions.slash("memories forget", {"id": gone}, user=user)
    assert not forgot.command_failed
    await kioku.interactions.click(listed, label="Next", user=user)

    oldest_first = newest_first[::-1]
    assert [i for i in oldest_first if f"**#{i}**" in description(listed)] == newest_first[5:][::-1]
    assert footer(listed).startswith("Page 2/2 · 9 memories")
    assert buttons(listed) == {"Previous": False, "Next": True}


async def test_previous_after_forgetting_a_newer_fact_shows_the_first_page(
    kioku: KiokuHarness, longterm: LongTermService
) -> None:
    user = kioku.env.member
    newest_first, listed = await listed_after_remembering(kioku, longterm, 12)
    await kioku.interactions.click(listed, label="Next", user=user)
    await kioku.interactions.click(listed, label="Next", user=user)
    assert footer(listed).startswith("Page 3/3")

    # Facts of pages 1 and 2 are deleted meanwhile: Previous shows the five just newer
    # than the page, then the first page, leaving none out.
    for gone in (newest_first[0], newest_first[6]):
        await kioku.interactions.slash("memories forget", {"id": gone}, user=user)
    await kioku.interactions.click(listed, label="Previous", user=user)
    shown = [i for i in newest_first if f"**#{i}**" in description(listed)]
    assert shown == [newest_first[i] for i in (4, 5, 7, 8, 9)]
    assert footer(listed).startswith("Page 2/3 · 10 memories")
    await kioku.interactions.click(listed, label="Previous", user=user)
    shown = [i for i in newest_first if f"**#{i}**" in description(listed)]
    assert shown == newest_first[1:6]  # short of a page before it: the first page
    assert footer(listed).startswith("Page 1/2")
    assert buttons(listed) == {"Previous": True, "Next": False}


async def test_list_works_in_a_dm(kioku: KiokuHarness, longterm: LongTermService) -> None:
    await remember(kioku, longterm, "My cat is called Miso")
    result = await kioku.interactions.slash("memories list", dm=True)
    assert result.ephemeral
    assert "My cat is called Miso" in description(result)


# ------------------------------------------------------------------ /memories forget


async def test_forget_deletes_the_users_own_fact(
    kioku: KiokuHarness, longterm: LongTermService
) -> None:
    cat = await remember(kioku, longterm, "My cat is called Miso")
    tea = await remember(kioku, longterm, "I like tea")

    result = await kioku.interactions.slash("memories forget", {"id": cat})

    assert result.ephemeral
    assert result.content == f"Forgot memory #{cat}:\n> My cat is called Miso"
    assert await fact_ids(kioku) == [tea]
    assert await recall_notes(longterm, kioku.env.member.id, kioku.env.guild.id, "cat", False) == [
        "I like tea"
    ]
    async with kioku.database.sessions() as session:
        events = list(await session.scalars(select(StmEvent).where(StmEvent.event == "ltm_forget")))
    assert [(e.user_id, e.origin) for e in events] == [(kioku.env.member.id, "user_command")]


async def test_forget_answer_quotes_every_line_and_fits_discords_2000_characters(
    kioku_with: KiokuStarter,
) -> None:
    # max_fact_chars may be set up to 1500; escaping markdown doubles such a fact.
    async with kioku_with(settings={"longterm": {"max_fact_chars": 1500}}) as kioku:
        service = kioku.bot.longterm
        long_fact = await remember(kioku, service, "My shell aliases: " + "a_b*c_d*e " * 148)
        two_lines = await remember(kioku, service, "Groceries:\nmilk and eggs")

        forgot = await kioku.interactions.slash("memories forget", {"id": long_fact})
        [text] = forgot.texts()
        assert len(text) <= 2000 and text.endswith("…")
        forgot = await kioku.interactions.slash("memories forget", {"id": two_lines})
        assert forgot.texts() == [f"Forgot memory #{two_lines}:\n> Groceries:\n> milk and eggs"]


async def test_forget_refuses_someone_elses_fact_without_revealing_it(
    kioku: KiokuHarness, longterm: LongTermService
) -> None:
    other = await kioku.env.create_member("other")
    theirs = await remember(kioku, longterm, "Other's secret hobby", user=other)

    result = await kioku.interactions.slash("memories forget", {"id": theirs})
    missing = await kioku.interactions.slash("memories forget", {"id": theirs + 100})

    assert result.ephemeral
    assert result.content == (
        f"You have no long-term memory #{theirs}. `/memories list` shows yours."
    )
    assert missing.content == result.content.replace(str(theirs), str(theirs + 100))
    assert await fact_ids(kioku) == [theirs]


@pytest.mark.parametrize("given", ["abc", 0, 2**60], ids=["not-a-number", "zero", "too-big"])
async def test_forget_with_an_id_discord_would_not_send_names_the_option(
    kioku: KiokuHarness,
    longterm: LongTermService,
    caplog: pytest.LogCaptureFixture,
    given: object,
) -> None:
    kept = await remember(kioku, longterm, "I like tea")
    with caplog.at_level(logging.ERROR):
        # A hand-made request (or an outdated client): Discord's own bounds are bypassed.
        result = await kioku.interactions.slash("memories forget", {"id": given})

    assert result.ephemeral
    assert result.texts() == [f"**id** must be between 1 and {2**53} (you gave `{given}`)."]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert await fact_ids(kioku) == [kept]


async def test_forget_autocompletes_over_the_users_own_facts(
    kioku: KiokuHarness, longterm: LongTermService
) -> None:
    cat = await remember(kioku, longterm, "My cat is called Miso")
    kioku.clock.advance(minutes=1)
    tea = await remember(kioku, longterm, "I like tea " + "very " * 40 + "much")
    other = await kioku.env.create_member("other")
    await remember(kioku, longterm, "Other's cat is called Rex", user=other)

    everything = await kioku.interactions.autocomplete("memories forget", "id", "")
    assert [c["value"] for c in everything.choices or []] == [tea, cat]
    names = [c["name"] for c in everything.choices or []]
    assert names[1] == f"#{cat} · My cat is called Miso"
    assert len(names[0]) == 100 and names[0].endswith("…")

    cats = await kioku.interactions.autocomplete("memories forget", "id", "cat")
    assert [c["value"] for c in cats.choices or []] == [cat]
    by_id = await kioku.interactions.autocomplete("memories forget", "id", str(tea))
    assert [c["value"] for c in by_id.choices or []] == [tea]


# ------------------------------------------------------------------ /memories clear


async def test_clear_with_nothing_stored_says_so(
    kioku: KiokuHarness, longterm: LongTermService
) -> None:
    result = await kioku.interactions.slash("memories clear")
    assert result.ephemeral and result.content == NOTHING_TO_CLEAR
    assert result.custom_ids == []


async def test_clear_confirm_deletes_every_fact_of_the_user(
    kioku: KiokuHarness, longterm: LongTermService
) -> None:
    user = kioku.env.member
    await remember(kioku, longterm, "My cat is called Miso")
    await remember(kioku, longterm, "I like tea", dm=True)
    other = await kioku.env.create_member("other")
    theirs = await remember(kioku, longterm, "Other's fact", user=other)

    asked = await kioku.interactions.slash("memories clear", user=user)
    assert asked.ephemeral
    assert asked.content is not None and asked.content.startswith("**Clear long-term memory**")
    assert "all 2 long-term memories" in asked.content
    assert list(buttons(asked)) == ["Delete all my long-term memories", "Cancel"]

    refused = await kioku.interactions.click(
        asked, label="Delete all my long-term memories", user=other
    )
    assert refused.content == MEMORIES_NOT_YOURS
    assert len(await fact_ids(kioku)) == 3

    done = await kioku.interactions.click(
        asked, label="Delete all my long-term memories", user=user
    )
    assert done.content == "**Done.** I deleted 2 long-term memories."
    assert asked.components == []
    assert await fact_ids(kioku) == [theirs]


async def test_clear_cancel_deletes_nothing(kioku: KiokuHarness, longterm: LongTermService) -> None:
    await remember(kioku, longterm, "My cat is called Miso")
    asked = await kioku.interactions.slash("memories clear")
    cancelled = await kioku.interactions.click(asked, label="Cancel")
    assert cancelled.content == CLEAR_CANCELLED
    assert asked.components == []
    assert len(await fact_ids(kioku)) == 1


async def test_long_term_memories_have_one_name_across_commands(
    kioku: KiokuHarness, longterm: LongTermService
) -> None:
    # /memories calls them "long-term memories": /forget-me and /refresh say the same
    # (and "cached memories", as the /forget-me receipt does, not "cached entries").
    env = kioku.env
    moderator = await env.create_member("mod", kind="moderator")
    await remember(kioku, longterm, "My cat is called Miso")
    listed = await kioku.interactions.slash("memories list")
    assert listed.embeds and listed.embeds[0].title == "Your long-term memories"
    refreshed = await kioku.interactions.slash("refresh", user=moderator)
    asked = await kioku.interactions.slash("forget-me")
    explanation = asked.content or ""
    done = await kioku.interactions.click(asked, label="Delete my memories")
    cross = await kioku.interactions.slash("memories cross-context", {"enabled": "on"})

    marker = next(s.content for s in env.sent_to(env.channel) if "Memory refreshed" in s.content)
    said = [explanation, done.original_message["content"], cross.content, marker]
    said.extend(refreshed.texts())
    everything = "\n".join(text or "" for text in said)
    assert "• 1 long-term memory\n" in done.original_message["content"]
    assert "long-term memories you asked me to keep" in explanation
    assert "Long-term memories people asked me to keep stay" in marker
    assert "long-term fact" not in everything
    assert "cached entr" not in everything


# ------------------------------------------------------------------ /memories cross-context

SERVER_SUMMARY = "The user is planning a trip to Lisbon-Qz7 in May."
SERVER_FACT = "The user's cat is called Miso-Kx3."


async def stored_opt_in(kioku: KiokuHarness, user_id: int) -> bool | None:
    async with kioku.database.sessions() as session:
        stored: bool | None = await session.scalar(
            select(UserSettings.cross_context_memory).where(UserSettings.user_id == user_id)
        )
        return stored


async def dm_prompt(kioku: KiokuHarness, user: discord.abc.User) -> str:
    """Everything the model was sent for one DM turn of ``user``."""
    first = len(kioku.llm.requests)
    kioku.llm.reply_text("Hello again!")
    await kioku.env.send(
        "what is my cat called, and where am I going?",
        channel=kioku.env.dm_channel(user),
        author=user,
    )
    assert kioku.llm.pending == 0
    return "\n".join(
        str(message.get("content") or "")
        for body in kioku.llm.requests[first:]
        for message in body.get("messages", [])
    )


async def test_cross_context_on_brings_server_memories_into_dms_and_off_takes_them_out(
    kioku: KiokuHarness, longterm: LongTermService
) -> None:
    env, user = kioku.env, kioku.env.member
    # A server conversation the model summarized, and a fact made in that server.
    kioku.llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": SERVER_SUMMARY})])
    kioku.llm.reply_text("Sounds lovely.")
    await env.send("I'm planning a trip to Lisbon in May", author=user, mention_bot=True)
    await remember(kioku, longterm, SERVER_FACT)
    kioku.clock.advance(minutes=5)

    before = await dm_prompt(kioku, user)
    assert SERVER_SUMMARY not in before and SERVER_FACT not in before
    assert await stored_opt_in(kioku, user.id) is None

    on = await kioku.interactions.slash("memories cross-context", {"enabled": "on"}, user=user)
    assert on.ephemeral
    assert on.content is not None
    assert on.content.startswith("Cross-context memory is now **on**: in our DMs I may use")
    assert "`/memories cross-context enabled:off` turns it off" in on.content
    assert await stored_opt_in(kioku, user.id) is True

    opted_in = await dm_prompt(kioku, user)
    assert SERVER_SUMMARY in opted_in
    assert f"#{env.channel.name} in {env.guild.name}" in opted_in
    assert SERVER_FACT in opted_in

    # Turned off from the DM itself: the next DM turn is back to DMs only.
    off = await kioku.interactions.slash(
        "memories cross-context", {"enabled": "off"}, user=user, dm=True
    )
    assert off.ephemeral
    assert off.content is not None
    assert off.content.startswith("Cross-context memory is now **off**: in our DMs I use only")
    assert await stored_opt_in(kioku, user.id) is False

    after = await dm_prompt(kioku, user)
    assert SERVER_SUMMARY not in after and SERVER_FACT not in after


async def test_cross_context_says_when_nothing_changed_and_touches_only_the_caller(
    kioku: KiokuHarness,
) -> None:
    user = kioku.env.member
    other = await kioku.env.create_member("other")

    off = await kioku.interactions.slash("memories cross-context", {"enabled": "off"}, user=user)
    assert off.content is not None
    assert off.content.startswith("Cross-context memory was already **off**")
    assert "`/memories cross-context enabled:on` turns it on" in off.content
    assert await stored_opt_in(kioku, user.id) is False

    await kioku.interactions.slash("memories cross-context", {"enabled": "on"}, user=user)
    again = await kioku.interactions.slash(
        "memories cross-context", {"enabled": "on"}, user=user, dm=True
    )
    assert again.content is not None
    assert again.content.startswith("Cross-context memory was already **on**")
    assert await stored_opt_in(kioku, user.id) is True
    assert await stored_opt_in(kioku, other.id) is None
    assert await kioku.bot.memory.cross_context_opt_in(other.id) is False


async def test_cross_context_with_the_database_down_answers_unavailable(
    kioku: KiokuHarness,
) -> None:
    # A refused connection: the storage error reaches the tree's error handler.
    async with outage(kioku.bot.memory.sessions):
        result = await kioku.interactions.slash("memories cross-context", {"enabled": "on"})
    assert result.ephemeral and result.content == UNAVAILABLE
    assert await stored_opt_in(kioku, kioku.env.member.id) is None


@pytest.mark.parametrize(
    ("command", "options", "service", "reads"),
    [
        ("memories list", {}, "longterm", "list_facts"),
        ("memories clear", {}, "longterm", "count"),
        ("memories forget", {"fact_id": 7}, "longterm", "forget"),
        ("memories cross-context", {"enabled": "on"}, "memory", "cross_context_opt_in"),
    ],
)
async def test_memories_commands_acknowledge_before_reading_the_database(
    kioku: KiokuHarness,
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    options: dict[str, Any],
    service: str,
    reads: str,
) -> None:
    """Discord drops an interaction not answered within 3 s: a command that reads the
    database says "thinking…" first, as the /stm commands do."""
    target = getattr(kioku.bot, service)
    real = getattr(target, reads)
    seen: list[bool] = []

    async def watched(*args: Any, **kwargs: Any) -> Any:
        seen.append(kioku.interactions.results[-1].deferred)
        return await real(*args, **kwargs)

    monkeypatch.setattr(target, reads, watched)
    result = await kioku.interactions.slash(command, options)
    assert seen and all(seen), f"{reads} ran before the acknowledgement: {seen}"
    assert not result.command_failed
    assert result.deferred and result.ephemeral, result.response_type
