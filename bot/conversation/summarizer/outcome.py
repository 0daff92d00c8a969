"""What a summarizer run reports: its status, its outcome, and why it stored nothing, in
words safe to show whoever ran it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "CATEGORIES_CHANGED_MEANWHILE",
    "CHANGED_MEANWHILE",
    "CLEARED_MEANWHILE",
    "CUT_OFF",
    "CUT_OFF_BY_CONTEXT",
    "EMPTY_ANSWER",
    "INVALID_JSON",
    "NO_CATEGORY_VALUES",
    "NO_ROOM",
    "TOOL_CALL_ANSWER",
    "SummaryOutcome",
    "SummaryStatus",
    "Unusable",
]

SummaryStatus = Literal["updated", "nothing_new", "busy", "failed", "empty", "disabled"]

EMPTY_ANSWER = "the model's answer was empty"
# Shown to whoever ran /stm summarize, often a moderator: the setting to raise
# (llm.max_reply_tokens) is only named in the log, for the operator.
CUT_OFF = (
    "the model's answer was cut off at its length limit (ask the bot's operator to allow "
    "longer answers)"
)
CUT_OFF_BY_CONTEXT = (
    "the model's answer was cut off at its length limit, which the provider's context "
    "size keeps small"
)
NO_ROOM = "the memory leaves no room for new messages in the provider's context"
TOOL_CALL_ANSWER = "the model answered with a tool call instead of a summary"
INVALID_JSON = "the model did not answer with the JSON object asked for"
NO_CATEGORY_VALUES = "the model's answer had no usable category values"
CLEARED_MEANWHILE = "the channel's memory was cleared while the summary was being made"
CHANGED_MEANWHILE = "the memory was updated by someone else while the summary was being made"
CATEGORIES_CHANGED_MEANWHILE = (
    "the server's memory categories changed while the summary was being made"
)


@dataclass(frozen=True, slots=True)
class SummaryOutcome:
    """What one run did.

    ``status``: ``updated`` (written; ``pending_sync`` when it went to the spool),
    ``nothing_new`` (no model call made), ``busy`` (another run holds the channel),
    ``disabled`` (short-term memory is off in the guild: no model call made, or turned
    off while the model was answering and nothing stored), ``failed``
    (model, storage or write refused: ``error`` says which, in words safe to show a user)
    or ``empty`` (the model answered nothing usable). Only ``updated`` changed the memory.
    ``new_messages`` counts the messages read (and now covered, when updated); ``chars``
    is the size of the memory written; ``calls`` the requests sent to the model (the
    ``openai`` client's own retries aside).
    """

    status: SummaryStatus
    new_messages: int = 0
    chars: int = 0
    error: str | None = None
    calls: int = 0
    skipped: int = 0  # the oldest new messages, not read: beyond MAX_BATCHES batches
    pending_sync: bool = False
    # Tokens the run's calls took, estimated from their text (capture's daily budget).
    tokens: int = 0
    facts: int = 0  # long-term facts distilled from the messages read, stored or merged

    @property
    def updated(self) -> bool:
        return self.status == "updated"


class Unusable(Exception):
    """The model answered, but nothing that can be stored."""

    def __init__(self, status: Literal["failed", "empty"], message: str) -> None:
        super().__init__(message)
        self.status: Literal["failed", "empty"] = status
        self.message = message
