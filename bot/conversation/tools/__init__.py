"""The tools the model may call, implemented over the memory services."""

from bot.conversation.tools.longterm import (
    FORGET_TOOL_NAME,
    LONG_TERM_TOOL_NAMES,
    REMEMBER_TOOL_NAME,
    long_term_tools,
)
from bot.conversation.tools.stm import STM_TOOL_NAME, run_stm_tool, stm_tool_definition

__all__ = [
    "FORGET_TOOL_NAME",
    "LONG_TERM_TOOL_NAMES",
    "REMEMBER_TOOL_NAME",
    "STM_TOOL_NAME",
    "long_term_tools",
    "run_stm_tool",
    "stm_tool_definition",
]
