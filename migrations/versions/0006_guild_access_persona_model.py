"""guild_settings holds each server's access lists (roles and users allowed or blocked),
its persona and its model (/kioku)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID_LISTS = ("allowed_role_ids", "blocked_role_ids", "allowed_user_ids", "blocked_user_ids")


def upgrade() -> None:
    for name in ID_LISTS:
        # Empty lists: every server keeps answering everyone, as before this revision.
        op.add_column(
            "guild_settings",
            sa.Column(
                name,
                postgresql.ARRAY(sa.BigInteger()),
                server_default=sa.text("'{}'::bigint[]"),
                nullable=False,
            ),
        )
    op.add_column("guild_settings", sa.Column("persona", sa.Text(), nullable=True))
    op.add_column("guild_settings", sa.Column("model", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("guild_settings", "model")
    op.drop_column("guild_settings", "persona")
    for name in reversed(ID_LISTS):
        op.drop_column("guild_settings", name)
