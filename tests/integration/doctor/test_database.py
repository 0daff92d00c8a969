"""``kioku doctor``'s database and migrations rows: a database unreachable, refusing, unmigrated,
migrated by a newer Kioku, or unreadable."""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL

from bot.db.engine import Database
from tests.helpers.database import make_test_settings, scratch_database, worker_suffix
from tests.helpers.fake_llm import ScriptedLLM
from tests.helpers.kioku_cli import doctor_against, doctor_rows, kioku, row_of

# No test asks the real Discord: doctor's token and intent rows ask a local fake.
pytestmark = pytest.mark.usefixtures("discord_api")


async def test_doctor_says_a_fresh_database_is_not_migrated(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    from bot.db.migrate import head_revision

    url = await scratch_database(pg_url, "kioku_unmigrated")
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    result = await doctor_against(llm, url, tmp_path)
    assert row_of(result, "migrations", code=1) == (
        "FAIL",
        f"not migrated (head is {head_revision()}): run kioku migrate",
    )


async def test_a_database_migrated_by_a_newer_kioku_is_named_as_such(
    llm: ScriptedLLM, pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # After a downgrade: doctor said "run kioku migrate", which then failed with
    # "CommandError: Can't locate revision identified by '0099'".
    from bot.db.migrate import head_revision

    url = await scratch_database(pg_url, "kioku_newer")
    database = Database(make_test_settings(url, tmp_path))
    await database.start()
    try:
        async with database.engine.begin() as connection:
            await connection.execute(text("CREATE TABLE alembic_version (version_num text)"))
            await connection.execute(text("INSERT INTO alembic_version VALUES ('0099')"))
    finally:
        await database.close()
    llm.reply_tool_calls([("ping", {"word": "pong"})])
    newer = (
        f"the database is at revision 0099, which this Kioku does not know (its newest is "
        f"{head_revision()}): a newer Kioku migrated it; run that version (or restore a "
        "backup made before the upgrade)"
    )
    result = await doctor_against(llm, url, tmp_path)
    assert doctor_rows(result.stdout)["migrations"] == ("FAIL", newer)
    migrated = await asyncio.to_thread(
        kioku, "migrate", data_dir=tmp_path, DATABASE_URL=url.render_as_string(hide_password=False)
    )
    assert (migrated.returncode, migrated.stderr.strip().splitlines()[-1]) == (1, f"kioku: {newer}")


async def test_doctor_names_a_database_that_never_answers_as_a_timeout(
    tmp_path: Path, silent_server: int, capsys: pytest.CaptureFixture[str]
) -> None:
    from bot.config import load_settings
    from bot.ops.doctor import run_doctor as doctor
    from tests.helpers.fake_llm import refused_base_url

    settings = load_settings(
        database_url=f"postgresql://u:p@127.0.0.1:{silent_server}/db",
        data_dir=tmp_path,
        openai_base_url=refused_base_url(),
        database={"connect_timeout_seconds": 0.5},
    )
    assert await doctor(settings) == 1
    rows = doctor_rows(capsys.readouterr().out)
    assert rows["database"] == (
        "FAIL",
        f"unreachable (postgresql at 127.0.0.1:{silent_server}/db): no answer within 0.5 s "
        "(KIOKU_DATABASE__CONNECT_TIMEOUT_SECONDS sets how long to wait)",
    )
    # They vanished from the table.
    why = "skipped: no database to read (see the database row)"
    assert (rows["migrations"], rows["clock"]) == (("skip", why), ("skip", why))


async def test_doctor_names_the_host_and_port_of_a_database_that_refuses_connections(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bot.config import load_settings
    from bot.ops.doctor import run_doctor as doctor
    from tests.helpers.fake_llm import refused_base_url

    port = urlsplit(refused_base_url()).port
    settings = load_settings(
        database_url=f"postgresql://kioku:db-password-1@127.0.0.1:{port}/kioku",
        data_dir=tmp_path,
        openai_base_url=refused_base_url(),
    )
    assert await doctor(settings) == 1
    table = capsys.readouterr().out
    status, detail = doctor_rows(table)["database"]
    assert status == "FAIL"
    assert detail.startswith(f"unreachable (postgresql at 127.0.0.1:{port}/kioku): "), detail
    assert "db-password-1" not in table


async def test_doctor_database_row_is_one_line_when_the_server_refuses(
    pg_url: URL, migrated_database: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bot.ops.doctor import run_doctor as doctor
    from tests.helpers.database import make_test_settings
    from tests.helpers.fake_llm import refused_base_url

    settings = make_test_settings(
        pg_url.set(database="kioku_does_not_exist"), tmp_path, openai_base_url=refused_base_url()
    )
    assert await doctor(settings) == 1
    table = capsys.readouterr().out
    # SQLAlchemy's "(Background on this error at: …)" was a stray line of the table.
    assert "Background on this error" not in table
    assert len(table.strip().splitlines()) == 2 + len(doctor_rows(table)), table
    rows = doctor_rows(table)
    assert rows["database"] == (
        "FAIL",
        'unusable: InvalidCatalogNameError: database "kioku_does_not_exist" does not exist',
    )
    why = "skipped: no database to read (see the database row)"
    assert (rows["migrations"], rows["clock"]) == (("skip", why), ("skip", why))


async def test_doctor_says_to_check_the_login_when_the_server_refuses_the_user(
    pg_url: URL, migrated_database: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bot.ops.doctor import run_doctor as doctor
    from tests.helpers.database import make_test_settings
    from tests.helpers.fake_llm import refused_base_url

    role = f"kioku_nobody{worker_suffix()}"
    settings = make_test_settings(
        pg_url.set(username=role), tmp_path, openai_base_url=refused_base_url()
    )
    assert await doctor(settings) == 1
    assert doctor_rows(capsys.readouterr().out)["database"] == (
        "FAIL",
        f'unusable: InvalidAuthorizationSpecificationError: role "{role}" does not exist; '
        "check the user and password in DATABASE_URL",
    )


def test_a_wrong_database_password_is_a_refused_login() -> None:
    # The test server trusts its local connections, so it never asks for a password:
    # the driver's error for a wrong one, as SQLAlchemy hands it over.
    import asyncpg
    from sqlalchemy.exc import DBAPIError

    from bot.ops.doctor import login_refused

    wrong = asyncpg.InvalidPasswordError('password authentication failed for user "kioku"')
    orig = RuntimeError("adapted")
    orig.__cause__ = wrong
    wrapped = DBAPIError("connect", None, orig)
    assert login_refused(wrong) and login_refused(wrapped)
    assert not login_refused(asyncpg.InvalidCatalogNameError('database "x" does not exist'))


async def test_doctor_fails_the_migrations_row_when_the_revision_cannot_be_read(
    pg_url: URL, migrated_database: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    from bot.ops.doctor import run_doctor as doctor
    from tests.helpers.database import make_test_settings
    from tests.helpers.fake_llm import refused_base_url

    # A role that may connect but not read alembic_version (a least-privilege setup gone
    # wrong): doctor printed a traceback instead of the table.
    database_url = await scratch_database(pg_url, "kioku_no_read")
    role = f"kioku_no_read{worker_suffix()}"  # roles are the server's, not a database's
    async with migrated_database.engine.connect() as connection:
        await connection.execution_options(isolation_level="AUTOCOMMIT")
        await connection.execute(text(f"DROP ROLE IF EXISTS {role}"))
        await connection.execute(text(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'"))
    owner = create_async_engine(database_url)
    try:
        async with owner.begin() as connection:
            await connection.execute(
                text("CREATE TABLE alembic_version (version_num varchar(32) PRIMARY KEY)")
            )
            await connection.execute(text("INSERT INTO alembic_version VALUES ('0001')"))
    finally:
        await owner.dispose()
    url = database_url.set(username=role, password="pw")
    settings = make_test_settings(url, tmp_path, openai_base_url=refused_base_url())
    assert await doctor(settings) == 1
    rows = doctor_rows(capsys.readouterr().out)
    assert rows["database"][0] == "ok"
    assert rows["migrations"] == (
        "FAIL",
        "cannot read the revision: InsufficientPrivilegeError: "
        "permission denied for table alembic_version",
    )
