"""The tools the model may call, implemented over the memory services."""

from bot.conversation.tools.longterm import LONG_TERM_TOOL_NAMES, long_term_tools
from bot.conversation.tools.stm import STM_TOOL_NAME, run_stm_tool, stm_tool_definition

__all__ = [
    "LONG_TERM_TOOL_NAMES",
    "STM_TOOL_NAME",
    "long_term_tools",
    "run_stm_tool",
    "stm_tool_definition",
]
