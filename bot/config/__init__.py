"""Settings: one typed object, environment over ``config/kioku.toml``.

Secrets and the operator's well-known variables keep their conventional names
(``DISCORD_TOKEN``, ``DATABASE_URL``, ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``); every other
setting is ``KIOKU_<NAME>`` or, inside a section, ``KIOKU_<SECTION>__<NAME>``.
A bad value stops start-up with one line per key naming the key, the value and what
is allowed.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import ValidationError
from pydantic_settings import SettingsError as PydanticSettingsError

from bot.config.errors import format_validation_error, not_json_line
from bot.config.files import (
    DEFAULT_PERSONA_FILE,
    SettingsError,
    config_file_path,
    env_file_path,
    env_file_values,
)
from bot.config.problems import (
    api_key_problem,
    data_dir_problem,
    database_unreachable,
    embedded_data_dir_problem,
    one_line_error,
)
from bot.config.settings import (
    SECTIONS,
    ContextSettings,
    DatabaseSettings,
    EmbeddingsSettings,
    LlmSettings,
    LongTermSettings,
    MetricsSettings,
    Settings,
    StmSettings,
    unknown_variables,
)
from bot.config.urls import async_database_url, without_credentials

__all__ = [
    "DEFAULT_PERSONA_FILE",
    "SECTIONS",
    "ContextSettings",
    "DatabaseSettings",
    "EmbeddingsSettings",
    "LlmSettings",
    "LongTermSettings",
    "MetricsSettings",
    "Settings",
    "SettingsError",
    "StmSettings",
    "api_key_problem",
    "async_database_url",
    "config_file_path",
    "data_dir_problem",
    "database_unreachable",
    "embedded_data_dir_problem",
    "env_file_path",
    "env_file_values",
    "load_settings",
    "one_line_error",
    "without_credentials",
]


def load_settings(**overrides: Any) -> Settings:
    """Build the settings; raise :class:`SettingsError` with readable lines on bad values."""
    problems = unknown_variables(os.environ, "the environment") + unknown_variables(
        env_file_values(), str(env_file_path())
    )
    if problems:
        raise SettingsError("\n".join(problems))
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise SettingsError(format_validation_error(exc)) from None
    except PydanticSettingsError as exc:  # a list or section variable that is not JSON
        raise SettingsError(not_json_line(exc)) from None
    except (OSError, ValueError) as exc:  # unreadable or malformed TOML file
        raise SettingsError(
            f"cannot read the configuration file {config_file_path()}: {exc}"
        ) from None
