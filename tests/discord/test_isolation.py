"""Isolation between servers, channels and users, on the real bot.

20 guilds, each with two public channels, one private channel (a third of the members
may read it) and 50 members, chat with the bot in interleaved turns (round robin over
the guilds, so every guild's turns are mixed with every other's). Every message and
every memory written in channel ``c`` of guild ``g`` carries the marker ``Ggg-Ccc``;
every few turns the scripted model updates the STM with a summary that starts with the
channel's secret marker (``G07-C02-secret``) and, like a real model, carries forward
what was said before. Some members also talk to the bot in DMs (some opted in to seeing
their server memories there).

Checked on every request the bot sent to the model:

* a guild channel's request carries no other guild's marker, and a public channel's
  request carries no marker of its guild's private channel;
* a DM carries nothing of any guild unless the user opted in, then only their own
  guild's; no request carries another user's DM text.

Then one member runs ``/forget-me`` (and confirms): SQL over every table finds nothing
derived from them — not their id, not their messages' text, ids or marker hashes — and
the next turns in their channels no longer show their words to the model.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import discord
import pytest
from sqlalchemy import select
from sqlalchemy.engine import URL

from bot.cogs.chat import to_raw
from bot.db.engine import Database
from bot.db.models import Base
from bot.llm.tools.stm import STM_TOOL_NAME
from bot.memory.model import message_hash
from tests.helpers.bot import KiokuHarness, start_kioku, stop_kioku
from tests.helpers.fake_llm import ScriptedLLM

GUILDS = 20
USERS_PER_GUILD = 50
PUBLIC_CHANNELS = 2
PRIVATE = PUBLIC_CHANNELS  # channel index of each guild's private channel
PRIVATE_MEMBERS = 16  # members 0..15 of each guild may read its private channel
ROUNDS = 52  # turns per guild: 20 * 52 = 1,040 guild turns, plus DMs and probes
TOOL_EVERY = 3  # every third turn the model updates the STM
CARRIED_FACTS = 8  # how many earlier facts the model's summary carries forward
VICTIM_GUILD, VICTIM_USER = 5, 7  # the member who runs /forget-me

MARKER = re.compile(r"G(\d\d)-C(\d\d)")
DM_TEXT = re.compile(r"dmtext-(\d+)")


def marker(guild: int, channel: int) -> str:
    return f"G{guild:02}-C{channel:02}"


def secret(guild: int, channel: int) -> str:
    return f"{marker(guild, channel)}-secret"


@dataclass
class Place:
    guild: int  # index, not id
    channel: int  # index within the guild; PRIVATE is the private one
    discord_channel: Any
    facts: list[str] = field(default_factory=list)  # what the "model" carries forward


@dataclass
class Tally:
    turns: int = 0
    requests: int = 0
    tool_turns: int = 0
    dm_turns: int = 0
    own_marker_seen: int = 0  # requests that showed their channel's own STM secret
    other_channel_seen: int = 0  # ... another channel's memory of the same guild
    opted_in_dm_seen: int = 0  # opted-in DMs that showed server memories
    leaks: list[str] = field(default_factory=list)


@pytest.fixture
async def world(
    db: Database, llm: ScriptedLLM, pg_url: URL, tmp_path: Path
) -> AsyncIterator[KiokuHarness]:
    harness = await start_kioku(
        db,
        llm,
        pg_url,
        tmp_path,
        guilds=GUILDS,
        channels=PUBLIC_CHANNELS,
        members=USERS_PER_GUILD,
        # Every other channel's memory may show up; raw messages of other channels too.
        settings={"stm": {"other_channels": 3}},
    )
    try:
        yield harness
    finally:
        await stop_kioku(harness)


def request_text(body: dict[str, Any]) -> str:
    return json.dumps(body, ensure_ascii=False)


def check_request(
    tally: Tally,
    text: str,
    *,
    guild: int | None,
    channel: int | None,
    dm_user: int | None,
    opted_in_guild: int | None,
) -> None:
    """Record every marker in ``text`` that may not be there."""
    tally.requests += 1
    seen = {(int(g), int(c)) for g, c in MARKER.findall(text)}
    for g, c in sorted(seen):
        if guild is not None:
            if g != guild:
                tally.leaks.append(f"{marker(g, c)} in a request of {marker(guild, channel or 0)}")
            elif c == PRIVATE and channel != PRIVATE:
                tally.leaks.append(
                    f"private {marker(g, c)} in public {marker(guild, channel or 0)}"
                )
        elif g != opted_in_guild:
            tally.leaks.append(f"{marker(g, c)} in a DM (opted in to guild {opted_in_guild})")
    for owner in {int(u) for u in DM_TEXT.findall(text)}:
        if owner != dm_user:
            where = f"DM of {dm_user}" if guild is None else marker(guild, channel or 0)
            tally.leaks.append(f"DM text of user {owner} in {where}")
    if guild is not None and channel is not None:
        if secret(guild, channel) in text:
            tally.own_marker_seen += 1
        if any(g == guild and c != channel for g, c in seen):
            tally.other_channel_seen += 1
    elif seen:
        tally.opted_in_dm_seen += 1


async def dump_every_table(db: Database) -> list[tuple[str, str]]:
    """Every row of every table, as ``(table, row as text)``."""
    out: list[tuple[str, str]] = []
    async with db.engine.connect() as connection:
        for table in Base.metadata.sorted_tables:
            for row in await connection.execute(select(table)):
                out.append((table.name, " | ".join(repr(value) for value in row)))
    return out


def hits(rows: Iterable[tuple[str, str]], needles: Iterable[str]) -> list[str]:
    needles = [n for n in needles if n]
    return [
        f"{table}: {needle!r} in {text!r}"
        for table, text in rows
        for needle in needles
        if needle in text
    ]


async def test_twenty_guilds_of_interleaved_turns_never_leak(world: KiokuHarness) -> None:
    env, llm, memory = world.env, world.llm, world.bot.memory
    guilds = env.guilds
    assert len(guilds) == GUILDS
    members = [env.members[g * USERS_PER_GUILD : (g + 1) * USERS_PER_GUILD] for g in range(GUILDS)]
    places: dict[tuple[int, int], Place] = {}
    for g, guild in enumerate(guilds):
        for c in range(PUBLIC_CHANNELS):
            channel = env.channels[g * PUBLIC_CHANNELS + c]
            assert channel.guild == guild
            places[(g, c)] = Place(g, c, channel)
        private = await env.create_text_channel(
            f"private-{g}", guild=guild, private=True, allow=members[g][:PRIVATE_MEMBERS]
        )
        places[(g, PRIVATE)] = Place(g, PRIVATE, private)
    # Members 3 of even guilds see their server memories in DMs; the others do not.
    opted_in = {members[g][3].id: g for g in range(0, GUILDS, 2)}
    for user_id in opted_in:
        await memory.set_cross_context_opt_in(user_id, True)

    tally = Tally()
    victim = members[VICTIM_GUILD][VICTIM_USER]
    victim_messages: list[discord.Message] = []
    victim_words: list[str] = []

    async def turn(
        place: Place, author: discord.Member, text: str, *, tool: bool, remember: str = ""
    ) -> discord.Message:
        if remember:
            llm.reply_tool_calls([("remember", {"fact": remember})]).reply_text("noted")
        elif tool:
            facts = "; ".join(place.facts[-CARRIED_FACTS:])
            summary = f"{secret(place.guild, place.channel)}. Recent: {facts}"
            llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": summary})]).reply_text("noted")
            tally.tool_turns += 1
        first = len(llm.requests)
        sent = await env.send(text, channel=place.discord_channel, author=author, mention_bot=True)
        place.facts.append(text)
        tally.turns += 1
        assert llm.pending == 0, "a scripted reply was not consumed by its turn"
        for body in llm.requests[first:]:
            check_request(
                tally,
                request_text(body),
                guild=place.guild,
                channel=place.channel,
                dm_user=None,
                opted_in_guild=None,
            )
        return sent

    async def dm_turn(author: discord.Member, *, tool: bool) -> discord.Message:
        g = next(i for i in range(GUILDS) if author in members[i])
        text = f"dmtext-{author.id} hello from a DM"
        if tool:
            llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": f"DM: {text}"})]).reply_text("ok")
        first = len(llm.requests)
        sent = await env.send(text, channel=env.dm_channel(author), author=author)
        tally.dm_turns += 1
        for body in llm.requests[first:]:
            check_request(
                tally,
                request_text(body),
                guild=None,
                channel=None,
                dm_user=author.id,
                opted_in_guild=g if author.id in opted_in else None,
            )
        return sent

    # ------------------------------------------------------------ interleaved turns
    count = 0
    for r in range(ROUNDS):
        for g in range(GUILDS):
            u = (r * 7 + g) % USERS_PER_GUILD
            author = members[g][u]
            c = PRIVATE if u < PRIVATE_MEMBERS and r % 3 == 1 else r % PUBLIC_CHANNELS
            if g == VICTIM_GUILD and r in (2, 9, 16, 23):
                # The victim speaks in every channel of their guild, and once asks the
                # bot to remember something (long-term memory).
                author, c = victim, (0, 1, PRIVATE, 0)[(r - 2) // 7]
            place = places[(g, c)]
            words = f"{marker(g, c)}-U{members[g].index(author):02}-r{r:02}"
            remember = ""
            if author == victim and r == 23:
                remember = f"{words} victim-fact: likes teal"
                text = f"remember that I like teal {words}"
            else:
                text = f"{words} says hello"
            count += 1
            sent = await turn(
                place,
                author,
                text,
                tool=count % TOOL_EVERY == 0 or author == victim,
                remember=remember,
            )
            if author == victim:
                victim_messages.append(sent)
                victim_words.append(words)
        if r % 10 == 5:
            for g in range(GUILDS):
                await dm_turn(members[g][3], tool=r == 5)
    victim_messages.append(await dm_turn(victim, tool=True))
    victim_words.append(f"dmtext-{victim.id}")

    print(
        f"\nisolation: {tally.turns} guild turns + {tally.dm_turns} DM turns, "
        f"{tally.requests} model requests checked ({tally.tool_turns} STM updates), "
        f"leaks found: {len(tally.leaks)}"
    )
    assert not tally.leaks, tally.leaks[:20]
    assert tally.turns >= 1_000
    # The checks are not vacuous: memories did flow where they may.
    assert tally.own_marker_seen > 100, tally
    assert tally.other_channel_seen > 100, tally
    assert tally.opted_in_dm_seen > 0, tally

    # -------------------------------------------------------------- /forget-me
    before = await dump_every_table(world.database)
    victim_id = str(victim.id)
    assert hits(before, [victim_id]), "the victim left no trace to forget"
    assert hits(before, victim_words), "the victim's words were never stored"

    home = places[(VICTIM_GUILD, 0)].discord_channel
    asked = await world.interactions.slash("forget-me", user=victim, channel=home)
    confirmed = await world.interactions.click(asked, label="Delete my memories", user=victim)
    assert (confirmed.content or "").startswith("**Done.**"), confirmed.content

    after = await dump_every_table(world.database)
    victim_raw = [to_raw(message) for message in victim_messages]
    derived = [
        victim_id,
        *victim_words,
        *(str(message.id) for message in victim_messages),
        *(message_hash(raw.author_id, raw.content) for raw in victim_raw),
    ]
    leftovers = hits(after, derived)

    # The model no longer sees the victim's words in their channels either.
    others = [m for m in members[VICTIM_GUILD][:PRIVATE_MEMBERS] if m != victim]
    still_shown: list[str] = []
    for c in (0, 1, PRIVATE):
        first = len(llm.requests)
        await env.send(
            "anything new?",
            channel=places[(VICTIM_GUILD, c)].discord_channel,
            author=others[c],
            mention_bot=True,
        )
        texts = [request_text(body) for body in llm.requests[first:]]
        still_shown += [
            f"{marker(VICTIM_GUILD, c)}: {w}" for w in victim_words if any(w in t for t in texts)
        ]

    print(
        f"forget-me: {len(before)} rows before, {len(after)} after; rows still derived "
        f"from the user: {len(leftovers)}; words still shown to the model: {len(still_shown)}"
    )
    for line in leftovers:
        print(f"  left behind: {line[:300]}")
    assert not still_shown, still_shown
    assert not leftovers, leftovers[:10]


def test_markers_are_what_the_checks_look_for() -> None:
    tally = Tally()
    check_request(tally, "G03-C01-secret", guild=4, channel=0, dm_user=None, opted_in_guild=None)
    check_request(tally, "G04-C02-x", guild=4, channel=0, dm_user=None, opted_in_guild=None)
    check_request(tally, "G04-C02-x", guild=4, channel=2, dm_user=None, opted_in_guild=None)
    check_request(tally, "dmtext-9", guild=None, channel=None, dm_user=8, opted_in_guild=None)
    check_request(tally, "G01-C00", guild=None, channel=None, dm_user=8, opted_in_guild=1)
    check_request(tally, "G02-C00", guild=None, channel=None, dm_user=8, opted_in_guild=1)
    assert len(tally.leaks) == 4, tally.leaks


async def test_a_fact_remembered_in_a_private_channel_stays_out_of_public_prompts(
    kioku: KiokuHarness,
) -> None:
    env, llm = kioku.env, kioku.llm
    private = await env.create_text_channel("mods", private=True, allow=[env.member])
    fact = "my alt account is Zed G00-C09-private-fact"
    llm.reply_tool_calls([("remember", {"fact": fact})]).reply_text("noted")
    await env.send(f"remember that {fact}", channel=private, mention_bot=True)
    assert [m["content"] for m in llm.messages() if m.get("role") == "tool"] == ["saved as fact #1"]
    first = len(llm.requests)
    await env.send("anything about my alt account?", mention_bot=True)
    public_requests = "\n".join(request_text(body) for body in llm.requests[first:])
    assert "G00-C09-private-fact" not in public_requests
    # ... while in the channel where it was said, it is recalled.
    first = len(llm.requests)
    await env.send("anything about my alt account?", channel=private, mention_bot=True)
    private_requests = "\n".join(request_text(body) for body in llm.requests[first:])
    assert "G00-C09-private-fact" in private_requests
