"""Memory evaluation: answer accuracy and prompt size, Kioku against a raw-history baseline.

The fixture ``tests/data/memory_eval.json`` is a four-day conversation in one Discord
channel (four speakers, a release date that changes, milestones in a known order, an
explicit "remember that…", an overnight restart of the bot) followed by questions, each
with the keywords a correct answer contains (one of a group's words, every group; for
the order question the groups in order) and one question nothing in the conversation
answers.

Two systems answer the same questions:

* **Kioku**: the whole conversation is replayed through the bot's pipeline (``TurnRunner``
  + ``MemoryService`` + an embedded PostgreSQL in a temporary folder, a hand-moved clock
  for the days between sessions). The model keeps its own memory: it is offered
  ``update_short_term_memory`` and, on the "remember that…" turn, ``remember``. Then each
  question is asked in the channel, in order, as a member would.
* **Baseline**: the same persona, the last 25 raw messages of the conversation (the
  fixture's transcript, with its reference bot replies) and the question; no memory.

The table gives accuracy (correct / total) and the mean prompt tokens per question
turn (every model call of the turn counted, tool round trips included), from the API's
``usage.prompt_tokens`` when the server sends it, else counted with tiktoken's cl100k_base
(the output says which; the dry run always counts: the scripted server's usage is a guess).

Usage::

    OPENAI_BASE_URL=http://localhost:11434/v1 KIOKU_MODEL=qwen2.5:7b \\
        python benchmarks/memory_eval.py
    python benchmarks/memory_eval.py --base-url https://api.openai.com/v1 --model gpt-4o-mini
    python benchmarks/memory_eval.py --dry-run   # scripted server, canned answers

The endpoint is found like the bot finds it (arguments, then ``OPENAI_BASE_URL`` /
``OPENAI_API_KEY`` / ``KIOKU_MODEL``, ``.env``, ``config/kioku.toml``). With neither a
base URL nor an API key configured it prints how to run it and exits 0, so ``make bench``
passes on a machine without a model. ``--dry-run`` replays everything against an
in-process scripted server with the fixture's canned model responses: the numbers then
show that the script works and how large the prompts are, not how good a model is.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from benchmarks._figures import Figure, emit, skipped
from benchmarks._persona import bot_persona
from benchmarks.recall.proxy import COUNTER
from bot.config import Settings, SettingsError, load_settings
from bot.conversation.tools.longterm import REMEMBER_TOOL_NAME
from bot.conversation.turn import TurnReply, TurnRequest, TurnRunner, render_persona
from bot.db.engine import Database
from bot.db.migrate import upgrade
from bot.llm.client import make_client, reported_tokens
from bot.memory.longterm.facts import LongTermService
from bot.memory.service import MemoryService
from bot.vocabulary.model import RawMessage
from tests.helpers.builders import ManualClock

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_PATH = ROOT / "tests" / "data" / "memory_eval.json"
DISCORD_EPOCH_MS = 1_420_070_400_000
DRY_RUN_MODEL = "scripted-dry-run"
BASELINE_CANNED_ANSWER = "I'm not sure: I can't find that in the recent messages."
"""What the scripted server answers the baseline in ``--dry-run`` (a memory-less shrug)."""

log = logging.getLogger("memory_eval")


# ------------------------------------------------------------------------------ fixture


@dataclass(frozen=True, slots=True)
class Speaker:
    key: str
    id: int
    name: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Scripted:
    """The canned model response of one bot turn: tool calls first, then the reply."""

    reply: str
    tools: tuple[ToolCall, ...] = ()


@dataclass(frozen=True, slots=True)
class Question:
    id: str
    kind: str
    text: str
    expected: str
    # Every group must match (case-insensitive substring, any word of the group); with
    # ``ordered`` the groups' first matches must also come in this order.
    keywords: tuple[tuple[str, ...], ...]
    ordered: bool
    # Text that has to reach the model for the question to be answerable (scripted run).
    evidence: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Post:
    """One member's message in the channel, placed in time, with a Discord-like id."""

    session: int  # index into ``Fixture.sessions``; -1 for the questions
    speaker: Speaker
    message: RawMessage
    to_bot: bool
    scripted: Scripted | None
    tag: str | None = None
    question: Question | None = None


@dataclass(frozen=True, slots=True)
class Session:
    label: str
    start: datetime
    restart_before: bool
    posts: tuple[Post, ...]


@dataclass(frozen=True)
class Fixture:
    name: str
    guild_id: int
    guild_name: str
    channel_id: int
    channel_name: str
    bot_id: int
    bot_name: str
    speakers: Mapping[str, Speaker]
    sessions: tuple[Session, ...]
    question_posts: tuple[Post, ...]
    bot_reply_delay: timedelta
    baseline_messages: int

    @property
    def start(self) -> datetime:
        return self.sessions[0].start

    @property
    def posts(self) -> list[Post]:
        """The conversation's member messages, oldest first (questions excluded)."""
        return [post for session in self.sessions for post in session.posts]

    @property
    def questions(self) -> list[Question]:
        return [post.question for post in self.question_posts if post.question is not None]

    def tagged(self, tag: str) -> Post:
        for post in self.posts:
            if post.tag == tag:
                return post
        raise KeyError(f"no message tagged {tag!r} in the fixture")

    def bot_message(self, post: Post, text: str) -> RawMessage:
        """The bot's reply to ``post``, posted ``bot_reply_delay`` later."""
        at = post.message.created_at + self.bot_reply_delay
        return RawMessage(snowflake(at), self.bot_id, self.bot_name, text, at, is_bot=True)

    def reference_transcript(self) -> list[RawMessage]:
        """The conversation as the fixture writes it: member messages and, after each one
        addressed to the bot, the scripted reply (what the baseline reads)."""
        transcript: list[RawMessage] = []
        for post in self.posts:
            transcript.append(post.message)
            if post.to_bot and post.scripted is not None:
                transcript.append(self.bot_message(post, post.scripted.reply))
        return transcript

    def request(self, post: Post) -> TurnRequest:
        """The turn request a Discord message from ``post`` becomes (see ``cogs/chat.py``)."""
        return TurnRequest(
            channel_id=self.channel_id,
            user_id=post.speaker.id,
            source_message_id=post.message.message_id,
            content=post.message.content,
            bot_user_id=self.bot_id,
            guild_id=self.guild_id,
            user_name=post.speaker.name,
            bot_name=self.bot_name,
            channel_name=self.channel_name,
            guild_name=self.guild_name,
        )


def snowflake(at: datetime) -> int:
    """A Discord-style id for a message sent at ``at`` (ids order like times)."""
    return (int(at.timestamp() * 1000) - DISCORD_EPOCH_MS) << 22


def _time(value: str) -> datetime:
    moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError(f"time {value!r} has no timezone")
    return moment


def _scripted(raw: Mapping[str, Any] | None) -> Scripted | None:
    if raw is None:
        return None
    tools = tuple(ToolCall(str(t["name"]), dict(t["arguments"])) for t in raw.get("tools", ()))
    return Scripted(str(raw["reply"]), tools)


def load_fixture(path: Path = FIXTURE_PATH) -> Fixture:
    """Read and check the fixture; raise ``ValueError`` naming what is wrong."""
    data = json.loads(path.read_text(encoding="utf-8"))
    speakers = {
        key: Speaker(key, int(user["id"]), str(user["name"])) for key, user in data["users"].items()
    }
    step = timedelta(minutes=float(data.get("minutes_between_messages", 2)))
    reply_delay = timedelta(seconds=float(data.get("bot_reply_seconds", 30)))
    if reply_delay >= step:
        raise ValueError("bot_reply_seconds must be shorter than the gap between messages")

    def post(raw: Mapping[str, Any], session: int, at: datetime) -> Post:
        speaker = speakers.get(raw["from"])
        if speaker is None:
            raise ValueError(f"unknown speaker {raw['from']!r}")
        to_bot = bool(raw.get("to_bot", False))
        scripted = _scripted(raw.get("scripted"))
        if to_bot and scripted is None:
            raise ValueError(f"a message to the bot has no scripted response: {raw['text']!r}")
        message = RawMessage(snowflake(at), speaker.id, speaker.name, str(raw["text"]), at)
        return Post(session, speaker, message, to_bot, scripted, raw.get("tag"))

    sessions: list[Session] = []
    last: datetime | None = None
    for index, raw_session in enumerate(data["sessions"]):
        start = _time(raw_session["start"])
        if last is not None and start <= last + step:
            raise ValueError(f"session {raw_session['label']!r} starts before the previous ends")
        posts = tuple(
            post(raw, index, start + step * position)
            for position, raw in enumerate(raw_session["messages"])
        )
        last = posts[-1].message.created_at
        sessions.append(
            Session(raw_session["label"], start, bool(raw_session.get("restart_before")), posts)
        )

    asked_at = _time(data["questions_at"])
    if last is None or asked_at <= last + step:
        raise ValueError("the questions must come after the conversation")
    question_step = timedelta(minutes=float(data.get("minutes_between_questions", 3)))
    question_posts: list[Post] = []
    for position, raw in enumerate(data["questions"]):
        keywords = tuple(tuple(str(word) for word in group) for group in raw["keywords"])
        if not keywords or not all(keywords):
            raise ValueError(f"question {raw['id']!r} needs non-empty keyword groups")
        question = Question(
            id=str(raw["id"]),
            kind=str(raw["kind"]),
            text=str(raw["text"]),
            expected=str(raw["expected"]),
            keywords=keywords,
            ordered=bool(raw.get("ordered", False)),
            evidence=tuple(str(text) for text in raw.get("evidence", ())),
        )
        made = post(
            {"from": raw["from"], "text": raw["text"], "to_bot": True, "scripted": raw["scripted"]},
            -1,
            asked_at + question_step * position,
        )
        question_posts.append(
            Post(made.session, made.speaker, made.message, True, made.scripted, None, question)
        )
    return Fixture(
        name=str(data["name"]),
        guild_id=int(data["guild"]["id"]),
        guild_name=str(data["guild"]["name"]),
        channel_id=int(data["channel"]["id"]),
        channel_name=str(data["channel"]["name"]),
        bot_id=int(data["bot"]["id"]),
        bot_name=str(data["bot"]["name"]),
        speakers=speakers,
        sessions=tuple(sessions),
        question_posts=tuple(question_posts),
        bot_reply_delay=reply_delay,
        baseline_messages=int(data.get("baseline_messages", 25)),
    )


def check_answer(question: Question, answer: str) -> bool:
    """Whether ``answer`` holds a keyword of every group (in order, for ``ordered``)."""
    text = answer.casefold()
    positions: list[int] = []
    for group in question.keywords:
        found = [text.find(word.casefold()) for word in group]
        hits = [position for position in found if position >= 0]
        if not hits:
            return False
        positions.append(min(hits))
    if question.ordered:
        return all(a < b for a, b in itertools.pairwise(positions))
    return True


# ------------------------------------------------------------------ recording client


@dataclass
class Call:
    """One chat-completions call: what was sent and the prompt tokens the API reported."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    prompt_tokens: int | None
    # Of prompt_tokens, those the server read from its prompt cache (0: none reported).
    cached_tokens: int = 0

    @property
    def counted_tokens(self) -> int:
        """The request's prompt tokens in cl100k_base: messages, framing and tool schemas."""
        return COUNTER.count_messages(self.messages, self.tools or None)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens if self.prompt_tokens is not None else self.counted_tokens

    @property
    def tool_names(self) -> list[str]:
        return [str(tool.get("function", {}).get("name")) for tool in self.tools]


class RecordingClient:
    """Stands in for ``openai.AsyncOpenAI`` where the bot uses it (``with_options`` and
    ``post``, and ``chat.completions.create`` for the baseline) and records every
    successful call in ``calls``; the server's usage is kept when ``use_usage``, else
    every call is counted here."""

    def __init__(
        self, client: Any, calls: list[Call] | None = None, *, use_usage: bool = True
    ) -> None:
        self._client = client
        self.calls: list[Call] = calls if calls is not None else []
        self.use_usage = use_usage
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))

    def with_options(self, **options: Any) -> RecordingClient:
        return RecordingClient(
            self._client.with_options(**options), self.calls, use_usage=self.use_usage
        )

    async def post(self, path: str, **arguments: Any) -> Any:
        """The bot's requests (``bot.llm.client.post_chat``): the body as sent."""
        answer = await self._client.post(path, **arguments)
        self._record(arguments.get("body") or {}, answer)
        return answer

    async def _create(self, **request: Any) -> Any:
        completion = await self._client.chat.completions.create(**request)
        self._record(request, completion)
        return completion

    def _record(self, request: Mapping[str, Any], answer: Any) -> None:
        # A streamed answer's usage is not read here: it counts as unreported.
        prompt, _, cached = reported_tokens(answer)
        self.calls.append(
            Call(
                messages=[dict(message) for message in request.get("messages", [])],
                tools=list(request.get("tools") or []),
                prompt_tokens=prompt if self.use_usage and prompt else None,
                cached_tokens=cached,
            )
        )

    async def close(self) -> None:
        await self._client.close()


# ----------------------------------------------------------------------------- replay


@dataclass
class TurnRecord:
    """One bot turn of the replay."""

    kind: str  # "conversation" or "question"
    post: Post
    window: tuple[RawMessage, ...]  # the channel's raw window as the turn saw it
    transcript_size: int  # messages posted in the channel so far, the trigger included
    first_call: int  # index of the turn's first model call in the client's ``calls``
    call_count: int
    reply: TurnReply
    after_restart: bool

    @property
    def stm_saved(self) -> bool:
        return any(result.startswith("saved") for result in self.reply.stm_results)

    @property
    def marker_id(self) -> int | None:
        """The message the memory covers through when this turn saved it."""
        turn = self.reply.turn
        if not self.stm_saved or turn is None or turn.marker is None:
            return None
        return turn.marker.message_id

    def calls(self, all_calls: Sequence[Call]) -> list[Call]:
        return list(all_calls[self.first_call : self.first_call + self.call_count])


class ReplayAborted(RuntimeError):
    """A turn failed (the model could not be reached or refused): the comparison would be
    meaningless, so the replay stops there."""

    def __init__(self, record: TurnRecord) -> None:
        super().__init__(
            f"the bot's turn on {record.post.message.line()!r} failed: {record.reply.text}"
        )
        self.record = record


class Replay:
    """Plays the fixture through Kioku's pipeline: every message is observed in the
    channel, the bot runs a turn where the fixture addresses it, the clock moves to each
    message's time, and a session marked ``restart_before`` starts with a fresh memory
    service (the STM comes back from PostgreSQL, the raw window from channel history)."""

    def __init__(
        self,
        fixture: Fixture,
        *,
        sessions: async_sessionmaker[AsyncSession],
        settings: Settings,
        client: RecordingClient,
        clock: ManualClock,
        script: Callable[[Scripted], None] | None = None,
        persona: str | None = None,
    ) -> None:
        self.fixture = fixture
        self.settings = settings
        self.client = client
        self.clock = clock
        self.script = script
        self._sessions = sessions
        self._persona = persona
        self.transcript: list[RawMessage] = []
        self.turns: list[TurnRecord] = []
        self.restarts = 0
        self._restarted = False
        self.memory, self.runner = self._start()

    def _start(self) -> tuple[MemoryService, TurnRunner]:
        memory = MemoryService(self._sessions, self.settings, clock=self.clock)
        longterm = LongTermService(self._sessions, self.settings, self.clock)
        runner = TurnRunner(
            memory, self.client, self.settings, longterm=longterm, persona=self._persona
        )
        # What the chat cog back-fills from Discord's channel history on the first message.
        memory.windows.prime(
            self.fixture.channel_id, self.transcript[-self.settings.stm.raw_window :]
        )
        return memory, runner

    async def restart(self) -> None:
        await self.runner.drain()
        self.memory, self.runner = self._start()
        self.restarts += 1
        self._restarted = True

    def _advance_to(self, at: datetime) -> None:
        delta = at - self.clock.now()
        if delta < timedelta(0):
            raise ValueError(f"the fixture goes back in time at {at.isoformat()}")
        self.clock.advance(seconds=delta.total_seconds())

    def _post(self, message: RawMessage) -> None:
        self.memory.observe_message(self.fixture.channel_id, message)
        self.transcript.append(message)

    async def _turn(self, post: Post, kind: str) -> TurnRecord:
        if self.script is not None and post.scripted is not None:
            self.script(post.scripted)
        first = len(self.client.calls)
        window = tuple(self.memory.windows.get(self.fixture.channel_id))
        reply = await self.runner.run(self.fixture.request(post))
        record = TurnRecord(
            kind=kind,
            post=post,
            window=window,
            transcript_size=len(self.transcript),
            first_call=first,
            call_count=len(self.client.calls) - first,
            reply=reply,
            after_restart=self._restarted,
        )
        self._restarted = False
        self.turns.append(record)
        if reply.failed:
            raise ReplayAborted(record)
        bot_message = self.fixture.bot_message(post, reply.text)
        self._advance_to(bot_message.created_at)
        self._post(bot_message)
        return record

    async def _play(self, post: Post, kind: str) -> TurnRecord | None:
        self._advance_to(post.message.created_at)
        self._post(post.message)
        return await self._turn(post, kind) if post.to_bot else None

    async def run_conversation(self) -> None:
        for session in self.fixture.sessions:
            self._advance_to(session.start)
            if session.restart_before:
                await self.restart()
            for post in session.posts:
                await self._play(post, "conversation")
        await self.runner.drain()

    async def ask_questions(self) -> list[TurnRecord]:
        records: list[TurnRecord] = []
        for post in self.fixture.question_posts:
            record = await self._play(post, "question")
            assert record is not None
            records.append(record)
        await self.runner.drain()
        return records

    @property
    def question_turns(self) -> list[TurnRecord]:
        return [turn for turn in self.turns if turn.kind == "question"]

    @property
    def conversation_turns(self) -> list[TurnRecord]:
        return [turn for turn in self.turns if turn.kind == "conversation"]


# --------------------------------------------------------------------------- baseline


def baseline_messages(fixture: Fixture, persona: str, post: Post) -> list[dict[str, str]]:
    """What the baseline sends for the question ``post``: the persona, the last
    ``baseline_messages`` messages of the reference transcript, then the question."""
    system = render_persona(persona, fixture.request(post), post.message.created_at)
    messages = [{"role": "system", "content": system}]
    for message in fixture.reference_transcript()[-fixture.baseline_messages :]:
        if message.is_bot:
            messages.append({"role": "assistant", "content": message.content})
        else:
            messages.append({"role": "user", "content": message.line()})
    messages.append({"role": "user", "content": post.message.line()})
    return messages


async def ask_baseline(
    fixture: Fixture,
    client: RecordingClient,
    settings: Settings,
    persona: str,
    *,
    before_each: Callable[[], None] | None = None,
) -> list[str]:
    """Each question with only the recent raw history; returns the answers in order
    (an error message in place of an answer when the call failed)."""
    answers: list[str] = []
    for post in fixture.question_posts:
        if before_each is not None:
            before_each()
        try:
            completion = await client.chat.completions.create(
                model=settings.model,
                messages=baseline_messages(fixture, persona, post),
                temperature=settings.llm.temperature,
                max_tokens=settings.llm.max_reply_tokens,
                timeout=settings.llm.timeout_seconds,
            )
        except Exception as exc:  # any client error: count the question as failed
            answers.append(f"(call failed: {type(exc).__name__})")
            continue
        choices = getattr(completion, "choices", None) or []
        content = getattr(choices[0].message, "content", None) if choices else None
        answers.append(content if isinstance(content, str) else "")
    return answers


# ---------------------------------------------------------------------------- reports


@dataclass
class SystemScore:
    name: str
    answers: list[str]
    correct: list[bool]
    turn_tokens: list[int]
    calls: list[Call] = field(default_factory=list)
    failed: int = 0

    @property
    def accuracy(self) -> str:
        right, total = sum(self.correct), len(self.correct)
        return f"{right}/{total} ({100 * right / total:.0f}%)" if total else "0/0"

    @property
    def mean_tokens(self) -> float:
        return sum(self.turn_tokens) / len(self.turn_tokens) if self.turn_tokens else 0.0


def token_source(calls: Sequence[Call]) -> str:
    reported = sum(call.prompt_tokens is not None for call in calls)
    if calls and reported == len(calls):
        return "usage.prompt_tokens reported by the API"
    if reported == 0:
        return "counted with cl100k_base (no usage reported, or a dry run)"
    return f"usage.prompt_tokens where reported ({reported}/{len(calls)} calls), else cl100k_base"


def _turn_tokens(turn: TurnRecord, calls: Sequence[Call]) -> int:
    return sum(call.tokens for call in turn.calls(calls))


def report(
    fixture: Fixture,
    replay: Replay,
    kioku: SystemScore,
    baseline: SystemScore,
    *,
    endpoint: str,
    model: str,
    dry_run: bool,
    verbose: bool,
) -> str:
    posts = fixture.posts
    speakers = len({post.speaker.key for post in posts})
    conversation = replay.conversation_turns
    lines = [
        f"Kioku memory eval: fixture {fixture.name} ({len(replay.transcript)} channel messages "
        f"incl. questions, {len(fixture.sessions)} sessions over "
        f"{(fixture.question_posts[-1].message.created_at - fixture.start).days + 1} days, "
        f"{speakers} speakers, {len(fixture.questions)} questions)",
        f"model {model} at {endpoint}"
        + (" (DRY RUN: scripted server, canned answers)" if dry_run else ""),
        "",
        f"{'question':<20} {'kind':<18} {'kioku':<6} {'baseline':<8}",
    ]
    for index, question in enumerate(fixture.questions):
        lines.append(
            f"{question.id:<20} {question.kind:<18} "
            f"{'ok' if kioku.correct[index] else 'wrong':<6} "
            f"{'ok' if baseline.correct[index] else 'wrong':<8}"
        )
    conversation_tokens = [_turn_tokens(turn, kioku.calls) for turn in conversation]
    mean_conversation = (
        f"{sum(conversation_tokens) / len(conversation_tokens):.0f}" if conversation_tokens else "-"
    )
    lines += [
        "",
        f"{'system':<10} {'accuracy':<12} {'prompt tokens / question turn':<31} "
        f"{'prompt tokens / conversation turn'}",
        f"{'kioku':<10} {kioku.accuracy:<12} {kioku.mean_tokens:<31.0f} {mean_conversation}",
        f"{'baseline':<10} {baseline.accuracy:<12} {baseline.mean_tokens:<31.0f} -",
        "",
        "prompt tokens: " + token_source(kioku.calls + baseline.calls),
    ]
    cached = sum(call.cached_tokens for call in kioku.calls)
    if cached:
        reported = sum(call.prompt_tokens or 0 for call in kioku.calls)
        lines.append(
            f"kioku prompt tokens read from the server's prompt cache: {cached} of {reported} "
            f"({cached / reported:.0%})"
        )
    stm_writes = sum(turn.stm_saved for turn in replay.turns)
    remembered = sum(
        name == REMEMBER_TOOL_NAME and outcome.startswith(("saved", "updated"))
        for turn in replay.turns
        for name, outcome in _tool_results(turn, kioku.calls)
    )
    lines.append(
        f"kioku memory writes by the model: {stm_writes} short-term, {remembered} long-term; "
        f"baseline window: last {fixture.baseline_messages} messages"
    )
    failures = kioku.failed + baseline.failed
    if failures:
        lines.append(f"FAILED model calls: kioku {kioku.failed}, baseline {baseline.failed}")
    if verbose:
        lines.append("")
        for index, question in enumerate(fixture.questions):
            lines += [
                f"[{question.id}] {question.text}",
                f"  expected: {question.expected}",
                f"  kioku:    {' '.join(kioku.answers[index].split())}",
                f"  baseline: {' '.join(baseline.answers[index].split())}",
            ]
    return "\n".join(line.rstrip() for line in lines)


def _tool_results(turn: TurnRecord, calls: Sequence[Call]) -> list[tuple[str, str]]:
    """(tool name, result) of the turn's tool calls, read from its follow-up requests
    (each one repeats the earlier tool messages, so results are keyed by call id)."""
    names: dict[str, str] = {}
    results: dict[str, tuple[str, str]] = {}
    for call in turn.calls(calls):
        for message in call.messages:
            for tool_call in message.get("tool_calls") or []:
                names[str(tool_call["id"])] = str(tool_call["function"]["name"])
            if message.get("role") == "tool":
                call_id = str(message.get("tool_call_id"))
                results[call_id] = (names.get(call_id, "?"), str(message.get("content")))
    return list(results.values())


# ------------------------------------------------------------------------------- main


USAGE = """\
memory_eval: no model endpoint configured, nothing to measure.

Replays tests/data/memory_eval.json through Kioku with a real OpenAI-compatible model and
compares answer accuracy and prompt tokens with a last-25-messages baseline. Run it with:

  OPENAI_BASE_URL=http://localhost:11434/v1 KIOKU_MODEL=qwen2.5:7b python benchmarks/memory_eval.py
  OPENAI_API_KEY=sk-... KIOKU_MODEL=gpt-4o-mini python benchmarks/memory_eval.py
  python benchmarks/memory_eval.py --base-url URL --model NAME [--api-key KEY] [--provider NAME]
  python benchmarks/memory_eval.py --dry-run      # scripted server, canned answers (no model)
"""
FIGURE_NAME = "memory eval"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Kioku vs a raw-history baseline on the memory evaluation fixture."
    )
    parser.add_argument("--base-url", help="OpenAI-compatible base URL (else OPENAI_BASE_URL)")
    parser.add_argument("--model", help="model name (else KIOKU_MODEL)")
    parser.add_argument("--api-key", help="API key (else OPENAI_API_KEY)")
    parser.add_argument("--provider", help="provider row of the capability table")
    parser.add_argument("--cadence", type=int, help="STM refresh cadence (default: settings)")
    parser.add_argument("--fixture", type=Path, default=FIXTURE_PATH)
    parser.add_argument("--dry-run", action="store_true", help="scripted server, canned answers")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every answer")
    parser.add_argument("--json", action="store_true", help="one line for run_all.py")
    return parser.parse_args(argv)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    if args.base_url:
        overrides["openai_base_url"] = args.base_url
    if args.model:
        overrides["model"] = args.model
    if args.api_key:
        overrides["openai_api_key"] = args.api_key
    if args.provider:
        overrides["provider"] = args.provider
    if args.cadence is not None:
        overrides["stm"] = {"refresh_cadence": args.cadence}
    return overrides


async def evaluate(
    fixture: Fixture,
    settings: Settings,
    client: Any,
    *,
    script: Callable[[Scripted], None] | None = None,
    before_baseline: Callable[[], None] | None = None,
    use_usage: bool = True,
) -> tuple[Replay, SystemScore, SystemScore]:
    """Run both systems on ``fixture`` with an embedded PostgreSQL in ``settings.data_dir``."""
    persona = bot_persona(settings)
    database = Database(settings)
    await database.start()
    try:
        await upgrade(database.engine)
        kioku_client = RecordingClient(client, use_usage=use_usage)
        replay = Replay(
            fixture,
            sessions=database.sessions,
            settings=settings,
            client=kioku_client,
            clock=ManualClock(fixture.start),
            script=script,
            persona=persona,
        )
        await replay.run_conversation()
        asked = await replay.ask_questions()
    finally:
        await database.close()
    kioku = SystemScore(
        "kioku",
        answers=[turn.reply.text for turn in asked],
        correct=[
            check_answer(question, turn.reply.text)
            for question, turn in zip(fixture.questions, asked, strict=True)
        ],
        turn_tokens=[_turn_tokens(turn, kioku_client.calls) for turn in asked],
        calls=kioku_client.calls,
    )
    baseline_client = RecordingClient(client, use_usage=use_usage)
    answers = await ask_baseline(
        fixture, baseline_client, settings, persona, before_each=before_baseline
    )
    baseline = SystemScore(
        "baseline",
        answers=answers,
        correct=[
            check_answer(question, answer)
            for question, answer in zip(fixture.questions, answers, strict=True)
        ],
        turn_tokens=[call.tokens for call in baseline_client.calls],
        calls=baseline_client.calls,
        failed=sum(answer.startswith("(call failed") for answer in answers),
    )
    return replay, kioku, baseline


def figures(kioku: SystemScore, baseline: SystemScore, note: str) -> list[Figure]:
    """The run's figures for ``run_all.py``: Kioku should answer at least as well."""
    source = "usage" if all(c.prompt_tokens is not None for c in kioku.calls) else "cl100k_base"
    return [
        Figure(
            f"{FIGURE_NAME}: accuracy, kioku",
            kioku.accuracy,
            "≥ baseline",
            sum(kioku.correct) >= sum(baseline.correct),
            note,
        ),
        Figure(f"{FIGURE_NAME}: accuracy, last-25 baseline", baseline.accuracy, note=note),
        Figure(
            f"{FIGURE_NAME}: prompt tokens/question, kioku",
            f"{kioku.mean_tokens:.0f}",
            note=f"mean per question turn ({source})",
        ),
        Figure(
            f"{FIGURE_NAME}: prompt tokens/question, baseline",
            f"{baseline.mean_tokens:.0f}",
            note=f"mean per question turn ({source})",
        ),
    ]


def _publish(
    args: argparse.Namespace,
    fixture: Fixture,
    results: tuple[Replay, SystemScore, SystemScore],
    *,
    endpoint: str,
    model: str,
) -> int:
    replay, kioku, baseline = results
    if args.json:
        note = f"{model}, dry run (canned answers)" if args.dry_run else model
        emit(figures(kioku, baseline, note), as_json=True)
    else:
        print(
            report(
                fixture,
                replay,
                kioku,
                baseline,
                endpoint=endpoint,
                model=model,
                dry_run=args.dry_run,
                verbose=args.verbose,
            )
        )
    return 1 if kioku.failed or baseline.failed else 0


async def dry_run(args: argparse.Namespace, fixture: Fixture, folder: Path) -> int:
    from tests.helpers.fake_llm import ScriptedLLM

    async with ScriptedLLM(model_id=DRY_RUN_MODEL) as llm:
        settings = load_settings(
            database_url=None,
            data_dir=folder,
            openai_base_url=llm.base_url,
            openai_api_key="dry-run",
            model=DRY_RUN_MODEL,
            provider="openai",
            llm={"max_retries": 0},
            **({"stm": {"refresh_cadence": args.cadence}} if args.cadence is not None else {}),
        )

        def script(scripted: Scripted) -> None:
            if scripted.tools:
                llm.reply_tool_calls([(tool.name, dict(tool.arguments)) for tool in scripted.tools])
            llm.reply_text(scripted.reply)

        client = make_client(settings)
        try:
            results = await evaluate(
                fixture,
                settings,
                client,
                script=script,
                before_baseline=lambda: llm.reply_text(BASELINE_CANNED_ANSWER),
                use_usage=False,  # the scripted server's usage is characters / 4
            )
        finally:
            await client.close()
        code = _publish(
            args, fixture, results, endpoint="an in-process scripted server", model=DRY_RUN_MODEL
        )
        if llm.unscripted or llm.pending:
            print(
                f"dry run out of step with the script: {llm.unscripted} unscripted call(s), "
                f"{llm.pending} scripted response(s) unused",
                file=sys.stderr,
            )
            return 1
    return code


async def real_run(args: argparse.Namespace, fixture: Fixture, settings: Settings) -> int:
    client = make_client(settings)
    try:
        results = await evaluate(fixture, settings, client)
    finally:
        await client.close()
    endpoint = settings.openai_base_url or "https://api.openai.com/v1"
    return _publish(args, fixture, results, endpoint=endpoint, model=settings.model)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    fixture = load_fixture(args.fixture)
    with tempfile.TemporaryDirectory(prefix="kioku-memory-eval-") as folder:
        if args.dry_run:
            try:
                return asyncio.run(dry_run(args, fixture, Path(folder)))
            except ReplayAborted as exc:
                print(f"memory_eval: {exc}", file=sys.stderr)
                return 1
        try:
            settings = load_settings(database_url=None, data_dir=Path(folder), **_overrides(args))
        except SettingsError as exc:
            print(f"memory_eval: bad settings:\n{exc}", file=sys.stderr)
            return 2
        if settings.openai_base_url is None and settings.openai_api_key is None:
            if args.json:
                emit([skipped(FIGURE_NAME, "--dry-run")], as_json=True)
            else:
                print(USAGE)
            return 0
        try:
            return asyncio.run(real_run(args, fixture, settings))
        except ReplayAborted as exc:
            print(f"memory_eval: {exc}", file=sys.stderr)
            return 1


if __name__ == "__main__":
    sys.exit(main())
