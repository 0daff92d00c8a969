"""Long-term memory: facts, where they may be shown, and when a turn asks for them.

facts            LongTermService: storing, recalling, listing and deleting facts
captured         facts capture distilled from a channel: merged, superseded, dated
holders          which users and channels hold facts at all (asked in batches)
ranking          recall's full-text and vector rankings fused, within a budget
results          what the service answers (stored, forgotten, a page, refused)
visibility       where a fact may be shown (never somewhere more public)
near_duplicates  whether a fact to remember restates, and replaces, a stored one
intent           whether a message explicitly asks to remember or forget
"""

from bot.memory.longterm.captured import CaptureStored, Distilled
from bot.memory.longterm.facts import SEARCH_LIMIT, FactPage, FactRefused, LongTermService
from bot.memory.longterm.intent import explicit_long_term_intent
from bot.memory.longterm.ranking import Recalled
from bot.memory.longterm.visibility import ChannelFilter, ChannelView, visible_here

__all__ = [
    "SEARCH_LIMIT",
    "CaptureStored",
    "ChannelFilter",
    "ChannelView",
    "Distilled",
    "FactPage",
    "FactRefused",
    "LongTermService",
    "Recalled",
    "explicit_long_term_intent",
    "visible_here",
]
