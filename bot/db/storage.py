"""Database access for the memory services: one way to open a session whose failures
surface as :class:`MemoryUnavailable` (a message safe to show a user), with a timeout.

It also keeps, per session factory, whether the database is down (a small circuit
breaker): after a failure that says the database cannot be used (unreachable, timed out,
shutting down, out of resources), a read that has a cached value to fall back on uses it
at once (see :func:`database_down`) instead of waiting :data:`DB_TIMEOUT_SECONDS` again
on a database that does not answer; one probe at a time, with a short timeout, finds out
when it is back (so does any operation that succeeds, a spool replay, or the cache
listener reconnecting). The outage is logged once, when it begins, and once when it
ends, not on every failed operation.

Every session is opened through :func:`open_session`, named for its step, so a
:class:`FaultPlan` (tests, drills) can make a step fail, hang or lose its connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import time
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal, TypeVar

from sqlalchemy import event, text
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import Session

from bot.db.deadline import database_deadline
from bot.vocabulary import MemoryUnavailable

log = logging.getLogger(__name__)

_T = TypeVar("_T")

DB_TIMEOUT_SECONDS = 5.0
# A probe of a database marked down: SELECT 1 must answer within this, and probes start
# at most this often (one at a time).
PROBE_TIMEOUT_SECONDS = 1.0
PROBE_INTERVAL_SECONDS = 1.0
# SQLSTATE classes of a server that cannot serve anyone now, whatever the statement:
# connection exception, insufficient resources, operator intervention (shutting down,
# cannot connect now), system error, internal error.
OUTAGE_SQLSTATE_CLASSES = frozenset({"08", "53", "57", "58", "XX"})


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE the server (or the driver) gave for ``exc``, looked up through the
    wrapping SQLAlchemy adds (``orig``, ``__cause__``); None when there is none (a lost
    connection, a timeout)."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        candidate = pending.pop()
        if candidate is None or id(candidate) in seen:
            continue
        seen.add(id(candidate))
        code = getattr(candidate, "sqlstate", None)
        if isinstance(code, str) and code:
            return code
        orig = getattr(candidate, "orig", None)
        pending.append(orig if isinstance(orig, BaseException) else None)
        pending.append(candidate.__cause__)
    return None


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot be used now (unreachable, timed out, a
    dropped connection, a server shutting down or out of resources), not that it refused
    this statement."""
    if isinstance(exc, TimeoutError | OSError | ConnectionError):
        return True
    if not isinstance(exc, DBAPIError):
        return False  # an ORM error (no row found…): the database answered
    code = sqlstate(exc)
    return code is None or code[:2] in OUTAGE_SQLSTATE_CLASSES


class _Breaker:
    """Whether one database (one session factory) is down, and since when."""

    def __init__(self) -> None:
        self.down_since: float | None = None
        # Counts the outages: tells one outage from the next (see outage_number).
        self.outages = 0
        self.failed_meanwhile = 0
        # Operations served without it (a cached value, the spool) while it was down.
        self.spared = 0
        self.probe: asyncio.Task[None] | None = None
        self.next_probe = 0.0

    def failed(self, what: str, exc: BaseException) -> None:
        name = exc.__class__.__name__
        if self.down_since is None:
            self.down_since = time.monotonic()
            self.outages += 1
            self.failed_meanwhile, self.spared = 1, 0
            self.next_probe = 0.0
            log.warning(
                "database unavailable: %s failed (%s); reads use cached values where they "
                "can until it answers again (further failures are logged at DEBUG)",
                what,
                name,
            )
        else:
            self.failed_meanwhile += 1
            log.debug("%s failed: %s", what, name)

    def answered(self) -> None:
        if self.down_since is None:
            return
        log.warning(
            "database back after %.0f s (%d operations failed meanwhile, %d were served "
            "without it)",
            time.monotonic() - self.down_since,
            self.failed_meanwhile,
            self.spared,
        )
        self.down_since = None
        self.failed_meanwhile = 0

    def start_probe(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        loop = asyncio.get_running_loop()
        probe = self.probe
        if probe is not None and not probe.done() and probe.get_loop() is loop:
            return  # one at a time
        if time.monotonic() < self.next_probe:
            return
        self.probe = loop.create_task(self._probe(sessions), name="database-probe")

    async def _probe(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        try:
            async with (
                asyncio.timeout(PROBE_TIMEOUT_SECONDS),
                open_session(sessions, "probing the database") as session,
            ):
                await session.execute(text("SELECT 1"))
        except Exception as exc:  # whatever it is, the database did not answer
            log.debug("database probe failed: %s", exc.__class__.__name__)
            self.next_probe = time.monotonic() + PROBE_INTERVAL_SECONDS
            return
        self.answered()


# One breaker per session factory (a database), forgotten with it.
_breakers: weakref.WeakKeyDictionary[async_sessionmaker[AsyncSession], _Breaker] = (
    weakref.WeakKeyDictionary()
)


def _breaker(sessions: async_sessionmaker[AsyncSession]) -> _Breaker:
    return _of_database(_breakers, sessions, _Breaker)


def _of_database(
    table: weakref.WeakKeyDictionary[async_sessionmaker[AsyncSession], _T],
    sessions: async_sessionmaker[AsyncSession],
    make: Callable[[], _T],
) -> _T:
    """What ``table`` holds for ``sessions``' database, made on first use."""
    held = table.get(sessions)
    if held is None:
        held = table[sessions] = make()
    return held


def database_down(sessions: async_sessionmaker[AsyncSession]) -> bool:
    """Whether the database was found down and has not answered since: a read with a
    cached fallback should use it now rather than wait for a timeout. While down, this
    starts a probe (one at a time, at most every :data:`PROBE_INTERVAL_SECONDS`) that
    finds out when it is back."""
    breaker = _breakers.get(sessions)
    if breaker is None or breaker.down_since is None:
        return False
    breaker.spared += 1
    breaker.start_probe(sessions)
    return True


def outage_number(sessions: async_sessionmaker[AsyncSession]) -> int | None:
    """Which outage of the database this is (a new number each time it goes down and
    nobody saw it answer since), or None while it is not known to be down."""
    breaker = _breakers.get(sessions)
    if breaker is None or breaker.down_since is None:
        return None
    return breaker.outages


def database_failed(
    sessions: async_sessionmaker[AsyncSession], what: str, exc: BaseException
) -> None:
    """Report a failure of ``what`` outside :func:`storage` (a write, a replay): an
    outage marks the database down (logged once), anything else is logged as it is."""
    if is_outage(exc):
        _breaker(sessions).failed(what, exc)
    else:
        log.warning("%s failed: %s", what, exc.__class__.__name__)


def database_answered(sessions: async_sessionmaker[AsyncSession]) -> None:
    """The database answered (a spool replay went through, the cache listener
    reconnected): it is up again."""
    breaker = _breakers.get(sessions)
    if breaker is not None:
        breaker.answered()


@contextlib.asynccontextmanager
async def memory_session(
    sessions: async_sessionmaker[AsyncSession], what: str
) -> AsyncIterator[AsyncSession]:
    """A session for ``what`` (named in the log if the database fails)."""
    try:
        async with database_deadline(DB_TIMEOUT_SECONDS), open_session(sessions, what) as session:
            yield session
    except (SQLAlchemyError, OSError, TimeoutError) as exc:
        database_failed(sessions, what, exc)
        raise MemoryUnavailable("memory storage is unavailable right now") from exc
    database_answered(sessions)


# ------------------------------------------------------------------ planned faults

# Where in its step a fault strikes: as its session opens (or at its first statement),
# or at its end (after its statements: at its commit, or once a read has its rows).
FaultPoint = Literal["start", "end"]
# The server ends the connection it runs on: its statement fails as a lost connection.
_TERMINATE_OWN_BACKEND = "SELECT pg_terminate_backend(pg_backend_pid())"


class Fault:
    """One planned fault, with how many more uses it strikes (None: every use)."""

    def __init__(
        self,
        kind: Literal["fail", "hang", "drop"],
        step: str | None,
        *,
        at: FaultPoint = "start",
        times: int | None = None,
        error: BaseException | None = None,
        timeout: float | None = None,
        after: int = 0,
    ) -> None:
        self.kind, self.step, self.at, self.times = kind, step, at, times
        self.error, self.timeout = error, timeout
        self.after = after  # uses let through first
        self.met = 0  # uses it struck
        self._held: list[asyncio.Future[None]] = []
        self._holding = asyncio.Event()

    def matches(self, what: str) -> bool:
        return self.times != 0 and (self.step is None or self.step in what)

    async def reached(self) -> None:
        """Return once a use hangs here (see :meth:`FaultPlan.hang`)."""
        await self._holding.wait()

    def release(self) -> None:
        """Let the uses hanging here go on (later uses still hang)."""
        held, self._held = self._held, []
        self._holding.clear()
        for future in held:
            if not future.done():
                future.set_result(None)

    async def hold(self) -> None:
        """Wait here until released (TimeoutError after ``timeout`` s, if given)."""
        future = asyncio.get_running_loop().create_future()
        self._held.append(future)
        self._holding.set()
        try:
            async with asyncio.timeout(self.timeout):
                await future
        finally:
            if future in self._held:
                self._held.remove(future)
                if not self._held:
                    self._holding.clear()


class FaultPlan:
    """Faults planned for one database (one session factory), by step: the ``what`` a
    session is opened for; a step given matches every ``what`` that contains it (None:
    every one). The latest fault planned that matches strikes."""

    def __init__(self) -> None:
        self._faults: list[Fault] = []
        self.met: list[str] = []  # the steps a fault struck, in order

    def fail(
        self,
        step: str | None = None,
        *,
        error: BaseException | None = None,
        times: int | None = None,
        after: int = 0,
    ) -> Fault:
        """The step's session raises ``error`` (by default a refused connection) as it
        opens, once ``after`` uses went through: none of its statements run."""
        return self._plan(Fault("fail", step, times=times, error=error, after=after))

    def hang(
        self,
        step: str | None = None,
        *,
        at: FaultPoint = "start",
        times: int | None = None,
        timeout: float | None = None,
    ) -> Fault:
        """The step hangs before its session opens (the database does not answer), or
        at its ``"end"`` (its statements ran, a transaction committed: the answer is
        late), until released or the plan cleared (it then goes on as the plan says), or
        its caller gives up; after ``timeout`` s it fails with TimeoutError, as a hung
        step's own timeout would, without waiting that long."""
        return self._plan(Fault("hang", step, at=at, times=times, timeout=timeout))

    def drop(
        self, step: str | None = None, *, at: FaultPoint = "start", times: int | None = None
    ) -> Fault:
        """The server ends the step's connection at its first statement, or at its
        commit (``"end"``: its statements ran and roll back; a read is spared): it fails
        with a genuinely lost connection."""
        return self._plan(Fault("drop", step, at=at, times=times))

    def clear(self) -> None:
        """No more faults (and none met); the uses hanging go on."""
        faults, self._faults = self._faults, []
        self.met = []
        for fault in faults:
            fault.release()

    def _plan(self, fault: Fault) -> Fault:
        self._faults.append(fault)
        return fault

    def _take(self, what: str) -> Fault | None:
        for fault in reversed(self._faults):
            if fault.matches(what):
                if fault.after:
                    fault.after -= 1
                    return None
                if fault.times is not None:
                    fault.times -= 1
                return fault
        return None

    def _struck(self, fault: Fault, what: str) -> None:
        fault.met += 1
        self.met.append(what)

    def session(
        self, sessions: async_sessionmaker[AsyncSession], what: str
    ) -> contextlib.AbstractAsyncContextManager[AsyncSession]:
        fault = self._take(what)
        return sessions() if fault is None else self._faulted(sessions, what, fault)

    @contextlib.asynccontextmanager
    async def _faulted(
        self, sessions: async_sessionmaker[AsyncSession], what: str, fault: Fault | None
    ) -> AsyncIterator[AsyncSession]:
        while fault is not None and fault.kind == "hang" and fault.at == "start":
            self._struck(fault, what)
            await fault.hold()
            fault = self._take(what)  # released: as the plan says now
        if fault is not None and fault.kind == "fail":
            self._struck(fault, what)
            raise fault.error or ConnectionRefusedError(
                errno.ECONNREFUSED, f"{what}: connection refused (a planned fault)"
            )
        async with sessions() as session:
            if fault is not None and fault.kind == "drop":
                self._drop_connection(session, fault, what)
            yield session
        if fault is not None and fault.kind == "hang":
            self._struck(fault, what)
            await fault.hold()

    def _drop_connection(self, session: AsyncSession, fault: Fault, what: str) -> None:
        def at_start(_session: Session, _transaction: Any, connection: Any) -> None:
            self._struck(fault, what)
            connection.exec_driver_sql(_TERMINATE_OWN_BACKEND)

        def at_commit(sync_session: Session) -> None:
            self._struck(fault, what)
            sync_session.connection().exec_driver_sql(_TERMINATE_OWN_BACKEND)

        if fault.at == "start":
            event.listen(session.sync_session, "after_begin", at_start, once=True)
        else:
            event.listen(session.sync_session, "before_commit", at_commit, once=True)


# A plan per session factory, forgotten with it; none for nearly all of them.
_plans: weakref.WeakKeyDictionary[async_sessionmaker[AsyncSession], FaultPlan] = (
    weakref.WeakKeyDictionary()
)


def faults(sessions: async_sessionmaker[AsyncSession]) -> FaultPlan:
    """The fault plan of ``sessions``' database (tests, drills): empty until told."""
    return _of_database(_plans, sessions, FaultPlan)


def open_session(
    sessions: async_sessionmaker[AsyncSession], what: str
) -> contextlib.AbstractAsyncContextManager[AsyncSession]:
    """A session of ``sessions`` for the step ``what``, with the faults planned for it
    (nearly always none: then just ``sessions()``)."""
    plan = _plans.get(sessions)
    return sessions() if plan is None else plan.session(sessions, what)
