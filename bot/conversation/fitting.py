"""What of a turn's prompt fits a provider's context: the notes, then the newest history."""

from __future__ import annotations

from collections.abc import Callable

from bot.memory import AssembledPrompt
from bot.vocabulary import prompt_chars

__all__ = ["TOOL_SCHEMA_TOKENS", "context_chars", "context_tokens", "fit_history", "fit_notes"]

# Room kept for tool schemas.
TOOL_SCHEMA_TOKENS = 1_000


def context_chars(context_tokens: int, reply_tokens: int) -> int:
    """Characters of prompt a provider's context window leaves room for."""
    return prompt_chars(context_tokens, reply_tokens, TOOL_SCHEMA_TOKENS)


def context_tokens(context: int, reply_tokens: int) -> int:
    """Tokens of prompt a provider's context window leaves room for."""
    return max(0, context - reply_tokens - TOOL_SCHEMA_TOKENS)


def fit_notes(
    prompt: AssembledPrompt, *, budget: int, cost: Callable[[str], int] = len
) -> tuple[list[str], list[str]]:
    """The system notes whose ``cost`` fits in ``budget``, leaving out optional ones (other
    channels, then long-term facts; see :class:`AssembledPrompt`) the least useful first:
    those that stay from turn to turn, and this turn's."""
    notes: list[str | None] = list(prompt.system_notes)
    costs = [cost(note) for note in prompt.system_notes]
    used = sum(costs)
    for index in prompt.optional:
        if used <= budget:
            break
        used -= costs[index]
        notes[index] = None
    late_from = len(notes) if prompt.late_from is None else prompt.late_from
    return (
        [note for note in notes[:late_from] if note is not None],
        [note for note in notes[late_from:] if note is not None],
    )


def fit_history(
    history: list[dict[str, str]], *, budget: int, cost: Callable[[str], int] = len
) -> list[dict[str, str]]:
    """The newest messages whose ``cost`` fits in ``budget`` (always at least the last one,
    the message being answered): small-context providers get a shorter history, not an
    error."""
    kept: list[dict[str, str]] = []
    used = 0
    for message in reversed(history):
        used += cost(message["content"])
        if kept and used > budget:
            break
        kept.append(message)
    kept.reverse()
    return kept
