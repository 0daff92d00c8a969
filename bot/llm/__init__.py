"""The model side: any OpenAI-compatible endpoint through the official client.

Imports nothing from memory: the tools it runs are handed to it.

client      one AsyncOpenAI per process, built from settings; where requests are posted;
            the tokens an answer reports (cached ones too)
roles       messages in the role order strict chat templates accept
model_call  one request of a turn, within its deadline, with the history-tools fallbacks
streaming   one streamed request: the raw event lines read over the client's HTTP
stream_assembly  a streamed answer put back together (text, tool-call deltas) from its lines
failures    the notices shown instead of an answer; what each error or refusal means
reply_text  the final answer after what was written beside the tool calls
leaks       tool-call syntax and reasoning leaked into reply text, stripped
escaping    entities a server's template escaped, turned back into characters
embeddings  vectors from a /v1/embeddings endpoint, resting after a failure
tools/      tools to the loop (schema, arguments, calls) and the tool loop itself
tokens/     prompt tokens: tiktoken's shipped encodings, else a calibrated per-script estimate
"""

from bot.llm.client import (
    LlmRequest,
    RequestObserver,
    chat_completion,
    make_client,
    reported_tokens,
)
from bot.llm.embeddings import Embedder, Vector
from bot.llm.escaping import unescape_new_entities
from bot.llm.failures import CUT_MESSAGE
from bot.llm.tokens import Calibration, TokenCounter, encoding_for_model, estimate_tokens
from bot.llm.tools import (
    FALLBACK_REPLY,
    FRIENDLY_ERRORS,
    UNAVAILABLE_MESSAGE,
    ImagesRefused,
    LlmUnavailable,
    LoopResult,
    ReplyPreview,
    ToolArgumentError,
    ToolOutcome,
    ToolSpec,
    complete_without_tools,
    json_type,
    load_object,
    quoted,
    reject_unexpected,
    require_string,
    run_tool_loop,
    text_tool_calls,
    tool_prompt,
    unexpected_fields,
    utf8_size,
)

__all__ = [
    "CUT_MESSAGE",
    "FALLBACK_REPLY",
    "FRIENDLY_ERRORS",
    "UNAVAILABLE_MESSAGE",
    "Calibration",
    "Embedder",
    "ImagesRefused",
    "LlmRequest",
    "LlmUnavailable",
    "LoopResult",
    "ReplyPreview",
    "RequestObserver",
    "TokenCounter",
    "ToolArgumentError",
    "ToolOutcome",
    "ToolSpec",
    "Vector",
    "chat_completion",
    "complete_without_tools",
    "encoding_for_model",
    "estimate_tokens",
    "json_type",
    "load_object",
    "make_client",
    "quoted",
    "reject_unexpected",
    "reported_tokens",
    "require_string",
    "run_tool_loop",
    "text_tool_calls",
    "tool_prompt",
    "unescape_new_entities",
    "unexpected_fields",
    "utf8_size",
]
