"""Failed model calls: the notices shown instead of an answer, and what each error means."""

from __future__ import annotations

import logging
import re
from typing import Literal

import openai

log = logging.getLogger(__name__)

TIMEOUT_MESSAGE = "The model took too long to answer. Please try again in a moment."
RATE_LIMIT_MESSAGE = "The model is busy right now (rate limited). Please try again in a minute."
UNAVAILABLE_MESSAGE = "I can't reach the language model right now. Please try again later."
CONFIGURATION_MESSAGE = (
    "I can't use the language model because of a configuration problem. "
    "Please contact the bot operator."
)
# A streamed answer that broke off: shown after what was sent (and alone if nothing was).
CUT_MESSAGE = "(The answer was cut off: the model stopped responding. Please try again.)"
# When the loop stopped early and even the final no-tools call failed.
FALLBACK_REPLY = "Sorry, I couldn't finish my answer this time. Please try again."

# What the bot says instead of an answer: never part of the conversation the model sees
# next (it would read its own outage notice as something it said, and may memorise it).
FRIENDLY_ERRORS = frozenset(
    (
        TIMEOUT_MESSAGE,
        RATE_LIMIT_MESSAGE,
        UNAVAILABLE_MESSAGE,
        CONFIGURATION_MESSAGE,
        FALLBACK_REPLY,
        CUT_MESSAGE,
    )
)

UnavailableKind = Literal["timeout", "rate_limited", "unavailable", "configuration"]


class LlmUnavailable(Exception):
    """The model could not be used for this turn, after the client's own retries."""

    # `user_message` is safe to post in Discord (no secrets, URLs or response bodies);
    # `status` is the HTTP status when there was one.
    def __init__(
        self, kind: UnavailableKind, user_message: str, *, status: int | None = None
    ) -> None:
        detail = f" (HTTP {status})" if status is not None else ""
        super().__init__(f"language model unavailable: {kind}{detail}")
        self.kind: UnavailableKind = kind
        self.user_message = user_message
        self.status = status


class ToolsRefused(Exception):
    """The server refused a request for offering tools: the model cannot call them."""


class ToolCallFailed(LlmUnavailable):
    """The server refused the model's tool call: it failed the schema (Groq's tool_use_failed)."""

    # A failed tool call of this turn, not a sign that the model cannot take tools; where
    # it is not handled as such, it is the ordinary unavailable notice.
    def __init__(self) -> None:
        super().__init__("unavailable", UNAVAILABLE_MESSAGE, status=400)


class ImagesRefused(LlmUnavailable):
    """The server refused the request for an image in it (a format or a file it cannot read)."""

    # Where the turn sent no image, or does not retry without them, it is the ordinary
    # unavailable notice.
    def __init__(self, status: int) -> None:
        super().__init__("unavailable", UNAVAILABLE_MESSAGE, status=status)


class HistoryToolsRefused(Exception):
    """The server refused a request whose tools are only there for the history's calls."""


# Statuses with which servers refuse what a request asks for (400; OpenRouter's 404 when
# no provider takes it; 422 from some gateways' validation), rather than the caller.
_REFUSAL_STATUSES = frozenset((400, 404, 422))

# What servers say when the model cannot take `tools` at all: Ollama, vLLM without a tool
# parser, llama.cpp without --jinja, OpenRouter.  Other bad requests that mention tools (a
# generation's schema check, a malformed history) must not make the process tool-less.
_TOOL_WORDS = r"(?:tools?|tool[ _-]?(?:use|calls?|calling)|function[ _-]?call(?:s|ing)?)"
_TOOLS_REFUSED = re.compile(
    "|".join(
        (
            rf"\bdoes(?: not|n't) support {_TOOL_WORDS}\b",
            rf"\b{_TOOL_WORDS} (?:is|are) not supported\b",
            r"\btool[ _-]?choice\b[^.\n]{0,80}?\bnot supported\b",
            r"--enable-auto-tool-choice",
            r"\btools param requires --jinja\b",
            # OpenRouter, as a 404, for a model none of its providers runs with tools.
            r"\bno endpoints found that support tool use\b",
        )
    ),
    re.IGNORECASE,
)
# OpenAI's invalid_image_format / image_parse_error, "Invalid image", "unsupported image",
# vLLM's and Ollama's failures to load an image_url part.
_IMAGE_WORDS = re.compile(r"\bimages?\b|image_url|image_parse|invalid_image", re.IGNORECASE)
_TOOL_CHOICE = re.compile(r"\btool[ _-]?choice\b", re.IGNORECASE)
# Groq: code "tool_use_failed", "tool call validation failed: …", "Failed to call a function".
_FAILED_GENERATION = re.compile(
    r"\btool_use_failed\b|\btool call validation failed\b|\bfailed to call a function\b",
    re.IGNORECASE,
)


def refusal(
    exc: openai.APIStatusError, *, tools: bool, tool_choice: object, history_only: bool
) -> Exception:
    """The exception a refused request raises, by what the server refused."""
    # In this order: one generation's tool call (also when it names tool choice: Groq's
    # "Tool choice is none, but model called a tool"); `tool_choice`; tools; tools only
    # there for the history; else unavailable (a plain 404 is a wrong model name or URL).
    if exc.status_code not in _REFUSAL_STATUSES:
        return unavailable(exc)
    text = _error_text(exc)
    if exc.status_code == 400 and _failed_generation(exc):
        log.warning(
            "LLM refused the model's tool call (HTTP 400 tool_use_failed)%s",
            f" request_id={exc.request_id}" if exc.request_id else "",
        )
        return ToolCallFailed()
    if exc.status_code == 400 and _IMAGE_WORDS.search(f"{exc.code or ''} {text}"):
        log.warning("LLM refused an image of the request (HTTP 400)")
        return ImagesRefused(exc.status_code)
    if tool_choice is not None and _TOOL_CHOICE.search(text):
        return HistoryToolsRefused()
    if tools and _TOOLS_REFUSED.search(text):
        return ToolsRefused()
    if history_only:
        log.warning("LLM refused a follow-up defining the tools called (HTTP %d)", exc.status_code)
        return HistoryToolsRefused()
    return unavailable(exc)


def unavailable(exc: openai.OpenAIError) -> LlmUnavailable:
    """The friendly :class:`LlmUnavailable` for a client error, logged without its body."""
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    request_id = getattr(exc, "request_id", None)
    log.warning(
        "LLM request failed: %s%s%s",
        type(exc).__name__,
        f" (HTTP {status})" if status is not None else "",
        f" request_id={request_id}" if request_id else "",
    )
    if isinstance(exc, openai.APITimeoutError):
        return LlmUnavailable("timeout", TIMEOUT_MESSAGE)
    if isinstance(exc, openai.RateLimitError) or status == 429:
        return LlmUnavailable("rate_limited", RATE_LIMIT_MESSAGE, status=status)
    if status in (401, 403, 404):
        # Bad key, no access, or a wrong model name / base URL: the operator must act.
        return LlmUnavailable("configuration", CONFIGURATION_MESSAGE, status=status)
    return LlmUnavailable("unavailable", UNAVAILABLE_MESSAGE, status=status)


def _error_text(exc: openai.APIStatusError) -> str:
    return str(getattr(exc, "message", "") or exc)


def _failed_generation(exc: openai.APIStatusError) -> bool:
    return exc.code == "tool_use_failed" or bool(_FAILED_GENERATION.search(_error_text(exc)))
