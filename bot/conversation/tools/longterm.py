"""The long-term memory tools ``remember``, ``recall`` and ``forget_memory``, offered instead of
the STM tool when the user explicitly asks to remember or forget (SPEC §6)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.llm import (
    ToolArgumentError,
    ToolOutcome,
    ToolSpec,
    json_type,
    load_object,
    quoted,
    reject_unexpected,
    require_string,
)
from bot.memory import (
    SEARCH_LIMIT,
    ChannelFilter,
    ChannelView,
    FactRefused,
    LongTermService,
    visible_here,
)
from bot.vocabulary import Fact, MemoryUnavailable, Place, Provenance

REMEMBER_TOOL_NAME = "remember"
RECALL_TOOL_NAME = "recall"
FORGET_TOOL_NAME = "forget_memory"
LONG_TERM_TOOL_NAMES = (REMEMBER_TOOL_NAME, RECALL_TOOL_NAME, FORGET_TOOL_NAME)

MAX_RAW_ARGUMENT_BYTES = 16 * 1024
MAX_QUERY_CHARS = 500
MAX_REMEMBERS_PER_TURN = 5
MAX_FACT_ID = 2**63 - 1
REDACTION_MARK = "[REDACTED"
UNAVAILABLE = "error: long-term memory storage is unavailable right now; nothing was changed"
NO_FULL_MATCH = (
    "nothing deleted: no saved fact holds every word of that query (recall finds facts "
    "by any word and shows their ids; forget one by its fact_id)"
)
# How much of each fact a list of candidates for forget_memory shows.
CANDIDATE_CHARS = 200


def _function(
    name: str, description: str, properties: dict[str, Any], required: list[str] | None
) -> dict[str, Any]:
    """A Chat Completions tool definition taking an object of ``properties`` and no other."""
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required is not None:
        parameters["required"] = required
    parameters["additionalProperties"] = False
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def _string(description: str, max_length: int) -> dict[str, Any]:
    """A string property of at most ``max_length`` characters."""
    return {"type": "string", "description": description, "maxLength": max_length}


def remember_definition(max_fact_chars: int = 500) -> dict[str, Any]:
    return _function(
        REMEMBER_TOOL_NAME,
        "Save one fact about the user in their long-term memory, because they "
        "explicitly asked you to remember it. Write it as a short, self-contained "
        "statement in the user's perspective (e.g. 'My cat is called Miso'). One "
        "fact per call. If a similar fact is already saved it is updated instead. "
        f"At most {max_fact_chars} characters. Never store passwords or tokens.",
        {"fact": _string("The fact to remember, as a complete sentence.", max_fact_chars)},
        ["fact"],
    )


def recall_definition() -> dict[str, Any]:
    return _function(
        RECALL_TOOL_NAME,
        "Search the user's long-term memory for saved facts (full-text, by words). "
        "Returns matching facts with their ids, best match first.",
        {"query": _string("Words to look for, e.g. 'cat name'.", MAX_QUERY_CHARS)},
        ["query"],
    )


def forget_definition() -> dict[str, Any]:
    return _function(
        FORGET_TOOL_NAME,
        "Delete one fact from the user's long-term memory, because they asked you "
        "to forget it. Give `fact_id` (from `recall`) or a `query`; with a query "
        "the fact holding every word of it is deleted (if several do, none is "
        "deleted and their ids are listed: call again with the right `fact_id`). "
        "Give exactly one of the two.",
        {
            "fact_id": {
                "type": "integer",
                "description": "The id of the fact to delete.",
                "minimum": 1,
            },
            "query": _string("Words of the fact to delete, e.g. 'cat name'.", MAX_QUERY_CHARS),
        },
        None,
    )


# ------------------------------------------------------------------ parsing


def _load_object(raw: str | None, example: str) -> dict[str, Any]:
    return load_object(
        raw,
        example,
        max_bytes=MAX_RAW_ARGUMENT_BYTES,
        shorter=f"send one short fact like {example}",
    )


def _text(payload: dict[str, Any], field: str, *, limit: int | None = None) -> str:
    value = require_string(field, payload[field])
    name = quoted([field])
    if not value.strip():
        raise ToolArgumentError(f"field {name} is empty", field)
    if limit is not None and len(value) > limit:
        raise ToolArgumentError(
            f"field {name} is too long ({len(value)} characters, at most {limit})", field
        )
    return value


def parse_remember_arguments(raw: str | None) -> str:
    """The fact to remember (as given; the service sanitizes and caps it)."""
    payload = _load_object(raw, '{"fact": "My cat is called Miso"}')
    reject_unexpected(payload, ("fact",))
    if "fact" not in payload:
        raise ToolArgumentError(
            'missing required field "fact" (the fact to remember, a string)', "fact"
        )
    return _text(payload, "fact")


def parse_recall_arguments(raw: str | None) -> str:
    """The words to search for."""
    payload = _load_object(raw, '{"query": "cat name"}')
    reject_unexpected(payload, ("query",))
    if "query" not in payload:
        raise ToolArgumentError('missing required field "query" (words to look for)', "query")
    return _text(payload, "query", limit=MAX_QUERY_CHARS)


def parse_forget_arguments(raw: str | None) -> tuple[int | None, str | None]:
    """``(fact_id, None)`` or ``(None, query)``: exactly one of them."""
    payload = _load_object(raw, '{"fact_id": 12} or {"query": "cat name"}')
    reject_unexpected(payload, ("fact_id", "query"))
    given = [key for key in ("fact_id", "query") if payload.get(key) is not None]
    if len(given) != 1:
        what = "both were given" if given else "neither was given"
        raise ToolArgumentError(
            f'give exactly one of "fact_id" (an integer id from recall) or "query" '
            f"(words of the fact); {what}"
        )
    if given == ["query"]:
        return None, _text(payload, "query", limit=MAX_QUERY_CHARS)
    value = payload["fact_id"]
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ToolArgumentError(
                f'field "fact_id" must be an integer like 12, got {json_type(value)}',
                "fact_id",
            )
    if not 1 <= value <= MAX_FACT_ID:
        raise ToolArgumentError('field "fact_id" must be a positive fact id', "fact_id")
    return value, None


# ------------------------------------------------------------------ running


def describe_fact(fact: Fact, limit: int | None = None) -> str:
    """``#12 (saved 2026-11-01, in a server): My cat is called Miso`` for the model; the
    text cut to ``limit`` characters (with ``…``) when given."""
    where = "in DMs" if fact.guild_id is None else "in a server"
    saved = fact.updated_at.strftime("%Y-%m-%d")
    # One line per fact: a stored line break cannot forge another fact's line.
    text = " ".join(fact.content.split())
    if limit is not None and len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return f"#{fact.id} (saved {saved}, {where}): {text}"


def _how_many(candidates: tuple[Fact, ...]) -> str:
    # The service lists at most SEARCH_LIMIT: there may be more.
    count = len(candidates)
    return f"at least {count}" if count >= SEARCH_LIMIT else str(count)


def _place_here(channel_id: int | None, may_show: ChannelFilter | None) -> Place | None:
    """Where a fact saved this turn is said: the caller's view of this channel, if it has one."""
    here = may_show.here if isinstance(may_show, ChannelView) else None
    if here is not None and here.channel_id == channel_id:
        return here
    return Place(channel_id) if channel_id is not None else None


def long_term_tools(
    service: LongTermService,
    *,
    user_id: int,
    guild_id: int | None,
    source_message_id: int | None,
    model: str | None,
    opted_in: bool,
    channel_id: int | None = None,
    may_show: ChannelFilter | None = None,
    started_at: datetime | None = None,
) -> dict[str, ToolSpec]:
    """The long-term tools by name, for one turn of ``user_id`` in ``guild_id`` (None: a DM).

    ``opted_in`` (to cross-context memory) lets them reach server facts from a DM.
    """
    turn = _TurnTools(
        service,
        user_id,
        guild_id,
        source_message_id,
        model,
        opted_in,
        place=_place_here(channel_id, may_show),
        may_show=may_show,
        started_at=started_at,
    )
    runners: dict[str, Callable[[str | None], Awaitable[ToolOutcome]]] = {
        REMEMBER_TOOL_NAME: turn.remember,
        RECALL_TOOL_NAME: turn.recall,
        FORGET_TOOL_NAME: turn.forget,
    }
    definitions = {
        REMEMBER_TOOL_NAME: remember_definition(service.limits.max_fact_chars),
        RECALL_TOOL_NAME: recall_definition(),
        FORGET_TOOL_NAME: forget_definition(),
    }
    return {name: ToolSpec(definitions[name], runners[name]) for name in LONG_TERM_TOOL_NAMES}


@dataclass(slots=True)
class _TurnTools:
    """The long-term tools of one turn: who asks, from where, and how many facts it saved."""

    service: LongTermService
    user_id: int
    guild_id: int | None
    source_message_id: int | None
    model: str | None
    opted_in: bool
    place: Place | None
    may_show: ChannelFilter | None
    started_at: datetime | None
    remembered: int = 0

    async def remember(self, raw: str | None) -> ToolOutcome:
        try:
            fact = parse_remember_arguments(raw)
        except ToolArgumentError as exc:
            return ToolOutcome.error(f"rejected: {exc}")
        if self.remembered >= MAX_REMEMBERS_PER_TURN:
            return ToolOutcome.error(
                f"rejected: at most {MAX_REMEMBERS_PER_TURN} facts can be saved per turn; "
                "answer the user now"
            )
        provenance = Provenance("model_tool", self.model, self.user_id, self.source_message_id)
        try:
            result = await self.service.remember(
                self.user_id,
                self.guild_id,
                fact,
                provenance,
                place=self.place,
                started_at=self.started_at,
            )
        except FactRefused as exc:
            return ToolOutcome.error(f"rejected: {exc}")
        except MemoryUnavailable:
            return ToolOutcome.error(UNAVAILABLE)
        self.remembered += 1
        limits = self.service.limits
        if result.created:
            text = f"saved as fact #{result.id}"
        else:
            text = f"updated fact #{result.id} (it replaced a similar fact saved earlier)"
        stored = result.fact.content if result.fact is not None else ""
        if REDACTION_MARK in stored and REDACTION_MARK not in fact:
            text += " (secrets in it were redacted)"
        if result.truncated:
            text += f" (shortened to {limits.max_fact_chars} characters)"
        if result.evicted_ids:
            dropped = ", ".join(f"#{i}" for i in result.evicted_ids)
            text += (
                f"; the memory was full, so the least-used fact {dropped} was dropped "
                f"(limit {limits.max_facts_per_user} facts)"
            )
        return ToolOutcome(text, ok=True)

    async def recall(self, raw: str | None) -> ToolOutcome:
        try:
            query = parse_recall_arguments(raw)
        except ToolArgumentError as exc:
            return ToolOutcome.error(f"rejected: {exc}")
        try:
            facts = await self.service.search(
                self.user_id, self.guild_id, query, opted_in=self.opted_in, may_show=self.may_show
            )
        except MemoryUnavailable:
            return ToolOutcome.error(UNAVAILABLE)
        if not facts:
            return ToolOutcome("no saved facts match that query", ok=True)
        return ToolOutcome("\n".join(describe_fact(fact) for fact in facts), ok=True)

    async def forget(self, raw: str | None) -> ToolOutcome:
        try:
            fact_id, query = parse_forget_arguments(raw)
        except ToolArgumentError as exc:
            return ToolOutcome.error(f"rejected: {exc}")
        try:
            result = await self.service.forget(
                self.user_id,
                fact_id=fact_id,
                query=query,
                guild_id=self.guild_id,
                opted_in=self.opted_in,
                may_show=self.may_show,
                actor_user_id=self.user_id,
                source_message_id=self.source_message_id,
            )
        except MemoryUnavailable:
            return ToolOutcome.error(UNAVAILABLE)
        if result.candidates:
            listed = "\n".join(describe_fact(f, CANDIDATE_CHARS) for f in result.candidates)
            return ToolOutcome(
                f"nothing deleted: {_how_many(result.candidates)} saved facts hold every word of "
                "that query; call forget_memory again with the fact_id of the one the user "
                f"means (or ask them which):\n{listed}",
                ok=True,
            )
        if not result.deleted:
            if fact_id is not None:
                return ToolOutcome(f"nothing deleted: this user has no fact #{fact_id}", ok=True)
            return ToolOutcome(NO_FULL_MATCH, ok=True)
        return ToolOutcome(
            "deleted " + "; ".join(map(self._describe_deleted, result.deleted)), ok=True
        )

    def _describe_deleted(self, fact: Fact) -> str:
        if visible_here(fact, self.guild_id, opted_in=self.opted_in, may_show=self.may_show):
            return describe_fact(fact)
        # Deleting by id works for any of the user's facts, but what was said in a DM or a
        # more private channel is not repeated here.
        return f"#{fact.id} (saved elsewhere; its text is not shown here)"
