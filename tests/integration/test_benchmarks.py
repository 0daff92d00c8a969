"""The benchmark scripts (``make bench``) smoke-run at tiny sizes, each as its own process.

Nothing else runs them, so a script broken by a change elsewhere would only show in
``make bench``. Each one is run as ``run_all.py`` runs it (``python benchmarks/X.py
--json``) and its ``KIOKU_FIGURES`` line checked: it parses, every figure the issues ask
for is there, and its value is well-formed (a number in the expected unit). Budgets are
never checked: the sizes here are far below the budgets' and the machine is shared. Only
the reference each timing budget was scaled by is (``benchmarks/_figures.py``).

Every script makes its embedded PostgreSQL in a ``tempfile`` folder: ``TMPDIR`` puts that
folder in the test's own ``tmp_path``, apart from the test session's server and from
other xdist workers. The environment carries no Kioku setting, no ``.env`` file and no
model endpoint (:func:`~tests.helpers.processes.kioku_env`), so nothing reaches a network.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

from benchmarks._figures import MARK, Figure
from tests.conftest import Figures
from tests.helpers.processes import ROOT, kioku_env

BENCHMARKS = ROOT / "benchmarks"

# A figure's value: a number (thousands separated by commas), then its unit if it has one.
NUMBER = re.compile(r"-?\d{1,3}(?:,\d{3})*(?:\.\d+)?|-?\d+(?:\.\d+)?")


def run_benchmark(script: str, tmp_path: Path, *args: str) -> list[Figure]:
    """Run ``benchmarks/<script> --json <args>`` and return the figures it printed."""
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--json", *args],
        cwd=ROOT,  # as make bench runs it (config/kioku.toml, the persona file)
        env=kioku_env(tmp_path, TMPDIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard, not a measure
    )
    assert result.returncode == 0, (
        f"{script} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith(MARK)]
    assert len(lines) == 1, f"{script} printed {len(lines)} figure lines:\n{result.stdout}"
    rows = json.loads(lines[0][len(MARK) :])
    assert isinstance(rows, list) and rows, f"{script}: no figures"
    figures = [Figure(**row) for row in rows]  # exactly the Figure fields, no more
    for figure in figures:
        assert figure.name and isinstance(figure.name, str), figure
        assert isinstance(figure.value, str) and figure.value, figure
        assert isinstance(figure.budget, str), figure
        assert figure.met is None or isinstance(figure.met, bool), figure
        assert isinstance(figure.note, str), figure
        # A budget and its status come together: run_all.py reads ``met`` as the verdict.
        assert (figure.met is None) == (figure.budget == ""), figure
    names = [figure.name for figure in figures]
    assert len(set(names)) == len(names), f"{script}: a figure named twice: {names}"
    return figures


def by_name(figures: list[Figure]) -> dict[str, Figure]:
    return {figure.name: figure for figure in figures}


def number(figure: Figure, unit: str = "") -> float:
    """The figure's value as a number, checking it is written ``<number>[ <unit>]``."""
    suffix = f" {unit}" if unit and unit != "%" else unit
    assert figure.value.endswith(suffix), f"{figure.name}: {figure.value!r} is not in {unit!r}"
    digits = figure.value[: len(figure.value) - len(suffix)] if suffix else figure.value
    assert NUMBER.fullmatch(digits), f"{figure.name}: {figure.value!r} is not a number"
    value = float(digits.replace(",", ""))
    assert math.isfinite(value) and value >= 0, f"{figure.name}: {figure.value!r}"
    return value


def record(figures: Figures, measured: list[Figure]) -> None:
    """Show the small run's figures in the summary (recorded before any check fails)."""
    for figure in measured:
        figures.record(figure.name, figure.value)


def test_stm_core_reports_assembly_hydration_upserts_and_cache_size(
    tmp_path: Path, figures: Figures
) -> None:
    measured = run_benchmark(
        "stm_core.py",
        tmp_path,
        *("--entries", "500", "--rows", "2000", "--updates", "50", "--writers", "2"),
    )
    record(figures, measured)
    found = by_name(measured)
    median = number(found["prompt assembly median"], "µs")
    p99 = number(found["prompt assembly p99"], "µs")
    assert median <= p99
    assert number(found["hydrate-on-miss p99"], "ms") > 0
    assert number(found["row upserts/s"]) > 0
    assert number(found["STM update p99"], "ms") > 0
    number(found["bot CPU per STM update"], "ms")
    assert number(found["cache bytes per entry beyond the text"], "B") > 0
    assert " µs × " in found["prompt assembly p99"].budget
    assert "machine p99 = " in found["prompt assembly p99"].budget
    assert "floor p99 = " in found["hydrate-on-miss p99"].budget
    assert found["row upserts/s"].budget.startswith("≥ 1,000 ÷ ")
    assert found["cache bytes per entry beyond the text"].budget == "≤ 2 KB"  # not a time
    assert "500 entries" in found["prompt assembly median"].note
    assert "2,000 rows" in found["hydrate-on-miss p99"].note
    assert "2 writers" in found["row upserts/s"].note
    assert "500 entries" in found["cache bytes per entry beyond the text"].note


def test_turns_reports_throughput_memory_share_and_warm_queries(
    tmp_path: Path, figures: Figures
) -> None:
    measured = run_benchmark(
        "turns.py", tmp_path, "--channels", "5", "--rounds", "1", "--repeats", "1"
    )
    record(figures, measured)
    found = by_name(measured)
    assert number(found["end-to-end turns/s"]) > 0
    assert "5 turns, 5 channels" in found["end-to-end turns/s"].note
    assert number(found["end-to-end turns/s (streamed)"]) > 0
    assert found["streamed / whole turns/s"].budget == "≥ 0.90"
    assert number(found["streamed / whole turns/s"]) > 0
    assert 0 < number(found["memory layer share of turn time"], "%") <= 100
    number(found["database queries per warm turn"])


def test_channels_reports_warm_queries_unavailable_lines_throughput_and_memory(
    tmp_path: Path, figures: Figures
) -> None:
    measured = run_benchmark("channels.py", tmp_path, "--channels", "12", "--pool", "2")
    record(figures, measured)
    found = by_name(measured)
    label = "12 channels at once"
    assert number(found[f"{label}: turns/s, cold"]) > 0
    assert number(found[f"{label}: turns/s, warm"]) > 0
    assert number(found[f"{label}: resident memory"], "MB") > 0
    warm = found[f"{label}: queries per warm turn"]
    assert warm.budget == "0" and number(warm) >= 0
    unavailable = found[f'{label}: "database unavailable" lines']
    assert unavailable.budget == "0" and number(unavailable) >= 0
    assert "a pool of 2" in found[f"{label}: turns/s, cold"].note


def test_coherence_reports_propagation_median_and_p99(tmp_path: Path, figures: Figures) -> None:
    measured = run_benchmark("coherence.py", tmp_path, "--writes", "20")
    record(figures, measured)
    found = by_name(measured)
    median = number(found["cross-process propagation median"], "ms")
    p99 = number(found["cross-process propagation p99"], "ms")
    assert 0 < median <= p99
    assert "20 writes" in found["cross-process propagation median"].note
    assert found["cross-process propagation p99"].budget.startswith("≤ 100 ms × ")


def test_startup_reports_cold_starts_and_the_cold_start_with_rows(
    tmp_path: Path, figures: Figures
) -> None:
    measured = run_benchmark("startup.py", tmp_path, "--runs", "1", "--rows", "2000")
    record(figures, measured)
    found = by_name(measured)
    assert number(found["cold start, new data folder"], "s") > 0
    assert number(found["cold start, existing data folder"], "s") > 0
    assert number(found["cold start with 2,000 rows"], "s") > 0
    assert " floor = " in found["cold start with 2,000 rows"].budget


def test_redaction_scales_its_budgets_by_their_own_checkout(
    tmp_path: Path, figures: Figures
) -> None:
    measured = run_benchmark("redaction.py", tmp_path, "--rounds", "1")
    record(figures, measured)
    found = by_name(measured)
    for corpus in ("summary", "secrets", "chat"):
        figure = found[f"sanitize µs/value ({corpus})"]
        assert number(figure) > 0
        # 06de254 from git beside this checkout, or the calibration loop where git has none.
        assert " 06de254 = " in figure.budget or " machine = " in figure.budget, figure


def test_memory_eval_without_an_endpoint_reports_skipped(tmp_path: Path, figures: Figures) -> None:
    measured = run_benchmark("memory_eval.py", tmp_path)
    record(figures, measured)
    assert [(f.name, f.value) for f in measured] == [("memory eval", "skipped")]
    assert "--dry-run" in measured[0].note


def test_memory_eval_dry_run_scores_both_systems(tmp_path: Path, figures: Figures) -> None:
    measured = run_benchmark("memory_eval.py", tmp_path, "--dry-run")
    record(figures, measured)
    found = by_name(measured)
    accuracy = re.compile(r"(\d+)/(\d+) \((\d+)%\)")
    for system in ("kioku", "last-25 baseline"):
        parsed = accuracy.fullmatch(found[f"memory eval: accuracy, {system}"].value)
        assert parsed is not None, found[f"memory eval: accuracy, {system}"]
        right, total = int(parsed[1]), int(parsed[2])
        assert 0 <= right <= total and total > 0
    for system in ("kioku", "baseline"):
        assert number(found[f"memory eval: prompt tokens/question, {system}"]) > 0
    assert "dry run" in found["memory eval: accuracy, kioku"].note
