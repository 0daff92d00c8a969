"""``kioku doctor``: check configuration, database, migrations and the LLM endpoint."""

# One row per check, printed as soon as it is done (an LLM endpoint that never answers
# takes the whole timeout); any FAIL exits 1, so it serves as a container health check.

from __future__ import annotations

import difflib
import os
import re
import time
from collections.abc import Callable
from urllib.parse import parse_qsl, urlsplit

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from bot.config import (
    DEFAULT_PERSONA_FILE,
    Settings,
    api_key_problem,
    config_file_path,
    data_dir_problem,
    database_unreachable,
    one_line_error,
)
from bot.db import (
    Database,
    MigrationsMissing,
    current_revision,
    describe_url,
    head_revision,
    measure_clock_skew,
    unknown_revision_problem,
)
from bot.db.repositories import embeddings as embeddings_repo
from bot.llm import Embedder
from bot.memory import inspect_spool, relative_time
from bot.ops.backup import backup_dir, latest_backup
from bot.ops.discord_probe import INTENT_ROW, TOKEN_ROW, discord_rows
from bot.ops.llm_probe import LLM_ROWS, llm_rows
from bot.ops.table import Check, Status, Table, logs_held
from bot.vocabulary import PROMPT_PLACEHOLDERS, SystemClock, redact_secrets

# Every row, in the order printed: the name column's width is known before the first.
ROWS = (
    "config",
    TOKEN_ROW,
    INTENT_ROW,
    "database",
    "migrations",
    "clock",
    "spool",
    "backup",
    "persona",
    *LLM_ROWS,
    "embeddings",
)


def passed(ok: bool) -> Status:
    return Status.OK if ok else Status.FAIL


async def run_doctor(settings: Settings) -> int:
    """Run every check, printing each row as it completes; return the exit code."""
    # Every row goes through one filter: no configured secret reaches the terminal.
    hide = secret_hider(settings)
    with logs_held():
        table = Table(ROWS, hide)
        await _checks(settings, table, hide)
    return 1 if table.failed else 0


async def _checks(settings: Settings, table: Table, hide: Callable[[str], str]) -> None:
    table.show(_config_check(settings))
    token = settings.discord_token.get_secret_value() if settings.discord_token else None
    for row in await table.waiting(TOKEN_ROW, "Discord", discord_rows(token)):
        table.show(row)
    database = Database(settings)
    try:
        await _database_checks(database, settings, table)
        table.show(_spool_check(settings))
        table.show(_backup_check(settings))
        table.show(_persona_check(settings))
        await llm_rows(settings, table, hide)
        table.show(await _embeddings_check(database, settings, hide))
    finally:
        await database.close()


# A shorter "key" is a placeholder (OPENAI_API_KEY=ollama); replacing it wherever it
# occurs would garble the rows ("via ollama") and hide nothing.
_MIN_SECRET_CHARS = 8


def secret_hider(settings: Settings) -> Callable[[str], str]:
    """What takes the configured secrets, and any :func:`redact_secrets` finds, out of a text."""
    # Servers quote a rejected key back in their errors.
    named: dict[str, str] = {}
    if settings.openai_api_key is not None:
        named[settings.openai_api_key.get_secret_value()] = "[REDACTED:openai_api_key]"
    if settings.discord_token is not None:
        named[settings.discord_token.get_secret_value()] = "[REDACTED:discord_token]"
    if settings.database_url is not None:
        password = make_url(settings.database_url).password
        if password is not None:
            named[str(password)] = "***"
    llm_url = urlsplit(settings.llm_base_url)
    for value in (llm_url.password, *(v for _, v in parse_qsl(llm_url.query))):
        if value:
            named[value] = "***"
    # Longest first: a secret holding another is replaced whole.
    secrets = sorted(
        ((s, marker) for s, marker in named.items() if len(s.strip()) >= _MIN_SECRET_CHARS),
        key=lambda pair: -len(pair[0]),
    )

    def hide(shown: str) -> str:
        for secret, marker in secrets:
            shown = shown.replace(secret, marker)
        return redact_secrets(shown)

    return hide


def shown_url(url: str) -> str:
    """``url`` with its user, password and query values masked."""
    # A gateway's key often rides in the query (``?api-key=…``).
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    netloc = f"***@{host}" if "@" in parts.netloc else host
    query = "&".join(
        f"{name}=***" if value else f"{name}="
        for name, value in parse_qsl(parts.query, keep_blank_values=True)
    )
    return parts._replace(netloc=netloc, query=query).geturl()


def _config_check(settings: Settings) -> Check:
    parts = [
        f"model {settings.model} via {settings.provider} at {shown_url(settings.llm_base_url)}"
    ]
    if settings.strict_roles:
        parts.append("strict role order")
    if settings.metrics.port:
        # Where `kioku run` serves its metrics (see bot.runtime.metrics).
        parts.append(f"metrics at http://{settings.metrics.host}:{settings.metrics.port}/metrics")
    parts.append(_config_file_note())
    problem = api_key_problem(settings)
    if problem is not None:
        return Check("config", Status.FAIL, "; ".join([problem, *parts]))
    return Check("config", Status.OK, "; ".join(parts))


def _config_file_note() -> str:
    # The default path is relative: run from another folder, the file is skipped in silence.
    path = config_file_path()
    where = path.absolute()
    if path.is_file():
        named = " (KIOKU_CONFIG)" if os.environ.get("KIOKU_CONFIG") else ""
        return f"config file {where}{named}"
    if path.exists():
        return f"config file {where} is not a file: not read"
    return f"config file: none found at {where}"


def _spool_check(settings: Settings) -> Check:
    # With an external database the data folder holds only the spool: `kioku run` refuses
    # a folder it cannot use, and this row says so ahead of it.
    problem = data_dir_problem(settings.data_dir)
    if problem is not None:
        return Check("spool", Status.FAIL, problem)
    spool = inspect_spool(settings.data_dir)
    noun = "operation" if spool.pending == 1 else "operations"
    state = f"{spool.pending} memory {noun} pending sync" if spool.pending else "empty"
    if spool.set_aside:
        # Records that could not be read or applied: the operator should look at them.
        state += f"; {len(spool.set_aside)} set-aside file(s): {spool.set_aside[-1]}"
    return Check("spool", passed(not spool.set_aside), state)


def _backup_check(settings: Settings) -> Check:
    """The newest backup in the default folder (information only: it never fails)."""
    latest = latest_backup(settings)
    if latest is None:
        return Check(
            "backup", Status.OK, f"none in {backup_dir(settings)} (kioku backup makes one)"
        )
    path, made = latest
    return Check(
        "backup", Status.OK, f"latest {path.name}, made {relative_time(made, SystemClock().now())}"
    )


# A `{word}` as bot.conversation.turn.render_persona fills them in (an unknown one reaches
# the model as written); other braces (JSON, code) are no placeholders.
_PLACEHOLDER = re.compile(r"\{([A-Za-z_]\w*)\}")


def _persona_check(settings: Settings) -> Check:
    """The persona file, which may be missing only at its default path."""
    # The built-in persona stands in; an installed package has no persona file.
    path = settings.persona_file
    try:
        template = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        # `kioku run` and `console` refuse it (a named file or the default alike).
        return Check(
            "persona",
            Status.FAIL,
            f"{path} is not UTF-8 text (byte {exc.start}): save it as UTF-8",
        )
    except OSError as exc:
        named = "KIOKU_PERSONA_FILE" in os.environ or path != DEFAULT_PERSONA_FILE
        return Check(
            "persona",
            passed(not named),
            f"{path} not readable ({exc.__class__.__name__}): the built-in persona is used",
        )
    detail = f"{path} ({len(template)} chars)"
    unknown = sorted(set(_PLACEHOLDER.findall(template)) - PROMPT_PLACEHOLDERS)
    if not unknown:
        return Check("persona", Status.OK, detail)
    known = ", ".join(f"{{{name}}}" for name in sorted(PROMPT_PLACEHOLDERS))
    listed = ", ".join(_unknown_placeholder(name) for name in unknown)
    which = "placeholder" if len(unknown) == 1 else "placeholders"
    return Check(
        "persona",
        Status.WARN,
        f"{detail}: unknown {which} {listed}, sent to the model as written (known: {known})",
    )


def _unknown_placeholder(name: str) -> str:
    guess = difflib.get_close_matches(name, PROMPT_PLACEHOLDERS, n=1, cutoff=0.75)
    return f"{{{name}}}" + (f" (did you mean {{{guess[0]}}}?)" if guess else "")


async def _database_checks(database: Database, settings: Settings, table: Table) -> None:
    row = await table.waiting("database", "the database", _database_check(database, settings))
    table.show(row)
    if row.status is Status.FAIL:
        why = "skipped: no database to read (see the database row)"
        table.show(Check("migrations", Status.SKIP, why))
        table.show(Check("clock", Status.SKIP, why))
        return
    table.show(await _migrations_check(database))
    table.show(await _clock_check(database))


async def _database_check(database: Database, settings: Settings) -> Check:
    try:
        await database.start()
        started = time.perf_counter()
        async with database.engine.connect() as connection:
            version = (await connection.execute(text("SHOW server_version"))).scalar_one()
        elapsed_ms = (time.perf_counter() - started) * 1000
    except (OSError, TimeoutError) as exc:
        # Worded as `kioku migrate` words it (one line, a silent server named as such),
        # with where it tried: a refused connection or an unknown host does not say.
        where = f" ({describe_url(database.url)})" if database.url is not None else ""
        reason = database_unreachable(exc, settings)
        return Check("database", Status.FAIL, f"unreachable{where}: {reason}")
    except Exception as exc:  # any other failure is the finding too
        detail = f"unusable: {one_line_error(exc, with_class=True)}"
        if settings.database_url is not None and login_refused(exc):
            detail += "; check the user and password in DATABASE_URL"
        return Check("database", Status.FAIL, detail)
    assert database.url is not None
    where = describe_url(database.url)
    return Check("database", Status.OK, f"PostgreSQL {version}, {where} ({elapsed_ms:.0f} ms)")


async def _embeddings_check(
    database: Database, settings: Settings, hide: Callable[[str], str]
) -> Check:
    """Whether recall's vector side works: the endpoint answers, the database has pgvector."""
    url = settings.embeddings_base_url
    if url is None:
        # Nothing is wrong: vector recall is an option.
        return Check("embeddings", Status.OK, "not set: recall uses full-text search only")
    try:
        async with database.sessions() as session:
            table_there = await embeddings_repo.available(session)
    except Exception as exc:  # the database row has said why
        return Check("embeddings", Status.SKIP, f"no database: {one_line_error(exc)}")
    if not table_there:
        why = "the database has no pgvector (long_term_embeddings): full-text recall only"
        return Check("embeddings", Status.FAIL, f"{why}; install pgvector, then kioku migrate")
    embedder = Embedder(settings)
    started = time.perf_counter()
    try:
        vectors = await embedder.embed(["kioku doctor"])
    finally:
        await embedder.close()
    elapsed_ms = (time.perf_counter() - started) * 1000
    where = hide(shown_url(url))
    if vectors is None:
        detail = f"{where} gave no usable embedding for {settings.embeddings.model!r}"
        return Check("embeddings", Status.FAIL, f"{detail}: recall falls back to full-text")
    dims = len(vectors[0])
    model = settings.embeddings.model
    return Check(
        "embeddings", Status.OK, f"{model}, {dims} dimensions, {where} ({elapsed_ms:.0f} ms)"
    )


def login_refused(exc: BaseException) -> bool:
    """Whether PostgreSQL refused the login (SQLSTATE class 28: password, user, role)."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        exc = exc.orig.__cause__ or exc.orig  # SQLAlchemy's adapter wraps asyncpg's error
    sqlstate = getattr(exc, "sqlstate", None)
    return isinstance(sqlstate, str) and sqlstate.startswith("28")


async def _migrations_check(database: Database) -> Check:
    try:
        head = head_revision()
    except MigrationsMissing as exc:
        return Check("migrations", Status.FAIL, str(exc))
    try:
        current = await current_revision(database.engine)
    except Exception as exc:  # e.g. a role not allowed to read alembic_version
        detail = f"cannot read the revision: {one_line_error(exc, with_class=True)}"
        return Check("migrations", Status.FAIL, detail)
    newer = unknown_revision_problem(current)
    if newer is not None:
        detail = newer
    elif current == head:
        detail = f"at {current}"
    elif current is None:
        detail = f"not migrated (head is {head}): run kioku migrate"
    else:
        detail = f"at {current}, head is {head}: run kioku migrate"
    return Check("migrations", passed(current == head), detail)


async def _clock_check(database: Database) -> Check:
    try:
        skew = await measure_clock_skew(database.engine, SystemClock().now)
    except Exception as exc:  # the database answered a moment ago: say what broke
        detail = f"cannot compare: {one_line_error(exc, with_class=True)}"
        return Check("clock", Status.FAIL, detail)
    return Check("clock", passed(not skew.too_large), skew.describe())
