"""The operator's tools beside the bot: backup and restore, and ``kioku doctor``.

backup         pg_dump backups and restores that keep /forget-me deletions
doctor         ``kioku doctor``: config, database, LLM endpoint and tool support
discord_probe  the doctor's Discord rows: the token and the Message Content intent
llm_probe      the doctor's model rows: endpoint, served context, a tool call as a turn asks
table          the doctor's table: rows as checks complete, a progress line
"""

from bot.ops.backup import (
    BackupFailed,
    BadBackupPath,
    backup_target,
    check_restore_allowed,
    check_revision,
    forgets_on_record,
    reapply_forgets,
    replace_from_backup,
    write_backup,
)
from bot.ops.doctor import run_doctor

__all__ = [
    "BackupFailed",
    "BadBackupPath",
    "backup_target",
    "check_restore_allowed",
    "check_revision",
    "forgets_on_record",
    "reapply_forgets",
    "replace_from_backup",
    "run_doctor",
    "write_backup",
]
