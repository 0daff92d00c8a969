"""The database: engine, sessions with their breaker, repositories, notices, deletion.

Imports nothing from the memory core or Discord.
"""

from bot.db.clock_skew import measure_clock_skew, warn_of_clock_skew
from bot.db.deadline import database_deadline
from bot.db.deletion import (
    ClearReceipt,
    ForgetReceipt,
    delete_channel_rows,
    delete_user_rows,
    stored_user_ids,
)
from bot.db.engine import Database, describe_url
from bot.db.migrate import (
    MigrationsMissing,
    UnknownRevision,
    current_revision,
    head_revision,
    is_known_revision,
    unknown_revision_problem,
    upgrade,
)
from bot.db.notify import CacheListener, Notice, send_notice, stm_notice
from bot.db.repositories import EventRecord, FactCursor
from bot.db.storage import (
    DB_TIMEOUT_SECONDS,
    database_answered,
    database_down,
    database_failed,
    memory_session,
    open_session,
    outage_number,
    sqlstate,
)

__all__ = [
    "DB_TIMEOUT_SECONDS",
    "CacheListener",
    "ClearReceipt",
    "Database",
    "EventRecord",
    "FactCursor",
    "ForgetReceipt",
    "MigrationsMissing",
    "Notice",
    "UnknownRevision",
    "current_revision",
    "database_answered",
    "database_deadline",
    "database_down",
    "database_failed",
    "delete_channel_rows",
    "delete_user_rows",
    "describe_url",
    "head_revision",
    "is_known_revision",
    "measure_clock_skew",
    "memory_session",
    "open_session",
    "outage_number",
    "send_notice",
    "sqlstate",
    "stm_notice",
    "stored_user_ids",
    "unknown_revision_problem",
    "upgrade",
    "warn_of_clock_skew",
]
