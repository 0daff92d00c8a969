"""The long-term memory tools ``remember``, ``recall`` and ``forget_memory``, offered instead of
the STM tool when the user explicitly asks to remember or forget (SPEC §6)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
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


def remember_definition(max_fact_chars: int = 500) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": REMEMBER_TOOL_NAME,
            "description": (
                "Save one fact about the user in their long-term memory, because they "
                "explicitly asked you to remember it. Write it as a short, self-contained "
                "statement in the user's perspective (e.g. 'My cat is called Miso'). One "
                "fact per call. If a similar fact is already saved it is updated instead. "
                f"At most {max_fact_chars} characters. Never store passwords or tokens."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "fact": {
                        "type": "string",
                        "description": "The fact to remember, as a complete sentence.",
                        "maxLength": max_fact_chars,
                    }
                },
                "required": ["fact"],
                "additionalProperties": False,
            },
        },
    }


def recall_definition() -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": RECALL_TOOL_NAME,
            "description": (
                "Search the user's long-term memory for saved facts (full-text, by words). "
                "Returns matching facts with their ids, best match first."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {
                        "type": "string",
                        "description": "Words to look for, e.g. 'cat name'.",
                        "maxLength": MAX_QUERY_CHARS,
                    }
                },
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    }


def forget_definition() -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": FORGET_TOOL_NAME,
            "description": (
                "Delete one fact from the user's long-term memory, because they asked you "
                "to forget it. Give `fact_id` (from `recall`) or a `query`; with a query "
                "the fact holding every word of it is deleted (if several do, none is "
                "deleted and their ids are listed: call again with the right `fact_id`). "
                "Give exactly one of the two."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "fact_id": {
                        "type": "integer",
                        "description": "The id of the fact to delete.",
                        "minimum": 1,
                    },
                    "query": {
                        "type": "string",
                        "description": "Words of the fact to delete, e.g. 'cat name'.",
                        "maxLength": MAX_QUERY_CHARS,
                    },
                },
                "additionalProperties": False,
            },
        },
    }


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
    remembered = 0
    place = _place_here(channel_id, may_show)

    async def remember(raw: str | None) -> ToolOutcome:
        nonlocal remembered
        try:
            fact = parse_remember_arguments(raw)
        except ToolArgumentError as exc:
            return ToolOutcome.error(f"rejected: {exc}")
        if remembered >= MAX_REMEMBERS_PER_TURN:
            return ToolOutcome.error(
                f"rejected: at most {MAX_REMEMBERS_PER_TURN} facts can be saved per turn; "
                "answer the user now"
            )
        provenance = Provenance("model_tool", model, user_id, source_message_id)
        try:
            result = await service.remember(
                user_id, guild_id, fact, provenance, place=place, started_at=started_at
            )
        except FactRefused as exc:
            return ToolOutcome.error(f"rejected: {exc}")
        except MemoryUnavailable:
            return ToolOutcome.error(UNAVAILABLE)
        remembered += 1
        if result.created:
            text = f"saved as fact #{result.id}"
        else:
            text = f"updated fact #{result.id} (it replaced a similar fact saved earlier)"
        stored = result.fact.content if result.fact is not None else ""
        if REDACTION_MARK in stored and REDACTION_MARK not in fact:
            text += " (secrets in it were redacted)"
        if result.truncated:
            text += f" (shortened to {service.limits.max_fact_chars} characters)"
        if result.evicted_ids:
            dropped = ", ".join(f"#{i}" for i in result.evicted_ids)
            text += (
                f"; the memory was full, so the least-used fact {dropped} was dropped "
                f"(limit {service.limits.max_facts_per_user} facts)"
            )
        return ToolOutcome(text, ok=True)

    async def recall(raw: str | None) -> ToolOutcome:
        try:
            query = parse_recall_arguments(raw)
        except ToolArgumentError as exc:
            return ToolOutcome.error(f"rejected: {exc}")
        try:
            facts = await service.search(
                user_id, guild_id, query, opted_in=opted_in, may_show=may_show
            )
        except MemoryUnavailable:
            return ToolOutcome.error(UNAVAILABLE)
        if not facts:
            return ToolOutcome("no saved facts match that query", ok=True)
        return ToolOutcome("\n".join(describe_fact(fact) for fact in facts), ok=True)

    async def forget(raw: str | None) -> ToolOutcome:
        try:
            fact_id, query = parse_forget_arguments(raw)
        except ToolArgumentError as exc:
            return ToolOutcome.error(f"rejected: {exc}")
        try:
            result = await service.forget(
                user_id,
                fact_id=fact_id,
                query=query,
                guild_id=guild_id,
                opted_in=opted_in,
                may_show=may_show,
                actor_user_id=user_id,
                source_message_id=source_message_id,
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
        described = [
            describe_fact(fact)
            if visible_here(fact, guild_id, opted_in=opted_in, may_show=may_show)
            # Deleting by id works for any of the user's facts, but what was said in a
            # DM or a more private channel is not repeated here.
            else f"#{fact.id} (saved elsewhere; its text is not shown here)"
            for fact in result.deleted
        ]
        return ToolOutcome("deleted " + "; ".join(described), ok=True)

    runners: dict[str, Callable[[str | None], Awaitable[ToolOutcome]]] = {
        REMEMBER_TOOL_NAME: remember,
        RECALL_TOOL_NAME: recall,
        FORGET_TOOL_NAME: forget,
    }
    definitions = {
        REMEMBER_TOOL_NAME: remember_definition(service.limits.max_fact_chars),
        RECALL_TOOL_NAME: recall_definition(),
        FORGET_TOOL_NAME: forget_definition(),
    }
    return {name: ToolSpec(definitions[name], runners[name]) for name in LONG_TERM_TOOL_NAMES}
