"""The LoCoMo harness (``benchmarks/locomo.py``) on its fixture, against the scripted server.

One small run (two sessions of each conversation, five questions each, every system)
is shared by the module: the real bot on dpytest with the session's PostgreSQL, the
baselines, all through the recording proxy, the scripted server answering as the
evidence oracle. The checks: the report's shape, every system answered every question,
no prompt holds another question, the oracle's scores follow what each prompt held; and
apart from the run, hand-computed F1 values and the one-line error for a bad file.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import discord
import pytest
from sqlalchemy.engine import URL

from benchmarks import locomo
from benchmarks._figures import MARK
from benchmarks.recall import (
    CATEGORIES,
    SYSTEMS,
    DatasetError,
    EvidenceOracle,
    Options,
    Sample,
    load_dataset,
    markdown,
    multi_hop_f1,
    normalize,
    plan,
    run_benchmark,
    score,
    token_f1,
)
from benchmarks.recall.baselines import BaselineSystem, fit, transcript
from benchmarks.recall.dataset import Question
from benchmarks.recall.judge import judge, judge_prompt
from benchmarks.recall.posting import snowflake_at
from bot.config import Settings
from bot.conversation.tools import STM_TOOL_NAME
from bot.db.engine import Database
from tests.helpers.database import empty_tables, make_test_settings
from tests.helpers.fake_llm import ScriptedLLM, openai_client
from tests.helpers.processes import OWN_VARIABLES, ROOT, kioku_env

FIXTURE = ROOT / "benchmarks" / "data" / "kioku_locomo.json"
SCRIPT = ROOT / "benchmarks" / "locomo.py"
OPTIONS = Options(dataset=FIXTURE, sessions=2, max_questions=5)
LEAK = "LEAKED-FROM-AN-EARLIER-QUESTION"


@dataclass
class Run:
    samples: list[Sample]
    report: dict[str, Any]
    requests: list[dict[str, Any]]
    progress: str


@pytest.fixture(scope="module")
async def run(
    migrated_database: Database, pg_url: URL, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Run]:
    await empty_tables(migrated_database.engine)
    samples = load_dataset(FIXTURE)
    async with ScriptedLLM() as llm:
        settings = make_test_settings(
            pg_url,
            tmp_path_factory.mktemp("locomo"),
            openai_base_url=llm.base_url,
            openai_api_key="test-key",
            model="test-model",
            provider="openai",
            llm={"max_retries": 0, "timeout_seconds": 5, "turns_per_user_per_minute": 0},
        )
        progress = io.StringIO()
        report = await run_benchmark(
            OPTIONS,
            samples,
            settings,
            database=migrated_database,
            before_forward=EvidenceOracle(llm.reply_text, samples),
            progress_stream=progress,
            scripted=True,
        )
        yield Run(samples, report, llm.requests, progress.getvalue())
    await empty_tables(migrated_database.engine)


def _asked(run: Run) -> dict[str, Question]:
    return {
        f"{item.sample.sample_id}#{q.index}": q
        for item in plan(run.samples, OPTIONS)
        for q in item.questions
    }


def _prompt(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content")) for m in body.get("messages", []))


# --------------------------------------------------------------------------- the run


def test_the_report_has_every_figure_for_every_system(run: Run) -> None:
    report = run.report
    json.dumps(report)  # the --out file
    assert report["benchmark"] == "locomo" and report["scripted"] is True
    assert report["samples"] == 2 and report["sessions_ingested"] == 4
    assert "cl100k_base" in report["token_counter"]
    assert list(report["systems"]) == list(SYSTEMS)
    for name, system in report["systems"].items():
        assert system["questions"] == 10 and system["failed"] == 0, name
        assert set(system["f1"]["by_category"]) == set(CATEGORIES.values()), name
        assert 0 <= system["f1"]["overall"] <= 1
        assert system["judge"] is None
        tokens = system["answering"]["prompt_tokens_per_question"]
        assert tokens["counted"] > 0 and tokens["server"] > 0, name
        latency = system["latency_seconds"]
        assert 0 <= latency["p50"] <= latency["p95"], name
        building = system["memory_building"]
        if name == "kioku":
            # Never addressed while ingesting: capture builds the memory, counted apart.
            assert building["calls"] > 0 and building["prompt_tokens"]["counted"] > 0
        else:
            assert building == {
                "calls": 0,
                "prompt_tokens": {"counted": 0, "server": None},
                "server_completion_tokens": None,
                "server_cached_prompt_tokens": 0,
            }, name
    assert (
        report["systems"]["none"]["answering"]["prompt_tokens_per_question"]["counted"]
        < (report["systems"]["raw"]["answering"]["prompt_tokens_per_question"]["counted"])
    )
    table = markdown(report).splitlines()
    assert table[0].startswith("| system | F1 | multi-hop | temporal |")
    assert [row.split("|")[1].strip() for row in table[2:6]] == list(SYSTEMS)
    assert "SCRIPTED" in markdown(report)
    assert run.progress.rstrip().split("\r")[-1].startswith("locomo [" + "#" * 24 + "]")


def test_every_system_answered_every_question(run: Run) -> None:
    asked = _asked(run)
    assert len(asked) == 10
    for name, system in run.report["systems"].items():
        answers = system["answers"]
        assert [a["key"] for a in answers] == list(asked), name
        for answer in answers:
            assert answer["answer"].strip() and not answer["failed"], (name, answer)
            assert answer["calls"] >= 1, (name, answer)
            assert answer["question"] == asked[answer["key"]].question


def test_no_prompt_holds_another_question(run: Run) -> None:
    questions = [q.question for q in _asked(run).values()]
    asking = []
    for body in run.requests:
        prompt = _prompt(body)
        held = [q for q in questions if q in prompt]
        assert len(held) <= 1, held  # an earlier question (or its answer's turn) never stays
        asking += held
    # Each system's every answer call carried its own question, once.
    assert sorted(asking) == sorted(questions * len(SYSTEMS))


def test_the_oracle_scores_follow_what_each_prompt_held(run: Run) -> None:
    systems = run.report["systems"]
    f1 = {name: system["f1"]["overall"] for name, system in systems.items()}
    # Two short sessions fit everywhere whole: only the last 25 messages lose evidence.
    assert f1["full"] == 1.0 and f1["kioku"] == 1.0
    assert f1["raw"] < 1.0
    adversarial = sum(q.category == 5 for q in _asked(run).values())
    assert f1["none"] == pytest.approx(adversarial / 10)
    assert systems["full"]["cut"] == 0


async def test_a_memory_written_while_answering_is_gone_for_the_next_question(
    db: Database, pg_url: URL, tmp_path: Path, llm: ScriptedLLM
) -> None:
    samples = load_dataset(FIXTURE)
    oracle = EvidenceOracle(llm.reply_text, samples)
    first = samples[0].questions[0].question

    def answer(body: Mapping[str, Any]) -> None:
        messages = body.get("messages", [])
        if first in _prompt(dict(body)) and not any(m.get("role") == "tool" for m in messages):
            llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": f"{LEAK} Tomas bakes."})])
        else:
            oracle(body)

    settings = make_test_settings(
        pg_url,
        tmp_path,
        openai_base_url=llm.base_url,
        openai_api_key="test-key",
        model="test-model",
        provider="openai",
        llm={"max_retries": 0, "timeout_seconds": 5, "turns_per_user_per_minute": 0},
    )
    options = Options(FIXTURE, systems=("kioku",), sessions=1, max_questions=2, samples=1)
    report = await run_benchmark(
        options,
        samples,
        settings,
        database=db,
        before_forward=answer,
        progress_stream=io.StringIO(),
    )
    assert [a["calls"] for a in report["systems"]["kioku"]["answers"]] == [2, 1]
    prompts = [_prompt(body) for body in llm.requests]
    saved = [m for m in llm.requests[1]["messages"] if m.get("role") == "tool"]
    assert saved and str(saved[0]["content"]).startswith(("saved", "updated")), saved
    assert LEAK in json.dumps(llm.requests[1]["messages"])  # the model's own tool call
    assert len(prompts) == 3 and LEAK not in prompts[-1]  # gone for the next question


async def test_full_keeps_the_newest_messages_that_fit_and_says_it_cut(
    run: Run, settings: Settings
) -> None:
    sample = load_dataset(FIXTURE)[0]
    # No call is made: the prompt is only built.
    full = BaselineSystem("full", settings, cast(Any, None), cast(Any, None), "P", 2000)
    await full.ingest(sample, sample.sessions)
    messages, cut = full.messages(sample, "Q?")
    assert cut
    history = transcript(sample.sessions)
    kept = messages[1:-1]
    assert 0 < len(kept) < len(history) and kept == history[-len(kept) :]
    assert messages[-1] == {"role": "user", "content": "Questioner: Q?"}
    full.context_tokens = 100_000
    messages, cut = full.messages(sample, "Q?")
    assert not cut and messages[1:-1] == history
    assert fit(history, 0) == ([], True)
    report = json.loads(json.dumps(run.report))
    report["systems"]["full"]["cut"] = 3
    table = markdown(report)
    assert "| full (cut) |" in table and "did not fit the context in {'full': 3}" in table


# --------------------------------------------------------------------------- scoring


def test_token_f1_matches_hand_computed_values() -> None:
    assert normalize("The cat, and a dog!") == "cat dog"
    assert token_f1("The Overstory", "the overstory") == 1.0
    # [7, may, 2023] against [week, befor, 14, march, 2023]: P 1/3, R 1/5.
    assert token_f1("7 May 2023", "the week before 14 March 2023") == pytest.approx(0.25)
    assert token_f1("running dogs", "dog runs") == 1.0  # stems: run, dog
    assert token_f1("", "Pebble") == 0.0


def test_category_rules_match_hand_computed_values() -> None:
    gold = "Biscuit, Pebble"
    assert score(1, "Pebble, Biscuit", gold) == 1.0
    assert score(1, "Biscuit", gold) == pytest.approx(0.5)
    # One prediction part [biscuit, pebbl] for each gold part: F1 2/3 each.
    assert multi_hop_f1("Biscuit and Pebble", gold) == pytest.approx(2 / 3)
    # Category 3: only the part before ';' counts; "yes he does" is [ye, he, doe].
    rationale = "Yes; he takes a pottery class"
    assert score(3, "Yes", rationale) == 1.0
    assert score(3, "yes he does", rationale) == pytest.approx(0.5)
    assert score(4, "Yes", rationale) < 0.5
    assert score(5, "That is not mentioned in the conversation.", "x") == 1.0
    assert score(5, "No information available.", "x") == 1.0
    assert score(5, "Biscuit", "x") == 0.0


async def test_the_judge_reads_correct_and_wrong(llm: ScriptedLLM) -> None:
    question = Question(0, "What is the name of Tomas's dog?", "not mentioned", 5, (), "Biscuit")
    assert "'Biscuit' is wrong" in judge_prompt(question, "Biscuit")
    llm.reply_text("CORRECT").reply_text("Wrong.").reply_text("INCORRECT")
    client = openai_client(llm)
    try:
        verdicts = [await judge(client, "judge", question, "Biscuit") for _ in range(3)]
    finally:
        await client.close()
    assert verdicts == [True, False, False]


def test_message_ids_carry_the_session_time() -> None:
    at = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    first, second = snowflake_at(at), snowflake_at(at)
    assert second > first
    assert discord.utils.snowflake_time(first) == at


# -------------------------------------------------------------------------- the file


def test_the_fixture_is_a_locomo_file_with_what_the_harness_needs() -> None:
    samples = load_dataset(FIXTURE)
    assert len(samples) == 2
    for sample in samples:
        assert len(sample.sessions) >= 6
        assert all(15 <= len(s.turns) <= 30 for s in sample.sessions)
        assert (sample.sessions[-1].start - sample.sessions[0].start).days >= 28
        last_25 = set([t.dia_id for s in sample.sessions for t in s.turns][-25:])
        # Most answers are stated long before the last 25 messages.
        early = [q for q in sample.questions if q.evidence and not set(q.evidence) & last_25]
        assert len(early) >= 15
    questions = [q for s in samples for q in s.questions]
    assert len(questions) >= 40
    assert {q.category for q in questions} == set(CATEGORIES)
    temporal = [q for q in questions if q.category == 2]
    assert len(temporal) >= 8 and all("2023" in q.answer for q in temporal)


def test_bad_files_name_the_sample_and_field(tmp_path: Path) -> None:
    cases: list[tuple[Any, str]] = [
        ({"not": "a list"}, "expected a non-empty list of samples"),
        ([{"conversation": {}}], "sample 0: sample_id missing"),
        (
            [{"sample_id": "x", "conversation": {"speaker_a": "A", "speaker_b": "B"}, "qa": []}],
            "sample 0: no session_N in conversation",
        ),
    ]
    base = json.loads(FIXTURE.read_text(encoding="utf-8"))
    unknown = json.loads(json.dumps(base))
    unknown[1]["qa"][0]["category"] = 7
    cases.append((unknown, "sample 1: qa 0: category 7 is not one of 1-5"))
    for index, (data, expected) in enumerate(cases):
        path = tmp_path / f"bad{index}.json"
        path.write_text(json.dumps(data), encoding="utf-8")
        with pytest.raises(DatasetError) as caught:
            load_dataset(path)
        assert str(caught.value) == expected
    (tmp_path / "broken.json").write_text("[{", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"^not JSON: "):
        load_dataset(tmp_path / "broken.json")


def test_a_malformed_file_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    del data[0]["conversation"]["session_3_date_time"]
    (tmp_path / "data.json").write_text(json.dumps(data), encoding="utf-8")
    env = kioku_env(tmp_path)
    # The dev extra (nltk) may be installed apart from the checkout: keep this process's path.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [env["PYTHONPATH"], os.getenv("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "data.json", "--scripted"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr == "locomo: data.json: sample 0: session_3_date_time missing\n"
    assert result.stdout == ""


def test_without_an_endpoint_make_bench_gets_a_skipped_figure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [*os.environ]:
        if name.startswith("KIOKU_") or name in OWN_VARIABLES:
            monkeypatch.delenv(name)
    monkeypatch.setenv("KIOKU_ENV_FILE", str(tmp_path / "absent.env"))
    monkeypatch.chdir(tmp_path)
    assert locomo.main(["--json", str(FIXTURE)]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith(MARK)]
    (figure,) = json.loads(line[len(MARK) :])
    assert (figure["name"], figure["value"]) == ("locomo", "skipped")
    assert "--scripted" in figure["note"]
