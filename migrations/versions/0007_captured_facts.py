"""long-term facts captured from conversation: a scope (the user's, or a channel's), the
date they refer to and their source members; embeddings beside them where pgvector is
installed

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-07
"""

import logging
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

log = logging.getLogger("alembic.runtime.migration")


def upgrade() -> None:
    # Every fact before this revision was one a user asked for: scope 'user'.
    op.add_column(
        "long_term_memories",
        sa.Column("scope", sa.Text(), server_default=sa.text("'user'"), nullable=False),
    )
    op.create_check_constraint(
        op.f("ck_long_term_memories_scope"), "long_term_memories", "scope IN ('user', 'channel')"
    )
    op.add_column("long_term_memories", sa.Column("refers_to", sa.Date(), nullable=True))
    op.add_column(
        "long_term_memories",
        sa.Column(
            "source_user_ids",
            postgresql.ARRAY(sa.BigInteger()),
            server_default=sa.text("'{}'"),
            nullable=False,
        ),
    )
    # A member's own facts are found past the captured facts bearing their id.
    op.drop_index("ix_long_term_memories_user_id_guild_id", table_name="long_term_memories")
    op.create_index(
        "ix_long_term_memories_user_id_scope_guild_id",
        "long_term_memories",
        ["user_id", "scope", "guild_id"],
    )
    op.create_index(
        "ix_long_term_memories_channel_facts",
        "long_term_memories",
        ["channel_id"],
        postgresql_where=sa.text("scope = 'channel'"),
    )
    # /forget-me finds the captured facts a member's words went into.
    op.create_index(
        "ix_long_term_memories_source_user_ids",
        "long_term_memories",
        ["source_user_ids"],
        postgresql_using="gin",
    )
    _create_embeddings()


def _create_embeddings() -> None:
    """The embeddings table, only where the pgvector extension can be installed: recall
    runs on full-text search alone elsewhere."""
    bind = op.get_bind()
    available = bind.execute(
        sa.text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
    ).first()
    if available is None:
        log.warning("pgvector is not installed: recall will use full-text search only")
        return
    savepoint = bind.begin_nested()
    try:
        bind.execute(sa.text("CREATE EXTENSION IF NOT EXISTS vector"))
    except sa.exc.DBAPIError as exc:
        savepoint.rollback()
        log.warning("pgvector could not be enabled (%s): full-text recall only", exc.orig)
        return
    savepoint.commit()
    # No dimension on the column: any embeddings model fits; rows of another model or
    # size are never compared (recall filters on both). Search is exact within a scope.
    bind.execute(
        sa.text(
            "CREATE TABLE long_term_embeddings ("
            " fact_id bigint PRIMARY KEY REFERENCES long_term_memories(id) ON DELETE CASCADE,"
            " model text NOT NULL,"
            " dims integer NOT NULL,"
            " embedding vector NOT NULL)"
        )
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS long_term_embeddings")
    op.drop_index("ix_long_term_memories_source_user_ids", table_name="long_term_memories")
    op.drop_index("ix_long_term_memories_channel_facts", table_name="long_term_memories")
    op.drop_index("ix_long_term_memories_user_id_scope_guild_id", table_name="long_term_memories")
    op.create_index(
        "ix_long_term_memories_user_id_guild_id", "long_term_memories", ["user_id", "guild_id"]
    )
    op.drop_column("long_term_memories", "source_user_ids")
    op.drop_column("long_term_memories", "refers_to")
    op.drop_constraint(op.f("ck_long_term_memories_scope"), "long_term_memories", type_="check")
    op.drop_column("long_term_memories", "scope")
