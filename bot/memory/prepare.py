"""A turn's start: its state, its channel's memory, the window it answers and the input of
its prompt (with other channels' memories), on a warm cache without a query."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import replace

from bot.memory.stm import MemoryState, Reader, answering, with_trigger
from bot.memory.turn import (
    FactRecall,
    LabelFor,
    OtherChannel,
    PreparedTurn,
    PromptInput,
    TurnStart,
    TurnState,
    count_new_messages,
)
from bot.vocabulary import Marker, MemoryUnavailable, RawMessage, ScopeKey, StmEntry

# Other channels' memories looked at per one shown (see prompt._other_notes).
CANDIDATES_PER_SLOT = 4


class TurnPreparer:
    """Prepares turns: everything a turn needs before calling the model."""

    def __init__(self, state: MemoryState, reader: Reader) -> None:
        self._state = state
        self._reader = reader

    async def prepare(self, start: TurnStart, recall: FactRecall | None = None) -> PreparedTurn:
        """The turn for ``start``, with the long-term facts ``recall`` finds. With the
        database down the bot still answers, from whatever is cached, and refuses STM
        writes this turn (it could not know the stored version to supersede)."""
        state, reader = self._state, self._reader
        guild_id, channel_id = start.guild_id, start.channel_id
        parent_channel_id, source_message_id = start.parent_channel_id, start.source_message_id
        # The turn starts before its long-term recall: a /forget-me that deletes the facts
        # it shows refuses what the model writes from them, in every process.
        started_at = state.clock.now()
        opted_in = False
        if guild_id is None:
            with contextlib.suppress(MemoryUnavailable):  # not shown, then
                opted_in = await state.guilds.opt_in(start.user_id)
        notes = await recall.notes(start, opted_in) if recall is not None else ()
        storage_ok = True
        try:
            config = await state.guilds.config(guild_id)
        except MemoryUnavailable:
            config, storage_ok = replace(state.defaults, guild_id=guild_id), False
        turn = TurnState(
            channel_id=channel_id,
            user_id=start.user_id,
            guild_id=guild_id,
            config=config,
            epoch=state.epoch(channel_id),
            started_at=started_at,
            parent_channel_id=parent_channel_id,
            source_message_id=source_message_id,
            explicit_long_term_intent=start.explicit_long_term_intent,
            provider_allows_stm=start.provider_allows_stm,
            model=start.model,
        )
        try:
            channel_key = turn.channel_key
            # Warm every key a write would touch now, so an outage later in the turn
            # cannot leave a write without its current version (read together: one batch).
            keys = [channel_key, *(key for key in turn.write_keys if key != channel_key)]
            entry = (await reader.entries(keys, parent_channel_id=parent_channel_id))[0]
        except MemoryUnavailable:
            entry, storage_ok = state.fresh(turn.channel_key, parent_channel_id), False
        turn.storage_available = storage_ok
        window = answering(
            await reader.recent_messages(
                channel_id, source_message_id=source_message_id, database_up=storage_ok
            ),
            source_message_id,
            start.bot_user_id,
        )
        if window:
            turn.marker = Marker.of(window[-1])
        turn.marker_at_start = entry.marker
        turn.read_authors.update({m.author_id for m in window if not m.is_bot})
        turn.memory_contributors.update(entry.contributor_ids)
        parent = None
        try:
            if start.label_for is not None:
                parent = await self._parent_channel(turn, start.label_for)
                # More than are shown: those the message relates to are picked from them.
                others = await self.other_channels(
                    turn,
                    start.label_for,
                    limit=state.settings.stm.other_channels * CANDIDATES_PER_SLOT,
                )
            else:
                others = []
        except MemoryUnavailable:
            others = []
        stm = state.settings.stm
        nudge = None
        if turn.stm_block_reason() is None and entry.turns_since_refresh >= config.refresh_cadence:
            nudge = count_new_messages(window, entry.marker)
        now = state.clock.now()
        # The starter was said in the parent channel: shown only where the parent may be.
        parent_hidden = start.label_for is not None and parent is None
        replied_to, starter = self._context_messages(start, turn, parent_hidden=parent_hidden)
        unanswered = False
        if start.trigger is not None:
            window = await self._with_trigger(start, turn.epoch, window)
            # Without its message the conversation ends with an earlier one (answered
            # again, as if it were this member's) or with nothing at all.
            unanswered = all(m.message_id != source_message_id for m in window)
        prompt = PromptInput(
            now=now,
            config=config,
            bot_user_id=start.bot_user_id,
            entry=entry,
            window=window,
            others=others,
            raw_window=stm.raw_window,
            min_raw_tail=stm.min_raw_tail,
            max_others=stm.other_channels,
            nudge_new_messages=nudge,
            long_term_notes=notes,
            is_dm=guild_id is None,
            stm_tool_offered=turn.stm_block_reason() is None,
            replied_to=replied_to,
            thread_starter=starter,
            parent=parent,
            content=start.content,
            raw_window_tokens=stm.raw_window_tokens,
            others_tokens=stm.other_channels_tokens,
        )
        return PreparedTurn(turn, prompt, entry, opted_in, unanswered)

    def _context_messages(
        self, start: TurnStart, turn: TurnState, *, parent_hidden: bool
    ) -> tuple[tuple[RawMessage, ...], RawMessage | None]:
        """The replied-to chain and the thread's starter message, without those deleted
        since, and (the chain) none when a /refresh or /forget-me wiped the channel since
        the message arrived: the chain was read before and could hold what it wiped."""
        deleted = self._state.windows.was_deleted
        replied_to: tuple[RawMessage, ...] = ()
        if start.trigger_epoch is None or start.trigger_epoch == turn.epoch:
            kept: list[RawMessage] = []
            for message in start.replied_to:
                if deleted(message.message_id):
                    break  # what it replied to was reached through it
                kept.append(message)
            replied_to = tuple(kept)
        starter = start.thread_starter
        if starter is not None and (parent_hidden or deleted(starter.message_id)):
            starter = None
        shown = [*replied_to, *([starter] if starter is not None else [])]
        # A memory written this turn may hold their words: /forget-me must find it.
        turn.read_authors.update(m.author_id for m in shown if not m.is_bot)
        return replied_to, starter

    async def _parent_channel(self, turn: TurnState, label_for: LabelFor) -> OtherChannel | None:
        """In a thread: its parent channel's memory and recent messages, read-only, when
        the thread may show them (``label_for``: the same privacy rule as other channels)."""
        parent_id = turn.parent_channel_id
        if turn.guild_id is None or parent_id is None or self._state.ledger.deaf:
            return None
        entry = await self._reader.entry(ScopeKey.server(turn.guild_id, parent_id))
        label = label_for(entry)
        if label is None:
            return None
        window = self._state.windows.get(parent_id)
        parent = OtherChannel(label, entry if entry.has_content else None, window, turn.config)
        turn.shown.append((entry, parent.shown_raw(turn.config, distilled=entry.has_content)))
        return parent

    async def _with_trigger(
        self, start: TurnStart, epoch: int, window: Sequence[RawMessage]
    ) -> Sequence[RawMessage]:
        """The window ending with the message being answered, unless it was deleted or
        wiped since it arrived: by a /refresh or /forget-me here (the epoch moved), or one
        recorded in the database (made elsewhere, or missed while deaf: the window drops
        what those wiped, but the trigger is carried beside it). One query, only when the
        message scrolled out of the window (rare); in doubt it is left out."""
        trigger = start.trigger
        if trigger is not None and all(m.message_id != trigger.message_id for m in window):
            if start.trigger_epoch != epoch:
                trigger = None
            else:
                try:
                    wiped = await self._reader.wiped_history(start.channel_id, [trigger])
                except MemoryUnavailable:
                    trigger = None
                else:
                    trigger = None if wiped(trigger) else trigger
        return with_trigger(window, trigger, self._state.windows.was_deleted)

    async def other_channels(
        self, turn: TurnState, label_for: LabelFor, *, limit: int | None = None
    ) -> list[OtherChannel]:
        """The other channels' memories ``turn`` may show (``label_for`` names those it
        may; None hides one), at most ``limit`` (default ``stm.other_channels``), most
        recently updated first: read from the cache's index of channels that hold a
        memory, so a turn looks at a few entries however many channels the server has.
        Which of these candidates the prompt keeps is the prompt's choice
        (``bot/memory/turn/prompt.py``)."""
        state = self._state
        limit = state.settings.stm.other_channels if limit is None else limit
        if limit <= 0 or state.ledger.deaf:
            # Deaf, a memory wiped or forgotten elsewhere could still be cached here: other
            # channels are not shown until the listener is back.
            return []
        candidates: Iterator[StmEntry]
        if turn.guild_id is not None:
            await self._reader.hydrate_guild_once(turn.guild_id)
            candidates = state.cache.server_entries_of_guild(turn.guild_id)
        else:
            if not await state.guilds.opt_in(turn.user_id):
                return []
            await self._reader.hydrate_user_once(turn.user_id)
            candidates = state.cache.memories_of_user(turn.user_id)
        # Chosen without awaiting: the index is walked as it stands.
        chosen: list[tuple[StmEntry, str]] = []
        for candidate in candidates:
            if candidate.key.channel_id in (turn.channel_id, turn.parent_channel_id):
                continue
            label = label_for(candidate)
            if label is not None:
                chosen.append((candidate, label))
                if len(chosen) == limit:
                    break
        others: list[OtherChannel] = []
        for candidate, label in chosen:
            config = turn.config
            if candidate.key.guild_id != turn.guild_id:  # a DM shows servers' memories
                config = await state.guilds.config(candidate.key.guild_id)
            other = OtherChannel(
                label, candidate, state.windows.get(candidate.key.channel_id), config
            )
            others.append(other)
            # Whose words the prompt shows (gathered on a write only: turns are many).
            turn.shown.append((candidate, other.shown_raw(config, distilled=True)))
        return others
