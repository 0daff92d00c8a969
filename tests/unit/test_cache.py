"""The STM cache (``bot.memory.stm.cache.StmCache``): bounded LRU, TTLs measured from the last
update, and secondary indexes that never outlive their entries; the index of the channels
that hold a memory lists only those, most recently updated first.

A :class:`ManualClock` drives both the wall clock (an entry's age) and the monotonic
clock (the cache's timer), so hours pass instantly and exactly.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from bot.memory.stm.cache import StmCache
from bot.vocabulary.model import ScopeKey, StmEntry
from tests.helpers.builders import ALICE, BOB, CHANNEL, GUILD, OTHER_CHANNEL, ManualClock

TTL_SUMMARY_HOURS = 24
TTL_EMPTY_HOURS = 12
OTHER_GUILD = GUILD + 1


def make_cache(clock: ManualClock, maxsize: int = 100) -> StmCache:
    return StmCache(
        maxsize=maxsize,
        ttl_summary_s=TTL_SUMMARY_HOURS * 3600,
        ttl_empty_s=TTL_EMPTY_HOURS * 3600,
        clock=clock,
    )


def entry(
    clock: ManualClock,
    key: ScopeKey,
    *,
    summary: str = "",
    categories: dict[str, str] | None = None,
    age: timedelta = timedelta(0),
) -> StmEntry:
    return StmEntry(
        key=key,
        updated_at=clock.now() - age,
        summary=summary,
        categories=dict(categories or {}),
    )


def indexed_in(cache: StmCache, key: ScopeKey) -> set[str]:
    """Which of the cache's index views still mention ``key``."""
    found = set()
    if key in cache.keys_of_channel(key.channel_id):
        found.add("keys_of_channel")
    if key.user_id is not None and any(e.key == key for e in cache.entries_of_user(key.user_id)):
        found.add("entries_of_user")
    if key.user_id is not None and any(e.key == key for e in cache.memories_of_user(key.user_id)):
        found.add("memories_of_user")
    if key.guild_id is not None and any(
        e.key == key for e in cache.server_entries_of_guild(key.guild_id)
    ):
        found.add("server_entries_of_guild")
    return found


# Where an entry holding a memory is found (one without: by channel and user only).
SERVER_INDEXES = {"keys_of_channel", "server_entries_of_guild"}
USER_INDEXES = {"keys_of_channel", "entries_of_user", "memories_of_user"}


def server(channel: int, guild: int = GUILD) -> ScopeKey:
    return ScopeKey.server(guild, channel)


def user(user_id: int, channel: int, guild: int | None = GUILD) -> ScopeKey:
    return ScopeKey.user(user_id, channel, guild)


# ------------------------------------------------------------------------ bounded, LRU


def test_lru_eviction_at_maxsize_removes_the_least_recently_used_from_every_index() -> None:
    clock = ManualClock()
    cache = make_cache(clock, maxsize=3)
    a, alice, b = server(CHANNEL), user(ALICE, CHANNEL), server(OTHER_CHANNEL)
    for key in (a, alice, b):
        cache.put(entry(clock, key, summary=f"memory of {key}"))
    assert indexed_in(cache, alice) == USER_INDEXES

    assert cache.get(a) is not None  # a is now the most recently used: alice is the oldest
    c = server(CHANNEL + 7, guild=OTHER_GUILD)
    cache.put(entry(clock, c, summary="third channel"))

    assert len(cache) == 3
    assert alice not in cache and cache.get(alice) is None
    assert indexed_in(cache, alice) == set()
    assert cache.entries_of_user(ALICE) == []
    assert set(cache.keys_of_channel(CHANNEL)) == {a}
    for key in (a, b, c):
        assert indexed_in(cache, key) == SERVER_INDEXES, key

    # Reading entries (directly or through an index view, as above) makes them recently
    # used: after touching a again, b is the least recently used.
    assert cache.get(a) is not None
    cache.put(entry(clock, user(BOB, OTHER_CHANNEL), summary="Bob's copy"))
    assert b not in cache
    assert indexed_in(cache, b) == set()
    assert [e.key for e in cache.server_entries_of_guild(GUILD)] == [a]
    assert cache.keys_of_channel(OTHER_CHANNEL) == [user(BOB, OTHER_CHANNEL)]


def test_the_cache_stays_bounded_and_its_indexes_hold_only_live_entries() -> None:
    clock = ManualClock()
    cache = make_cache(clock, maxsize=5)
    keys = [user(ALICE + i, CHANNEL + i) for i in range(40)]
    for key in keys:
        cache.put(entry(clock, key, summary="hi"))
        assert len(cache) <= 5
    live = keys[-5:]
    assert [key for key in keys if key in cache] == live
    for key in keys[:-5]:
        assert indexed_in(cache, key) == set(), key
    for key in live:
        assert indexed_in(cache, key) == USER_INDEXES, key


# --------------------------------------------------------------------------------- TTL

TTL_CASES = [
    pytest.param({"summary": "the launch moved to Friday"}, TTL_SUMMARY_HOURS, id="summary-24h"),
    pytest.param({"categories": {"todo": "write docs"}}, TTL_EMPTY_HOURS, id="category-only-12h"),
    pytest.param({}, TTL_EMPTY_HOURS, id="empty-12h"),
    pytest.param({"summary": "   \n"}, TTL_EMPTY_HOURS, id="blank-summary-12h"),
]


@pytest.mark.parametrize(("content", "ttl_hours"), TTL_CASES)
def test_ttl_depends_on_the_summary_and_is_measured_from_the_last_update(
    content: dict[str, object], ttl_hours: int
) -> None:
    clock = ManualClock()
    cache = make_cache(clock)
    key = server(CHANNEL)
    live = entry(clock, key, **content)  # type: ignore[arg-type]
    cache.put(live)

    clock.advance(hours=ttl_hours - 1, minutes=59)
    assert cache.get(key) is live
    live.updated_at = clock.now()  # an update re-inserts the entry: the TTL restarts
    cache.put(live)

    clock.advance(hours=ttl_hours - 1, minutes=59)
    assert cache.get(key) is live, "the TTL ran from the first insert, not the last update"
    clock.advance(minutes=2)
    assert cache.get(key) is None
    assert key not in cache


@pytest.mark.parametrize(("content", "ttl_hours"), TTL_CASES[:2])
def test_ttl_expiry_removes_the_entry_from_every_index(
    content: dict[str, object], ttl_hours: int
) -> None:
    clock = ManualClock()
    cache = make_cache(clock)
    channel_key, alice_key = server(CHANNEL), user(ALICE, CHANNEL)
    for key in (channel_key, alice_key):
        cache.put(entry(clock, key, **content))  # type: ignore[arg-type]
    assert indexed_in(cache, channel_key) == SERVER_INDEXES
    assert indexed_in(cache, alice_key) == USER_INDEXES

    clock.advance(hours=ttl_hours, minutes=1)

    assert cache.get(channel_key) is None and cache.get(alice_key) is None
    assert indexed_in(cache, channel_key) == set()
    assert indexed_in(cache, alice_key) == set()
    assert cache.keys_of_channel(CHANNEL) == []
    assert cache.entries_of_user(ALICE) == []


def test_an_entry_put_past_its_ttl_is_not_cached_and_drops_the_live_one_from_the_indexes() -> None:
    clock = ManualClock()
    cache = make_cache(clock)
    stale_row = server(CHANNEL)
    cache.put(entry(clock, stale_row, summary="old", age=timedelta(hours=TTL_SUMMARY_HOURS)))
    assert stale_row not in cache
    assert indexed_in(cache, stale_row) == set()

    # A live entry replaced by a version already past its TTL is gone from the cache, and
    # must be gone from the indexes too.
    alice_key = user(ALICE, CHANNEL)
    cache.put(entry(clock, alice_key, summary="live"))
    cache.put(entry(clock, alice_key, summary="old", age=timedelta(hours=TTL_SUMMARY_HOURS + 1)))
    assert cache.get(alice_key) is None
    assert indexed_in(cache, alice_key) == set()
    assert cache.entries_of_user(ALICE) == []


# ------------------------------------------------- the index of channels with memory


def test_only_channels_holding_a_memory_are_indexed_and_the_newest_comes_first() -> None:
    clock = ManualClock()
    cache = make_cache(clock, maxsize=1000)
    for channel in range(500):  # channels seen, nothing remembered yet
        cache.put(entry(clock, server(CHANNEL + channel)))
    remembered = [server(CHANNEL + 1000 + n) for n in range(3)]
    for n, key in enumerate(remembered):
        clock.advance(minutes=1)
        cache.put(entry(clock, key, summary=f"memory {n}"))
    cache.put(entry(clock, server(CHANNEL + 2000), categories={"todo": "docs"}))

    newest = [e.key for e in cache.server_entries_of_guild(GUILD)]

    assert newest == [server(CHANNEL + 2000), *reversed(remembered)]


def test_a_write_moves_a_channel_to_the_front_and_emptying_it_takes_it_out() -> None:
    clock = ManualClock()
    cache = make_cache(clock)
    older = entry(clock, server(CHANNEL), summary="a")
    cache.put(older)
    clock.advance(minutes=1)
    newer = entry(clock, server(OTHER_CHANNEL), summary="b")
    cache.put(newer)
    assert [e.key for e in cache.server_entries_of_guild(GUILD)] == [newer.key, older.key]

    clock.advance(minutes=1)
    older.summary, older.updated_at = "a, updated", clock.now()  # as a write does, then re-puts
    cache.put(older)
    assert [e.key for e in cache.server_entries_of_guild(GUILD)] == [older.key, newer.key]

    newer.summary, newer.updated_at = "", clock.now()  # cleared by its own write
    cache.put(newer)
    assert [e.key for e in cache.server_entries_of_guild(GUILD)] == [older.key]
    assert newer.key in cache  # still cached (its version), just not a memory to show


def test_a_users_copies_are_indexed_newest_first_and_dm_copies_are_not() -> None:
    clock = ManualClock()
    cache = make_cache(clock)
    in_guild = [user(ALICE, CHANNEL + n) for n in range(3)]
    for n, key in enumerate(in_guild):
        clock.advance(minutes=1)
        cache.put(entry(clock, key, summary=f"copy {n}"))
    cache.put(entry(clock, user(ALICE, CHANNEL + 9, guild=None), summary="said in a DM"))
    cache.put(entry(clock, user(ALICE, CHANNEL + 10)))  # nothing remembered there

    assert [e.key for e in cache.memories_of_user(ALICE)] == list(reversed(in_guild))
    assert list(cache.memories_of_user(BOB)) == []


def test_evicted_popped_and_cleared_channels_leave_the_index() -> None:
    clock = ManualClock()
    cache = make_cache(clock, maxsize=3)
    keys = [server(CHANNEL + n) for n in range(4)]
    for key in keys:  # the fourth evicts the first (least recently used)
        cache.put(entry(clock, key, summary="memory"))
    assert [e.key for e in cache.server_entries_of_guild(GUILD)] == list(reversed(keys[1:]))

    cache.pop(keys[2])  # a /refresh, a notice from another process
    assert [e.key for e in cache.server_entries_of_guild(GUILD)] == [keys[3], keys[1]]

    cache.clear()  # the listener reconnected: everything goes
    assert list(cache.server_entries_of_guild(GUILD)) == []


def test_an_expired_memory_leaves_the_index_on_the_next_read() -> None:
    clock = ManualClock()
    cache = make_cache(clock)
    fading = server(CHANNEL)
    cache.put(entry(clock, fading, categories={"todo": "docs"}))  # 12 h
    clock.advance(hours=1)
    lasting = server(OTHER_CHANNEL)
    cache.put(entry(clock, lasting, summary="a summary"))  # 24 h
    clock.advance(hours=TTL_EMPTY_HOURS - 1, minutes=1)

    assert [e.key for e in cache.server_entries_of_guild(GUILD)] == [lasting]
    assert indexed_in(cache, fading) == set()
