"""Settings taken as given: defaults, precedence (environment over .env over the TOML
file), blank values that count as not set, and values normalised."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp import web

from bot.config import DEFAULT_PERSONA_FILE, Settings, load_settings
from bot.llm.client import make_client
from tests.helpers.fake_llm import ScriptedLLM
from tests.helpers.settings_sources import write_dotenv, write_toml


def test_defaults_match_the_spec() -> None:
    settings = load_settings()
    assert settings.stm.cache_max_entries == 50_000
    assert settings.stm.ttl_summary_hours == 24
    assert settings.stm.ttl_empty_hours == 12
    assert settings.stm.refresh_cadence == 5
    assert settings.stm.render_mode == "crude_summary"
    assert settings.stm.crude_message_count == 6
    assert settings.stm.max_turns_to_pull == 20
    assert settings.stm.retention_days == 90
    assert settings.llm.max_consecutive_tool_errors == 5
    assert settings.llm.max_waiting_turns == 5
    assert settings.longterm.recall_char_budget == 1200
    assert settings.database_url is None and settings.embedded_database


def test_shipped_toml_equals_code_defaults() -> None:
    # config/kioku.toml documents the defaults; it must not silently change them.
    assert load_settings() == Settings(_env_file=None)  # type: ignore[call-arg]


def test_environment_overrides_toml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_toml(tmp_path, 'model = "from-file"\n[stm]\nrefresh_cadence = 9\n', monkeypatch)
    assert load_settings().stm.refresh_cadence == 9
    assert load_settings().model == "from-file"
    monkeypatch.setenv("KIOKU_STM__REFRESH_CADENCE", "12")
    monkeypatch.setenv("KIOKU_MODEL", "from-env")
    settings = load_settings()
    assert settings.stm.refresh_cadence == 12
    assert settings.model == "from-env"


def test_well_known_variables_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISCORD_TOKEN", "abc")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:11434/v1/")
    monkeypatch.setenv("DATABASE_URL", "postgres://kioku:pw@db:5432/kioku")
    settings = load_settings()
    assert settings.discord_token is not None
    assert settings.discord_token.get_secret_value() == "abc"
    assert settings.openai_base_url == "http://localhost:11434/v1"
    assert settings.database_url == "postgresql+asyncpg://kioku:pw@db:5432/kioku"


def test_dotenv_is_read_and_foreign_variables_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_dotenv(
        tmp_path,
        "POSTGRES_PASSWORD=x\nDISCORD_TOKEN=from-dotenv\nKIOKU_STM__REFRESH_CADENCE=7\n",
        monkeypatch,
        name=".env",
    )
    settings = load_settings()
    assert settings.discord_token is not None
    assert settings.discord_token.get_secret_value() == "from-dotenv"
    assert settings.stm.refresh_cadence == 7
    monkeypatch.setenv("KIOKU_STM__REFRESH_CADENCE", "8")
    assert load_settings().stm.refresh_cadence == 8, "the environment wins over .env"


@pytest.mark.parametrize("name", ["Azure-OpenAI", "LM_Studio", "generic", "llama.cpp"])
def test_provider_aliases_and_generic_are_accepted(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv("KIOKU_PROVIDER", name)
    assert load_settings().provider == name


@pytest.mark.parametrize(
    "mode", ["disable", "allow", "prefer", "require", "verify-ca", "verify-full"]
)
def test_libpq_sslmode_becomes_asyncpg_ssl(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    # Managed hosts (RDS, Supabase, Neon, Heroku) hand out URLs with ?sslmode=…, which
    # asyncpg.connect() refuses as an unexpected keyword.
    import inspect

    import asyncpg
    from sqlalchemy.engine import make_url

    monkeypatch.setenv(
        "DATABASE_URL", f"postgresql://u:pw@db.example.com:5432/kioku?sslmode={mode}"
    )
    url = make_url(load_settings().database_url)
    assert dict(url.query) == {"ssl": mode}
    _, connect_kwargs = url.get_dialect()().create_connect_args(url)
    inspect.signature(asyncpg.connect).bind(**connect_kwargs)  # what the engine will call


def test_equal_limits_are_not_contradictory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIOKU_STM__RAW_WINDOW", "6")
    monkeypatch.setenv("KIOKU_STM__MIN_RAW_TAIL", "6")
    monkeypatch.setenv("KIOKU_STM__TTL_EMPTY_HOURS", "24")
    settings = load_settings()
    assert settings.stm.raw_window == settings.stm.crude_message_count == 6


@pytest.mark.parametrize("value", ["debug", "Warning", " error "])
def test_log_level_is_case_insensitive(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("KIOKU_LOG_LEVEL", value)
    assert load_settings().log_level == value.strip().upper()


@pytest.mark.parametrize("value", ["", "   ", "\t"])
def test_a_blank_discord_token_counts_as_not_set(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    # config/example.env ships `DISCORD_TOKEN=`; run, sync and doctor must all see "unset".
    monkeypatch.setenv("DISCORD_TOKEN", value)
    assert load_settings().discord_token is None
    monkeypatch.setenv("DISCORD_TOKEN", "  abc \n")
    token = load_settings().discord_token
    assert token is not None and token.get_secret_value() == "abc"


def test_a_toml_boolean_still_sets_a_boolean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_toml(tmp_path, "[stm]\nenabled = false\nrefresh_cadence = 3\n", monkeypatch)
    settings = load_settings()
    assert (settings.stm.enabled, settings.stm.refresh_cadence) == (False, 3)


@pytest.mark.parametrize("value", ["", "  "])
def test_a_blank_data_dir_or_persona_file_counts_as_not_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    # As for `DISCORD_TOKEN=`: not the working directory (which Path("") is).
    monkeypatch.setenv("KIOKU_DATA_DIR", value)
    monkeypatch.setenv("KIOKU_PERSONA_FILE", value)
    settings = load_settings()
    assert (settings.data_dir, settings.persona_file) == (Path("data"), DEFAULT_PERSONA_FILE)
    # Not set: the file's values apply, as they would with the variables absent.
    write_toml(tmp_path, 'data_dir = "/srv/kioku"\npersona_file = "/srv/persona.md"\n', monkeypatch)
    settings = load_settings()
    assert (settings.data_dir, settings.persona_file) == (
        Path("/srv/kioku"),
        Path("/srv/persona.md"),
    )


def test_a_blank_data_dir_in_dotenv_counts_as_not_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_dotenv(tmp_path, "KIOKU_DATA_DIR=\n", monkeypatch, name=".env")
    assert load_settings().data_dir == Path("data")


@pytest.mark.parametrize("value", ["", "  "])
def test_a_blank_openai_base_url_means_openai_itself(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    # compose's env_file turns `OPENAI_BASE_URL=` into a blank variable in the container;
    # the openai client, given no base URL, would read that blank variable itself.
    monkeypatch.setenv("OPENAI_BASE_URL", value)
    settings = load_settings()
    assert settings.openai_base_url is None
    assert str(make_client(settings).base_url) == "https://api.openai.com/v1/"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("HTTP://localhost:11434/v1", "http://localhost:11434/v1"),
        ("Https://api.example.com/v1/", "https://api.example.com/v1"),
        ("http://[::1]:8080/v1/", "http://[::1]:8080/v1"),
        ("http://gateway/v1/?api-version=1", "http://gateway/v1?api-version=1"),
    ],
)
def test_an_openai_base_url_loses_only_the_trailing_slash_of_its_path(
    monkeypatch: pytest.MonkeyPatch, url: str, expected: str
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    assert load_settings().openai_base_url == expected


class QueryRecordingLLM(ScriptedLLM):
    """Records the query string of each chat request."""

    def __init__(self) -> None:
        super().__init__()
        self.queries: list[dict[str, list[str]]] = []

    async def _handle_chat(self, request: web.Request) -> web.StreamResponse:
        self.queries.append({key: request.query.getall(key) for key in request.query})
        return await super()._handle_chat(request)


async def test_a_base_url_query_goes_with_each_request_to_the_chat_endpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Azure-style gateways want ?api-version=… on every call; left in the base URL, the
    # client would append /chat/completions after it and miss the endpoint.
    async with QueryRecordingLLM() as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{llm.base_url}/?api-version=1&tag=")
        settings = load_settings()
        assert settings.openai_base_url == f"{llm.base_url}?api-version=1&tag="
        llm.reply_text("Hello!")
        client = make_client(settings, max_retries=0)
        try:
            completion = await client.chat.completions.create(
                model="test-model", messages=[{"role": "user", "content": "hi"}]
            )
        finally:
            await client.close()
        assert completion.choices[0].message.content == "Hello!"
        assert llm.queries == [{"api-version": ["1"], "tag": [""]}]
        assert llm.unscripted == 0
