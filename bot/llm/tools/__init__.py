"""What a tool is to the model loop, and the loop that runs them.

base       a tool's schema and outcome; ToolArgumentError
arguments  parsing a call's JSON arguments, with errors the model can read
calls      the calls in an answer: read, echoed in the history, run
text_calls  tool calls a model wrote into its reply text, read as calls
loop       ask, run the tools the model calls, repeat until it answers in text
"""

from bot.llm.tools.arguments import (
    json_type,
    load_object,
    quoted,
    reject_unexpected,
    require_string,
    unexpected_fields,
    utf8_size,
)
from bot.llm.tools.base import ToolArgumentError, ToolOutcome
from bot.llm.tools.loop import (
    FALLBACK_REPLY,
    FRIENDLY_ERRORS,
    UNAVAILABLE_MESSAGE,
    ImagesRefused,
    LlmUnavailable,
    LoopResult,
    ReplyPreview,
    ToolSpec,
    complete_without_tools,
    run_tool_loop,
)
from bot.llm.tools.text_calls import TextCalls, text_tool_calls, tool_prompt

__all__ = [
    "FALLBACK_REPLY",
    "FRIENDLY_ERRORS",
    "UNAVAILABLE_MESSAGE",
    "ImagesRefused",
    "LlmUnavailable",
    "LoopResult",
    "ReplyPreview",
    "TextCalls",
    "ToolArgumentError",
    "ToolOutcome",
    "ToolSpec",
    "complete_without_tools",
    "json_type",
    "load_object",
    "quoted",
    "reject_unexpected",
    "require_string",
    "run_tool_loop",
    "text_tool_calls",
    "tool_prompt",
    "unexpected_fields",
    "utf8_size",
]
