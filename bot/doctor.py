"""``kioku doctor``: check configuration, database, migrations and the LLM endpoint.

Prints one row per check and exits non-zero when any check fails, so it can serve as a
container health check or a CI smoke test. The tool-call probe runs only for providers
that can call tools (``bot/llm/providers.py``); for the others the summarizer keeps the
memory, so the row says it was skipped and passes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import openai
from sqlalchemy import text

from bot.backup import backup_dir, latest_backup
from bot.config import DEFAULT_PERSONA_FILE, Settings
from bot.db.clock_skew import measure_clock_skew
from bot.db.engine import Database, describe_url
from bot.db.migrate import (
    MigrationsMissing,
    current_revision,
    head_revision,
    unknown_revision_problem,
)
from bot.llm.client import chat_completion, make_client
from bot.llm.providers import capabilities
from bot.memory.clock import SystemClock
from bot.memory.prompt import relative_time
from bot.memory.spool import inspect_spool
from bot.problems import data_dir_problem, database_unreachable, one_line_error
from bot.urls import without_credentials

DOCTOR_TIMEOUT_SECONDS = 15.0


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


async def doctor(settings: Settings) -> int:
    """Run every check, print the table, return the exit code."""
    checks: list[Check] = [
        Check(
            "config",
            True,
            f"model {settings.model} via {settings.provider} at "
            f"{without_credentials(settings.llm_base_url)}"
            + ("; strict role order" if settings.strict_roles else "")
            + _metrics_note(settings),
        ),
        Check(
            "discord token",
            settings.discord_token is not None,
            "set" if settings.discord_token is not None else "DISCORD_TOKEN is not set",
        ),
    ]
    database = Database(settings)
    try:
        checks.extend(await _database_checks(database, settings))
    finally:
        await database.close()
    checks.append(_spool_check(settings))
    checks.append(_backup_check(settings))
    checks.append(_persona_check(settings))
    checks.extend(await _llm_checks(settings))
    print(render_table(checks))
    return 0 if all(check.ok for check in checks) else 1


def _metrics_note(settings: Settings) -> str:
    """Where ``kioku run`` serves its metrics, if it does (see bot.metrics)."""
    metrics = settings.metrics
    return f"; metrics at http://{metrics.host}:{metrics.port}/metrics" if metrics.port else ""


def _spool_check(settings: Settings) -> Check:
    # With an external database the data folder holds only the spool: `kioku run` refuses
    # a folder it cannot use, and this row says so ahead of it.
    problem = data_dir_problem(settings.data_dir)
    if problem is not None:
        return Check("spool", False, problem)
    spool = inspect_spool(settings.data_dir)
    state = "empty" if not spool.pending else f"{spool.pending} memory operations pending sync"
    if spool.set_aside:
        # Records that could not be read or applied: the operator should look at them.
        state += f"; {len(spool.set_aside)} set-aside file(s): {spool.set_aside[-1]}"
    return Check("spool", not spool.set_aside, state)


def _backup_check(settings: Settings) -> Check:
    """The newest backup in the default folder (information only: a managed database,
    or backups kept elsewhere, are as good)."""
    latest = latest_backup(settings)
    if latest is None:
        return Check("backup", True, f"none in {backup_dir(settings)} (kioku backup makes one)")
    path, made = latest
    return Check(
        "backup", True, f"latest {path.name}, made {relative_time(made, SystemClock().now())}"
    )


def _persona_check(settings: Settings) -> Check:
    """The persona file: the built-in persona stands in when it is missing, which is
    fine for the default path (an installed package has none) but not for a named one."""
    path = settings.persona_file
    try:
        size = len(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        # `kioku run` and `console` refuse it (a named file or the default alike).
        return Check(
            "persona", False, f"{path} is not UTF-8 text (byte {exc.start}): save it as UTF-8"
        )
    except OSError as exc:
        named = "KIOKU_PERSONA_FILE" in os.environ or path != DEFAULT_PERSONA_FILE
        return Check(
            "persona",
            not named,
            f"{path} not readable ({exc.__class__.__name__}): the built-in persona is used",
        )
    return Check("persona", True, f"{path} ({size} chars)")


async def _database_checks(database: Database, settings: Settings) -> list[Check]:
    try:
        await database.start()
        started = time.perf_counter()
        async with database.engine.connect() as connection:
            version = (await connection.execute(text("SHOW server_version"))).scalar_one()
        elapsed_ms = (time.perf_counter() - started) * 1000
    except (OSError, TimeoutError) as exc:
        # Worded as `kioku migrate` words it (one line, a silent server named as such).
        return [Check("database", False, f"unreachable: {database_unreachable(exc, settings)}")]
    except Exception as exc:  # any other failure is the finding too
        return [Check("database", False, f"unusable: {one_line_error(exc, with_class=True)}")]
    assert database.url is not None
    where = describe_url(database.url)
    database_row = Check("database", True, f"PostgreSQL {version}, {where} ({elapsed_ms:.0f} ms)")
    return [database_row, await _migrations_check(database), await _clock_check(database)]


async def _migrations_check(database: Database) -> Check:
    try:
        head = head_revision()
    except MigrationsMissing as exc:
        return Check("migrations", False, str(exc))
    try:
        current = await current_revision(database.engine)
    except Exception as exc:  # e.g. a role not allowed to read alembic_version
        detail = f"cannot read the revision: {one_line_error(exc, with_class=True)}"
        return Check("migrations", False, detail)
    newer = unknown_revision_problem(current)
    if newer is not None:
        detail = newer
    elif current == head:
        detail = f"at {current}"
    elif current is None:
        detail = f"not migrated (head is {head}): run kioku migrate"
    else:
        detail = f"at {current}, head is {head}: run kioku migrate"
    return Check("migrations", current == head, detail)


async def _clock_check(database: Database) -> Check:
    try:
        skew = await measure_clock_skew(database.engine, SystemClock().now)
    except Exception as exc:  # the database answered a moment ago: say what broke
        return Check("clock", False, f"cannot compare: {one_line_error(exc, with_class=True)}")
    return Check("clock", not skew.too_large, skew.describe())


async def _llm_checks(settings: Settings) -> list[Check]:
    caps = capabilities(settings.provider)
    client = make_client(settings, max_retries=0).with_options(timeout=DOCTOR_TIMEOUT_SECONDS)
    try:
        checks = [await _timed("llm endpoint", lambda: _list_models(client, settings.model))]
        if caps.tool_calling:
            checks.append(
                await _timed(
                    "llm tool call",
                    lambda: _tiny_tool_call(client, settings.model, settings.strict_roles),
                )
            )
        else:
            checks.append(
                Check(
                    "llm tool call",
                    True,
                    f"skipped (provider {caps.name} has no tool calling; "
                    "the summarizer keeps memory)",
                )
            )
        return checks
    finally:
        await client.close()


async def _timed(name: str, probe: Callable[[], Awaitable[str]]) -> Check:
    started = time.perf_counter()
    try:
        detail = await probe()
    except Exception as exc:  # any failure is the finding
        return Check(name, False, f"{exc.__class__.__name__}: {exc}{_cause(exc)}")
    return Check(name, True, f"{detail} ({(time.perf_counter() - started) * 1000:.0f} ms)")


def _cause(exc: BaseException) -> str:
    """What lies under a connection failure, briefly: openai's "Connection error." says
    nothing of a refused connection or a name that does not resolve, which the innermost
    of its causes does (the HTTP libraries hide it as a suppressed context; followed here
    anyway, as it is the finding)."""
    if not isinstance(exc, openai.APIConnectionError):
        return ""  # the other errors' own text says what the endpoint answered
    chain: list[BaseException] = [exc]
    while (inner := chain[-1].__cause__ or chain[-1].__context__) is not None:
        if inner in chain:
            break
        chain.append(inner)
    own = str(exc)
    for inner in reversed(chain[1:]):
        text = " ".join(str(inner).split())
        if text and text not in own:
            return f" ({text if len(text) <= 120 else text[:117] + '...'})"
    return ""


async def _list_models(client: openai.AsyncOpenAI, model: str) -> str:
    try:
        page = await client.models.list()
    except (openai.NotFoundError, openai.PermissionDeniedError) as exc:
        # Some gateways do not list models (404) or forbid it (403): the server
        # answered, which is what this row checks; the tool-call row uses the model.
        return f"reachable (it does not list models: HTTP {exc.status_code})"
    names = [item.id for item in page.data]
    listed = "listed" if model in names else "not listed (may still work)"
    return f"reachable, {len(names)} models, {model} {listed}"


async def _tiny_tool_call(client: openai.AsyncOpenAI, model: str, strict_roles: bool) -> str:
    request = {
        "model": model,
        "messages": [{"role": "user", "content": "Call the ping tool with word set to 'pong'."}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "ping",
                    "description": "Health check.",
                    "parameters": {
                        "type": "object",
                        "properties": {"word": {"type": "string"}},
                        "required": ["word"],
                    },
                },
            }
        ],
        "max_tokens": 32,
    }
    response = await chat_completion(client, request, strict_roles=strict_roles)
    calls = response.choices[0].message.tool_calls or []
    if not calls:
        raise RuntimeError("the model answered without calling the tool (no tool support?)")
    return "the model called the tool"


def render_table(checks: list[Check]) -> str:
    width = max(len(check.name) for check in checks)
    lines = [f"{'check':<{width}}  status  detail", f"{'-' * width}  ------  ------"]
    for check in checks:
        status = "ok" if check.ok else "FAIL"
        lines.append(f"{check.name:<{width}}  {status:<6}  {check.detail}")
    return "\n".join(lines)
