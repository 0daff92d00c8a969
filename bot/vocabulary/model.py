"""The memory model: scope keys, STM entries, raw messages, guild configuration, facts."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from typing import Literal, NamedTuple

from bot.vocabulary.redaction import redact_secrets

ScopeKind = Literal["server", "user"]
Origin = Literal["model_tool", "summarizer", "admin", "user_command", "import"]
RenderMode = Literal["crude_summary", "supersede"]

SUMMARY_SLUG = "summary"
MAX_CATEGORIES = 5


# A named tuple, not a dataclass: its hash and equality run in C, about 5x faster per cache
# lookup, and every turn makes several (docs/scaling.md).
class ScopeKey(NamedTuple):
    """One STM entry's key: ``server:{guild}:{channel}`` or ``user:{user}:{channel}``.

    A user key keeps the guild it was made in (``None`` in DMs), for recall elsewhere.
    """

    kind: ScopeKind
    channel_id: int
    guild_id: int | None = None
    user_id: int | None = None

    @classmethod
    def server(cls, guild_id: int, channel_id: int) -> ScopeKey:
        return cls("server", channel_id, guild_id, None)

    @classmethod
    def user(cls, user_id: int, channel_id: int, guild_id: int | None = None) -> ScopeKey:
        return cls("user", channel_id, guild_id, user_id)

    def __str__(self) -> str:
        if self.kind == "server":
            return f"server:{self.guild_id}:{self.channel_id}"
        return f"user:{self.user_id}:{self.channel_id}"


@dataclass(frozen=True, slots=True)
class ImageRef:
    """An image posted with a message: where to get it, never its bytes (never stored)."""

    url: str
    name: str
    content_type: str | None = None
    # In bytes; 0 when Discord does not say (an image embed).
    size: int = 0


@dataclass(frozen=True, slots=True)
class RawMessage:
    """One Discord message as the prompt sees it (never persisted)."""

    message_id: int
    author_id: int
    author_name: str
    content: str
    created_at: datetime
    is_bot: bool = False
    # Images for vision models; the text notes each one (``[image: name]``), and only the
    # text ever reaches memory.
    images: tuple[ImageRef, ...] = ()
    # Computed once: one message is shown in many prompts and compared with many markers.
    _shared_line: str | None = field(default=None, init=False, repr=False, compare=False)
    _content_hash: str | None = field(default=None, init=False, repr=False, compare=False)
    _line: str | None = field(default=None, init=False, repr=False, compare=False)

    def content_hash(self) -> str:
        """The marker's fingerprint of this message (see :func:`message_hash`)."""
        if self._content_hash is None:
            object.__setattr__(self, "_content_hash", message_hash(self.author_id, self.content))
        assert self._content_hash is not None
        return self._content_hash

    def shared_line(self) -> str:
        """:meth:`line` as other channels' prompts show it: secrets redacted, as in memory."""
        if self._shared_line is None:
            # The text only: a speaker called "Password" says no password.
            shown = replace(self, content=redact_secrets(self.content))
            object.__setattr__(self, "_shared_line", shown.line())
        assert self._shared_line is not None
        return self._shared_line

    def line(self) -> str:
        """The ``Name: text`` line, continuation lines indented so none passes for a speaker's."""
        if self._line is None:
            text = f"{self.author_name}: {self.content}"
            if not text.isprintable():  # a line break of some kind (the usual message has none)
                text = "\n    ".join(text.splitlines())
            object.__setattr__(self, "_line", text)
        assert self._line is not None
        return self._line


def speaker_name(name: str) -> str:
    """``name`` on one line with look-alike colons (U+A789), so it cannot forge a speaker."""
    return " ".join(name.replace(":", "\ua789").split())


def message_hash(author_id: int, content: str) -> str:
    """sha256 of a message's author id and content: the marker's fingerprint."""
    return hashlib.sha256(f"{author_id}:{content}".encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Marker:
    """The last message a summary covers."""

    message_id: int
    content_hash: str

    @classmethod
    def of(cls, message: RawMessage) -> Marker:
        return cls(message.message_id, message.content_hash())


@dataclass(frozen=True, slots=True)
class Provenance:
    """How a memory got in: origin, detail (model name, command), actor, source message."""

    origin: Origin
    detail: str | None = None
    actor_user_id: int | None = None
    source_message_id: int | None = None


@dataclass(slots=True)
class StmEntry:
    """One short-term memory (cache entry and row); only the memory core mutates it."""

    key: ScopeKey
    updated_at: datetime
    parent_channel_id: int | None = None
    summary: str = ""
    categories: dict[str, str] = field(default_factory=dict)
    turns_since_refresh: int = 0
    last_refreshed_turn: int = 0
    marker: Marker | None = None
    contributor_ids: list[int] = field(default_factory=list)
    provenance: Provenance | None = None
    # 0 means never persisted; every successful write increments it.
    version: int = 0
    # When its row was created (None until first written). Versions count from 1 again
    # for a row deleted and written anew; the pair tells the two apart.
    created_at: datetime | None = None

    @property
    def has_summary(self) -> bool:
        # Not .strip(): this runs several times per prompt on 1500-character texts.
        return bool(self.summary) and not self.summary.isspace()

    @property
    def has_content(self) -> bool:
        return self.has_summary or any(value.strip() for value in self.categories.values())

    def derived_from(self, user_id: int) -> bool:
        """Whether the memory holds something of the user's (then /forget-me deletes it)."""
        actor = self.provenance.actor_user_id if self.provenance is not None else None
        return user_id in (self.key.user_id, actor) or user_id in self.contributor_ids

    def derived_from_users(self) -> set[int]:
        """Every user the memory is derived from (see :meth:`derived_from`)."""
        actor = self.provenance.actor_user_id if self.provenance is not None else None
        return {u for u in (self.key.user_id, actor) if u is not None} | set(self.contributor_ids)

    def chars(self) -> int:
        """Size of the stored text (for audit events, which never hold the text)."""
        return len(self.summary) + sum(len(value) for value in self.categories.values())


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One ``/stm history`` event (a ``stm_events`` row): sizes, never memory text."""

    event: str
    created_at: datetime
    scope_kind: str | None = None
    user_id: int | None = None
    channel_id: int | None = None
    origin: str | None = None
    actor_user_id: int | None = None
    message_id: int | None = None
    chars_before: int | None = None
    chars_after: int | None = None


@dataclass(frozen=True, slots=True)
class Category:
    """An admin-defined STM category."""

    position: int
    slug: str
    label: str
    description: str


@dataclass(frozen=True, slots=True)
class GuildAccess:
    """A guild's allow and block lists of roles and users (``/kioku access``)."""

    allowed_roles: frozenset[int] = frozenset()
    blocked_roles: frozenset[int] = frozenset()
    allowed_users: frozenset[int] = frozenset()
    blocked_users: frozenset[int] = frozenset()

    @property
    def restricted(self) -> bool:
        """Whether an allow list exists (then only those on it are answered)."""
        return bool(self.allowed_roles or self.allowed_users)

    @property
    def empty(self) -> bool:
        return not (self.restricted or self.blocked_roles or self.blocked_users)


@dataclass(frozen=True, slots=True)
class GuildConfig:
    """A guild's STM configuration (``guild_settings`` + ``stm_categories``)."""

    guild_id: int | None
    stm_enabled: bool = True
    refresh_cadence: int = 5
    render_mode: RenderMode = "crude_summary"
    crude_message_count: int = 6
    tool_description_override: str | None = None
    nudge_override: str | None = None
    categories: tuple[Category, ...] = ()
    always_on_channels: frozenset[int] = frozenset()
    access: GuildAccess = GuildAccess()
    # The server's persona text (sanitized when set) and chosen model; None: the operator's.
    persona: str | None = None
    model: str | None = None

    @property
    def category_mode(self) -> bool:
        """Summary mode: no categories, or the single category ``summary``."""
        return bool(self.categories) and not (
            len(self.categories) == 1 and self.categories[0].slug == SUMMARY_SLUG
        )


# ------------------------------------------------------------------ long-term memory


@dataclass(frozen=True, slots=True)
class Fact:
    """One stored long-term fact, with its provenance."""

    id: int
    user_id: int
    guild_id: int | None
    content: str
    origin: str
    origin_detail: str | None
    source_message_id: int | None
    recall_count: int
    last_recalled_at: datetime | None
    created_at: datetime
    updated_at: datetime
    channel_id: int | None = None
    parent_channel_id: int | None = None
    private_thread: bool = False
    readable_by_everyone: bool = False
    scope: str = "user"  # or "channel": distilled by capture from a channel's conversation
    refers_to: date | None = None  # the day a captured fact is about
    source_user_ids: tuple[int, ...] = ()  # whose words a captured fact came from

    @property
    def captured(self) -> bool:
        return self.scope == "channel"

    @property
    def note(self) -> str:
        """The fact as a prompt shows it: dated when it refers to a day."""
        if self.refers_to is None:
            return self.content
        return f"{self.refers_to.isoformat()}: {self.content}"

    @property
    def place(self) -> Place | None:
        """Where the fact was said (None: no channel recorded)."""
        if self.channel_id is None:
            return None
        return Place(
            self.channel_id, self.parent_channel_id, self.private_thread, self.readable_by_everyone
        )


@dataclass(frozen=True, slots=True)
class Place:
    """Where a fact was said, as the bot saw it then: what judges the fact once Discord forgets
    the place (an archived thread, a deleted channel)."""

    channel_id: int
    parent_channel_id: int | None = None
    private_thread: bool = False
    readable_by_everyone: bool = False


@dataclass(frozen=True, slots=True)
class ScoredFact:
    """A search hit: the fact, whether it matched, its score, and how many query words it holds."""

    fact: Fact
    matched: bool
    score: float
    words_matched: int = 0


@dataclass(frozen=True, slots=True)
class FactEvent:
    """One ``stm_events`` row about a user's long-term memory (never its text)."""

    event: str
    user_id: int
    origin: str | None = None
    actor_user_id: int | None = None
    message_id: int | None = None
    chars_before: int | None = None
    chars_after: int | None = None
