"""One run: every chosen system ingests each conversation, then answers its questions.

Systems go one after another within a conversation (every question of one system, then
the next system's), so a local server's prompt cache serves one client at a time. A
question is asked with :data:`ASK_SUFFIX`, the same words for every system.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TextIO

import openai

from benchmarks._persona import bot_persona
from benchmarks.recall.baselines import BASELINES, BaselineSystem
from benchmarks.recall.dataset import Question, Sample, Session
from benchmarks.recall.judge import judge
from benchmarks.recall.kioku import Answer, KiokuSystem, SessionClock
from benchmarks.recall.progress import Progress
from benchmarks.recall.proxy import Phase, RecordingProxy
from benchmarks.recall.report import QuestionResult, SystemRun, build_report
from benchmarks.recall.scoring import score
from bot.config import Settings
from bot.db.engine import Database
from bot.db.migrate import upgrade
from bot.llm import make_client

SYSTEMS = ("kioku", *BASELINES)
ASK_SUFFIX = (
    " Answer with a short phrase, using words from the conversation where you can."
    " If the conversation does not say, answer: not mentioned."
)


class System(Protocol):
    name: str

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def ingest(self, sample: Sample, sessions: tuple[Session, ...]) -> None: ...

    async def answer(self, sample: Sample, key: str, asked: str) -> Answer: ...


@dataclass(frozen=True)
class Options:
    dataset: Path
    systems: tuple[str, ...] = SYSTEMS
    sessions: int | None = None  # the first K sessions of each conversation
    max_questions: int | None = None  # per conversation
    samples: int | None = None  # the first N conversations
    context_tokens: int = 8192
    judge_url: str | None = None
    judge_model: str | None = None
    judge_api_key: str | None = None


@dataclass(frozen=True)
class Planned:
    sample: Sample
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]


def plan(samples: Sequence[Sample], options: Options) -> list[Planned]:
    """What is ingested and asked: the first ``sessions`` of each of the first ``samples``
    conversations, and the first ``max_questions`` questions answerable from them (all
    of a question's evidence ingested; one naming no evidence needs every session)."""
    planned: list[Planned] = []
    for sample in samples[: options.samples]:
        sessions = sample.sessions[: options.sessions]
        numbers = {session.number for session in sessions}
        everything = len(sessions) == len(sample.sessions)
        questions = [q for q in sample.questions if _answerable(q, numbers, everything)]
        planned.append(Planned(sample, sessions, tuple(questions[: options.max_questions])))
    return planned


def _answerable(question: Question, ingested: set[int], everything: bool) -> bool:
    needed = question.sessions_needed()
    return everything if needed is None else needed <= ingested


def question_key(sample: Sample, question: Question) -> str:
    return f"{sample.sample_id}#{question.index}"


async def run_benchmark(
    options: Options,
    samples: Sequence[Sample],
    settings: Settings,
    *,
    database: Database | None = None,
    before_forward: Callable[[Mapping[str, Any]], None] | None = None,
    progress_stream: TextIO | None = None,
    scripted: bool = False,
) -> dict[str, Any]:
    """Run ``options`` on ``samples`` against ``settings``' endpoint; return the report.

    ``database``: an already migrated one (tests); else an embedded PostgreSQL is made in
    a temporary folder. ``before_forward`` sees each model request first (the oracle)."""
    upstream = settings.llm_base_url
    planned = plan(samples, options)
    proxy = await RecordingProxy(upstream, before_forward=before_forward).start()
    proxied = settings.model_copy(update={"openai_base_url": proxy.base_url})
    owned = database is None
    try:
        with tempfile.TemporaryDirectory(prefix="kioku-locomo-") as folder:
            if database is None:
                proxied = proxied.model_copy(
                    update={"data_dir": Path(folder), "database_url": None}
                )
                database = Database(proxied)
                await database.start()
                await upgrade(database.engine)
            client = make_client(proxied)
            try:
                runs = await _run_systems(
                    options, planned, proxied, database, proxy, client, progress_stream
                )
                if options.judge_url and options.judge_model:
                    await _judge_all(options, runs, planned, settings)
            finally:
                await client.close()
                if owned:
                    await database.close()
    finally:
        await proxy.close()
    meta = {
        "dataset": str(options.dataset),
        "model": settings.model,
        "base_url": upstream,
        "scripted": scripted,
        "samples": len(planned),
        "sessions_ingested": sum(len(p.sessions) for p in planned),
        "options": {
            "sessions": options.sessions,
            "max_questions": options.max_questions,
            "samples": options.samples,
            "context_tokens": options.context_tokens,
            "systems": list(options.systems),
            "judge_model": options.judge_model if options.judge_url else None,
        },
    }
    return build_report(runs, meta, judged=bool(options.judge_url and options.judge_model))


async def _run_systems(
    options: Options,
    planned: Sequence[Planned],
    settings: Settings,
    database: Database,
    proxy: RecordingProxy,
    client: openai.AsyncOpenAI,
    progress_stream: TextIO | None,
) -> list[SystemRun]:
    first = next((p.sessions[0].start for p in planned if p.sessions), None)
    systems: list[System] = []
    for name in options.systems:
        if name == "kioku":
            clock = SessionClock(first or datetime.now(UTC))
            systems.append(KiokuSystem(settings, database, proxy, clock))
        else:
            persona = bot_persona(settings)
            systems.append(
                BaselineSystem(name, settings, client, proxy, persona, options.context_tokens)
            )
    turns = sum(len(s.turns) for p in planned for s in p.sessions)
    asked = sum(len(p.questions) for p in planned)
    progress = Progress(
        turns * ("kioku" in options.systems) + asked * len(systems), progress_stream
    )
    runs = {system.name: SystemRun(system.name) for system in systems}
    for system in systems:
        await system.start()
    try:
        for item in planned:
            for system in systems:
                if isinstance(system, KiokuSystem):
                    progress.step(f"kioku: ingesting {item.sample.sample_id}", 0)
                    await system.ingest(item.sample, item.sessions, on_turn=progress.step)
                else:
                    await system.ingest(item.sample, item.sessions)
            for system in systems:
                for question in item.questions:
                    key = question_key(item.sample, question)
                    progress.step(f"{system.name}: {key}", 0)
                    answer = await system.answer(item.sample, key, question.question + ASK_SUFFIX)
                    runs[system.name].results.append(
                        _result(item, question, key, answer, proxy, system.name)
                    )
                    progress.step()
    finally:
        for system in systems:
            await system.close()
        progress.finish()
    for run in runs.values():
        run.ingest_calls = [
            c
            for c in proxy.calls
            if c.phase is not None and c.phase.system == run.name and c.phase.stage == "ingest"
        ]
    return list(runs.values())


def _result(
    item: Planned,
    question: Question,
    key: str,
    answer: Answer,
    proxy: RecordingProxy,
    system: str,
) -> QuestionResult:
    calls = proxy.calls_in([Phase(system, "answer", key)])
    server_prompt = [c.server_prompt_tokens for c in calls]
    server_completion = [c.server_completion_tokens for c in calls]
    return QuestionResult(
        sample_id=item.sample.sample_id,
        key=key,
        question=question.question,
        category=question.category,
        gold=question.answer,
        answer=answer.text,
        score=0.0 if answer.failed else score(question.category, answer.text, question.answer),
        seconds=answer.seconds,
        failed=answer.failed,
        cut=answer.cut,
        calls=len(calls),
        counted_prompt_tokens=sum(c.counted_prompt_tokens for c in calls),
        server_prompt_tokens=None
        if not calls or None in server_prompt
        else sum(v for v in server_prompt if v is not None),
        server_completion_tokens=None
        if not calls or None in server_completion
        else sum(v for v in server_completion if v is not None),
        server_cached_tokens=sum(c.server_cached_tokens for c in calls),
    )


async def _judge_all(
    options: Options, runs: Sequence[SystemRun], planned: Sequence[Planned], settings: Settings
) -> None:
    questions = {question_key(p.sample, q): q for p in planned for q in p.questions}
    client = openai.AsyncOpenAI(
        base_url=options.judge_url,
        api_key=options.judge_api_key or "unset",
        timeout=settings.llm.timeout_seconds,
        max_retries=settings.llm.max_retries,
    )
    assert options.judge_model is not None
    try:
        for run in runs:
            for result in run.results:
                result.judge = await judge(
                    client, options.judge_model, questions[result.key], result.answer
                )
    finally:
        await client.close()
