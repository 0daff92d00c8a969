"""An explicit "remember that…" the model did not store: the facts are extracted, or the
reply says plainly that nothing was saved.

Small models answer "I remember your cat Miso" in prose without calling a tool; no reply
may claim a memory that has no row.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from datetime import datetime

import openai

from bot.config import Settings
from bot.conversation.summarizer import answer_facts
from bot.llm import (
    LlmUnavailable,
    RequestObserver,
    ToolOutcome,
    ToolSpec,
    complete_without_tools,
)

log = logging.getLogger(__name__)

NOTHING_SAVED = "(Nothing was saved in my memory this time. Please ask me again.)"
SAVED_NOTE = "(Saved in my memory: {count}.)"
# At most this many facts are taken from one message.
MAX_FACTS = 3
EXTRACT_SYSTEM = (
    "You extract what a user explicitly asked a chat assistant to remember. Answer with "
    'one JSON object only: {"facts": ["…"]}. Each fact is one short, self-contained '
    'statement about the user in the third person ("The user\'s cat is called Miso."), '
    "with dates written as dates: the message was sent on {date} (UTC), so resolve "
    "'tomorrow' or 'last Friday' from that day. Only what the user asked to be "
    'remembered; never passwords or secrets. If there is nothing to remember, answer {"facts": []}.'
)


def tracked(registry: dict[str, ToolSpec], names: tuple[str, ...], done: list[str]) -> None:
    """Wrap the tools ``names`` of ``registry`` so that each successful call is noted in
    ``done``."""
    for name in names:
        spec = registry.get(name)
        if spec is None:
            continue

        async def run(raw: str | None, _spec: ToolSpec = spec, _name: str = name) -> ToolOutcome:
            outcome = await _spec.run(raw)
            if outcome.ok:
                done.append(_name)
            return outcome

        registry[name] = dataclasses.replace(spec, run=run)


def with_saving_note(text: str, stored: int) -> str:
    """The reply, with a line saying what the fallback saved (or that nothing was)."""
    if stored:
        note = SAVED_NOTE.format(count="1 fact" if stored == 1 else f"{stored} facts")
    else:
        note = NOTHING_SAVED
    return f"{text}\n\n{note}" if text else note


async def save_unsaved(
    client: openai.AsyncOpenAI,
    settings: Settings,
    *,
    model: str,
    content: str,
    sent_at: datetime,
    remember: ToolSpec,
    observe: RequestObserver | None = None,
) -> int:
    """Extract the facts ``content`` asks to remember and store each through ``remember``
    (the turn's own tool: its checks, attribution and limits); how many were stored."""
    system = EXTRACT_SYSTEM.replace("{date}", sent_at.strftime("%Y-%m-%d (%A)"))
    messages = [{"role": "system", "content": system}, {"role": "user", "content": content}]
    try:
        answer = await complete_without_tools(
            client,
            model=model,
            messages=messages,
            settings=settings.llm,
            strict_roles=settings.strict_roles,
            observe=observe,
        )
    except LlmUnavailable as exc:
        log.info("fact extraction for an unsaved remember request failed: %s", exc)
        return 0
    stored = 0
    for fact in _facts(answer.text)[:MAX_FACTS]:
        outcome = await remember.run(json.dumps({"fact": fact}, ensure_ascii=False))
        stored += outcome.ok
    log.info("remember request the model did not store: %d fact(s) extracted and saved", stored)
    return stored


def _facts(text: str) -> list[str]:
    """The ``facts`` strings of the answer's JSON object; none when it has no such object."""
    facts = answer_facts(text) or []
    return [fact.strip() for fact in facts if isinstance(fact, str) and fact.strip()]
