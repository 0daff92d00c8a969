"""``kioku backup`` and ``kioku restore``, their refusals as one line."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from bot import ops
from bot.cli.database import configured_database, database_errors, migrated, where
from bot.cli.errors import EXIT_CONFIG, EXIT_OK, CliError
from bot.config import Settings
from bot.db import Database


async def backup(settings: Settings, target: Path | None) -> int:
    database = Database(settings)
    try:
        with _backup_errors():
            path = ops.backup_target(settings, target)
            with database_errors(database):
                await database.start()  # not migrated: a backup before an upgrade is as it was
            await ops.write_backup(settings, path, database)
    finally:
        await database.close()
    return EXIT_OK


async def restore(settings: Settings, source: Path, *, confirmed: bool) -> int:
    if not confirmed:
        raise CliError(
            f"restore replaces every memory in {configured_database(settings)} with the "
            "backup's: stop every bot using that database, then run again with --yes",
            EXIT_CONFIG,
        )
    database = Database(settings)
    try:
        with _backup_errors():
            ops.check_restore_allowed(settings, source)
            await ops.check_revision(source)  # a file that is no backup starts nothing
            with database_errors(database):
                await database.start()
            forgets = await ops.forgets_on_record(database)
            await ops.replace_from_backup(source, database)
            _, revision = await migrated(database)
            again = await ops.reapply_forgets(database, forgets)
    finally:
        await database.close()
    print(f"restored {source} into {where(database)}; schema at revision {revision}")
    if again:
        print(f"forgot {again} user(s) of the backup again: they asked /forget-me since")
    return EXIT_OK


@contextlib.contextmanager
def _backup_errors() -> Iterator[None]:
    """A refused backup or restore as one line: a file named wrong is a usage error."""
    try:
        yield
    except ops.BadBackupPath as exc:
        raise CliError(str(exc), EXIT_CONFIG) from None
    except ops.BackupFailed as exc:
        raise CliError(str(exc)) from None
