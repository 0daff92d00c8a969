"""The settings model: sections, their limits, and the sources they are read from."""

from __future__ import annotations

import difflib
import os
import typing
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from bot.config.files import (
    DEFAULT_PERSONA_FILE,
    PROCESS_ONLY_VARIABLES,
    SettingsError,
    config_file_path,
    env_file_error,
    env_file_path,
    env_file_values,
)
from bot.config.urls import OPENAI_DEFAULT_BASE_URL, async_database_url, openai_base_url
from bot.vocabulary import capabilities, provider_problem

RenderMode = Literal["crude_summary", "supersede"]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]
# "auto": the provider capability table decides; "on" / "off" override it.
StrictRoles = Literal["auto", "on", "off"]
# "auto": the provider table's vision flag decides whether images go to the model.
Vision = Literal["auto", "on", "off"]
ImageTransport = Literal["url", "data_url"]


class Section(BaseModel):
    """A ``[section]`` of the file; a misspelt key is an error, not silently ignored."""

    # NaN passes no range check and fails it with a misleading bound ("should be less
    # than or equal to 2"); infinity is no duration or temperature either.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

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
    # Capture: after this many messages the memory does not cover, the summarizer folds
    # them in the background, addressed or not (0: off), within a server's daily tokens.
    capture_after_messages: Annotated[int, Field(ge=0, le=500)] = 20
    capture_daily_tokens: Annotated[int, Field(ge=0, le=100_000_000)] = 200_000
    # ...and once a channel with a few such messages has been quiet this long (0: never).
    capture_quiet_minutes: Annotated[float, Field(ge=0, le=24 * 60)] = 30.0
    raw_window: Annotated[int, Field(ge=1, le=500)] = 50
    # Tokens the raw window may take, whoever was addressed: past it (or raw_window
    # messages) its start steps ahead by a third, so a prompt cache keeps the rest.
    raw_window_tokens: Annotated[int, Field(ge=100, le=200_000)] = 1500
    min_raw_tail: Annotated[int, Field(ge=0, le=50)] = 4
    other_channels: Annotated[int, Field(ge=0, le=3)] = 3
    # Tokens other channels' memories may take on every turn; one the message relates
    # to comes in beside them (at most other_channels of each).
    other_channels_tokens: Annotated[int, Field(ge=0, le=10_000)] = 150
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
                raise combination_error(
                    smaller, getattr(self, smaller), larger, getattr(self, larger)
                )
        # A row the janitor deleted must not still be shown from a cache entry that
        # outlives it (no notice tells the caches about the janitor's deletions).
        if self.ttl_summary_hours > self.retention_days * 24:
            raise combination_error(
                "ttl_summary_hours",
                self.ttl_summary_hours,
                "retention_days",
                self.retention_days,
                f"{self.retention_days * 24} hours",
            )
        return self


class LlmSettings(Section):
    """How the tool loop talks to the OpenAI-compatible endpoint, and how many turns of
    one channel may wait for it."""

    timeout_seconds: Annotated[float, Field(gt=0, le=600)] = 60.0
    max_retries: Annotated[int, Field(ge=0, le=10)] = 2
    # All the model calls of one reply together, the client's retries and their waits
    # included. Without it a silent endpoint holds a member (and the channel's queue) for
    # timeout_seconds × (1 + max_retries) before the "took too long" notice.
    turn_timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 90.0
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
    # Turns one member may start in a minute, across channels and DMs; past it a message
    # gets the same reaction and no model call (0: no limit). One account flooding the
    # bot costs the operator model calls and holds up everyone's channel queue.
    turns_per_user_per_minute: Annotated[int, Field(ge=0, le=600)] = 12
    # A streamed reply's Discord message is edited at most this often (Discord limits
    # edits); an answer complete sooner is sent once, as a whole.
    stream_edit_seconds: Annotated[float, Field(ge=0.5, le=60)] = 1.0
    # Discord messages one reply may take; past it the last one says the answer was cut.
    max_reply_messages: Annotated[int, Field(ge=1, le=100)] = 10


class LongTermSettings(Section):
    """Long-term memory: explicit facts and captured ones, and their recall (SPEC §6)."""

    recall_char_budget: Annotated[int, Field(ge=0, le=20_000)] = 1200
    max_facts_per_user: Annotated[int, Field(ge=1, le=10_000)] = 200
    max_fact_chars: Annotated[int, Field(ge=20, le=1500)] = 500
    # Capture also distils durable, dated facts of a channel's conversation.
    capture_facts: bool = True
    max_facts_per_channel: Annotated[int, Field(ge=1, le=100_000)] = 2_000


class EmbeddingsSettings(Section):
    """An OpenAI-compatible ``/v1/embeddings`` endpoint: recall ranks facts by vector
    similarity beside full-text search (pgvector). Unset: full-text search alone."""

    # "same": the chat endpoint (OPENAI_BASE_URL); otherwise another server's /v1 URL.
    base_url: str | None = None
    model: Annotated[str, Field(min_length=1, max_length=200)] = "text-embedding-3-small"
    # None: the chat endpoint's key (OPENAI_API_KEY).
    api_key: SecretStr | None = None
    timeout_seconds: Annotated[float, Field(gt=0, le=120)] = 5.0
    # After a failure, recall uses full-text search alone this long before trying again.
    retry_after_seconds: Annotated[float, Field(ge=0, le=86_400)] = 60.0
    # Facts farther than this (cosine distance, 0 same … 2 opposite) are no vector match.
    max_distance: Annotated[float, Field(gt=0, le=2)] = 0.75

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        if value.strip().lower() == "same":
            return "same"
        return openai_base_url(value.strip())

    @field_validator("api_key")
    @classmethod
    def _blank_key_unset(cls, value: SecretStr | None) -> SecretStr | None:
        # `KIOKU_EMBEDDINGS__API_KEY=` (as config/example.env ships it) means "not set".
        return value if value is not None and value.get_secret_value().strip() else None


class ContextSettings(Section):
    """What a turn brings in beside the raw window: images, reply chains, threads."""

    # Replied-to messages followed back from the message being answered (0: none).
    reply_chain_depth: Annotated[int, Field(ge=0, le=10)] = 3
    vision: Vision = "auto"
    # "url": the model's server fetches the image; "data_url": the bot downloads it
    # (size-capped) and sends the bytes, for servers that cannot reach Discord's CDN.
    image_transport: ImageTransport = "url"
    images_per_message: Annotated[int, Field(ge=0, le=10)] = 4
    images_per_turn: Annotated[int, Field(ge=0, le=20)] = 6
    image_max_mb: Annotated[float, Field(gt=0, le=50)] = 8.0


class DatabaseSettings(Section):
    """Connection pool sizing; the URL itself is the top-level ``DATABASE_URL``."""

    pool_size: Annotated[int, Field(ge=1, le=200)] = 5
    max_overflow: Annotated[int, Field(ge=0, le=200)] = 5
    connect_timeout_seconds: Annotated[float, Field(gt=0, le=120)] = 10.0

    @property
    def batched_loads(self) -> int:
        """Batched cold loads of one kind (memories, wipe times, facts) running at once: a
        quarter of the pool, so a burst of them queues behind a few, not for every
        connection, and writes still find one free."""
        return max(1, (self.pool_size + self.max_overflow) // 4)


class MetricsSettings(Section):
    """The Prometheus endpoint (``/metrics``); off while ``port`` is 0."""

    host: Annotated[str, Field(min_length=1, max_length=255)] = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 0


class AccessSettings(Section):
    """Who may talk to the bot beyond each server's own lists (``/kioku access``)."""

    # Off: DMs get no answer and cost no model call (owners are still answered).
    direct_messages: bool = True


class ServersSettings(Section):
    """What a server's admins may choose for their server (``/kioku persona``, ``/kioku model``)."""

    # Models an admin may pick besides the default ``model`` (empty: only the default).
    allowed_models: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        default_factory=list
    )
    persona_max_chars: Annotated[int, Field(ge=50, le=4000)] = 1500

    @field_validator("allowed_models")
    @classmethod
    def _check_models(cls, value: list[str]) -> list[str]:
        # Names are compared as typed in /kioku model; surrounding spaces would never match.
        names = [name.strip() for name in value]
        if any(not name for name in names):
            raise ValueError("model names must not be blank")
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"lists {', '.join(duplicates)} more than once")
        return names


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
    embeddings: EmbeddingsSettings = Field(default_factory=EmbeddingsSettings)
    context: ContextSettings = Field(default_factory=ContextSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    access: AccessSettings = Field(default_factory=AccessSettings)
    servers: ServersSettings = Field(default_factory=ServersSettings)

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
        # Order is precedence: explicit arguments, then the operator's sources.
        return (init_settings, *_operator_sources(settings_cls, env_settings))

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
    def embeddings_base_url(self) -> str | None:
        """Where embeddings are asked for (None: not configured)."""
        url = self.embeddings.base_url
        return self.llm_base_url if url == "same" else url

    @property
    def server_models(self) -> tuple[str, ...]:
        """The models a server's admins may choose: the default first, then the allowed."""
        return (self.model, *(m for m in self.servers.allowed_models if m != self.model))

    @property
    def strict_roles(self) -> bool:
        """Whether requests keep the strict role order (one leading system message, user
        and assistant alternating; :mod:`bot.llm.roles`): ``llm.strict_roles``, or with
        ``"auto"`` the provider capability table's ``strict_roles``."""
        if self.llm.strict_roles == "auto":
            return capabilities(self.provider).strict_roles
        return self.llm.strict_roles == "on"


def _operator_sources(
    settings_cls: type[BaseSettings], env_settings: PydanticBaseSettingsSource
) -> tuple[PydanticBaseSettingsSource, PydanticBaseSettingsSource, PydanticBaseSettingsSource]:
    """The environment, the ``.env`` file and the TOML file, in order of precedence."""
    chosen = os.environ.get("KIOKU_CONFIG")
    config_file = config_file_path()
    if chosen and not config_file.is_file():
        # The default file may be absent (an installed package); a named one may not,
        # and a folder would be skipped in silence like an absent file.
        why = "is not a file" if config_file.exists() else "no such file"
        raise SettingsError(f"cannot read the configuration file {chosen} (KIOKU_CONFIG): {why}")
    toml = TomlConfigSettingsSource(settings_cls, toml_file=config_file)
    # Checked first: python-dotenv skips a line it cannot parse, with a warning naming no file.
    env_file_values()
    env_file = env_file_path()
    try:
        dotenv = _KnownKeysOnly(settings_cls, DotEnvSettingsSource(settings_cls, env_file))
    except (OSError, UnicodeDecodeError) as exc:  # read here, when the source is made
        raise env_file_error(env_file, exc) from None
    return (
        _BlankPathsUnset(settings_cls, env_settings),
        _BlankPathsUnset(settings_cls, dotenv),
        toml,
    )


Origin = Literal["environment", "dotenv", "toml"]


def value_origin(loc: Sequence[str]) -> Origin | None:
    """Which source the settings took the value at ``loc`` (``("stm", "raw_window")``)
    from, asked of the sources themselves so that their precedence, variable names and
    JSON sections are those of :func:`load_settings`; ``None``: a default or an argument."""
    sources = _operator_sources(Settings, EnvSettingsSource(Settings))
    origins: tuple[Origin, ...] = ("environment", "dotenv", "toml")
    for origin, source in zip(origins, sources, strict=True):
        values: Any = source()
        for part in loc:
            if not isinstance(values, dict) or part not in values:
                break
            values = values[part]
        else:
            return origin
    return None


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


_CONVENTIONAL = ("DISCORD_TOKEN", "DATABASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL")
# The settings' sections ([stm], [llm], ...), from the model: a new one is known at once.
SECTIONS = tuple(
    name
    for name, field in Settings.model_fields.items()
    if isinstance(field.annotation, type) and issubclass(field.annotation, Section)
)


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
    sections = {f"KIOKU_{name.upper()}" for name in SECTIONS}
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


COMBINATION_ERROR = "settings_combination"


def combination_error(
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
