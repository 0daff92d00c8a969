"""LoCoMo for Kioku: long-conversation question answering, Kioku against baselines.

Reads conversations in LoCoMo's published JSON layout (https://github.com/snap-research/locomo,
``data/locomo10.json``; not shipped here, its terms are non-commercial: CC BY-NC 4.0) or
the project's own fixture ``benchmarks/data/kioku_locomo.json`` (the default). Each
conversation is posted in a Discord channel (dpytest) at its sessions' dates, through
the real bot with an embedded PostgreSQL; then each question is asked of every system,
on one model: ``kioku`` (the bot, mentioned in the channel), ``raw`` (the last 25
messages), ``full`` (the whole conversation, cut to the context) and ``none``. Scores are
LoCoMo's token F1 per category, plus an optional LLM judge. See docs/memory.md.

Usage::

    python benchmarks/locomo.py --scripted                       # no model: evidence oracle
    python benchmarks/locomo.py path/to/locomo10.json --base-url http://127.0.0.1:8080/v1 \\
        --model qwen-1.5b --sessions 3 --max-questions 10 --out locomo.json

The endpoint is found as the bot finds it (arguments, then ``OPENAI_BASE_URL`` /
``OPENAI_API_KEY`` / ``KIOKU_MODEL``, ``.env``, ``config/kioku.toml``); with none it
prints how to run it and exits 0. Exit codes: 0 done, 1 some answer failed, 2 a bad
dataset file or bad arguments (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._figures import Figure, emit, skipped
from benchmarks.recall import (
    SYSTEMS,
    DatasetError,
    EvidenceOracle,
    Options,
    Sample,
    load_dataset,
    markdown,
    run_benchmark,
)
from bot.config import Settings, SettingsError, load_settings
from tests.helpers.fake_llm import ScriptedLLM

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "benchmarks" / "data" / "kioku_locomo.json"
SCRIPTED_MODEL = "scripted-oracle"
FIGURE_NAME = "locomo"
# The questioner asks every question within minutes: no per-member turn limit.
HARNESS_LLM = {"turns_per_user_per_minute": 0}

USAGE = """\
locomo: no model endpoint configured, nothing to measure.

Run it against an OpenAI-compatible server, or with the scripted evidence oracle:

  python benchmarks/locomo.py [DATASET] --base-url URL --model NAME [--api-key KEY]
  OPENAI_BASE_URL=http://127.0.0.1:8080/v1 KIOKU_MODEL=qwen-1.5b python benchmarks/locomo.py
  python benchmarks/locomo.py --scripted      # scripted server (no model)
"""


def _systems(value: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(name.strip() for name in value.split(",") if name.strip()))
    unknown = [name for name in names if name not in SYSTEMS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown system {', '.join(unknown) or '(none)'}; choose from {','.join(SYSTEMS)}"
        )
    return names


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number")
    return number


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="locomo", description="Kioku's memory on LoCoMo-style conversations."
    )
    parser.add_argument(
        "dataset", nargs="?", type=Path, default=FIXTURE, help="LoCoMo JSON (default: fixture)"
    )
    parser.add_argument("--sessions", type=_positive, help="first K sessions per conversation")
    parser.add_argument("--max-questions", type=_positive, help="questions per conversation")
    parser.add_argument("--samples", type=_positive, help="first N conversations")
    parser.add_argument(
        "--systems", type=_systems, default=SYSTEMS, help=f"default {','.join(SYSTEMS)}"
    )
    parser.add_argument("--base-url", help="OpenAI-compatible base URL (else OPENAI_BASE_URL)")
    parser.add_argument("--model", help="model name (else KIOKU_MODEL)")
    parser.add_argument("--api-key", help="API key (else OPENAI_API_KEY)")
    parser.add_argument("--provider", help="provider row of the capability table")
    parser.add_argument(
        "--context-tokens", type=_positive, default=8192, help="the model's context (full)"
    )
    parser.add_argument("--judge-url", help="OpenAI-compatible base URL of an LLM judge")
    parser.add_argument("--judge-model", help="the judge's model")
    parser.add_argument("--judge-api-key", help="the judge's API key (else --api-key)")
    parser.add_argument("--out", type=Path, help="write the JSON report here")
    parser.add_argument("--scripted", action="store_true", help="scripted server, oracle answers")
    parser.add_argument("--json", action="store_true", help="one line for run_all.py")
    args = parser.parse_args(argv)
    if bool(args.judge_url) != bool(args.judge_model):
        parser.error("--judge-url and --judge-model go together")
    return args


def _options(args: argparse.Namespace) -> Options:
    return Options(
        dataset=args.dataset,
        systems=tuple(args.systems),
        sessions=args.sessions,
        max_questions=args.max_questions,
        samples=args.samples,
        context_tokens=args.context_tokens,
        judge_url=args.judge_url,
        judge_model=args.judge_model,
        judge_api_key=args.judge_api_key or args.api_key,
    )


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    overrides: dict[str, Any] = {"llm": dict(HARNESS_LLM)}
    for name, value in (
        ("openai_base_url", args.base_url),
        ("model", args.model),
        ("openai_api_key", args.api_key),
        ("provider", args.provider),
    ):
        if value:
            overrides[name] = value
    return overrides


def figures(report: dict[str, Any]) -> list[Figure]:
    """The run's figures for ``run_all.py``: F1 and prompt tokens per question per system."""
    note = report["model"] + (" (scripted oracle)" if report["scripted"] else "")
    found: list[Figure] = []
    for name, system in report["systems"].items():
        overall = system["f1"]["overall"]
        found.append(
            Figure(
                f"{FIGURE_NAME} F1, {name}",
                "-" if overall is None else f"{overall:.3f}",
                note=f"{system['questions']} questions; {note}",
            )
        )
        tokens = system["answering"]["prompt_tokens_per_question"]["counted"]
        found.append(
            Figure(
                f"{FIGURE_NAME} prompt tokens/question, {name}",
                "-" if tokens is None else f"{tokens:,.0f}",
                note="counted (cl100k_base)",
            )
        )
    return found


def publish(args: argparse.Namespace, report: dict[str, Any]) -> int:
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    if args.json:
        emit(figures(report), as_json=True)
    else:
        print(markdown(report))
    return 1 if any(s["failed"] for s in report["systems"].values()) else 0


async def scripted(args: argparse.Namespace, samples: list[Sample], folder: Path) -> dict[str, Any]:
    async with ScriptedLLM(model_id=SCRIPTED_MODEL) as llm:
        settings = load_settings(
            database_url=None,
            data_dir=folder,
            openai_base_url=llm.base_url,
            openai_api_key="scripted",
            model=SCRIPTED_MODEL,
            provider="openai",
            llm={**HARNESS_LLM, "max_retries": 0},
        )
        oracle = EvidenceOracle(llm.reply_text, samples)
        return await run_benchmark(
            _options(args), samples, settings, before_forward=oracle, scripted=True
        )


def _endpoint(args: argparse.Namespace, folder: Path) -> Settings | None:
    settings = load_settings(database_url=None, data_dir=folder, **_overrides(args))
    if settings.openai_base_url is None and settings.openai_api_key is None:
        return None
    return settings


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # discord.py warns that voice is unsupported (no PyNaCl): nothing here speaks.
    logging.getLogger("discord.client").setLevel(logging.ERROR)
    try:
        samples = load_dataset(args.dataset)
    except DatasetError as exc:
        print(f"locomo: {args.dataset}: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="kioku-locomo-") as folder:
        if args.scripted:
            return publish(args, asyncio.run(scripted(args, samples, Path(folder))))
        try:
            settings = _endpoint(args, Path(folder))
        except SettingsError as exc:
            print(f"locomo: bad settings:\n{exc}", file=sys.stderr)
            return 2
        if settings is None:
            if args.json:
                emit([skipped(FIGURE_NAME, "--scripted")], as_json=True)
            else:
                print(USAGE)
            return 0
        return publish(args, asyncio.run(run_benchmark(_options(args), samples, settings)))


if __name__ == "__main__":
    sys.exit(main())
