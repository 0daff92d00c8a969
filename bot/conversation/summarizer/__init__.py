"""The summarizer (seed 000, SPEC §4): fold a channel's new messages into its memory.

run       the runs: batches within the context, all or nothing, one at a time per channel
prompt    one call's request as pure functions: prompt, dated lines, batches, answer parsing
outcome   what a run reports: its status, and why it stored nothing
checks    quality gates on an answer before anything is stored
facts     the durable, dated facts of the messages a run read, into long-term memory
triggers  when a run follows a turn: the cadence, a tool-less provider, an ignored nudge
capture   memory built while nobody addresses the bot, within a daily token budget
"""

from bot.conversation.summarizer.capture import Capture
from bot.conversation.summarizer.checks import SummaryRejected, checked_summary
from bot.conversation.summarizer.facts import answer_facts
from bot.conversation.summarizer.outcome import (
    CATEGORIES_CHANGED_MEANWHILE,
    CHANGED_MEANWHILE,
    CLEARED_MEANWHILE,
    CUT_OFF,
    EMPTY_ANSWER,
    INVALID_JSON,
    NO_ROOM,
    TOOL_CALL_ANSWER,
    SummaryOutcome,
    SummaryStatus,
)
from bot.conversation.summarizer.prompt import (
    CUT_MARK,
    MAX_BATCHES,
    build_messages,
    plan_batches,
    request_chars,
)
from bot.conversation.summarizer.run import REPLY_SHARE, Summarizer
from bot.conversation.summarizer.triggers import (
    auto_summarize_reason,
    ignored_nudges,
    should_auto_summarize,
)

__all__ = [
    "CATEGORIES_CHANGED_MEANWHILE",
    "CHANGED_MEANWHILE",
    "CLEARED_MEANWHILE",
    "CUT_MARK",
    "CUT_OFF",
    "EMPTY_ANSWER",
    "INVALID_JSON",
    "MAX_BATCHES",
    "NO_ROOM",
    "REPLY_SHARE",
    "TOOL_CALL_ANSWER",
    "Capture",
    "Summarizer",
    "SummaryOutcome",
    "SummaryRejected",
    "SummaryStatus",
    "answer_facts",
    "auto_summarize_reason",
    "build_messages",
    "checked_summary",
    "ignored_nudges",
    "plan_batches",
    "request_chars",
    "should_auto_summarize",
]
