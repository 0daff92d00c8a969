"""The raw window's start: fixed between turns, moved in steps, so a prompt's history stays
an exact prefix of the next turn's (what a provider's prompt cache keeps)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bot.vocabulary import RawMessage

# Once the window passes its count or its tokens, its start jumps ahead so that it holds
# at most this share of each: a third of the window is read again once in a while,
# rather than all of it on every turn.
KEEP_AFTER_STEP = 2 / 3


@dataclass(frozen=True, slots=True)
class WindowLimits:
    """How much raw history a prompt shows: messages, tokens, and the tail always kept."""

    messages: int
    tokens: int
    min_tail: int


def window_start(
    messages: Sequence[RawMessage],
    *,
    first_uncovered: int,
    previous: int | None,
    limits: WindowLimits,
    cost: Callable[[RawMessage], int],
) -> int:
    """The index in ``messages`` (oldest first) at which the shown window starts.

    ``first_uncovered`` is where the memory stops covering (0 without memory);
    ``previous`` the message id the window started at last turn (None: none yet).
    The start stays where it was unless a summary now covers more than ``min_tail`` of
    the messages after it, or the window outgrew its limits; at least ``min_tail``
    messages (and always the last one) are shown.
    """
    count = len(messages)
    if not count:
        return 0
    tail = max(limits.min_tail, 1)
    start = min(first_uncovered, max(count - tail, 0))
    if previous is not None:
        # The first message at or after the previous start (it may have been deleted).
        kept = next((i for i, m in enumerate(messages) if m.message_id >= previous), count - 1)
        if first_uncovered - kept <= tail:
            start = min(kept, max(count - tail, 0))
    # A first window (no previous start) is as long as the limits allow.
    return _stepped(
        messages, start, limits, cost, keep=1.0 if previous is None else KEEP_AFTER_STEP
    )


def _stepped(
    messages: Sequence[RawMessage],
    start: int,
    limits: WindowLimits,
    cost: Callable[[RawMessage], int],
    *,
    keep: float,
) -> int:
    """``start``, or past it when the window from there passes a limit: then the first
    index from which the window holds at most ``keep`` of each limit."""
    count = len(messages)
    costs = [cost(message) for message in messages[start:]]
    if count - start <= limits.messages and sum(costs) <= limits.tokens:
        return start
    keep_messages = max(int(limits.messages * keep), 1)
    keep_tokens = int(limits.tokens * keep)
    index, used = count, 0
    # Newest first, while both stay within the kept share; the last message always stays.
    for offset, message_cost in enumerate(reversed(costs)):
        if offset and (offset + 1 > keep_messages or used + message_cost > keep_tokens):
            break
        used += message_cost
        index = count - offset - 1
    return index
