"""What each kind of OpenAI-compatible provider can do, as far as Kioku cares (SPEC §3, §8)."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = [
    "CHARS_PER_TOKEN",
    "GENERIC",
    "MIN_STM_CONTEXT_TOKENS",
    "PROVIDERS",
    "ProviderCaps",
    "capabilities",
    "prompt_chars",
]

MIN_STM_CONTEXT_TOKENS = 8192
"""Below this context size the memory-management overhead crowds out the conversation."""
CHARS_PER_TOKEN = 4
"""A rough, model-independent estimate of characters per token, for fitting prompts."""


def prompt_chars(context_tokens: int, reply_tokens: int, reserved_tokens: int) -> int:
    """Characters of prompt that fit in the context beside the reply and ``reserved_tokens``."""
    return max(0, (context_tokens - reply_tokens - reserved_tokens) * CHARS_PER_TOKEN)


@dataclass(frozen=True)
class ProviderCaps:
    """One provider's capabilities; STM needs tool calling and ``MIN_STM_CONTEXT_TOKENS``."""

    name: str
    tool_calling: bool
    # Conservative for the provider's usual models; a local server's depends on how the
    # model was loaded, which its notes say.
    context_tokens: int
    stm_allowed: bool
    notes: str
    # The server refuses a second system message, or roles that do not alternate (the
    # operator's llm.strict_roles overrides this).
    strict_roles: bool = False
    # The provider's usual models read image parts (``image_url``) in user messages; for
    # a local server it depends on the model loaded, so it is off (context.vision = "on").
    vision: bool = False
    # Replies stream in as they are written (tool calls arrive as deltas).
    streaming: bool = True
    # Small self-hosted models often write tool calls into the reply text when the
    # server's template does not parse them: those are read and run (never shown).
    text_tool_calls: bool = False
    # Learnt at run time (never set in the table): the server cannot take tools through the
    # API, so they are described in the prompt and the calls read from the text.
    tools_in_prompt: bool = False


def _caps(
    name: str,
    *,
    tool_calling: bool,
    context_tokens: int,
    notes: str,
    strict_roles: bool = False,
    vision: bool = False,
    streaming: bool = True,
    text_tool_calls: bool = False,
) -> ProviderCaps:
    return ProviderCaps(
        name=name,
        tool_calling=tool_calling,
        context_tokens=context_tokens,
        stm_allowed=tool_calling and context_tokens >= MIN_STM_CONTEXT_TOKENS,
        notes=notes,
        strict_roles=strict_roles,
        vision=vision,
        streaming=streaming,
        text_tool_calls=text_tool_calls,
    )


# What the template-driven local servers' notes say of the role order.
_TEMPLATE_ROLES = (
    " The model's chat template decides the role order: Llama 2 and Mistral templates "
    "refuse roles that do not alternate, so requests keep the strict order."
)


GENERIC = _caps(
    "generic",
    tool_calling=True,
    context_tokens=MIN_STM_CONTEXT_TOKENS,
    notes="Generic OpenAI-compatible endpoint: tool calling and at least 8k tokens of "
    "context are assumed.",
    text_tool_calls=True,
)

_ENTRIES: tuple[ProviderCaps, ...] = (
    _caps(
        "openai",
        tool_calling=True,
        context_tokens=128_000,
        notes="Native function calling.",
        vision=True,
    ),
    _caps(
        "azure",
        tool_calling=True,
        context_tokens=128_000,
        notes="Azure OpenAI: the model name is the deployment name; function calling as "
        "OpenAI for the deployed model.",
        vision=True,
    ),
    _caps(
        "ollama",
        tool_calling=True,
        context_tokens=8192,
        notes="Tool calling only with models whose template supports tools (e.g. Llama 3.1+, "
        "Qwen 2.5+, Mistral). The context is num_ctx, which may default lower: set "
        "OLLAMA_CONTEXT_LENGTH (or num_ctx) to at least 8192.",
        text_tool_calls=True,
    ),
    _caps(
        "vllm",
        tool_calling=True,
        context_tokens=32_768,
        notes="Tool calling needs --enable-auto-tool-choice and a matching "
        "--tool-call-parser; context is the served model's --max-model-len." + _TEMPLATE_ROLES,
        strict_roles=True,
        text_tool_calls=True,
    ),
    _caps(
        "lmstudio",
        tool_calling=True,
        context_tokens=8192,
        notes="Tool calling depends on the loaded model; the context length is chosen when "
        "the model is loaded (use at least 8192)." + _TEMPLATE_ROLES,
        strict_roles=True,
        text_tool_calls=True,
    ),
    _caps(
        "llamacpp",
        tool_calling=True,
        context_tokens=8192,
        notes="llama.cpp's llama-server: start it with --jinja for tool calling and -c 8192 "
        "or more; llama-cpp-python's server: --chat_format chatml-function-calling (or a "
        "model whose GGUF template takes tools) and --n_ctx 8192 or more." + _TEMPLATE_ROLES,
        strict_roles=True,
        text_tool_calls=True,
    ),
    _caps(
        "localai",
        tool_calling=True,
        context_tokens=8192,
        notes="Tool calling depends on the model configuration; context is the model's "
        "context_size." + _TEMPLATE_ROLES,
        strict_roles=True,
        text_tool_calls=True,
    ),
    _caps(
        "litellm",
        tool_calling=True,
        context_tokens=32_768,
        notes="LiteLLM proxy: capabilities are those of the model it routes to.",
    ),
    _caps(
        "openrouter",
        tool_calling=True,
        context_tokens=128_000,
        notes="Depends on the routed model; choose one listed with tool support.",
    ),
    _caps(
        "groq",
        tool_calling=True,
        context_tokens=128_000,
        notes="Function calling on the Llama 3.x, Qwen and GPT-OSS models.",
    ),
    _caps(
        "together",
        tool_calling=True,
        context_tokens=32_768,
        notes="Function calling on selected models only (Llama 3.1+, Qwen 2.5, Mistral).",
    ),
    _caps(
        "fireworks",
        tool_calling=True,
        context_tokens=32_768,
        notes="Function calling on selected models (e.g. firefunction, Llama 3.1+, Qwen).",
    ),
    _caps(
        "mistral",
        tool_calling=True,
        context_tokens=128_000,
        notes="La Plateforme: function calling on the current Mistral models; it refuses "
        "some role orders (e.g. a system message after other messages), so requests keep "
        "the strict order.",
        strict_roles=True,
    ),
    _caps(
        "deepseek",
        tool_calling=True,
        context_tokens=64_000,
        notes="deepseek-chat supports function calling; deepseek-reasoner may not, "
        "wraps reasoning in <think> blocks (stripped from replies) and refuses messages that "
        "do not alternate or start with the assistant, so requests keep the strict order.",
        strict_roles=True,
    ),
    _caps(
        "anthropic",
        tool_calling=True,
        context_tokens=200_000,
        notes="Anthropic's OpenAI SDK compatibility endpoint (or a gateway in front of "
        "Claude): tool calling supported.",
        vision=True,
    ),
    _caps(
        "gemini",
        tool_calling=True,
        context_tokens=1_000_000,
        notes="Google's OpenAI-compatible Gemini endpoint: function calling supported. "
        "Replies are not streamed: its stream sends tool-call deltas without their index "
        "and ends them with finish_reason 'stop'.",
        vision=True,
        streaming=False,
    ),
    _caps(
        "xai",
        tool_calling=True,
        context_tokens=131_072,
        notes="xAI Grok API: function calling supported.",
        vision=True,
    ),
    _caps(
        "perplexity",
        tool_calling=False,
        context_tokens=127_000,
        notes="Sonar models answer with web search and take no function tools: STM is off. "
        "User and assistant roles must alternate after the system message(s), so requests "
        "keep the strict order.",
        strict_roles=True,
    ),
    _caps(
        "novelai",
        tool_calling=False,
        context_tokens=4096,
        notes="NovelAI's OpenAI-compatible text endpoint: story-completion models with no "
        "function calling and a few thousand tokens of context (by subscription tier): "
        "STM is off.",
    ),
    GENERIC,
)

PROVIDERS: Mapping[str, ProviderCaps] = MappingProxyType({caps.name: caps for caps in _ENTRIES})
"""Known providers by canonical name."""

_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "azure-openai": "azure",
        "azureopenai": "azure",
        "lm-studio": "lmstudio",
        "llama.cpp": "llamacpp",
        "llama-cpp": "llamacpp",
        "llama-server": "llamacpp",
        "together.ai": "together",
        "togetherai": "together",
        "together-ai": "together",
        "mistralai": "mistral",
        "mistral-ai": "mistral",
        "claude": "anthropic",
        "google": "gemini",
        "x.ai": "xai",
        "grok": "xai",
        "fireworks-ai": "fireworks",
        "openai-compatible": "generic",
        "custom": "generic",
    }
)


def _normalize(name: str) -> str:
    return "-".join(name.strip().lower().replace("_", "-").split())


def provider_problem(name: str) -> str | None:
    """Why ``name`` names no row of the table (with the likeliest meant one), or None."""
    key = _normalize(name)
    if key in PROVIDERS or key in _ALIASES:
        return None
    guess = difflib.get_close_matches(key, [*PROVIDERS, *_ALIASES], n=1, cutoff=0.6)
    meant = f"did you mean {_ALIASES.get(guess[0], guess[0])!r}? " if guess else ""
    return (
        f"is not a known provider; {meant}known: {', '.join(sorted(PROVIDERS))} "
        "('generic' fits any other OpenAI-compatible server)"
    )


def capabilities(name: str) -> ProviderCaps:
    """The capabilities of provider ``name``; an unknown name gets the generic entry's."""
    key = _normalize(name)
    key = _ALIASES.get(key, key)
    known = PROVIDERS.get(key)
    if known is not None:
        return known
    shown = key[:64] or "(empty)"
    return dataclasses.replace(
        GENERIC,
        name=shown,
        notes=f"Unknown provider {shown!r}: treated as a generic OpenAI-compatible endpoint "
        "(tool calling and at least 8k tokens of context assumed). Set provider to a known "
        f"name if this is wrong; known: {', '.join(sorted(PROVIDERS))}.",
    )
