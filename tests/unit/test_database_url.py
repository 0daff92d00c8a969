"""Which PostgreSQL the test harness uses: ``TEST_DATABASE_URL``, or an embedded server.

The fixture wiring (a pytest run with the variable set starts no embedded server) is
proved in tests/integration/test_database.py; this is the choice itself.
"""

from __future__ import annotations

import pytest

from tests.helpers.database import external_database_url, worker_suffix

GIVEN = "postgresql://kioku:s3cret@db.example:6543/kioku_test"


@pytest.mark.parametrize("environ", [{}, {"TEST_DATABASE_URL": ""}], ids=["unset", "empty"])
def test_without_test_database_url_the_embedded_server_is_used(environ: dict[str, str]) -> None:
    assert external_database_url(environ) is None
    assert external_database_url({**environ, "PYTEST_XDIST_WORKER": "gw0"}) is None


def test_test_database_url_is_the_session_database_outside_xdist() -> None:
    url = external_database_url({"TEST_DATABASE_URL": GIVEN})
    assert url is not None
    assert url.render_as_string(hide_password=False) == (
        "postgresql+asyncpg://kioku:s3cret@db.example:6543/kioku_test"
    )


def test_under_xdist_each_worker_gets_its_own_database_on_that_server() -> None:
    given = external_database_url({"TEST_DATABASE_URL": GIVEN})
    url = external_database_url({"TEST_DATABASE_URL": GIVEN, "PYTEST_XDIST_WORKER": "gw3"})
    assert given is not None and url is not None
    assert url.database == "kioku_test_gw3"
    # Everything but the database name is the given server's.
    assert url.set(database=given.database) == given


def test_a_unix_socket_url_like_the_embedded_servers_is_taken_as_it_is() -> None:
    raw = "postgresql://postgres:@/postgres?host=/tmp/pg/socket"
    url = external_database_url({"TEST_DATABASE_URL": raw})
    assert url is not None
    assert (url.drivername, url.database, dict(url.query)) == (
        "postgresql+asyncpg",
        "postgres",
        {"host": "/tmp/pg/socket"},
    )


def test_a_malformed_test_database_url_is_an_error_not_a_silent_embedded_server() -> None:
    with pytest.raises(ValueError, match="names no database"):
        external_database_url({"TEST_DATABASE_URL": "postgresql://kioku@db.example:5432"})


def test_worker_suffix_reads_the_given_environment() -> None:
    assert worker_suffix({"PYTEST_XDIST_WORKER": "gw1"}) == "_gw1"
    assert worker_suffix({}) == ""
