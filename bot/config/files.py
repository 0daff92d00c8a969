"""Where the settings come from: the ``.env`` file and the TOML file."""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path

from dotenv import dotenv_values
from dotenv.parser import Binding, parse_stream

DEFAULT_CONFIG_FILE = Path("config/kioku.toml")
DEFAULT_PERSONA_FILE = Path("config/persona.md")


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


def env_file_line_error(path: Path, binding: Binding) -> SettingsError:
    """A line python-dotenv cannot parse (it would skip it, warning without the file's
    name): one line naming the file and the line, not its text, which may hold a secret."""
    statement = binding.original.string
    # The statement starts with the blank lines before it; its line is the first non-blank.
    line = binding.original.line + statement[: len(statement) - len(statement.lstrip())].count("\n")
    named = " (KIOKU_ENV_FILE)" if "KIOKU_ENV_FILE" in os.environ else ""
    return SettingsError(
        f"cannot parse line {line} of {path}{named}: "
        "expected NAME=value, a # comment or a blank line"
    )


def config_file_path() -> Path:
    """The TOML file read: ``KIOKU_CONFIG`` or ``config/kioku.toml``."""
    chosen = os.environ.get("KIOKU_CONFIG")
    return Path(chosen) if chosen else DEFAULT_CONFIG_FILE


class SettingsError(Exception):
    """Raised with an operator-readable, one-line-per-key message."""


# Read straight from the process environment (before the settings exist), not fields.
PROCESS_ONLY_VARIABLES = (
    "KIOKU_CONFIG",
    "KIOKU_ENV_FILE",
    "KIOKU_MIGRATIONS_DIR",
    "KIOKU_DISCORD_API_URL",
)


def env_file_values() -> dict[str, str | None]:
    """The ``.env`` file's variables (none when it is absent); :class:`SettingsError` when
    it cannot be read or a line of it cannot be parsed."""
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
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise env_file_error(path, exc) from None
    for binding in parse_stream(io.StringIO(text)):
        if binding.error:
            raise env_file_line_error(path, binding)
    return dotenv_values(stream=io.StringIO(text))
