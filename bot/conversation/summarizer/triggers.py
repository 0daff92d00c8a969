"""When the summarizer runs after a turn: the cadence, a tool-less provider, an ignored nudge."""

from __future__ import annotations

from bot.config import Settings
from bot.vocabulary import GuildConfig, ProviderCaps, StmEntry

__all__ = ["auto_summarize_reason", "ignored_nudges", "should_auto_summarize"]


def ignored_nudges(entry: StmEntry, config: GuildConfig) -> int:
    """How many finished turns carried the update nudge without the model acting on it.

    The nudge is in a turn's prompt when ``turns_since_refresh`` had reached the cadence
    as the turn started, and every turn that does not update the memory adds one; so after
    a turn that many nudged turns went by: ``turns_since_refresh - refresh_cadence``.
    """
    return max(0, entry.turns_since_refresh - config.refresh_cadence)


def auto_summarize_reason(
    entry: StmEntry,
    config: GuildConfig,
    caps: ProviderCaps,
    ignored_nudges: int,
    settings: Settings,
) -> str | None:
    """Why the summarizer should run after a turn (``None``: it should not).

    Only when short-term memory is on and the cadence is due (``turns_since_refresh >=
    refresh_cadence``), and then either ``"tool-less provider"`` (the provider cannot
    maintain the memory through the tool: no tool calling, or too little context — the
    STM tool is never offered there) or, opted in with ``stm.summarize_when_ignored_turns
    = N > 0``, ``"nudge ignored"`` once the model has ignored the nudge for N turns.
    """
    if not config.stm_enabled or entry.turns_since_refresh < config.refresh_cadence:
        return None
    if not caps.stm_allowed:
        return "tool-less provider"
    threshold = settings.stm.summarize_when_ignored_turns
    if threshold > 0 and ignored_nudges >= threshold:
        return "nudge ignored"
    return None


def should_auto_summarize(
    entry: StmEntry,
    config: GuildConfig,
    caps: ProviderCaps,
    ignored_nudges: int,
    settings: Settings,
) -> bool:
    """Whether to run the summarizer after a turn; see :func:`auto_summarize_reason`."""
    return auto_summarize_reason(entry, config, caps, ignored_nudges, settings) is not None
