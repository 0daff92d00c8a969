"""``DATABASE_URL`` and ``OPENAI_BASE_URL``: checked, normalised, and masked for display.

Checks raise ``ValueError`` worded to follow the setting's name; the settings' validators
turn it into one line, so nothing here reads the settings.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
_BASE_URL_ALLOWED = (
    "allowed: an http:// or https:// URL with a host, e.g. http://localhost:11434/v1"
)


def openai_base_url(raw: str) -> str:
    """Check an ``OPENAI_BASE_URL`` and return it without a trailing ``/``.

    The HTTP library would only refuse a bad one at the first call; a query
    (``?api-version=…``) is kept, as the client sends it with every request."""
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


# Up to the last "@": a password may hold "/", spaces or "@" itself.
_URL_CREDENTIALS = re.compile(r"(?<=://).*@")


def without_credentials(text: str) -> str:
    """``text`` with a URL's user and password masked: they never reach the terminal, a
    log collector reading it, or a table pasted into a bug report."""
    return _URL_CREDENTIALS.sub("***@", text)
