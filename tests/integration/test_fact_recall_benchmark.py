"""``benchmarks/fact_recall.py`` (recall p50/p95 at 10k and 1M facts) smoke-run at tiny
sizes, as ``run_all.py`` runs it, like the other scripts in :mod:`.test_benchmarks`.

The figures are named after the sizes run (``--facts 1000 3000``: "1k" and "3k"; by
default "10k" and "1M"). Budgets are never checked: the sizes are far below the budget's
and the machine is shared.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Figures
from tests.integration.test_benchmarks import by_name, number, record, run_benchmark


def test_fact_recall_reports_recall_p50_and_p95_at_both_sizes(
    tmp_path: Path, figures: Figures
) -> None:
    measured = run_benchmark(
        "fact_recall.py", tmp_path, *("--facts", "1000", "3000", "--recalls", "20")
    )
    record(figures, measured)
    found = by_name(measured)
    for size in ("1k", "3k"):
        p50 = number(found[f"recall p50 at {size} facts"], "ms")
        p95 = number(found[f"recall p95 at {size} facts"], "ms")
        assert 0 < p50 <= p95
        assert "20 recalls" in found[f"recall p50 at {size} facts"].note
    # The budget is the larger size's (1M facts by default).
    assert found["recall p95 at 3k facts"].budget.startswith("≤ 20 ms × ")
    assert found["recall p95 at 1k facts"].budget == ""
    assert number(found["fact fill at 3k facts"], "s") >= 0
