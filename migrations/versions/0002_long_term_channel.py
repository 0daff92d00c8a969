"""long-term facts remember the channel they were said in

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("long_term_memories", sa.Column("channel_id", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    op.drop_column("long_term_memories", "channel_id")
