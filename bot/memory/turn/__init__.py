"""A turn as memory sees it, and the prompt it is given (SPEC §5).

types    TurnStart, PreparedTurn, TurnState: what a turn asks, gets, and the guards see
prompt   prompt assembly: memory, other channels, the raw window, notes
fences   stored text defused so it can never open or close a memory fence
gather   the messages a memory does not cover yet (after its marker)
recall   the long-term facts a turn shows, and the scopes known to show none
window   where the raw window starts: fixed between turns, moved in steps
"""

from bot.memory.turn.gather import (
    count_new_messages,
    dated_lines,
    gather_new_messages,
    messages_after_marker,
)
from bot.memory.turn.prompt import (
    MESSAGE_OVERHEAD_TOKENS,
    VALUE_LIMIT,
    AssembledPrompt,
    OtherChannel,
    PromptInput,
    assemble,
    nudge_text,
    relative_time,
    render_memory_text,
    stamp,
)
from bot.memory.turn.recall import FactRecall
from bot.memory.turn.types import (
    REASON_ALREADY_UPDATED,
    REASON_CHANGED,
    REASON_CLEARED,
    REASON_DISABLED,
    REASON_STORAGE,
    LabelFor,
    PreparedTurn,
    TurnStart,
    TurnState,
)

__all__ = [
    "MESSAGE_OVERHEAD_TOKENS",
    "REASON_ALREADY_UPDATED",
    "REASON_CHANGED",
    "REASON_CLEARED",
    "REASON_DISABLED",
    "REASON_STORAGE",
    "VALUE_LIMIT",
    "AssembledPrompt",
    "FactRecall",
    "LabelFor",
    "OtherChannel",
    "PreparedTurn",
    "PromptInput",
    "TurnStart",
    "TurnState",
    "assemble",
    "count_new_messages",
    "dated_lines",
    "gather_new_messages",
    "messages_after_marker",
    "nudge_text",
    "relative_time",
    "render_memory_text",
    "stamp",
]
