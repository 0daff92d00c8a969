"""long-term facts remember a thread's parent channel, whether the thread was private,
and whether every member could read where they were said (recalled after the thread is
archived or the channel deleted)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "long_term_memories", sa.Column("parent_channel_id", sa.BigInteger(), nullable=True)
    )
    # Facts saved before this revision know nothing of their place: false is the
    # conservative answer (never judged by a parent nor taken as readable by everyone).
    op.add_column(
        "long_term_memories",
        sa.Column("private_thread", sa.Boolean(), server_default=sa.text("false"), nullable=False),
    )
    op.add_column(
        "long_term_memories",
        sa.Column(
            "readable_by_everyone", sa.Boolean(), server_default=sa.text("false"), nullable=False
        ),
    )


def downgrade() -> None:
    op.drop_column("long_term_memories", "readable_by_everyone")
    op.drop_column("long_term_memories", "private_thread")
    op.drop_column("long_term_memories", "parent_channel_id")
