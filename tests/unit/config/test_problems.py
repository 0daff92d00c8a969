"""The one-line descriptions of start-up problems: the data folder, errors, the database."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy.exc

from bot.config import load_settings
from bot.config.problems import (
    data_dir_problem,
    database_unreachable,
    embedded_data_dir_problem,
    one_line_error,
)


def test_data_dir_problems_name_the_variable_and_the_reason(tmp_path: Path) -> None:
    assert data_dir_problem(tmp_path) is None
    assert data_dir_problem(tmp_path / "new" / "data") is None, "created on first use"
    a_file = tmp_path / "data"
    a_file.write_text("")
    assert data_dir_problem(a_file) == (
        f"the data folder {a_file} (KIOKU_DATA_DIR) is a file, not a folder"
    )
    assert data_dir_problem(a_file / "inner") == (
        f"the data folder {a_file / 'inner'} (KIOKU_DATA_DIR) cannot be created: "
        f"{a_file} is a file, not a folder"
    )


def test_a_relative_data_folder_under_a_path_with_a_space_names_where_the_space_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The default ./data in a checkout under "My Projects": "data" itself has no space.
    checkout = tmp_path / "My Projects" / "kioku"
    checkout.mkdir(parents=True)
    monkeypatch.chdir(checkout)
    assert embedded_data_dir_problem(Path("data")) == (
        f"the data folder data (KIOKU_DATA_DIR) has a space in its path ({checkout / 'data'}), "
        "which the embedded PostgreSQL cannot use: choose a folder without one, or set "
        "DATABASE_URL"
    )


def test_an_error_without_text_is_named_by_its_class() -> None:
    assert one_line_error(TimeoutError()) == "TimeoutError"
    assert one_line_error(ConnectionRefusedError(111, "Connection refused")) == (
        "[Errno 111] Connection refused"
    )


def test_sqlalchemys_documentation_link_is_not_part_of_the_line() -> None:
    # What the pool raises when every connection is taken (its code adds the link).
    error = sqlalchemy.exc.TimeoutError("QueuePool limit of size 5 overflow 5 reached", code="3o7r")
    assert "Background on this error" in str(error)
    assert one_line_error(error, with_class=True) == (
        "TimeoutError: QueuePool limit of size 5 overflow 5 reached"
    )


def test_a_database_that_never_answered_is_named_as_a_timeout() -> None:
    settings = load_settings()
    assert database_unreachable(TimeoutError(), settings) == (
        "no answer within 10 s (KIOKU_DATABASE__CONNECT_TIMEOUT_SECONDS sets how long to wait)"
    )
