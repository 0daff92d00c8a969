"""The commands an operator runs, as a subprocess: backup and restore, --version, --help, usage
errors, migrate (and a database it cannot use), make sync."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from bot.db.engine import Database
from bot.db.migrate import head_revision
from tests.helpers.database import scratch_database
from tests.helpers.kioku_cli import kioku
from tests.helpers.processes import ROOT

# No test asks the real Discord: doctor's token and intent rows ask a local fake.
pytestmark = pytest.mark.usefixtures("discord_api")


def test_backup_and_restore_on_the_embedded_database(tmp_path: Path) -> None:
    assert kioku("migrate", data_dir=tmp_path).returncode == 0
    made = kioku("backup", data_dir=tmp_path)
    assert made.returncode == 0, made.stderr
    [path] = (tmp_path / "backups").glob("kioku-*.dump")
    assert f"to {path} (" in made.stdout

    unconfirmed = kioku("restore", str(path), data_dir=tmp_path)
    assert unconfirmed.returncode == 2
    assert unconfirmed.stderr.strip().splitlines() == [
        f"kioku: restore replaces every memory in the embedded database in {tmp_path} with "
        "the backup's: stop every bot using that database, then run again with --yes"
    ]
    restored = kioku("restore", str(path), "--yes", data_dir=tmp_path)
    assert restored.returncode == 0, restored.stderr
    assert restored.stdout.startswith(f"restored {path} into postgresql at socket in ")


def test_version_names_the_release_and_the_schema_revision(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import bot.cli.main as cli

    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    release = importlib.metadata.version("kioku")
    assert capsys.readouterr().out == f"kioku {release} (schema revision {head_revision()})\n"


@pytest.mark.parametrize(
    "command", ["run", "migrate", "sync", "console", "doctor", "backup", "restore"]
)
def test_every_commands_help_says_what_it_does(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # `kioku sync --help` showed only "usage: kioku sync [-h]" and the -h option.
    import bot.cli.main as cli

    with pytest.raises(SystemExit) as exited:
        cli.main([command, "--help"])
    assert exited.value.code == 0
    paragraphs = capsys.readouterr().out.split("\n\n")
    assert paragraphs[0].startswith(f"usage: kioku {command}")
    assert not paragraphs[1].startswith("options:"), "no description before the options"
    if command in ("run", "sync"):
        assert "DISCORD_TOKEN" in paragraphs[1]


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["bogus"],
            "kioku: argument COMMAND: invalid choice: 'bogus' (choose from 'run', 'migrate', "
            "'doctor', 'console', 'sync', 'backup', 'restore') (see kioku --help)",
        ),
        ([], "kioku: the following arguments are required: COMMAND (see kioku --help)"),
        (
            ["run", "--shard-count", "x"],
            "kioku run: argument --shard-count: invalid int value: 'x' (see kioku run --help)",
        ),
    ],
)
def test_a_usage_error_is_one_line_pointing_at_the_help(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import bot.cli.main as cli

    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines() == [line]


def test_migrate_twice_on_embedded_is_a_noop_the_second_time(tmp_path: Path) -> None:
    first = kioku("migrate", data_dir=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "migrated from empty to" in first.stdout
    second = kioku("migrate", data_dir=tmp_path)
    assert second.returncode == 0, second.stderr
    assert "already at revision" in second.stdout


async def test_migrate_twice_on_external_postgres(
    pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # A separate database on the session's server stands in for an operator's PostgreSQL.
    url = (await scratch_database(pg_url, "kioku_cli")).render_as_string(hide_password=False)
    first = kioku("migrate", data_dir=tmp_path, DATABASE_URL=url)
    assert first.returncode == 0, first.stderr
    assert "migrated from empty to" in first.stdout
    second = kioku("migrate", data_dir=tmp_path, DATABASE_URL=url)
    assert "already at revision" in second.stdout
    assert not (tmp_path / "postgres").exists(), "an external URL must not start the embedded one"


async def test_migrate_accepts_a_managed_hosts_sslmode_url(
    pg_url: URL, migrated_database: Database, tmp_path: Path
) -> None:
    # RDS, Supabase, Neon and Heroku put ?sslmode=require in the URL they hand out. The
    # test server listens on a Unix socket, where asyncpg does not negotiate TLS.
    url = await scratch_database(pg_url, "kioku_ssl")
    url = url.update_query_dict({"sslmode": "require"})
    result = kioku("migrate", data_dir=tmp_path, DATABASE_URL=url.render_as_string(False))
    assert result.returncode == 0, result.stderr
    assert "migrated from empty to" in result.stdout


@pytest.mark.parametrize("command", ["migrate", "console"])
async def test_a_database_refusing_the_connection_is_one_line(
    pg_url: URL, migrated_database: Database, tmp_path: Path, command: str
) -> None:
    # Not a network failure: the server answers, and refuses (no such database).
    url = pg_url.set(database="kioku_does_not_exist", password="hunter2")
    result = kioku(command, data_dir=tmp_path, DATABASE_URL=url.render_as_string(False))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("kioku: cannot use postgresql at ")
    assert "kioku_does_not_exist" in lines[0] and "hunter2" not in lines[0]


def test_a_database_that_never_answers_is_named_as_a_timeout(
    tmp_path: Path, silent_server: int
) -> None:
    result = kioku(
        "migrate",
        data_dir=tmp_path,
        DATABASE_URL=f"postgresql://u:p@127.0.0.1:{silent_server}/db",
        KIOKU_DATABASE__CONNECT_TIMEOUT_SECONDS="1",
    )
    assert result.returncode == 1
    # Was "kioku: cannot reach postgresql at 127.0.0.1:PORT/db: " and then nothing.
    assert result.stderr.strip().splitlines() == [
        f"kioku: cannot reach postgresql at 127.0.0.1:{silent_server}/db: no answer within 1 s "
        "(KIOKU_DATABASE__CONNECT_TIMEOUT_SECONDS sets how long to wait)"
    ]


def test_make_sync_runs_kioku_sync() -> None:
    # The README sends operators to `kioku sync`; make has a target like migrate/doctor.
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", "sync"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        # Run from `make test`, the parent make's variables would change the output.
        env={k: v for k, v in os.environ.items() if not k.startswith("MAKE")},
    )
    assert result.returncode == 0, result.stderr
    assert ".venv/bin/kioku sync" in result.stdout.strip().splitlines()
