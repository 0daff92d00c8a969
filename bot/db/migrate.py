"""Schema migrations through Alembic, on the bot's own engine.

Several shard processes may start at once against one PostgreSQL, so the upgrade runs
under a transaction-level advisory lock: the first process migrates, the others wait and
then find nothing to do.
"""

from __future__ import annotations

import os
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

# An arbitrary constant shared by every Kioku process ("kioku" in ASCII).
MIGRATION_LOCK_ID = 0x6B696F6B75


class MigrationsMissing(RuntimeError):
    """The migration scripts are not where the configuration says."""


class UnknownRevision(RuntimeError):
    """The database is at a revision these scripts do not know: a newer Kioku's."""


def migrations_dir() -> Path:
    """Where the Alembic scripts are: ``KIOKU_MIGRATIONS_DIR``, the checkout, or the cwd."""
    override = os.environ.get("KIOKU_MIGRATIONS_DIR")
    if override:
        path = Path(override)
        if not (path / "env.py").is_file():
            raise MigrationsMissing(
                f"KIOKU_MIGRATIONS_DIR={override} holds no Alembic scripts (no env.py there)"
            )
        return path
    beside_package = Path(__file__).resolve().parents[2] / "migrations"
    if beside_package.is_dir():
        return beside_package
    return Path.cwd() / "migrations"


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def is_known_revision(revision: str) -> bool:
    """Whether ``revision`` is one of these scripts' (a newer Kioku's is not)."""
    scripts = ScriptDirectory.from_config(alembic_config())
    return revision in {script.revision for script in scripts.walk_revisions()}


def unknown_revision_problem(current: str | None) -> str | None:
    """Why the database cannot be migrated by this Kioku, when its revision is none of
    these scripts' (Alembic's own words, "Can't locate revision", say nothing of a
    downgrade, and "run kioku migrate" would be no advice); ``None`` otherwise."""
    if current is None or is_known_revision(current):
        return None
    return (
        f"the database is at revision {current}, which this Kioku does not know (its "
        f"newest is {head_revision()}): a newer Kioku migrated it; run that "
        "version (or restore a backup made before the upgrade)"
    )


async def current_revision(engine: AsyncEngine) -> str | None:
    """The revision the database is at (``None`` when never migrated)."""

    def read(connection: Connection) -> str | None:
        return MigrationContext.configure(connection).get_current_revision()

    async with engine.connect() as connection:
        return await connection.run_sync(read)


async def upgrade(engine: AsyncEngine) -> tuple[str | None, str | None]:
    """Upgrade to head; return (revision before, revision after). Idempotent."""

    def run(connection: Connection) -> tuple[str | None, str | None]:
        connection.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": MIGRATION_LOCK_ID})
        before = MigrationContext.configure(connection).get_current_revision()
        problem = unknown_revision_problem(before)
        if problem is not None:
            raise UnknownRevision(problem)
        command.upgrade(alembic_config(connection), "head")
        after = MigrationContext.configure(connection).get_current_revision()
        return before, after

    async with engine.begin() as connection:
        return await connection.run_sync(run)
