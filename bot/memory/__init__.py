"""The memory core: short-term memory (STM), long-term facts and their privacy rules.

This face is all that other packages import; it imports nothing from Discord, the LLM
client or the conversation above it.

service     MemoryService: the one way STM is read, written and deleted
prepare     a turn's start: its state, memory, window and prompt input
guard       whether a message read for a turn was deleted, wiped or forgotten since
janitor     housekeeping loops: the purge of expired rows, saving turn counts
turn/       a turn as memory sees it, the prompt it gets, the messages not yet covered
stm/        the STM parts behind the service: cache, state, reading, writing, wipes
spool/      the durable spool of operations the database refused, and its replay
longterm/   per-user and captured facts: storage, recall, visibility, intent
"""

from bot.memory.guard import MessageGuard
from bot.memory.janitor import run_janitor, run_turn_count_saver
from bot.memory.longterm import (
    SEARCH_LIMIT,
    CaptureStored,
    ChannelFilter,
    ChannelView,
    Distilled,
    FactPage,
    FactRefused,
    LongTermService,
    explicit_long_term_intent,
    visible_here,
)
from bot.memory.service import MemoryService
from bot.memory.spool import DurableSpool, SpoolLocked, inspect_spool, spool_in_use, spool_path
from bot.memory.stm import (
    DESCRIPTION_MAX_LENGTH,
    LABEL_MAX_LENGTH,
    REASON_ALL_EMPTY,
    REASON_CATEGORIES_CHANGED,
    CategoryDefinitionError,
    WriteResult,
    parse_category_lines,
)
from bot.memory.turn import (
    MESSAGE_OVERHEAD_TOKENS,
    REASON_CHANGED,
    REASON_CLEARED,
    REASON_DISABLED,
    REASON_STORAGE,
    VALUE_LIMIT,
    AssembledPrompt,
    FactRecall,
    LabelFor,
    PreparedTurn,
    TurnStart,
    TurnState,
    assemble,
    count_new_messages,
    dated_lines,
    gather_new_messages,
    messages_after_marker,
    nudge_text,
    relative_time,
    render_memory_text,
)

__all__ = [
    "DESCRIPTION_MAX_LENGTH",
    "LABEL_MAX_LENGTH",
    "MESSAGE_OVERHEAD_TOKENS",
    "REASON_ALL_EMPTY",
    "REASON_CATEGORIES_CHANGED",
    "REASON_CHANGED",
    "REASON_CLEARED",
    "REASON_DISABLED",
    "REASON_STORAGE",
    "SEARCH_LIMIT",
    "VALUE_LIMIT",
    "AssembledPrompt",
    "CaptureStored",
    "CategoryDefinitionError",
    "ChannelFilter",
    "ChannelView",
    "Distilled",
    "DurableSpool",
    "FactPage",
    "FactRecall",
    "FactRefused",
    "LabelFor",
    "LongTermService",
    "MemoryService",
    "MessageGuard",
    "PreparedTurn",
    "SpoolLocked",
    "TurnStart",
    "TurnState",
    "WriteResult",
    "assemble",
    "count_new_messages",
    "dated_lines",
    "explicit_long_term_intent",
    "gather_new_messages",
    "inspect_spool",
    "messages_after_marker",
    "nudge_text",
    "parse_category_lines",
    "relative_time",
    "render_memory_text",
    "run_janitor",
    "run_turn_count_saver",
    "spool_in_use",
    "spool_path",
    "visible_here",
]
