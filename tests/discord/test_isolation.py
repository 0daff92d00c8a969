"""Isolation between servers, channels, threads and users, on the real bot.

20 guilds, each with two public channels (0, 1), one private channel (2: members 0-15
may read it), a public thread of channel 0 (3) and a private thread under channel 1 (4:
members 30-49 are in it), and 50 members, chat with the bot in interleaved turns (round
robin over the guilds, so every guild's turns are mixed with every other's). Every
message and every memory written in channel ``c`` of guild ``g`` carries the marker
``Ggg-Ccc``; every few turns the scripted model updates the STM with a summary that
starts with the channel's secret marker (``G07-C02-secret``) and, like a real model,
carries forward what was said before. Two members of each guild ask the bot to remember
a personal fact (``ltmfact-<user id>``). Some members also talk to the bot in DMs: in
even guilds member 3 (who may read the private channel), in every guild member 20 (who
may read neither the private channel nor the private thread) opted in to seeing their
server memories there; the others did not.

Checked on every request the bot sent to the model:

* a guild request carries no other guild's marker; nothing of a private thread outside
  it; nothing of the private channel outside it (public channels, both threads);
* a DM carries nothing of any guild unless the user opted in, and then only markers of
  channels that user can read: never a private channel's memory in the DM of a member
  who cannot read it;
* no request carries another user's DM text, nor another user's long-term fact.

One of the victim's STM writes happens while the database is down: it goes through the
spool (``<data_dir>/spool/stm.jsonl``) and is replayed. Then the victim runs
``/forget-me`` (and confirms): SQL over every table and every file of the spool folder
find nothing derived from them - not their id, not their messages' text, ids or marker
hashes - the spool is empty, and the next turns in their channels no longer show their
words to the model.

Separate tests take a member's access to a private channel away and check their DM, and
check a channel denied to one (uncached) member stays out of channels they read.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import discord
import pytest
from sqlalchemy import select

from bot.cogs.history import to_raw
from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.db.engine import Database
from bot.db.models import Base
from bot.memory.spool.durable import inspect_spool, spool_path
from bot.vocabulary.model import message_hash
from tests.conftest import Figures
from tests.helpers.bot import KiokuHarness
from tests.helpers.chat_world import KiokuStarter
from tests.helpers.faults import outage

GUILDS = 20
USERS_PER_GUILD = 50
PUBLIC_CHANNELS = 2
PRIVATE = 2  # channel index of each guild's private channel
THREAD = 3  # a public thread of public channel 0
PRIVATE_THREAD = 4  # a private thread under public channel 1
PRIVATE_MEMBERS = 16  # members 0..15 of each guild may read its private channel
THREAD_MEMBERS = range(30, USERS_PER_GUILD)  # members 30..49 are in the private thread
INSIDER = 3  # opted in to DMs (even guilds); may read the private channel
OUTSIDER = 20  # opted in to DMs (every guild); may read neither private place
KEEPERS = (10, 24)  # ask the bot to remember a personal fact (10 reads the private channel)
ROUNDS = 52  # turns per guild: 20 * 52 = 1,040 round-robin guild turns, plus side turns
SIDE_ROUNDS = (5, 25, 45)  # rounds after which keepers, insiders and outsiders talk
TOOL_EVERY = 3  # every third round-robin turn the model updates the STM
CARRIED_FACTS = 8  # how many earlier facts the model's summary carries forward
VICTIM_GUILD, VICTIM_USER = 5, 7  # the member who runs /forget-me
# The victim's turns: round -> channel. They speak in every channel they may read, ask
# for a long-term memory at round 23 and write while the database is down at round 30.
VICTIM_TURNS = {2: 0, 9: 1, 16: PRIVATE, 23: 0, 30: 1, 37: THREAD}
VICTIM_REMEMBERS, VICTIM_OUTAGE = 23, 30

MARKER = re.compile(r"G(\d\d)-C(\d\d)")
DM_TEXT = re.compile(r"dmtext-(\d+)")
FACT = re.compile(r"ltmfact-(\d+)")


def marker(guild: int, channel: int) -> str:
    return f"G{guild:02}-C{channel:02}"


def secret(guild: int, channel: int) -> str:
    return f"{marker(guild, channel)}-secret"


def readable(member: int) -> frozenset[int]:
    """The channel indexes member ``member`` (index within its guild) may read."""
    channels = {0, 1, THREAD}
    if member < PRIVATE_MEMBERS:
        channels.add(PRIVATE)
    if member in THREAD_MEMBERS:
        channels.add(PRIVATE_THREAD)
    return frozenset(channels)


def may_carry(request_channel: int, memory_channel: int) -> bool:
    """Whether a request in one channel of a guild may show another channel's memory:
    never a private thread's outside it, never the private channel's outside it (not
    in the private thread either: it hangs under a public channel, and its members need
    not read the private channel); public channels and the public thread anywhere."""
    if memory_channel == request_channel:
        return True
    return memory_channel not in (PRIVATE, PRIVATE_THREAD)


@dataclass
class Place:
    guild: int  # index, not id
    channel: int  # index within the guild (see PRIVATE, THREAD, PRIVATE_THREAD)
    discord_channel: Any
    facts: list[str] = field(default_factory=list)  # what the "model" carries forward


@dataclass
class Tally:
    turns: int = 0
    requests: int = 0
    tool_turns: int = 0
    dm_turns: int = 0
    own_marker_seen: Counter[int] = field(default_factory=Counter)  # by channel index
    # (request's channel, shown channel) -> requests that showed another channel's memory
    flows: Counter[tuple[int, int]] = field(default_factory=Counter)
    own_fact_seen: int = 0  # requests that showed their author's own long-term fact
    dm_seen: Counter[str] = field(default_factory=Counter)  # opted-in DMs showing a guild
    leaks: list[str] = field(default_factory=list)


@pytest.fixture
async def world(kioku_with: KiokuStarter) -> AsyncIterator[KiokuHarness]:
    async with kioku_with(
        guilds=GUILDS,
        channels=PUBLIC_CHANNELS,
        members=USERS_PER_GUILD,
        # Every other channel's memory may show up; raw messages of other channels too.
        settings={"stm": {"other_channels": 3}},
    ) as harness:
        yield harness


def request_text(body: dict[str, Any]) -> str:
    return json.dumps(body, ensure_ascii=False)


def check_request(
    tally: Tally,
    text: str,
    *,
    where: tuple[int, int] | None,
    author: int,
    dm_readable: Iterable[tuple[int, int]] = (),
    dm_kind: str = "",
) -> None:
    """Record every marker in ``text`` that may not be there. ``where``: the request's
    (guild, channel), ``None`` in a DM; ``author``: who sent the message; in a DM,
    ``dm_readable``: the (guild, channel) markers it may carry (empty: not opted in)."""
    tally.requests += 1
    seen = {(int(g), int(c)) for g, c in MARKER.findall(text)}
    allowed = frozenset(dm_readable)
    for g, c in sorted(seen):
        if where is None:
            if (g, c) not in allowed:
                tally.leaks.append(
                    f"{marker(g, c)} in the DM of {author} (may show {sorted(allowed)})"
                )
        elif g != where[0] or not may_carry(where[1], c):
            tally.leaks.append(f"{marker(g, c)} in a request of {marker(*where)}")
    for owner in {int(u) for u in DM_TEXT.findall(text)}:
        if where is not None or owner != author:
            place = f"the DM of {author}" if where is None else marker(*where)
            tally.leaks.append(f"DM text of user {owner} in {place}")
    for owner in {int(u) for u in FACT.findall(text)}:
        if owner != author:
            place = f"the DM of {author}" if where is None else marker(*where)
            tally.leaks.append(
                f"long-term fact of user {owner} in a request of {author} in {place}"
            )
        else:
            tally.own_fact_seen += 1
    if where is not None:
        g, c = where
        if secret(g, c) in text:
            tally.own_marker_seen[c] += 1
        for shown in {oc for og, oc in seen if og == g and oc != c}:
            tally.flows[(c, shown)] += 1
    elif seen:
        tally.dm_seen[dm_kind] += 1
        if any(c == PRIVATE for _, c in seen):
            tally.dm_seen[f"{dm_kind} private"] += 1


async def dump_every_table(db: Database) -> list[tuple[str, str]]:
    """Every row of every table, as ``(table, row as text)``."""
    out: list[tuple[str, str]] = []
    async with db.engine.connect() as connection:
        for table in Base.metadata.sorted_tables:
            for row in await connection.execute(select(table)):
                out.append((table.name, " | ".join(repr(value) for value in row)))
    return out


def spool_files(data_dir: Path) -> list[tuple[str, str]]:
    """Every file of the spool folder (the log, set-aside and temporary files), as
    ``(name, text)``."""
    folder = spool_path(data_dir).parent
    if not folder.exists():
        return []
    return [
        (f"spool/{path.name}", path.read_text(encoding="utf-8", errors="replace"))
        for path in sorted(folder.iterdir())
        if path.is_file()
    ]


def hits(rows: Iterable[tuple[str, str]], needles: Iterable[str]) -> list[str]:
    needles = [n for n in needles if n]
    return [
        f"{table}: {needle!r} in {text!r}"
        for table, text in rows
        for needle in needles
        if needle in text
    ]


async def test_twenty_guilds_of_interleaved_turns_never_leak(
    world: KiokuHarness, figures: Figures
) -> None:
    env, llm, memory = world.env, world.llm, world.bot.memory
    spool = world.bot.spool
    assert spool is not None
    data_dir = world.bot.settings.data_dir
    guilds = env.guilds
    assert len(guilds) == GUILDS
    members = [env.members[g * USERS_PER_GUILD : (g + 1) * USERS_PER_GUILD] for g in range(GUILDS)]
    index = {m.id: i for g in range(GUILDS) for i, m in enumerate(members[g])}
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
        public_thread = await env.create_thread(places[(g, 0)].discord_channel, f"thread-{g}")
        places[(g, THREAD)] = Place(g, THREAD, public_thread)
        private_thread = await env.create_thread(
            places[(g, 1)].discord_channel,
            f"private-thread-{g}",
            private=True,
            owner=members[g][THREAD_MEMBERS[0]],
        )
        assert private_thread.type is discord.ChannelType.private_thread
        places[(g, PRIVATE_THREAD)] = Place(g, PRIVATE_THREAD, private_thread)
    # The setup is what the checks assume: who may read the private channel.
    for g in range(GUILDS):
        private = places[(g, PRIVATE)].discord_channel
        for i in (INSIDER, OUTSIDER, *KEEPERS, VICTIM_USER, THREAD_MEMBERS[0]):
            assert private.permissions_for(members[g][i]).view_channel == (PRIVATE in readable(i))
    # Opted in to seeing their server memories in DMs: insiders of even guilds, outsiders
    # of every guild.
    opted_in = {members[g][INSIDER].id for g in range(0, GUILDS, 2)}
    opted_in |= {members[g][OUTSIDER].id for g in range(GUILDS)}
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
            facts = "; ".join([*place.facts, text][-CARRIED_FACTS:])
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
                tally, request_text(body), where=(place.guild, place.channel), author=author.id
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
        assert llm.pending == 0, "a scripted reply was not consumed by its turn"
        i = index[author.id]
        kind = {INSIDER: "insider", OUTSIDER: "outsider"}.get(i, "other")
        dm_readable = {(g, c) for c in readable(i)} if author.id in opted_in else set()
        for body in llm.requests[first:]:
            check_request(
                tally,
                request_text(body),
                where=None,
                author=author.id,
                dm_readable=dm_readable,
                dm_kind=kind,
            )
        return sent

    # One of the victim's writes goes through the spool: what the spool file held.
    spool_snapshots: list[str] = []
    spool_write = spool._write

    def recording_write(record: dict[str, Any]) -> None:
        spool_write(record)
        spool_snapshots.append(spool.path.read_text(encoding="utf-8"))

    async def outage_turn(place: Place, text: str) -> discord.Message:
        spool._write = recording_write  # type: ignore[method-assign]
        first = len(llm.requests)
        try:
            async with outage(memory.sessions):
                sent = await turn(place, victim, text, tool=True)
        finally:
            del spool._write
        results = [
            m["content"]
            for body in llm.requests[first:]
            for m in body["messages"]
            if m.get("role") == "tool"
        ]
        assert any("pending sync" in r for r in results), results
        # The database is back: the spooled write reaches it (the replayer may have done
        # it already; this waits for it or does it).
        await spool.replay(memory.sessions)
        assert memory.pending_sync == 0
        return sent

    # ------------------------------------------------------------ interleaved turns
    count = 0
    outage_words = ""
    recalled = 0  # later turns of a keeper whose prompt recalled their fact
    for r in range(ROUNDS):
        for g in range(GUILDS):
            u = (r * 7 + g) % USERS_PER_GUILD
            author = members[g][u]
            if u < PRIVATE_MEMBERS and r % 3 == 1:
                c = PRIVATE
            elif r % 4 == 2:
                c = THREAD
            elif r % 4 == 3 and u in THREAD_MEMBERS:
                c = PRIVATE_THREAD
            else:
                c = r % PUBLIC_CHANNELS
            if g == VICTIM_GUILD and r in VICTIM_TURNS:
                # The victim speaks in every channel they may read, and once asks the
                # bot to remember something (long-term memory).
                author, c = victim, VICTIM_TURNS[r]
            place = places[(g, c)]
            words = f"{marker(g, c)}-U{index[author.id]:02}-r{r:02}"
            remember = ""
            if author == victim and r == VICTIM_REMEMBERS:
                remember = f"{words} victim-fact: likes teal"
                text = f"remember that I like teal {words}"
            else:
                text = f"{words} says hello"
            count += 1
            if author == victim and r == VICTIM_OUTAGE:
                sent = await outage_turn(place, text)
                outage_words = words
            else:
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
        if r in SIDE_ROUNDS:
            side = SIDE_ROUNDS.index(r)
            for g in range(GUILDS):
                # Two members keep a personal long-term fact: stated once, then recalled
                # in later turns of theirs - and never shown to anyone else.
                for k, keeper in enumerate(KEEPERS):
                    place = places[(g, (k, 1 - k, THREAD)[side])]
                    words = f"{marker(g, place.channel)}-U{keeper:02}-r{r:02}"
                    author = members[g][keeper]
                    if side == 0:
                        fact = f"{words} ltmfact-{author.id} umbrella is teal"
                        await turn(
                            place,
                            author,
                            f"remember that my umbrella is teal {words}",
                            tool=False,
                            remember=fact,
                        )
                    else:
                        first = len(llm.requests)
                        await turn(place, author, f"{words} umbrella weather?", tool=False)
                        # The first request of the turn already carries the fact.
                        recalled += f"ltmfact-{author.id}" in request_text(llm.requests[first])
                # The insider writes the private channel's memory, then DMs; the outsider
                # writes a public channel's (or the public thread's), then DMs.
                insider, outsider = members[g][INSIDER], members[g][OUTSIDER]
                place = places[(g, PRIVATE)]
                words = f"{marker(g, PRIVATE)}-U{INSIDER:02}-r{r:02}"
                await turn(place, insider, f"{words} insider says hello", tool=True)
                place = places[(g, (0, 1, THREAD)[side])]
                words = f"{marker(g, place.channel)}-U{OUTSIDER:02}-r{r:02}"
                await turn(place, outsider, f"{words} outsider says hello", tool=True)
                await dm_turn(insider, tool=side == 0)
                await dm_turn(outsider, tool=side == 0)
    victim_messages.append(await dm_turn(victim, tool=True))
    victim_words.append(f"dmtext-{victim.id}")

    flows = dict(sorted(tally.flows.items()))
    figures["guild turns"] = tally.turns
    figures["DM turns"] = tally.dm_turns
    figures["model requests checked"] = tally.requests
    figures["STM updates"] = tally.tool_turns
    figures["leaks found"] = len(tally.leaks)
    print(
        f"\nisolation: {tally.turns} guild turns + {tally.dm_turns} DM turns, "
        f"{tally.requests} model requests checked ({tally.tool_turns} STM updates), "
        f"leaks found: {len(tally.leaks)}\n"
        f"  own memory shown, by channel: {dict(sorted(tally.own_marker_seen.items()))}\n"
        f"  other channels shown (request channel, shown channel): {flows}\n"
        f"  own long-term fact shown: {tally.own_fact_seen} requests, recalled in {recalled} "
        f"later turns; DMs showing memories: "
        f"{dict(tally.dm_seen)}"
    )
    assert not tally.leaks, tally.leaks[:20]
    assert tally.turns >= 1_000
    # The checks are not vacuous: memories did flow where they may ...
    for c in (0, 1, PRIVATE, THREAD, PRIVATE_THREAD):
        assert tally.own_marker_seen[c] > 20, (c, tally.own_marker_seen)
    assert sum(tally.flows.values()) > 100, flows
    for request_channel, shown in (
        (0, THREAD),  # a public thread's memory in its parent
        (1, THREAD),  # ... and in another public channel
        (THREAD, 0),  # the parent's memory in its public thread
        (PRIVATE, THREAD),  # the public thread's memory in the private channel
        (PRIVATE_THREAD, 1),  # the parent's memory in its private thread
        (PRIVATE_THREAD, THREAD),
    ):
        assert tally.flows[(request_channel, shown)] > 0, (request_channel, shown, flows)
    # ... long-term facts were recalled to their owners (stated once per keeper, then
    # recalled in each of their later turns, in other channels and the public thread) ...
    assert recalled == GUILDS * len(KEEPERS) * (len(SIDE_ROUNDS) - 1), recalled
    # ... and opted-in DMs showed server memories: the insider's even the private
    # channel's (so the DM path can carry one), the outsider's never.
    assert tally.dm_seen["insider private"] > 0, tally.dm_seen
    assert tally.dm_seen["outsider"] > 0, tally.dm_seen
    assert tally.dm_seen["other"] == 0, tally.dm_seen
    # The spool did hold the victim's words while the database was down.
    assert hits([("spool", text) for text in spool_snapshots], victim_words), spool_snapshots

    # -------------------------------------------------------------- /forget-me
    before = await dump_every_table(world.database)
    victim_id = str(victim.id)
    assert hits(before, [victim_id]), "the victim left no trace to forget"
    assert hits(before, victim_words), "the victim's words were never stored"
    assert hits(before, [outage_words]), "the spooled write never reached the database"

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
    # With the database up nothing waits in the spool, and no spool file (the log, a
    # set-aside or temporary file) holds anything of the victim.
    spooled = spool_files(data_dir)
    spool_leftovers = hits(spooled, derived)
    status = inspect_spool(data_dir)

    # The model no longer sees the victim's words in their channels either.
    others = [m for m in members[VICTIM_GUILD][:PRIVATE_MEMBERS] if m != victim]
    still_shown: list[str] = []
    for c in (0, 1, PRIVATE, THREAD):
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

    figures["forget-me: rows still derived from the user"] = len(leftovers)
    figures["forget-me: spool records holding the user's data"] = len(spool_leftovers)
    print(
        f"forget-me: {len(before)} rows before, {len(after)} after; rows still derived "
        f"from the user: {len(leftovers)}; spool files {[name for name, _ in spooled]}, "
        f"{status.pending} pending, holding the user's data: {len(spool_leftovers)}; "
        f"words still shown to the model: {len(still_shown)}"
    )
    for line in leftovers:
        print(f"  left behind: {line[:300]}")
    assert not still_shown, still_shown
    assert not leftovers, leftovers[:10]
    assert status.pending == 0 and memory.pending_sync == 0, status
    assert status.set_aside == (), status
    assert spool_path(data_dir).read_text(encoding="utf-8") == "", "records left in the spool"
    assert not spool_leftovers, spool_leftovers[:10]


def test_markers_are_what_the_checks_look_for() -> None:
    tally = Tally()
    leaks = [
        # another guild's memory in a channel; the private channel's in a public one, in
        # the public thread and in the private thread; a private thread's anywhere else
        ("G03-C01-secret", (4, 0), 1, ()),
        ("G04-C02-x", (4, 0), 1, ()),
        ("G04-C02-x", (4, THREAD), 1, ()),
        ("G04-C02-x", (4, PRIVATE_THREAD), 1, ()),
        ("G04-C04-x", (4, PRIVATE), 1, ()),
        ("G04-C04-x", (4, THREAD), 1, ()),
        # another user's DM text; a DM not opted in; another guild; a channel the DM's
        # user cannot read; DM text in a server; another user's long-term fact
        ("dmtext-9", None, 8, ()),
        ("G01-C00", None, 8, ()),
        ("G02-C00", None, 8, ((1, 0),)),
        ("G01-C02-secret", None, 8, ((1, 0), (1, 1), (1, THREAD))),
        ("dmtext-8", (1, 0), 8, ()),
        ("ltmfact-9", (1, 0), 8, ()),
        ("ltmfact-9", None, 8, ()),
    ]
    for text, where, author, readable_here in leaks:
        before = len(tally.leaks)
        check_request(tally, text, where=where, author=author, dm_readable=readable_here)
        assert len(tally.leaks) == before + 1, (text, where, readable_here)
    fine = [
        ("G04-C02-x", (4, PRIVATE), 1, ()),
        ("G04-C04-x", (4, PRIVATE_THREAD), 1, ()),
        ("G04-C00 G04-C01 G04-C03", (4, PRIVATE), 1, ()),
        ("G04-C00 G04-C01 G04-C03", (4, PRIVATE_THREAD), 1, ()),
        ("G04-C03 G04-C01", (4, 0), 1, ()),
        ("G01-C02-secret dmtext-8 ltmfact-8", None, 8, ((1, 2),)),
        ("ltmfact-8", (1, 0), 8, ()),
    ]
    for text, where, author, readable_here in fine:
        check_request(tally, text, where=where, author=author, dm_readable=readable_here)
    assert len(tally.leaks) == len(leaks), tally.leaks[len(leaks) :]
    assert readable(INSIDER) == {0, 1, PRIVATE, THREAD}
    assert readable(OUTSIDER) == {0, 1, THREAD}
    assert readable(THREAD_MEMBERS[0]) == {0, 1, THREAD, PRIVATE_THREAD}


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


@pytest.mark.parametrize("how", ["access revoked", "left the server"])
async def test_a_member_who_lost_access_to_a_private_channel_sees_none_of_it_in_dms(
    kioku: KiokuHarness, how: str
) -> None:
    """A member opted in to seeing their server memories in DMs, talked in a private
    channel (its STM, a long-term fact said there), then lost access to it (the admin
    removed their overwrite, or they left the server). Their DM must not show that
    channel's memory, its raw messages (some posted after they lost access) or a fact
    said there - while it still shows what they may read."""
    env, llm, memory = kioku.env, kioku.llm, kioku.bot.memory
    member, other = env.member, await env.create_member("other")
    private = await env.create_text_channel("mods", private=True, allow=[member, other])
    dm = env.dm_channel(member)
    await memory.set_cross_context_opt_in(member.id, True)

    llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": "G00-C09-secret"})]).reply_text("ok")
    await env.send("G00-C09 plans for the raid", channel=private, author=member, mention_bot=True)
    llm.reply_tool_calls([("remember", {"fact": "G00-C09-fact umbrella"})]).reply_text("ok")
    await env.send(
        "remember that G00-C09-fact umbrella", channel=private, author=member, mention_bot=True
    )
    await env.send("G00-C09 what other said before", channel=private, author=other)
    llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": "G00-C00-secret"})]).reply_text("ok")
    await env.send("G00-C00 hello everyone", author=member, mention_bot=True)
    assert llm.pending == 0

    async def dm_request() -> str:
        first = len(llm.requests)
        await env.send("anything new about the umbrella?", channel=dm, author=member)
        return "\n".join(request_text(body) for body in llm.requests[first:])

    # While they may read it, the private channel's memory does show in their DM.
    shown = await dm_request()
    assert "G00-C09-secret" in shown and "G00-C09-fact" in shown, shown

    if how == "access revoked":
        await env.set_overwrite(private, member, None)
        assert not private.permissions_for(member).view_channel
    else:
        await env.run_parser(
            env.state.parse_guild_member_remove,
            {
                "guild_id": str(env.guild.id),
                "user": {
                    "id": str(member.id),
                    "username": member.name,
                    "discriminator": "0",
                    "avatar": None,
                },
            },
        )
        assert env.guild.get_member(member.id) is None
    await env.send("G00-C09 said after they lost access", channel=private, author=other)

    shown = await dm_request()
    leaked = {
        "the private channel's STM": "G00-C09-secret",
        "its raw messages": "G00-C09 what other said before",
        "a raw message posted after they lost access": "said after they lost access",
        "a long-term fact said there": "G00-C09-fact",
    }
    found = [what for what, needle in leaked.items() if needle in shown]
    # The DM turn did reach the model (so the absence below is not vacuous).
    assert "anything new about the umbrella?" in shown, shown
    if how == "access revoked":
        # What they may still read is still shown (the check is not vacuous).
        assert "G00-C00-secret" in shown, shown
    assert not found, f"{how}: the DM shows {found}"


async def test_a_channel_one_member_is_denied_stays_out_of_channels_they_read(
    kioku: KiokuHarness,
) -> None:
    """#staff is readable by everyone except one member (a member overwrite denies them).
    Its memory must never appear in #general, which that member reads - also when the
    member is not in the bot's member cache, as in production: the bot runs without the
    privileged members intent, so discord.py hands such an overwrite's target over as a
    bare ``discord.Object``, not a ``Member``."""
    env, llm = kioku.env, kioku.llm
    denied = await env.create_member("denied")
    staff = await env.create_text_channel(
        "staff", overwrites={denied: discord.PermissionOverwrite(view_channel=False)}
    )
    assert not staff.permissions_for(denied).view_channel
    assert env.channel.permissions_for(denied).view_channel
    llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": "G00-C07-secret"})]).reply_text("ok")
    await env.send("G00-C07 staff-only talk", channel=staff, mention_bot=True)

    async def general_request() -> str:
        first = len(llm.requests)
        await env.send("what's up?", mention_bot=True)
        return "\n".join(request_text(body) for body in llm.requests[first:])

    assert "G00-C07" not in await general_request()  # the member is cached: filtered
    # What a bot without the members intent knows of them: nothing.
    env.guild._remove_member(denied)
    assert not any(isinstance(target, discord.Member) for target in staff.overwrites)
    assert "G00-C07" not in await general_request(), "#staff's memory shown in #general"


async def test_a_member_whose_roles_combine_to_read_one_channel_sees_no_memory_of_a_closed_one(
    kioku: KiokuHarness,
) -> None:
    # #vip-lounge opens for the role vip; #planning closes for the role guest. Role by
    # role, the lounge is no more private than #planning, but a member holding both reads
    # the lounge and not #planning.
    env, llm = kioku.env, kioku.llm
    vip = await env.create_role("vip", discord.Permissions.none())
    guest = await env.create_role("guest", discord.Permissions.none())
    both = await env.create_member("vip-guest", roles=[vip, guest])
    lounge = await env.create_text_channel("vip-lounge", private=True, allow=[vip])
    planning = await env.create_text_channel(
        "planning", overwrites={guest: discord.PermissionOverwrite(view_channel=False)}
    )
    assert lounge.permissions_for(both).view_channel
    assert not planning.permissions_for(both).view_channel
    llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": "PLANNING-SECRET"})]).reply_text("ok")
    await env.send("surprise party for vip-guest on friday", channel=planning, mention_bot=True)
    assert llm.pending == 0

    first = len(llm.requests)
    llm.reply_text("hi")
    await env.send("what's new?", channel=lounge, author=both, mention_bot=True)

    shown = "\n".join(request_text(body) for body in llm.requests[first:])
    assert "what's new?" in shown
    assert "PLANNING-SECRET" not in shown


async def test_without_the_members_intent_a_dm_judges_roles_by_a_fresh_fetch(
    kioku: KiokuHarness,
) -> None:
    # Without the members intent Discord sends no role changes: a member cached while in
    # voice keeps the roles they had. An admin removed the staff role; Discord's answer to
    # a fetch says so, and the opted-in DM must follow it.
    env, llm, memory = kioku.env, kioku.llm, kioku.bot.memory
    staff_role = await env.create_role("staff", discord.Permissions.none())
    member = await env.create_member("voice-sitter", roles=[staff_role])  # cached
    staff = await env.create_text_channel("staff", private=True, allow=[staff_role])
    await memory.set_cross_context_opt_in(member.id, True)
    llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": "STAFF-SECRET"})]).reply_text("ok")
    await env.send("ban list for friday", channel=staff, author=member, mention_bot=True)
    assert llm.pending == 0
    kioku.bot._connection._intents.members = False  # as in production (Intents.default())
    truth = {
        "user": {"id": str(member.id), "username": member.name, "discriminator": "0"},
        "roles": [],
        "joined_at": "2024-01-01T00:00:00+00:00",
        "deaf": False,
        "mute": False,
        "flags": 0,
    }

    async def get_member(guild_id: int, member_id: int) -> dict[str, Any]:
        return truth

    kioku.bot.http.get_member = get_member  # type: ignore[method-assign]
    first = len(llm.requests)
    llm.reply_text("hi")
    await env.send("anything new?", channel=env.dm_channel(member), author=member)

    shown = "\n".join(request_text(body) for body in llm.requests[first:])
    assert "anything new?" in shown
    assert "STAFF-SECRET" not in shown
