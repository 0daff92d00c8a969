"""The systems without Kioku's memory, on the same endpoint and model: ``raw``, ``full``, ``none``.

Each prompt is the bot's persona, then the conversation as chat messages (``Name: text``,
the first message of each session shown with the session's date, as a reader of the
channel would see it), then the question as the questioner's message:

- ``raw``: the last :data:`RAW_MESSAGES` messages (llmcord's default history).
- ``full``: the whole ingested conversation, its oldest messages left out when it does
  not fit ``context_tokens`` (less the reply's tokens); such an answer is marked ``cut``.
- ``none``: no conversation at all.

With ``strict_roles`` (a strict chat template) the messages are merged as the bot merges
its own (:func:`bot.llm.roles.alternate_roles`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import openai

from benchmarks.recall.dataset import Sample, Session
from benchmarks.recall.kioku import GUILD_NAME, QUESTION_DELAY, QUESTIONER, TURN_GAP, Answer
from benchmarks.recall.kioku import channel_name as kioku_channel_name
from benchmarks.recall.proxy import COUNTER, Phase, RecordingProxy
from bot.config import Settings
from bot.conversation import TurnRequest
from bot.conversation.turn import render_persona
from bot.llm.roles import alternate_roles
from bot.llm.tokens import MESSAGE_TOKENS

RAW_MESSAGES = 25
BASELINES = ("raw", "full", "none")
# Tokens kept free beside the reply's: the chat template's own framing.
_MARGIN_TOKENS = 32


def transcript(sessions: tuple[Session, ...]) -> list[dict[str, str]]:
    """The ingested conversation as chat messages, oldest first."""
    messages: list[dict[str, str]] = []
    for session in sessions:
        for position, turn in enumerate(session.turns):
            line = f"{turn.speaker}: {turn.posted}"
            if position == 0:
                line = f"({session.date_time}) {line}"
            messages.append({"role": "user", "content": line})
    return messages


def _tokens(message: dict[str, str]) -> int:
    return MESSAGE_TOKENS + COUNTER.count(message["content"])


def fit(history: list[dict[str, str]], budget: int) -> tuple[list[dict[str, str]], bool]:
    """The newest messages of ``history`` whose tokens fit ``budget``; whether any was cut."""
    kept: list[dict[str, str]] = []
    used = 0
    for message in reversed(history):
        used += _tokens(message)
        if used > budget:
            break
        kept.append(message)
    kept.reverse()
    return kept, len(kept) < len(history)


@dataclass
class BaselineSystem:
    name: str  # one of BASELINES
    settings: Settings
    client: openai.AsyncOpenAI
    proxy: RecordingProxy
    persona: str  # the template, rendered for each sample's channel as the bot renders it
    context_tokens: int
    _history: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    _ask_at: dict[str, datetime] = field(default_factory=dict)

    async def start(self) -> None:
        """Nothing to start: the client is the caller's."""

    async def close(self) -> None:
        """Nothing to close: the client is the caller's."""

    async def ingest(self, sample: Sample, sessions: tuple[Session, ...]) -> None:
        """No memory to build: the conversation is kept for the prompts."""
        self._history[sample.sample_id] = transcript(sessions)
        last = sessions[-1]
        # Asked when Kioku is asked: an hour after the last turn.
        self._ask_at[sample.sample_id] = (
            last.start + TURN_GAP * (len(last.turns) - 1) + QUESTION_DELAY
        )

    def _system(self, sample: Sample, asked: str) -> str:
        request = TurnRequest(
            channel_id=0,
            user_id=0,
            source_message_id=0,
            content=asked,
            bot_user_id=0,
            user_name=QUESTIONER,
            channel_name=f"#{kioku_channel_name(sample.sample_id)}",
            guild_name=GUILD_NAME,
        )
        return render_persona(self.persona, request, self._ask_at[sample.sample_id])

    def messages(self, sample: Sample, asked: str) -> tuple[list[dict[str, Any]], bool]:
        """The prompt for ``asked`` and whether the conversation in it was cut."""
        system = {"role": "system", "content": self._system(sample, asked)}
        question = {"role": "user", "content": f"{QUESTIONER}: {asked}"}
        history = self._history.get(sample.sample_id, [])
        cut = False
        if self.name == "raw":
            history = history[-RAW_MESSAGES:]
        elif self.name == "full":
            budget = (
                self.context_tokens
                - self.settings.llm.max_reply_tokens
                - _tokens(system)
                - _tokens(question)
                - _MARGIN_TOKENS
            )
            history, cut = fit(history, max(budget, 0))
        else:
            history = []
        messages: list[dict[str, Any]] = [system, *history, question]
        if self.settings.strict_roles:
            messages = alternate_roles(messages)
        return messages, cut

    async def answer(self, sample: Sample, key: str, asked: str) -> Answer:
        messages, cut = self.messages(sample, asked)
        self.proxy.phase = Phase(self.name, "answer", key)
        started = time.perf_counter()
        try:
            completion = await self.client.chat.completions.create(
                model=self.settings.model,
                messages=messages,  # type: ignore[arg-type]
                temperature=self.settings.llm.temperature,
                max_tokens=self.settings.llm.max_reply_tokens,
            )
        except openai.OpenAIError as exc:
            return Answer(f"(call failed: {type(exc).__name__})", _since(started), True, cut)
        finally:
            self.proxy.phase = None
        choices = completion.choices or []
        content = choices[0].message.content if choices else None
        return Answer(content or "", _since(started), failed=not choices, cut=cut)


def _since(started: float) -> float:
    return time.perf_counter() - started
