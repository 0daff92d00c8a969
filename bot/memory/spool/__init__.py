"""The durable spool: memory operations the database refused, kept until it is back.

durable  DurableSpool: append before "saved, pending sync", replay in order with backoff
file     the spool's file: its lock, fsynced appends and rewrites
records  the record format
pending  what waits in the spool, as reads of the memory see it
replay   applying spooled records to the database
"""

from bot.memory.spool.durable import (
    DurableSpool,
    PendingChanges,
    SpoolLocked,
    inspect_spool,
    spool_in_use,
    spool_path,
)
from bot.memory.spool.replay import carried_row_wiped

__all__ = [
    "DurableSpool",
    "PendingChanges",
    "SpoolLocked",
    "carried_row_wiped",
    "inspect_spool",
    "spool_in_use",
    "spool_path",
]
