"""A turn as memory sees it: what it asks for (TurnStart), what it gets (PreparedTurn), and
what the guards of SPEC §3 look at while it runs (TurnState)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from bot.memory.longterm import ChannelFilter
from bot.memory.turn.prompt import PromptInput
from bot.vocabulary import GuildConfig, Marker, RawMessage, ScopeKey, StmEntry

_turn_ids = itertools.count(1)

REASON_DISABLED = "short-term memory is disabled in this server"
REASON_EXPLICIT_INTENT = (
    "the user asked for long-term memory this turn; use the long-term memory tools instead"
)
REASON_PROVIDER = "the current model provider cannot maintain short-term memory"
REASON_ALREADY_UPDATED = "short-term memory was already updated this turn (at most once per turn)"
REASON_STORAGE = "memory storage is unavailable right now; nothing can be saved this turn"
REASON_CLEARED = (
    "the memory was cleared during this turn (/refresh, or /forget-me of someone in it); "
    "nothing was saved"
)
REASON_CHANGED = "the memory changed meanwhile; nothing was saved"


@dataclass(slots=True)
class TurnState:
    """One bot turn in one channel. The tool loop and the memory service share it."""

    channel_id: int
    user_id: int
    guild_id: int | None
    config: GuildConfig
    epoch: int
    # When the turn started (the service clock): a /refresh after this, in any process,
    # refuses the turn's write (the in-process epoch covers this process only).
    started_at: datetime | None = None
    parent_channel_id: int | None = None
    source_message_id: int | None = None
    # The newest message the model sees this turn: a summary written now covers it.
    marker: Marker | None = None
    # The memory's marker when the turn began, and whether the model was shown only part
    # of the messages after it (the oldest cut to fit the context): then its write may
    # not keep a marker moved meanwhile (a summary), which would claim the cut messages.
    marker_at_start: Marker | None = None
    history_trimmed: bool = False
    explicit_long_term_intent: bool = False
    provider_allows_stm: bool = True
    model: str | None = None
    storage_available: bool = True
    stm_updated: bool = False
    # What the prompt showed from other channels: their memories and raw messages. A
    # memory written this turn may hold those words, so /forget-me must find it from
    # their authors too (see shown_contributors).
    shown: list[tuple[StmEntry, Sequence[RawMessage]]] = field(default_factory=list)
    # Human authors of this channel's raw messages the model (or the summarizer) read: a
    # memory written now may hold their words even once those messages left the window
    # (deleted, or pushed out by newer ones), so /forget-me must find it from them too.
    read_authors: set[int] = field(default_factory=set)
    # Contributors of this channel's memory as the prompt showed it: a memory written now
    # is built on it, so it holds their words too, even when the entry the write reads
    # again no longer names them (evicted, and its row deleted by a /forget-me this
    # process did not hear of: rows read back then come back empty).
    memory_contributors: set[int] = field(default_factory=set)
    turn_id: int = field(default_factory=lambda: next(_turn_ids))

    def shown_contributors(self) -> set[int]:
        """Whose words the prompt showed from other channels: the contributors of their
        memories and the human authors of their raw messages."""
        ids: set[int] = set()
        for entry, messages in self.shown:
            ids.update(entry.contributor_ids)
            ids.update(m.author_id for m in messages if not m.is_bot)
        return ids

    @property
    def is_dm(self) -> bool:
        return self.guild_id is None

    @property
    def channel_key(self) -> ScopeKey:
        """The key whose memory this channel's prompt shows."""
        if self.guild_id is None:
            return ScopeKey.user(self.user_id, self.channel_id)
        return ScopeKey.server(self.guild_id, self.channel_id)

    @property
    def write_keys(self) -> tuple[ScopeKey, ...]:
        """Keys one STM update writes: server and user in a guild, user in a DM."""
        if self.guild_id is None:
            return (ScopeKey.user(self.user_id, self.channel_id),)
        return (
            ScopeKey.server(self.guild_id, self.channel_id),
            ScopeKey.user(self.user_id, self.channel_id, self.guild_id),
        )

    def stm_block_reason(self) -> str | None:
        """Why the STM tool is neither offered nor accepted this turn (``None``: allowed)."""
        if not self.config.stm_enabled:
            return REASON_DISABLED
        if self.explicit_long_term_intent:
            return REASON_EXPLICIT_INTENT
        if not self.provider_allows_stm:
            return REASON_PROVIDER
        if self.stm_updated:
            return REASON_ALREADY_UPDATED
        if not self.storage_available:
            return REASON_STORAGE
        return None


# Returns the label to show for another channel's memory, or None when it may not be
# shown here (more private than the current channel, or no longer visible).
LabelFor = Callable[[StmEntry], str | None]


# Not frozen (as PromptInput): a frozen dataclass is several times slower to build, and
# every turn builds one. Nothing changes it once built. Keyword-only, so the conversation's
# request can extend it with fields of its own (see ``conversation.TurnRequest``).
@dataclass(slots=True, kw_only=True)
class TurnStart:
    """What memory needs to prepare a turn: where, for whom, answering which message."""

    channel_id: int
    user_id: int
    guild_id: int | None = None
    bot_user_id: int
    parent_channel_id: int | None = None
    source_message_id: int | None = None
    # What the message being answered says: the long-term facts recalled are those most
    # relevant to it.
    content: str = ""
    # The message being answered as it arrived, and the channel's epoch then: shown even
    # when it scrolled out of the raw window, unless deleted or wiped since. Set, the turn
    # answers nothing without it (see ``PreparedTurn.unanswered``).
    trigger: RawMessage | None = None
    trigger_epoch: int | None = None
    # What the message being answered replies to, the direct reference first, then what
    # that one replied to (already checked against the wipes recorded when it was read):
    # dropped when the channel is wiped after ``trigger_epoch``.
    replied_to: tuple[RawMessage, ...] = ()
    # In a thread: the message it was started from (in its parent channel).
    thread_starter: RawMessage | None = None
    label_for: LabelFor | None = None
    # Whether something said in another channel may be shown here (None: anything); the
    # long-term facts recalled are filtered by it too.
    may_show: ChannelFilter | None = None
    explicit_long_term_intent: bool = False
    provider_allows_stm: bool = True
    model: str | None = None


@dataclass(slots=True)
class PreparedTurn:
    """A turn ready for the model: its state, its prompt input and its channel's memory."""

    turn: TurnState
    prompt: PromptInput
    entry: StmEntry
    # Whether the user lets this DM show their server memories (False in a server).
    opted_in: bool = False
    # The message being answered was deleted or wiped before the model was asked.
    unanswered: bool = False
