"""What the chaos harness models: the users, channels and keys, what a write or row holds, and
the harness's view of each process, write and turn."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import async_sessionmaker

from bot.memory.service import MemoryService
from bot.memory.spool.durable import DurableSpool
from bot.vocabulary.model import GuildConfig, ScopeKey, StmEntry
from tests.helpers.builders import ALICE, BOB, CHANNEL, GUILD, OTHER_CHANNEL

CAROL = 333_333_333_333_333_003
USERS = (ALICE, BOB, CAROL)
CHANNELS = (CHANNEL, OTHER_CHANNEL)
KEYS = [ScopeKey.server(GUILD, c) for c in CHANNELS] + [
    ScopeKey.user(u, c, GUILD) for u in USERS for c in CHANNELS
]


RETENTION_DAYS = 2
TEXT = re.compile(r"^(w\d+)$")
SLUGS = ("plans", "likes", "facts", "tone")
EARLIEST = datetime.min.replace(tzinfo=UTC)

# What a write's payload, a cache entry or a row holds: the summary and the non-empty
# category values (every write's values are its own text, so contents are unique).
Content = tuple[str, tuple[tuple[str, str], ...]]
# What a write's shape depends on: STM enabled, category mode, the category slugs.
ConfigKey = tuple[bool, bool, frozenset[str]]
DEFAULT_CONFIG: ConfigKey = (True, False, frozenset())
EMPTY: Content = ("", ())


def content(summary: str | None, categories: dict[str, str] | None) -> Content:
    return (summary or "", tuple(sorted((k, v) for k, v in (categories or {}).items() if v)))


def entry_content(entry: StmEntry) -> Content:
    return content(entry.summary, entry.categories)


def config_key(config: GuildConfig) -> ConfigKey:
    slugs = frozenset(c.slug for c in config.categories) if config.category_mode else frozenset()
    return (config.stm_enabled, config.category_mode, slugs)


def values_of(stored: Content) -> list[tuple[str, str]]:
    """(slug or "summary", text) of every value held."""
    summary, categories = stored
    return ([("summary", summary)] if summary else []) + list(categories)


# ------------------------------------------------------------------- the model


@dataclass
class Proc:
    name: str
    service: MemoryService
    spool: DurableSpool | None
    real: async_sessionmaker  # type: ignore[type-arg]
    down: bool = False
    listening: str = "ok"  # ok | losing (notices lost, not noticed) | deaf
    # Up to when the wipes of a channel / user have reached this process (see the module
    # docstring); the windows were dropped at ``reset_at`` (every wipe before it reached).
    reach_clear: dict[int, datetime] = field(default_factory=dict)
    reach_forget: dict[int, datetime] = field(default_factory=dict)
    reset_at: datetime = EARLIEST
    # The last settings change (index in Scenario.configs) that has reached this process.
    config_reach: int = 0


@dataclass
class Write:
    id: int
    text: str
    proc: str
    channel: int
    user: int
    started_at: datetime
    keys: tuple[ScopeKey, ...]
    status: str | None = None
    ack: int | None = None
    derived: dict[ScopeKey, set[int]] = field(default_factory=dict)
    written_at: datetime | None = None
    turn_seq: int = 0
    ack_seq: int = 0
    kind: str = "write"
    start_seq: int = 0  # the write operation's start (the turn may have begun earlier)
    build_seq: int = 0  # when its entries were built (cache mutated, before persisting)
    built_at: datetime | None = None  # the clock then
    base: dict[ScopeKey, Content] = field(default_factory=dict)  # what it replaced
    base_versions: dict[ScopeKey, int] = field(default_factory=dict)
    after: dict[ScopeKey, Content] = field(default_factory=dict)  # what it stored
    validated: ConfigKey | None = None
    reach: int = 0  # Proc.config_reach when it built its entries
    known: int = 0  # how many settings changes had committed then
    expected_version: int | None = None
    # Up to when wipes had reached its process when it built its entries (_wipe_reach).
    wipe_reach: tuple[dict[int, datetime], dict[int, datetime]] | None = None


@dataclass
class Turn:
    proc: str
    state: Any
    user: int
    channel: int
    seq: int = 0
    written: bool = False
