"""Durable facts from the messages a run folded in (SPEC §4, §6): one more model call,
after the memory is written, whose answer goes to long-term memory as captured facts.

The messages are shown dated (a header per day, each line's time), so "last Friday"
becomes a date; the channel's newest captured facts are shown numbered, so the model can
say which a new fact makes untrue. The answer is parsed leniently (small models wrap JSON
in prose or fences); what cannot be read stores nothing.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import openai
from cachetools import LRUCache

from bot.config import Settings
from bot.conversation.summarizer.prompt import CUT_MARK
from bot.llm import LlmUnavailable, RequestObserver, complete_without_tools, unescape_new_entities
from bot.memory import Distilled, LongTermService, TurnState, dated_lines
from bot.vocabulary import (
    CHARS_PER_TOKEN,
    Fact,
    MemoryUnavailable,
    Place,
    Provenance,
    RawMessage,
    capabilities,
    prompt_chars,
    speaker_name,
)

__all__ = [
    "MAX_FACTS",
    "SHOWN_KNOWN",
    "Distillation",
    "FactDistiller",
    "answer_facts",
    "build_fact_messages",
    "parse_facts",
]

log = logging.getLogger(__name__)

# At most this many facts are taken from one batch, and this many known ones shown.
MAX_FACTS = 12
SHOWN_KNOWN = 15
FACT_REPLY_TOKENS = 700

FACTS_SYSTEM = (
    "You keep the long-term notes of a group chat. From the new messages, list the "
    "durable facts worth remembering for weeks: what people did, plan or own, when and "
    "where, names, relationships, preferences, events. Skip greetings and small talk. "
    "Each fact is one short sentence that names the person it is about. Write every "
    "date as a date (YYYY-MM-DD): the day headers give each message's day, so resolve "
    "'yesterday', 'last Friday' or 'next month' from the day the message was sent. "
    "Never passwords or secrets. Answer with one JSON object only: "
    '{"facts": [{"fact": "…", "date": "YYYY-MM-DD" or null, "who": "speaker name", '
    '"replaces": [numbers of known facts it makes untrue]}]}. '
    'If nothing is worth keeping, answer {"facts": []}.'
)

_OBJECT = re.compile(r"\{.*\}", re.DOTALL)
_NEW_HEADING = "New messages:\n"
_ISO_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")


@dataclass(frozen=True, slots=True)
class FactAsk:
    """One distillation's request and what reading its answer needs."""

    messages: list[dict[str, Any]]
    known: tuple[Fact, ...]  # numbered 1… in the prompt
    speakers: Mapping[str, int]  # case-folded speaker name -> author id
    read: tuple[RawMessage, ...] = ()  # the messages the request shows


def build_fact_messages(
    batch: Sequence[RawMessage], known: Sequence[Fact], room: int = sys.maxsize
) -> FactAsk:
    """The request that asks for ``batch``'s durable facts, ``known`` shown numbered, in
    at most ``room`` characters: the oldest messages that fit (the rest wait for the next
    run; one alone too long is cut)."""
    shown = tuple(known[:SHOWN_KNOWN])
    parts = []
    if shown:
        numbered = "\n".join(f"[{i}] {fact.note}" for i, fact in enumerate(shown, start=1))
        parts.append(f"Known facts:\n{numbered}")
    left = room - len(FACTS_SYSTEM) - sum(len(part) + 2 for part in parts) - len(_NEW_HEADING)
    lines: list[str] = []
    for line in dated_lines(batch):
        if len(line) + 1 > left:
            if not lines:
                lines.append(line[: max(0, left - len(CUT_MARK))] + CUT_MARK)
            break
        lines.append(line)
        left -= len(line) + 1
    batch = batch[: len(lines)]
    parts.append(_NEW_HEADING + "\n".join(lines))
    speakers = {
        speaker_name(message.author_name).casefold(): message.author_id
        for message in batch
        if not message.is_bot
    }
    return FactAsk(
        [
            {"role": "system", "content": FACTS_SYSTEM},
            {"role": "user", "content": "\n\n".join(parts)},
        ],
        shown,
        speakers,
        tuple(batch),
    )


def answer_facts(text: str) -> list[Any] | None:
    """The ``facts`` list of the JSON object in a model's answer (prose or a code fence
    around it allowed); None when it holds no such object."""
    found = _OBJECT.search(text)
    if found is None:
        return None
    try:
        value: Any = json.loads(found.group(0))
    except ValueError:
        return None
    items = value.get("facts") if isinstance(value, dict) else None
    return items if isinstance(items, list) else None


def parse_facts(text: str, ask: FactAsk) -> list[Distilled]:
    """The facts of an answer (objects or plain strings); none when it holds none."""
    items = answer_facts(text) or []
    facts = [fact for item in items if (fact := _fact(item, ask)) is not None]
    return facts[:MAX_FACTS]


def _fact(item: Any, ask: FactAsk) -> Distilled | None:
    if isinstance(item, str):
        return Distilled(item.strip()) if item.strip() else None
    if not isinstance(item, dict) or not isinstance(item.get("fact"), str):
        return None
    content = item["fact"].strip()
    if not content:
        return None
    who = item.get("who")
    about = ask.speakers.get(speaker_name(who).casefold()) if isinstance(who, str) else None
    return Distilled(content, _date(item.get("date")), about, _replaced(item.get("replaces"), ask))


def _date(value: Any) -> date | None:
    """An ISO date the model wrote; None for anything else (an impossible day too)."""
    found = _ISO_DATE.search(value) if isinstance(value, str) else None
    if found is None:
        return None
    try:
        return date(*(int(part) for part in found.groups()))
    except ValueError:
        return None


def _replaced(value: Any, ask: FactAsk) -> tuple[int, ...]:
    """The ids of the known facts the numbers ``value`` names (others are ignored)."""
    numbers = value if isinstance(value, list) else [value]
    ids = []
    for number in numbers:
        if isinstance(number, bool) or not isinstance(number, int | str):
            continue
        try:
            index = int(number)
        except ValueError:
            continue
        if 1 <= index <= len(ask.known):
            ids.append(ask.known[index - 1].id)
    return tuple(ids)


@dataclass
class FactDistiller:
    """Runs the facts call of a summarizer run and stores what it found."""

    client: openai.AsyncOpenAI
    settings: Settings
    longterm: LongTermService
    observe: RequestObserver | None = None
    # Per channel, the newest message distilled (this process): a run that reads again
    # what a rejected summary left uncovered does not distil it twice.
    _done: LRUCache[int, int] = field(default_factory=lambda: LRUCache(maxsize=100_000))

    async def run(
        self, turn: TurnState, read: Sequence[RawMessage], *, detail: str
    ) -> Distillation:
        """Distil the messages of ``read`` (a run just read them in ``turn``'s channel) not
        distilled before, the oldest first, at most a batch of them."""
        if turn.guild_id is None or not self.settings.longterm.capture_facts:
            return Distillation()
        after = self._done.get(turn.channel_id, 0)
        read = [m for m in read if m.message_id > after][: self.settings.stm.max_turns_to_pull]
        if not read:
            return Distillation()
        try:
            known = await self.longterm.captured.known(turn.channel_id, SHOWN_KNOWN)
        except MemoryUnavailable as exc:
            log.info("facts of channel %s not distilled: %s", turn.channel_id, exc)
            return Distillation()
        context = capabilities(self.settings.provider).context_tokens
        ask = build_fact_messages(read, known, prompt_chars(context, FACT_REPLY_TOKENS, 64))
        read = list(ask.read)
        sent = "\n".join(str(message["content"]) for message in ask.messages)
        tokens = len(sent) // CHARS_PER_TOKEN
        llm = self.settings.llm.model_copy(update={"max_reply_tokens": FACT_REPLY_TOKENS})
        try:
            answer = await complete_without_tools(
                self.client,
                model=turn.model or self.settings.model,
                messages=ask.messages,
                settings=llm,
                strict_roles=self.settings.strict_roles,
                observe=self.observe,
            )
        except LlmUnavailable as exc:
            log.info("facts of channel %s not distilled: %s", turn.channel_id, exc)
            return Distillation(calls=1, tokens=tokens)
        tokens += len(answer.text) // CHARS_PER_TOKEN
        calls = 2 if answer.tool_calls else 1
        text = "" if answer.tool_calls else unescape_new_entities(answer.text, sent)
        facts = parse_facts(text, ask)
        if not facts:
            if answer_facts(text) == []:  # nothing worth keeping: those messages are done
                self._done[turn.channel_id] = read[-1].message_id
            log.info("facts of channel %s: the model gave none usable", turn.channel_id)
            return Distillation(calls=calls, tokens=tokens)
        try:
            stored = await self.longterm.captured.store(
                facts,
                guild_id=turn.guild_id,
                place=Place(turn.channel_id, turn.parent_channel_id),
                sources=sorted({m.author_id for m in read if not m.is_bot}) or [turn.user_id],
                provenance=Provenance("summarizer", detail, turn.user_id, read[-1].message_id),
                started_at=turn.started_at or self.longterm.clock.now(),
            )
        except MemoryUnavailable as exc:
            log.warning("facts of channel %s not stored: %s", turn.channel_id, exc)
            return Distillation(calls=calls, tokens=tokens)
        if stored.refused is None:
            self._done[turn.channel_id] = read[-1].message_id
        if stored.refused is not None:
            log.info("facts of channel %s not stored: %s", turn.channel_id, stored.refused)
        else:
            log.info(
                "facts of channel %s: %d new, %d merged, %d superseded",
                turn.channel_id,
                len(stored.created),
                len(stored.merged),
                len(stored.superseded),
            )
        return Distillation(len(stored.stored), calls, tokens)


@dataclass(frozen=True, slots=True)
class Distillation:
    """What one facts call did: facts stored, model calls made, tokens (estimated)."""

    stored: int = 0
    calls: int = 0
    tokens: int = 0
