"""stm_forgets: when each (hashed) user was last forgotten (cross-process /forget-me)

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "stm_forgets",
        sa.Column("user_hash", sa.LargeBinary(), nullable=False),
        sa.Column("forgotten_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("user_hash", name=op.f("pk_stm_forgets")),
    )


def downgrade() -> None:
    op.drop_table("stm_forgets")
