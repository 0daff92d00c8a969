"""Deployment files and the operator's documentation: docker-compose.yml wires the bot to
PostgreSQL correctly, config/example.env documents every setting with config/kioku.toml's
default and the range the code enforces, and README's commands and error examples are
what the command line has and prints."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import annotated_types
import pytest
import yaml
from pydantic import AliasChoices, BaseModel
from pydantic.fields import FieldInfo

from bot.cli.main import main
from bot.config import Settings, load_settings
from bot.runtime.metrics import Metrics, MetricsServer

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
EXAMPLE_ENV = ROOT / "config" / "example.env"
KIOKU_TOML = ROOT / "config" / "kioku.toml"

# Variables read straight from os.environ rather than through Settings.
PROCESS_ONLY = {
    "KIOKU_CONFIG": "bot/config/files.py",
    "KIOKU_ENV_FILE": "bot/config/files.py",
    "KIOKU_MIGRATIONS_DIR": "bot/db/migrate.py",
    "KIOKU_DISCORD_API_URL": "bot/ops/discord_probe.py",
}
SECRETS = {"DISCORD_TOKEN", "OPENAI_API_KEY"}

# `KEY=value`, `# KEY=value` (a documented default) or `# e.g. KEY=value` (an example).
ENV_LINE = re.compile(
    r"^(?P<comment>#\s*(?P<example>e\.g\.\s+)?)?(?P<name>[A-Z][A-Z0-9_]*)=(?P<value>.*)$"
)


# ------------------------------------------------------------------------- helpers


def settings_env_names(model: type[BaseModel] = Settings, prefix: str = "KIOKU_") -> dict[str, str]:
    """Every variable Settings reads, mapped to its dotted key (``stm.refresh_cadence``)."""
    names: dict[str, str] = {}
    for name, field in model.model_fields.items():
        alias = field.validation_alias
        annotation = field.annotation
        if isinstance(alias, AliasChoices):
            env = next(str(c) for c in alias.choices if isinstance(c, str) and c.isupper())
            names[env] = name
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
            for env, key in settings_env_names(annotation, f"{prefix}{name.upper()}__").items():
                names[env] = f"{name}.{key}"
        else:
            names[f"{prefix}{name.upper()}"] = name
    return names


def env_name_for(key: str) -> str:
    """The variable of a dotted kioku.toml key, as Settings computes it."""
    by_key = {key: env for env, key in settings_env_names().items()}
    return by_key.get(key, "KIOKU_" + "__".join(part.upper() for part in key.split(".")))


def toml_keys(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    keys: dict[str, Any] = {}
    for name, value in table.items():
        if isinstance(value, dict):
            keys.update(toml_keys(value, f"{prefix}{name}."))
        else:
            keys[f"{prefix}{name}"] = value
    return keys


def env_text(value: Any) -> str:
    """How a TOML value is written as an environment variable."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | dict):
        return json.dumps(value)
    return str(value)


def parse_example_env(text: str) -> tuple[dict[str, str], dict[str, str], set[str]]:
    """(active ``KEY=value`` lines, commented defaults ``# KEY=value``, every name mentioned)."""
    active: dict[str, str] = {}
    defaults: dict[str, str] = {}
    mentioned: set[str] = set()
    for line in text.splitlines():
        match = ENV_LINE.match(line.strip())
        if match is None:
            continue
        name, value = match["name"], match["value"]
        mentioned.add(name)
        if match["comment"] is None:
            active[name] = value
        elif match["example"] is None:
            defaults[name] = value
    return active, defaults, mentioned


@pytest.fixture(scope="module")
def example_env() -> tuple[dict[str, str], dict[str, str], set[str]]:
    return parse_example_env(EXAMPLE_ENV.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    return loaded


def service(compose: dict[str, Any], name: str) -> dict[str, Any]:
    services: dict[str, Any] = compose.get("services") or {}
    assert name in services, f"docker-compose.yml has no `{name}` service"
    found: dict[str, Any] = services[name]
    return found


def depends_on(svc: dict[str, Any]) -> dict[str, Any]:
    """``depends_on`` in the long form (``name: {condition: ...}``); the short list has no
    conditions, so it maps every name to an empty dict."""
    raw = svc.get("depends_on") or {}
    if isinstance(raw, list):
        return {name: {} for name in raw}
    assert isinstance(raw, dict)
    return raw


def command_of(svc: dict[str, Any]) -> list[str]:
    raw = svc.get("command")
    if raw is None:
        return ["run"]  # the image's CMD
    return raw.split() if isinstance(raw, str) else [str(part) for part in raw]


def environment_of(svc: dict[str, Any]) -> dict[str, str]:
    raw = svc.get("environment") or {}
    if isinstance(raw, list):
        return dict(item.split("=", 1) for item in raw if "=" in item)
    return {str(k): str(v) for k, v in raw.items()}


# ------------------------------------------------------------------- docker-compose.yml


def test_db_is_postgres_16_with_pgvector_and_a_pg_isready_healthcheck(
    compose: dict[str, Any],
) -> None:
    db = service(compose, "db")
    # pgvector's image: recall's vector side needs the extension (migration 0007).
    assert str(db.get("image", "")).startswith("pgvector/pgvector:pg16")
    test = db.get("healthcheck", {}).get("test")
    assert test, "db has no healthcheck"
    joined = test if isinstance(test, str) else " ".join(test)
    assert "pg_isready" in joined
    assert {"POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"} <= set(environment_of(db))


def test_bot_waits_for_a_healthy_db(compose: dict[str, Any]) -> None:
    assert depends_on(service(compose, "bot")).get("db", {}).get("condition") == "service_healthy"


def test_bot_keeps_its_data_in_a_named_volume_on_data(compose: dict[str, Any]) -> None:
    mounts: dict[str, str] = {}
    for volume in service(compose, "bot").get("volumes") or []:
        if isinstance(volume, str):
            source, _, rest = volume.partition(":")
            mounts[rest.split(":")[0]] = source
        else:
            mounts[str(volume.get("target"))] = str(volume.get("source"))
    assert "/data" in mounts, "the bot has no volume on /data"
    assert mounts["/data"] in (compose.get("volumes") or {}), "/data is not a named volume"
    # The image's data dir is /data; make sure .env cannot move it off the volume.
    assert environment_of(service(compose, "bot")).get("KIOKU_DATA_DIR", "/data") == "/data"


def test_bot_reads_dotenv(compose: dict[str, Any]) -> None:
    env_file = service(compose, "bot").get("env_file")
    files = [env_file] if isinstance(env_file, str) else list(env_file or [])
    assert ".env" in files


def test_migrations_run_before_the_bot(compose: dict[str, Any]) -> None:
    bot = service(compose, "bot")
    assert command_of(bot) == ["run"]
    migrators = [
        name
        for name, condition in depends_on(bot).items()
        if condition.get("condition") == "service_completed_successfully"
        and command_of(service(compose, name)) == ["migrate"]
    ]
    assert migrators, "the bot does not wait for a `kioku migrate` service to finish"
    for name in migrators:
        migrate = service(compose, name)
        assert depends_on(migrate).get("db", {}).get("condition") == "service_healthy"
        assert str(migrate.get("restart", "no")) == "no", "a one-shot must not restart"
        assert environment_of(migrate).get("DATABASE_URL") == environment_of(bot).get(
            "DATABASE_URL"
        ), "the migration and the bot must use the same database"


def test_bot_database_url_points_at_the_db_service(compose: dict[str, Any]) -> None:
    url = environment_of(service(compose, "bot")).get("DATABASE_URL", "")
    assert url.startswith("postgresql://")
    assert "@db:5432/" in url
    for variable in ("POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"):
        assert "${" + variable in url, f"DATABASE_URL does not use {variable}"


def test_bot_restarts_unless_stopped(compose: dict[str, Any]) -> None:
    assert service(compose, "bot").get("restart") == "unless-stopped"


@pytest.mark.parametrize(("problems", "exit_code"), [([], 0), (["database: down"], 1)])
async def test_the_bots_healthcheck_passes_only_when_healthz_says_ok(
    compose: dict[str, Any], problems: list[str], exit_code: int
) -> None:
    # The compose command itself, run against a real /healthz on a free port.
    bot = service(compose, "bot")
    port = environment_of(bot)["KIOKU_METRICS__PORT"]
    test = bot["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"]
    assert f"http://127.0.0.1:{port}/healthz" in test[3]

    async def health() -> list[str]:
        return problems

    server = MetricsServer(Metrics(), health)
    await server.start("127.0.0.1", 0)
    try:
        check = await asyncio.create_subprocess_exec(
            sys.executable, "-c", test[3].replace(f":{port}/", f":{server.port}/")
        )
        assert await check.wait() == exit_code
    finally:
        await server.close()


def test_every_compose_variable_is_documented(
    example_env: tuple[dict[str, str], dict[str, str], set[str]],
) -> None:
    lines = COMPOSE_FILE.read_text(encoding="utf-8").splitlines()
    text = "\n".join(line for line in lines if not line.lstrip().startswith("#"))
    used = set(re.findall(r"(?<!\$)\$\{([A-Z][A-Z0-9_]*)(?=[:?}-])", text))
    assert used, "docker-compose.yml substitutes no variables (POSTGRES_* expected)"
    assert used - example_env[2] == set()


# ------------------------------------------------------------------- config/example.env


def test_example_env_mentions_every_setting(
    example_env: tuple[dict[str, str], dict[str, str], set[str]],
) -> None:
    missing = sorted(set(settings_env_names()) - example_env[2])
    assert missing == [], f"config/example.env does not mention {missing}"


def test_example_env_documents_every_toml_key_with_its_default(
    example_env: tuple[dict[str, str], dict[str, str], set[str]],
) -> None:
    _, defaults, _ = example_env
    keys = toml_keys(tomllib.loads(KIOKU_TOML.read_text(encoding="utf-8")))
    assert keys, "config/kioku.toml is empty"
    wrong = {
        env_name_for(key): (defaults.get(env_name_for(key)), env_text(value))
        for key, value in keys.items()
        if defaults.get(env_name_for(key)) != env_text(value)
    }
    assert wrong == {}, "example.env default (left) differs from kioku.toml (right)"


def test_example_env_names_no_unknown_variable(
    example_env: tuple[dict[str, str], dict[str, str], set[str]],
) -> None:
    known = set(settings_env_names()) | set(PROCESS_ONLY)
    unknown = sorted(n for n in example_env[2] if n.startswith("KIOKU_") and n not in known)
    assert unknown == [], f"config/example.env names variables nothing reads: {unknown}"
    for name, source in PROCESS_ONLY.items():
        assert name in example_env[2]
        assert name in (ROOT / source).read_text(), f"{source} no longer reads {name}"


def test_example_env_sets_nothing_but_empty_secrets(
    example_env: tuple[dict[str, str], dict[str, str], set[str]],
) -> None:
    active, _, _ = example_env
    assert set(active) == SECRETS
    assert all(value == "" for value in active.values()), "secrets must be empty"


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("KIOKU_") or name in settings_env_names():
            monkeypatch.delenv(name)
    (tmp_path / "empty.toml").write_text("")  # no TOML settings (a missing file is an error)
    monkeypatch.setenv("KIOKU_CONFIG", str(tmp_path / "empty.toml"))
    monkeypatch.setenv("KIOKU_ENV_FILE", str(tmp_path / "absent.env"))


@pytest.mark.usefixtures("clean_environment")
def test_example_env_defaults_load_as_the_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every documented default, uncommented, must be a valid value equal to the default.
    _, defaults, _ = parse_example_env(EXAMPLE_ENV.read_text(encoding="utf-8"))
    readable = {k: v for k, v in defaults.items() if k in settings_env_names()}
    env_file = tmp_path / "defaults.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in readable.items()))
    expected = load_settings()
    monkeypatch.setenv("KIOKU_ENV_FILE", str(env_file))
    loaded = load_settings()
    assert loaded.model_dump() == expected.model_dump()
    assert readable, "no documented defaults were found"


# ------------------------------------------------------------- documented limits and commands


def field_of(key: str) -> FieldInfo:
    """The settings field of a dotted key (``stm.refresh_cadence``)."""
    model: type[BaseModel] = Settings
    *sections, name = key.split(".")
    for section in sections:
        annotation = model.model_fields[section].annotation
        assert isinstance(annotation, type) and issubclass(annotation, BaseModel)
        model = annotation
    return model.model_fields[name]


def number(value: object) -> str:
    """A bound as the documentation writes it (``720``, not ``720.0``)."""
    as_float = float(value)  # type: ignore[arg-type]
    return str(int(as_float)) if as_float.is_integer() else str(as_float)


def range_phrases(field: FieldInfo) -> list[str]:
    """What a comment must say of a bounded field: ``1–100``, or for a lower bound that
    is excluded ``more than 0`` and ``at most 600``; nothing for an unbounded field."""
    lower: object = None
    upper: object = None
    strict = False
    for meta in field.metadata:
        if isinstance(meta, annotated_types.Ge):
            lower = meta.ge
        elif isinstance(meta, annotated_types.Gt):
            lower, strict = meta.gt, True
        elif isinstance(meta, annotated_types.Le):
            upper = meta.le
    if lower is None or upper is None:
        return []
    if strict:
        return [f"more than {number(lower)}", f"at most {number(upper)}"]
    return [f"{number(lower)}–{number(upper)}"]


def says(comment: str, phrase: str) -> bool:
    # "1–100" must not be found inside "11–1000".
    return re.search(rf"(?<![\d.]){re.escape(phrase)}(?!\.?\d)", comment) is not None


def example_env_comments() -> dict[str, str]:
    """config/example.env: each commented default ``# KIOKU_…=`` → the comment above it."""
    found: dict[str, str] = {}
    comment: list[str] = []
    for line in EXAMPLE_ENV.read_text(encoding="utf-8").splitlines():
        assigned = ENV_LINE.match(line.strip())
        if assigned is not None and assigned["comment"] is not None:
            found[assigned["name"]] = " ".join(comment)
            comment = []
        elif line.startswith("# "):
            comment.append(line[2:])
        else:
            comment = []
    return found


def test_example_env_states_the_range_the_code_enforces() -> None:
    keys = settings_env_names()
    comments = {n: c for n, c in example_env_comments().items() if n in keys}
    assert len(comments) > 25
    wrong = {}
    for name, comment in comments.items():
        phrases = range_phrases(field_of(keys[name]))
        if not all(says(comment, phrase) for phrase in phrases):
            wrong[name] = (comment, phrases)
    assert wrong == {}, "example.env comment (left) does not say the range (right)"


def test_kioku_toml_comments_state_the_range_the_code_enforces() -> None:
    section = ""
    checked = 0
    wrong = {}
    for line in KIOKU_TOML.read_text(encoding="utf-8").splitlines():
        header = re.match(r"\[(\w+)\]", line)
        if header:
            section = header.group(1)
            continue
        keyed = re.match(r"(\w+) = [^#]*#(.*)", line)
        if keyed is None:
            continue
        key = f"{section}.{keyed[1]}" if section else keyed[1]
        for documented in re.findall(r"\d+(?:\.\d+)?–\d+(?:\.\d+)?", keyed[2]):
            checked += 1
            if [documented] != range_phrases(field_of(key)):
                wrong[key] = (documented, range_phrases(field_of(key)))
    assert checked > 3
    assert wrong == {}, "kioku.toml comment (left) differs from the code (right)"


def test_readme_command_table_lists_the_commands_of_the_parser(
    capsys: pytest.CaptureFixture[str],
) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("## Command line", 1)[1].split("\n\n", 2)[1]
    documented = set(re.findall(r"^\| `kioku (\w+)", table, re.MULTILINE))
    with pytest.raises(SystemExit):
        main(["--help"])
    # argparse lists each sub-command with its help under the COMMAND metavar.
    listed = set(re.findall(r"^ {4}(\w+) +\S", capsys.readouterr().out, re.MULTILINE))
    assert documented == listed
    assert len(listed) >= 5


@pytest.mark.usefixtures("clean_environment")
@pytest.mark.parametrize(
    ("env", "shown"),
    [
        ({"KIOKU_STM__RENDER_MODE": "fancy"}, "kioku: invalid setting stm.render_mode "),
        ({"KIOKU_REFRESH_CADENCE": "3"}, "kioku: unknown setting KIOKU_REFRESH_CADENCE "),
    ],
)
def test_readme_error_examples_are_what_the_cli_prints(
    env: dict[str, str],
    shown: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    documented = [line for line in readme.splitlines() if line.startswith(shown)]
    assert len(documented) == 1, f"README shows no (or several) {shown!r} examples"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["migrate"]) == 2
    assert capsys.readouterr().err.strip() == documented[0]
