"""Typed SQLAlchemy 2 models: the database contract of ARCHITECTURE.md.

Discord ids are ``bigint``; timestamps are ``timestamptz``. Memory text lives only in
``short_term_memories`` and ``long_term_memories``; ``stm_events`` never holds it.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Computed,
    Date,
    DateTime,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TSVECTOR
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

ORIGINS = ("model_tool", "summarizer", "admin", "user_command", "import")
# Tables no model declares: migration 0007 makes them only where pgvector is installed.
OPTIONAL_TABLES = ("long_term_embeddings",)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def _created_at() -> Mapped[datetime]:
    return mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())


def _updated_at() -> Mapped[datetime]:
    return mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now(), onupdate=func.now()
    )


def _id_list() -> Mapped[list[int]]:
    return mapped_column(ARRAY(BigInteger), nullable=False, server_default=text("'{}'::bigint[]"))


class GuildSettings(Base):
    """Per-guild configuration, edited by admins with ``/stm settings`` and ``/kioku``."""

    __tablename__ = "guild_settings"
    __table_args__ = (
        CheckConstraint("refresh_cadence BETWEEN 1 AND 100", name="refresh_cadence_range"),
        CheckConstraint(
            "render_mode IN ('crude_summary', 'supersede')", name="render_mode_allowed"
        ),
        CheckConstraint("crude_message_count BETWEEN 1 AND 10", name="crude_count_range"),
    )

    guild_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    short_term_memory_enabled: Mapped[bool] = mapped_column(
        Boolean, nullable=False, server_default=text("true")
    )
    refresh_cadence: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("5"))
    render_mode: Mapped[str] = mapped_column(
        Text, nullable=False, server_default=text("'crude_summary'")
    )
    crude_message_count: Mapped[int] = mapped_column(
        Integer, nullable=False, server_default=text("6")
    )
    tool_description_override: Mapped[str | None] = mapped_column(Text)
    nudge_override: Mapped[str | None] = mapped_column(Text)
    # Channels where the bot answers every message, not only mentions and replies.
    always_on_channel_ids: Mapped[list[int]] = mapped_column(
        ARRAY(BigInteger), nullable=False, server_default=text("'{}'::bigint[]")
    )
    # Who may talk to the bot here (/kioku access): blocked beats allowed; with an allow
    # list only those on it are answered.
    allowed_role_ids: Mapped[list[int]] = _id_list()
    blocked_role_ids: Mapped[list[int]] = _id_list()
    allowed_user_ids: Mapped[list[int]] = _id_list()
    blocked_user_ids: Mapped[list[int]] = _id_list()
    # The server's persona (sanitized) and model (one of the operator's allowed_models).
    persona: Mapped[str | None] = mapped_column(Text)
    model: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime] = _updated_at()


class StmCategory(Base):
    """One admin-defined STM category of a guild (at most five, positions 0–4)."""

    __tablename__ = "stm_categories"
    __table_args__ = (
        CheckConstraint("position BETWEEN 0 AND 4", name="position_range"),
        Index("uq_stm_categories_guild_id_position", "guild_id", "position", unique=True),
        Index("uq_stm_categories_guild_id_slug", "guild_id", "slug", unique=True),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    guild_id: Mapped[int] = mapped_column(BigInteger, nullable=False)
    position: Mapped[int] = mapped_column(SmallInteger, nullable=False)
    slug: Mapped[str] = mapped_column(Text, nullable=False)
    label: Mapped[str] = mapped_column(Text, nullable=False)
    description: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[datetime] = _created_at()


class ShortTermMemory(Base):
    """The durable copy of one STM cache entry (server or user scope)."""

    __tablename__ = "short_term_memories"
    __table_args__ = (
        CheckConstraint("scope_kind IN ('server', 'user')", name="scope_kind_allowed"),
        CheckConstraint(
            "scope_kind = 'user' OR guild_id IS NOT NULL", name="server_scope_has_guild"
        ),
        CheckConstraint("scope_kind = 'server' OR user_id IS NOT NULL", name="user_scope_has_user"),
        Index(
            "uq_short_term_memories_scope_key",
            "scope_kind",
            func.coalesce(text("guild_id"), text("0")),
            func.coalesce(text("user_id"), text("0")),
            "channel_id",
            unique=True,
        ),
        Index("ix_short_term_memories_updated_at", "updated_at"),
        Index("ix_short_term_memories_channel_id", "channel_id"),
        Index("ix_short_term_memories_user_id", "user_id"),
        Index("ix_short_term_memories_contributor_ids", "contributor_ids", postgresql_using="gin"),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    scope_kind: Mapped[str] = mapped_column(Text, nullable=False)
    guild_id: Mapped[int | None] = mapped_column(BigInteger)
    user_id: Mapped[int | None] = mapped_column(BigInteger)
    channel_id: Mapped[int] = mapped_column(BigInteger, nullable=False)
    parent_channel_id: Mapped[int | None] = mapped_column(BigInteger)
    summary: Mapped[str] = mapped_column(Text, nullable=False, server_default=text("''"))
    categories: Mapped[dict[str, Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'{}'::jsonb")
    )
    turns_since_refresh: Mapped[int] = mapped_column(
        Integer, nullable=False, server_default=text("0")
    )
    last_refreshed_turn: Mapped[int] = mapped_column(
        Integer, nullable=False, server_default=text("0")
    )
    covered_through_message_id: Mapped[int | None] = mapped_column(BigInteger)
    covered_through_hash: Mapped[str | None] = mapped_column(Text)
    contributor_ids: Mapped[list[int]] = mapped_column(
        ARRAY(BigInteger), nullable=False, server_default=text("'{}'::bigint[]")
    )
    origin: Mapped[str] = mapped_column(Text, nullable=False)
    origin_detail: Mapped[str | None] = mapped_column(Text)
    actor_user_id: Mapped[int | None] = mapped_column(BigInteger)
    source_message_id: Mapped[int | None] = mapped_column(BigInteger)
    version: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default=text("1"))
    created_at: Mapped[datetime] = _created_at()
    updated_at: Mapped[datetime] = _updated_at()


class StmEvent(Base):
    """Append-only audit log of STM changes. Never holds memory text, only sizes."""

    __tablename__ = "stm_events"
    __table_args__ = (
        Index("ix_stm_events_guild_id_created_at", "guild_id", "created_at"),
        Index("ix_stm_events_user_id", "user_id"),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    event: Mapped[str] = mapped_column(Text, nullable=False)
    scope_kind: Mapped[str | None] = mapped_column(Text)
    guild_id: Mapped[int | None] = mapped_column(BigInteger)
    user_id: Mapped[int | None] = mapped_column(BigInteger)
    channel_id: Mapped[int | None] = mapped_column(BigInteger)
    origin: Mapped[str | None] = mapped_column(Text)
    actor_user_id: Mapped[int | None] = mapped_column(BigInteger)
    message_id: Mapped[int | None] = mapped_column(BigInteger)
    chars_before: Mapped[int | None] = mapped_column(Integer)
    chars_after: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = _created_at()


class LongTermMemory(Base):
    """A fact: one a user explicitly asked the bot to remember (scope ``user``), or one
    capture distilled from a channel's conversation (scope ``channel``)."""

    __tablename__ = "long_term_memories"
    __table_args__ = (
        CheckConstraint("scope IN ('user', 'channel')", name="scope"),
        Index("ix_long_term_memories_content_tsv", "content_tsv", postgresql_using="gin"),
        Index("ix_long_term_memories_user_id_scope_guild_id", "user_id", "scope", "guild_id"),
        Index(
            "ix_long_term_memories_channel_facts",
            "channel_id",
            postgresql_where=text("scope = 'channel'"),
        ),
        Index("ix_long_term_memories_source_user_ids", "source_user_ids", postgresql_using="gin"),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    user_id: Mapped[int] = mapped_column(BigInteger, nullable=False)
    guild_id: Mapped[int | None] = mapped_column(BigInteger)
    # Where the fact was said: it is never recalled in a channel more public than that.
    channel_id: Mapped[int | None] = mapped_column(BigInteger)
    # What the bot knew of that place when the fact was said, to judge it once Discord
    # no longer shows it (an archived thread is not cached; a channel may be deleted):
    # a thread's parent channel, whether the thread was private, and whether every
    # member of the server could read the place.
    parent_channel_id: Mapped[int | None] = mapped_column(BigInteger)
    private_thread: Mapped[bool] = mapped_column(
        Boolean, nullable=False, server_default=text("false")
    )
    readable_by_everyone: Mapped[bool] = mapped_column(
        Boolean, nullable=False, server_default=text("false")
    )
    content: Mapped[str] = mapped_column(Text, nullable=False)
    # Generated, so the full-text index can never disagree with the text it indexes.
    content_tsv: Mapped[str] = mapped_column(
        TSVECTOR, Computed("to_tsvector('simple', content)", persisted=True)
    )
    origin: Mapped[str] = mapped_column(Text, nullable=False)
    origin_detail: Mapped[str | None] = mapped_column(Text)
    source_message_id: Mapped[int | None] = mapped_column(BigInteger)
    scope: Mapped[str] = mapped_column(Text, nullable=False, server_default=text("'user'"))
    # The day a captured fact is about ("last Friday", resolved from the message's date).
    refers_to: Mapped[date | None] = mapped_column(Date)
    # Whose messages a captured fact was distilled from: /forget-me of any deletes it.
    source_user_ids: Mapped[list[int]] = mapped_column(
        ARRAY(BigInteger), nullable=False, server_default=text("'{}'")
    )
    recall_count: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    last_recalled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = _created_at()
    updated_at: Mapped[datetime] = _updated_at()


class StmClear(Base):
    """When a channel's memory was last wiped (``/refresh``). A write from a turn that
    started before it is refused by every process, not only the one that cleared: the
    row is the cross-process form of the in-process channel epoch; it also bounds a cold
    channel's back-fill when the ``/refresh`` marker was deleted. Kept 30 days, then
    purged by the janitor."""

    __tablename__ = "stm_clears"

    channel_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    cleared_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class StmForget(Base):
    """When a user was last forgotten (``/forget-me``), under a hash of their id, not the
    id. A write derived from their messages by a turn that started before it (a memory
    that was shown their words, a fact they asked for) is refused by every process, also
    one that missed the notice or replays a spool later. Kept 30 days, then purged by the
    janitor."""

    __tablename__ = "stm_forgets"

    user_hash: Mapped[bytes] = mapped_column(LargeBinary, primary_key=True)
    forgotten_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class UserSettings(Base):
    """Per-user privacy choices."""

    __tablename__ = "user_settings"

    user_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    cross_context_memory: Mapped[bool] = mapped_column(
        Boolean, nullable=False, server_default=text("false")
    )
    updated_at: Mapped[datetime] = _updated_at()
