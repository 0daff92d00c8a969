"""Short-term memory behind the service, sharing one MemoryState.

state           the caches, epochs, tombstones, locks and ledger the parts share
cache           the STM cache (bounded TLRU with secondary indexes)
window          the recent raw messages of each channel (never persisted)
guild_settings  guild configuration and opt-ins: cached, announced on change
coherence       what changed since a read began; deaf while notices are unheard
reading         entries from the cache or hydrated; raw windows as a prompt uses them
change          one write: its checks, sanitized values, what it does to an entry
categories      admin-defined categories: slugs from labels, validation
writing         the write path (SPEC §3) and the turn counts of the cadence
commit          group commit: writes queued behind a transaction share the next one
wipes           /refresh, /forget-me and the janitor's purge in a live process
notices         what other processes' notices evict here; deaf and hearing again
unsynced        the spool as the service sees it: when to use it, what its replay changes
"""

from bot.memory.stm.categories import (
    DESCRIPTION_MAX_LENGTH,
    LABEL_MAX_LENGTH,
    CategoryDefinitionError,
    parse_category_lines,
)
from bot.memory.stm.change import REASON_ALL_EMPTY, REASON_CATEGORIES_CHANGED, WriteResult
from bot.memory.stm.notices import Notices
from bot.memory.stm.reading import Reader
from bot.memory.stm.state import MemoryState
from bot.memory.stm.unsynced import Pending
from bot.memory.stm.window import WindowCache, answering, with_trigger
from bot.memory.stm.wipes import Wipes
from bot.memory.stm.writing import Origin, Writer

__all__ = [
    "DESCRIPTION_MAX_LENGTH",
    "LABEL_MAX_LENGTH",
    "REASON_ALL_EMPTY",
    "REASON_CATEGORIES_CHANGED",
    "CategoryDefinitionError",
    "MemoryState",
    "Notices",
    "Origin",
    "Pending",
    "Reader",
    "WindowCache",
    "Wipes",
    "WriteResult",
    "Writer",
    "answering",
    "parse_category_lines",
    "with_trigger",
]
