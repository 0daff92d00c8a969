"""The summarizer (seed 000, SPEC §4): fold a channel's new messages into its memory.

The gatherer's material (the messages newer than the memory's marker, as ``Name: text``
lines) and the current memory go to a separate model call built from the seed's
template ("Please integrate the following new information into the existing summary",
``[LATEST_MEMORIES]``, ``[CHAT_SUMMARY]``). The answer is written through the normal
write path (:meth:`MemoryService.update_stm`) with origin ``summarizer``, and the marker
moves to the last message gathered.

**Batching.** One model call reads at most ``stm.max_turns_to_pull`` messages (the
gatherer's bound, default 20), and no more than fits in the provider's context. When more
are new, they are folded in oldest first, one batch per call, each call integrating its
batch into the running summary the previous call produced; the memory is written once, at
the end, with the marker on the last message read. (A later batch that no longer fits,
because the JSON of the categories grew, reads only the messages that fit whole; the run
stops there and the rest stay new for the next one.) So 30 short new messages
with the defaults take two calls (20 + 10) and the marker lands on the 30th. At most
:data:`~bot.conversation.summarizer.prompt.MAX_BATCHES` calls are made per run: new messages that
do not fit in that many batches are not read, the oldest first (the gatherer's own rule:
the newest are read); the outcome counts them as ``skipped``. The batches are planned, and
each call's prompt built and its answer parsed, in :mod:`bot.conversation.summarizer.prompt`.

**Context.** Every request fits the provider's context (``context_tokens`` of
:func:`bot.vocabulary.providers.capabilities`, at :data:`~bot.vocabulary.providers.CHARS_PER_TOKEN`
characters a token, the chat turn's estimate: :func:`~bot.vocabulary.providers.prompt_chars`):
the answer may use at most a third of it (:data:`REPLY_SHARE`), the instructions and the
memory come next, and the new messages get what is left. A single message longer than
that room is cut (marked ``[…]``), not sent whole. Between batches the running memory is
sanitized as a write would store it (so it is never longer than a stored value). A
memory so large that no room is left fails the run before any model call.

**All or nothing.** A failed call (after the ``openai`` client's own retries), an empty
or unusable answer in any batch (a tool call instead of a summary is unusable too), a
``/refresh`` of the channel meanwhile (the turn's epoch is captured before the first
call), another update of the memory meanwhile, short-term memory turned off or the
server's categories changed meanwhile (in any process: the write re-checks the current
settings) leaves the summary and the marker exactly as they were; the outcome says why.

**One at a time.** Never two runs for the same channel: a second one while the first is
in flight returns ``busy`` at once, without gathering or calling the model.

Triggers: ``/stm summarize`` (``cogs/stm.py``) and, after a turn, whatever
:func:`auto_summarize_reason` / :func:`should_auto_summarize` approve. Logs carry counts
and ids, never memory or message text. Nothing here imports Discord.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai

from bot.config import Settings
from bot.conversation.server_profile import server_model
from bot.conversation.summarizer.checks import SummaryRejected, checked_summary
from bot.conversation.summarizer.facts import FactDistiller
from bot.conversation.summarizer.outcome import (
    CATEGORIES_CHANGED_MEANWHILE,
    CHANGED_MEANWHILE,
    CLEARED_MEANWHILE,
    CUT_OFF,
    CUT_OFF_BY_CONTEXT,
    EMPTY_ANSWER,
    INVALID_JSON,
    NO_CATEGORY_VALUES,
    NO_ROOM,
    TOOL_CALL_ANSWER,
    SummaryOutcome,
    Unusable,
)
from bot.conversation.summarizer.prompt import (
    HEADER_ROOM,
    build_messages,
    fitting,
    line_sizes,
    parse_categories,
    plan_batches,
    request_chars,
)
from bot.llm import (
    UNAVAILABLE_MESSAGE,
    LlmUnavailable,
    LoopResult,
    RequestObserver,
    complete_without_tools,
)
from bot.memory import (
    REASON_CATEGORIES_CHANGED,
    REASON_CHANGED,
    REASON_CLEARED,
    REASON_DISABLED,
    VALUE_LIMIT,
    LongTermService,
    MemoryService,
    TurnState,
    messages_after_marker,
    render_memory_text,
)
from bot.vocabulary import (
    CHARS_PER_TOKEN,
    GuildConfig,
    Marker,
    MemoryUnavailable,
    RawMessage,
    StmEntry,
    capabilities,
    prompt_chars,
    sanitize_value,
)

__all__ = ["REPLY_SHARE", "Summarizer"]

log = logging.getLogger(__name__)

REPLY_SHARE = 3
"""The answer may use at most ``1 / REPLY_SHARE`` of the provider's context."""
FORMAT_TOKENS = 64
"""Kept free for the chat format around the two messages (roles, special tokens)."""
MIN_ROOM_CHARS = 200
"""Below this many characters of room for the new messages, a run is not worth a call."""

# ----------------------------------------------------------------- summarizer


@dataclass(frozen=True, slots=True)
class _Budget:
    """One run's share of the provider's context."""

    reply_tokens: int  # max_tokens of every call
    prompt_chars: int  # the most characters the two messages together may have
    capped: bool  # the reply budget was lowered to fit the context


@dataclass
class _Asked:
    """One batch's request, and the calls made for it so far."""

    messages: list[dict[str, Any]]
    batch: Sequence[RawMessage]
    previous: str  # the summary the batch is integrated into
    channel_id: int
    whole: bool  # one summary, not the categories' JSON
    calls: int = 0


# The rejected answer is shown back (cut) with what to do instead.
RETRY_ECHO_CHARS = 2_000
REJECTED_PREFIX = "That answer cannot be stored:"


def _sent(messages: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(str(message.get("content") or "") for message in messages)


@dataclass
class Summarizer:
    """Runs summaries for the memory service; one instance per bot (``bot.summarizer``)."""

    memory: MemoryService
    client: openai.AsyncOpenAI
    settings: Settings
    # Told of every run's outcome, and of every model request (the bot's metrics count them).
    on_outcome: Callable[[SummaryOutcome], None] | None = field(default=None, kw_only=True)
    observe: RequestObserver | None = field(default=None, kw_only=True)
    # Where the durable facts of the messages read go (None: no facts call is made).
    longterm: LongTermService | None = field(default=None, kw_only=True)
    _distiller: FactDistiller | None = field(default=None, init=False)
    _running: set[int] = field(default_factory=set, init=False)
    _tokens: dict[int, int] = field(default_factory=dict, init=False)  # runs in flight

    def __post_init__(self) -> None:
        if self.longterm is not None:
            self._distiller = FactDistiller(self.client, self.settings, self.longterm, self.observe)

    def is_running(self, channel_id: int) -> bool:
        return channel_id in self._running

    async def summarize(
        self,
        *,
        guild_id: int | None,
        channel_id: int,
        actor_user_id: int,
        reason: str,
        parent_channel_id: int | None = None,
    ) -> SummaryOutcome:
        """Fold the channel's new messages into its memory; see the module docstring.

        ``actor_user_id`` is who asked (the command's user, or the turn's user for an
        automatic run): in a guild their user-scope copy is written too, as for every
        update, and in a DM the memory is theirs. ``reason`` (why it runs: the command,
        or what made it automatic) is logged and recorded in the memory's provenance.
        """
        if channel_id in self._running:
            self._report(channel_id, reason, SummaryOutcome("busy"))
            return SummaryOutcome("busy")
        self._running.add(channel_id)
        self._tokens[channel_id] = 0
        try:
            outcome = await self._summarize(
                guild_id=guild_id,
                channel_id=channel_id,
                actor_user_id=actor_user_id,
                parent_channel_id=parent_channel_id,
                reason=reason,
            )
        finally:
            self._running.discard(channel_id)
            tokens = self._tokens.pop(channel_id, 0)
        outcome = dataclasses.replace(outcome, tokens=tokens)
        self._report(channel_id, reason, outcome)
        return outcome

    def _report(self, channel_id: int, reason: str, outcome: SummaryOutcome) -> None:
        if self.on_outcome is not None:
            self.on_outcome(outcome)
        level = logging.WARNING if outcome.status == "failed" else logging.INFO
        log.log(
            level,
            "summarizer (%s) in channel %s: %s; %d new message(s), %d skipped, %d model "
            "call(s), %d chars%s",
            reason,
            channel_id,
            outcome.status,
            outcome.new_messages,
            outcome.skipped,
            outcome.calls,
            outcome.chars,
            f" ({outcome.error})" if outcome.error else "",
        )

    async def _summarize(
        self,
        *,
        guild_id: int | None,
        channel_id: int,
        actor_user_id: int,
        parent_channel_id: int | None,
        reason: str,
    ) -> SummaryOutcome:
        memory = self.memory
        # The epoch is captured before anything is read: a /refresh from here on wins.
        epoch, started_at = memory.channel_epoch(channel_id), memory.clock.now()
        try:
            config = await memory.guild_config(guild_id)
            turn = TurnState(
                channel_id=channel_id,
                user_id=actor_user_id,
                guild_id=guild_id,
                config=config,
                epoch=epoch,
                started_at=started_at,
                parent_channel_id=parent_channel_id,
                model=server_model(self.settings, config),
            )
            entry = await memory.entry(turn.channel_key, parent_channel_id=parent_channel_id)
            # Every key the write touches (in a guild, the actor's own copy too), warmed
            # now as a turn warms them: an outage while the model answers then finds their
            # versions cached, and the summary goes to the spool instead of being dropped.
            for key in turn.write_keys:
                if key != turn.channel_key:
                    await memory.entry(key, parent_channel_id=parent_channel_id)
        except MemoryUnavailable as exc:
            return SummaryOutcome("failed", error=str(exc))
        if not config.stm_enabled:
            return SummaryOutcome("disabled")
        new = messages_after_marker(await memory.recent_messages(channel_id), entry.marker)
        if not new:
            return SummaryOutcome("nothing_new")

        version = entry.version
        # Whose words the memory integrated into holds (see TurnState.memory_contributors):
        # the version alone does not tell a row deleted and written anew since.
        turn.memory_contributors.update(entry.contributor_ids)
        # What the chat model is shown as the memory is what gets integrated into: with
        # no summary yet in summary mode, the values of categories from before.
        summary = entry.summary if entry.has_summary else render_memory_text(entry, config)
        categories = dict(entry.categories)
        budget = self._budget(config)
        # The batches are planned before the first call, so that the messages skipped are
        # known (and the newest read): for the later batches the memory is taken at its
        # largest (every value at the limit, as the sanitized answers are at most).
        largest = "x" * VALUE_LIMIT
        room = budget.prompt_chars - max(
            request_chars(build_messages(config, [], summary=summary, categories=categories)),
            request_chars(
                build_messages(
                    config,
                    [],
                    summary=largest,
                    categories={c.slug: largest for c in config.categories},
                )
            ),
        )
        if room < MIN_ROOM_CHARS:
            return SummaryOutcome("failed", len(new), error=NO_ROOM)
        first, batches = plan_batches(
            line_sizes(new),
            per_call=self.settings.stm.max_turns_to_pull,
            room=room - HEADER_ROOM,
        )
        skipped, new = first, new[first:]
        calls = 0
        read = 0  # how many of ``new`` the model has integrated
        try:
            for start, end in batches:
                batch = new[start - first : end - first]
                # The room again, for the memory as it is now: JSON escaping (a line break
                # or a quote takes two characters) can make the categories longer than the
                # plan allowed. A later batch then reads only the messages that fit whole;
                # the rest stay new for the next run (the marker stops before them).
                fixed = build_messages(config, [], summary=summary, categories=categories)
                room_now = budget.prompt_chars - request_chars(fixed)
                if read:
                    batch = batch[: fitting(line_sizes(batch), room_now - HEADER_ROOM)]
                    if not batch:
                        break
                messages = build_messages(
                    config,
                    batch,
                    summary=summary,
                    categories=categories,
                    max_new_chars=max(MIN_ROOM_CHARS, room_now),
                )
                if request_chars(messages) > budget.prompt_chars:
                    raise Unusable("failed", NO_ROOM)
                model = turn.model or self.settings.model
                asked = _Asked(
                    messages,
                    batch,
                    previous=summary,
                    channel_id=channel_id,
                    whole=not config.category_mode,
                )
                try:
                    text = await self._checked_answer(asked, budget, model)
                finally:
                    calls += asked.calls
                summary, categories = _integrate(
                    text, config, summary=summary, categories=categories
                )
                read += len(batch)
                if start - first + len(batch) < end - first:
                    break  # the batch was shortened: nothing after it is read this run
        except LlmUnavailable as exc:
            return SummaryOutcome(
                "failed", len(new), error=exc.user_message, calls=calls, skipped=skipped
            )
        except Unusable as exc:
            # The facts do not hang on the summary: a small model that only copies the
            # transcript still leaves its dates and plans in long-term memory.
            failed = SummaryOutcome(
                exc.status, len(new), error=exc.message, calls=calls, skipped=skipped
            )
            return await self._with_facts(failed, turn, new, epoch, reason)

        outcome = await self._store(
            turn,
            epoch=epoch,
            version=version,
            read=new[:read],
            summary=summary,
            categories=categories,
            calls=calls,
            skipped=skipped,
            detail=f"{turn.model}, {reason}",
        )
        if not outcome.updated:
            return outcome
        return await self._with_facts(outcome, turn, new[:read], epoch, reason)

    async def _with_facts(
        self,
        outcome: SummaryOutcome,
        turn: TurnState,
        read: Sequence[RawMessage],
        epoch: int,
        reason: str,
    ) -> SummaryOutcome:
        """``outcome`` after the facts call on ``read`` (those not distilled before)."""
        if self._distiller is None or self.memory.wiped_since(turn.channel_id, epoch):
            return outcome
        made = await self._distiller.run(turn, read, detail=f"{turn.model}, {reason}")
        self._tokens[turn.channel_id] += made.tokens
        return dataclasses.replace(outcome, facts=made.stored, calls=outcome.calls + made.calls)

    async def _store(
        self,
        turn: TurnState,
        *,
        epoch: int,
        version: int,
        read: Sequence[RawMessage],
        summary: str,
        categories: Mapping[str, str],
        calls: int,
        skipped: int,
        detail: str,
    ) -> SummaryOutcome:
        """Write the memory made from the messages ``read`` (the marker on the last one)
        unless the channel was wiped since ``epoch`` or the memory changed since
        ``version``; the run's outcome either way. ``detail``: the provenance's (the
        model, and why the summarizer ran)."""
        memory, config = self.memory, turn.config

        def failed(error: str) -> SummaryOutcome:
            return SummaryOutcome("failed", len(read), error=error, calls=calls, skipped=skipped)

        if memory.wiped_since(turn.channel_id, epoch):
            return failed(CLEARED_MEANWHILE)
        # If the model (or an admin) wrote meanwhile, what we made is built on an older
        # memory and would move the marker back over their update: the write checks the
        # version under the channel's lock (``expected_version``) and refuses.
        marker = Marker.of(read[-1])
        # Whose words the summary may hold, whatever the window holds by now.
        turn.read_authors.update(m.author_id for m in read if not m.is_bot)
        # In category mode every current value, unchanged ones included: the write moves
        # the marker even when the new messages changed nothing.
        values: dict[str, Any] = (
            {
                "categories": {
                    c.slug: categories[c.slug] for c in config.categories if categories.get(c.slug)
                }
            }
            if config.category_mode
            else {"summary": summary}
        )
        result = await memory.update_stm(
            turn,
            origin="summarizer",
            marker=marker,
            expected_version=version,
            detail=detail,
            **values,
        )
        if not result.ok:
            reason = result.reason or "the memory could not be saved"
            if reason == REASON_DISABLED:
                # Turned off (here or in another process) while the model was answering.
                return SummaryOutcome("disabled", len(read), calls=calls, skipped=skipped)
            known = {
                REASON_CLEARED: CLEARED_MEANWHILE,
                REASON_CHANGED: CHANGED_MEANWHILE,
                REASON_CATEGORIES_CHANGED: CATEGORIES_CHANGED_MEANWHILE,
            }
            return failed(known.get(reason, reason))
        written = memory.cached_entry(turn.channel_key)
        return SummaryOutcome(
            "updated",
            len(read),
            chars=self._chars(written, config) if written is not None else 0,
            calls=calls,
            skipped=skipped,
            pending_sync=result.status == "saved, pending sync",
        )

    @staticmethod
    def _chars(entry: StmEntry, config: GuildConfig) -> int:
        if config.category_mode:
            return sum(len(entry.categories.get(c.slug, "")) for c in config.categories)
        return len(entry.summary)

    async def _checked_answer(self, asked: _Asked, budget: _Budget, model: str) -> str:
        """The answer to ``asked`` that passes the quality gates, asked again once."""
        # Raises Unusable when neither answer is usable: nothing is stored, and the
        # messages stay uncovered in the raw window.
        messages = asked.messages
        for attempt in range(2):
            text = await self._answer(messages, budget, model, asked)
            try:
                return checked_summary(
                    text,
                    asked.batch,
                    previous=asked.previous,
                    sent=_sent(messages),
                    whole=asked.whole,
                )
            except SummaryRejected as rejected:
                log.info(
                    "summarizer in channel %s: the answer %s%s",
                    asked.channel_id,
                    rejected.reason,
                    "; asking once more" if attempt == 0 else "; nothing stored",
                )
                if attempt == 1:
                    raise Unusable("failed", f"the summary {rejected.reason}") from None
                messages = [
                    *asked.messages,
                    {"role": "assistant", "content": text[:RETRY_ECHO_CHARS]},
                    {"role": "user", "content": f"{REJECTED_PREFIX} {rejected.ask}"},
                ]
        raise AssertionError("unreachable")

    async def _answer(
        self, messages: list[dict[str, Any]], budget: _Budget, model: str, asked: _Asked
    ) -> str:
        """One call's text, or :class:`Unusable` for a tool call or a cut-off answer."""
        asked.calls += 1  # counted before: a call that raises was made all the same
        self._tokens[asked.channel_id] += request_chars(messages) // CHARS_PER_TOKEN
        answer = await self._complete(messages, budget, model)
        self._tokens[asked.channel_id] += len(answer.text) // CHARS_PER_TOKEN
        if answer.tool_calls or answer.gave_up:
            # The tool loop answered the tool call and asked once more: two requests.
            # Whatever text it returns is not a summary (a lead-in written beside the
            # call, or the notice that it gave up).
            asked.calls += 1
            raise Unusable("failed", TOOL_CALL_ANSWER)
        if answer.truncated:
            if not budget.capped:
                log.warning(
                    "summarizer in channel %s: answer cut off at %d tokens; raise "
                    "llm.max_reply_tokens",
                    asked.channel_id,
                    budget.reply_tokens,
                )
            raise Unusable("failed", CUT_OFF_BY_CONTEXT if budget.capped else CUT_OFF)
        return answer.text

    def _budget(self, config: GuildConfig) -> _Budget:
        """The reply budget and the room for the prompt, from the provider's context."""
        llm = self.settings.llm
        context = capabilities(self.settings.provider).context_tokens
        # Room for every field at its full size (about 3 characters a token, plus JSON),
        # whatever the chat reply budget is; but never more than a share of the context,
        # or the prompt would have no room left.
        fields = len(config.categories) or 1
        wanted = max(llm.max_reply_tokens, fields * (VALUE_LIMIT // 3 + 100) + 200)
        reply = min(wanted, context // REPLY_SHARE)
        prompt = prompt_chars(context, reply, FORMAT_TOKENS)
        return _Budget(reply_tokens=reply, prompt_chars=prompt, capped=reply < wanted)

    async def _complete(
        self, messages: list[dict[str, Any]], budget: _Budget, model: str
    ) -> LoopResult:
        """One model call without tools (see :func:`bot.llm.complete_without_tools`)."""
        llm = self.settings.llm.model_copy(update={"max_reply_tokens": budget.reply_tokens})
        try:
            return await complete_without_tools(
                self.client,
                model=model,
                messages=messages,
                settings=llm,
                strict_roles=self.settings.strict_roles,
                observe=self.observe,
            )
        except openai.OpenAIError as exc:  # mapped inside already; belt and braces
            log.warning("summarizer model call failed: %s", type(exc).__name__)
            raise LlmUnavailable("unavailable", UNAVAILABLE_MESSAGE) from exc


def _integrate(
    text: str, config: GuildConfig, *, summary: str, categories: Mapping[str, str]
) -> tuple[str, dict[str, str]]:
    """The running memory, ``(summary, categories)``, with one batch's answer folded in
    as a write would store it (sanitized, at most VALUE_LIMIT a value: what the plan
    reserved room for), for the next batch to integrate into. Raises :class:`Unusable`
    when the answer is empty, or holds no usable value (category mode: not the JSON
    object asked for, or no value left after sanitizing)."""
    if not text.strip():
        raise Unusable("empty", EMPTY_ANSWER)
    if not config.category_mode:
        summary = sanitize_value(text.strip())
        if not summary:
            raise Unusable("empty", EMPTY_ANSWER)
        return summary, dict(categories)
    try:
        values = parse_categories(text, config)
    except ValueError:
        raise Unusable("failed", INVALID_JSON) from None
    values = {slug: sanitize_value(v) for slug, v in values.items()}
    if not any(values.values()):
        raise Unusable("empty", NO_CATEGORY_VALUES)
    return summary, {**categories, **{slug: v for slug, v in values.items() if v}}
