"""The run's report: per system F1 (overall and per category), judge accuracy, prompt
tokens per question, memory-building calls and tokens, latency; as JSON and a table."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks.recall.dataset import CATEGORIES
from benchmarks.recall.proxy import TOKEN_COUNTER, Call


@dataclass
class QuestionResult:
    sample_id: str
    key: str
    question: str
    category: int
    gold: str
    answer: str
    score: float
    seconds: float
    failed: bool = False
    cut: bool = False
    judge: bool | None = None
    calls: int = 0
    counted_prompt_tokens: int = 0
    server_prompt_tokens: int | None = None
    server_completion_tokens: int | None = None
    server_cached_tokens: int = 0


@dataclass
class SystemRun:
    name: str
    results: list[QuestionResult] = field(default_factory=list)
    ingest_calls: list[Call] = field(default_factory=list)


def percentile(values: Sequence[float], share: float) -> float | None:
    """Linear interpolation between the closest ranks (None without values)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = share * (len(ordered) - 1)
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _server_total(values: Sequence[int | None]) -> int | None:
    """The server's figures summed, or None if it left any out."""
    if not values or any(value is None for value in values):
        return None
    return sum(value for value in values if value is not None)


def _scores(results: Sequence[QuestionResult], judged: bool) -> dict[str, Any]:
    def of(group: Sequence[QuestionResult]) -> float | None:
        if judged:
            verdicts = [r.judge for r in group if r.judge is not None]
            return _mean([1.0 if v else 0.0 for v in verdicts])
        return _mean([r.score for r in group])

    by_category = {}
    for number, name in CATEGORIES.items():
        group = [r for r in results if r.category == number]
        if group:
            by_category[name] = {"score": of(group), "questions": len(group)}
    return {"overall": of(results), "by_category": by_category}


def summarize(run: SystemRun, *, judged: bool) -> dict[str, Any]:
    results = run.results
    ingest = run.ingest_calls
    server_prompt = [r.server_prompt_tokens for r in results]
    return {
        "questions": len(results),
        "failed": sum(r.failed for r in results),
        "cut": sum(r.cut for r in results),
        "f1": _scores(results, judged=False),
        "judge": _scores(results, judged=True) if judged else None,
        "answering": {
            "calls": sum(r.calls for r in results),
            "prompt_tokens_per_question": {
                "counted": _mean([r.counted_prompt_tokens for r in results]),
                "server": None
                if _server_total(server_prompt) is None
                else _mean([v for v in server_prompt if v is not None]),
            },
            "server_completion_tokens": _server_total(
                [r.server_completion_tokens for r in results]
            ),
            "server_cached_prompt_tokens": sum(r.server_cached_tokens for r in results),
        },
        "memory_building": {
            "calls": len(ingest),
            "prompt_tokens": {
                "counted": sum(c.counted_prompt_tokens for c in ingest),
                "server": _server_total([c.server_prompt_tokens for c in ingest]),
            },
            "server_completion_tokens": _server_total([c.server_completion_tokens for c in ingest]),
            "server_cached_prompt_tokens": sum(c.server_cached_tokens for c in ingest),
        },
        "latency_seconds": {
            "p50": percentile([r.seconds for r in results], 0.5),
            "p95": percentile([r.seconds for r in results], 0.95),
        },
        "answers": [asdict(r) for r in results],
    }


def build_report(
    runs: Sequence[SystemRun], meta: Mapping[str, Any], *, judged: bool
) -> dict[str, Any]:
    return {
        "benchmark": "locomo",
        **meta,
        "token_counter": TOKEN_COUNTER,
        "systems": {run.name: summarize(run, judged=judged) for run in runs},
    }


def _number(value: float | int | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.{digits}f}"


def _tokens(counted: float | int | None, server: float | int | None) -> str:
    text = _number(counted, 0) if isinstance(counted, float) else _number(counted)
    if server is not None:
        shown = _number(server, 0) if isinstance(server, float) else _number(server)
        text += f" / {shown}"
    return text


def markdown(report: Mapping[str, Any]) -> str:
    """The report as a markdown table (one row per system) and its notes."""
    names = list(CATEGORIES.values())
    judged = any(s["judge"] is not None for s in report["systems"].values())
    header = ["system", "F1", *names]
    if judged:
        header.append("judge")
    header += [
        "prompt tok/q",
        "memory calls",
        "memory tok",
        "p50 s",
        "p95 s",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, system in report["systems"].items():
        label = f"{name} (cut)" if system["cut"] else name
        f1 = system["f1"]
        row = [label, _number(f1["overall"])]
        row += [_number(f1["by_category"].get(c, {}).get("score")) for c in names]
        if judged:
            row.append(_number(system["judge"]["overall"]) if system["judge"] else "-")
        answering = system["answering"]["prompt_tokens_per_question"]
        memory = system["memory_building"]
        row += [
            _tokens(answering["counted"], answering["server"]),
            _number(memory["calls"]),
            _tokens(memory["prompt_tokens"]["counted"], memory["prompt_tokens"]["server"]),
            _number(system["latency_seconds"]["p50"], 2),
            _number(system["latency_seconds"]["p95"], 2),
        ]
        lines.append("| " + " | ".join(row) + " |")
    counts = {name: s["questions"] for name, s in report["systems"].items()}
    failed = {name: s["failed"] for name, s in report["systems"].items() if s["failed"]}
    cut = {name: s["cut"] for name, s in report["systems"].items() if s["cut"]}
    notes = [
        "",
        f"model {report['model']} at {report['base_url']}; dataset {report['dataset']} "
        f"({report['samples']} conversations, {report['sessions_ingested']} sessions, "
        f"questions per system {counts})",
        f"tokens: counted here ({report['token_counter']}) / as the server reported",
    ]
    if report.get("scripted"):
        notes.append(
            "SCRIPTED: the evidence oracle answered (right exactly when the evidence "
            "was in the prompt): these scores measure recall into the prompt, not a model"
        )
    cached = {
        name: s["answering"]["server_cached_prompt_tokens"]
        + s["memory_building"]["server_cached_prompt_tokens"]
        for name, s in report["systems"].items()
    }
    if any(cached.values()):
        notes.append(f"prompt tokens the server read from its prompt cache: {cached}")
    if cut:
        notes.append(f"cut: the conversation did not fit the context in {cut} questions")
    if failed:
        notes.append(f"FAILED answers: {failed}")
    return "\n".join([*lines, *notes])
