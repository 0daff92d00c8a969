"""Shared output for benchmark scripts: a table for people, JSON for ``run_all.py``."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

MARK = "KIOKU_FIGURES "


@dataclass
class Figure:
    name: str
    value: str
    budget: str = ""
    met: bool | None = None
    note: str = ""


def status(met: bool | None) -> str:
    return "" if met is None else ("met" if met else "NOT MET")


def table(figures: list[Figure]) -> str:
    rows = [("figure", "value", "budget", "status", "note")]
    rows += [(f.name, f.value, f.budget, status(f.met), f.note) for f in figures]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = []
    for index, row in enumerate(rows):
        cells = [row[0].ljust(widths[0]), row[1].rjust(widths[1])]
        cells += [row[i].ljust(widths[i]) for i in (2, 3)] + [row[4]]
        lines.append("  ".join(cells).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def emit(figures: list[Figure], as_json: bool) -> None:
    if as_json:
        print(MARK + json.dumps([asdict(f) for f in figures]), flush=True)
    else:
        print(table(figures), flush=True)


def skipped(name: str, hint: str) -> Figure:
    """The figure of a benchmark that needs a model endpoint and has none (``hint``: the
    flag that runs it without one)."""
    return Figure(
        name, "skipped", note=f"no model endpoint (OPENAI_BASE_URL / OPENAI_API_KEY); try {hint}"
    )
