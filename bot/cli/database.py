"""``kioku migrate``, and every verb's database failures as one line."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from bot.cli.errors import EXIT_CONFIG, EXIT_OK, CliError
from bot.config import Settings, async_database_url, database_unreachable, one_line_error
from bot.db import Database, MigrationsMissing, UnknownRevision, describe_url, upgrade
from bot.vocabulary import DatabaseUnavailable

log = logging.getLogger(__name__)


async def migrate(settings: Settings) -> int:
    database = Database(settings)
    try:
        before, after = await migrated(database)
    finally:
        await database.close()
    if before == after:
        print(f"database already at revision {after}; nothing to do")
    else:
        print(f"database migrated from {before or 'empty'} to {after}")
    return EXIT_OK


async def migrated(database: Database) -> tuple[str | None, str | None]:
    """Start ``database`` and upgrade it to head; the revisions before and after."""
    with database_errors(database):
        await database.start()
        return await upgrade(database.engine)


@contextlib.contextmanager
def database_errors(database: Database) -> Iterator[None]:
    """Failures to start, reach or migrate ``database`` as one-line :class:`CliError`."""
    try:
        yield
    except DatabaseUnavailable as exc:
        raise CliError(str(exc)) from None
    except MigrationsMissing as exc:
        raise CliError(str(exc), EXIT_CONFIG) from None
    except UnknownRevision as exc:
        raise CliError(str(exc)) from None
    except (OSError, TimeoutError) as exc:
        raise CliError(
            f"cannot reach {where(database)}: {database_unreachable(exc, database.settings)}"
        ) from None
    except Exception as exc:
        # The driver's own refusals (TLS, authentication, no such database) end here too:
        # the operator gets one line, the traceback stays available in debug logs.
        log.debug("database start failed", exc_info=True)
        raise CliError(
            f"cannot use {where(database)}: {one_line_error(exc, with_class=True)} "
            "(KIOKU_LOG_LEVEL=DEBUG shows the details)"
        ) from None


def where(database: Database) -> str:
    return describe_url(database.url) if database.url else "the database"


def configured_database(settings: Settings) -> str:
    """Which database the settings name, before it is started."""
    if settings.database_url:
        return describe_url(async_database_url(settings.database_url))
    return f"the embedded database in {settings.data_dir}"
