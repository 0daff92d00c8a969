"""The "figures" and "fuzz examples run" sections: what tests recorded reaches the
summary, in one process and from pytest-xdist's workers (``make test`` runs those)."""

from __future__ import annotations

import pytest

from tests.helpers.processes import ROOT

RECORDING_TESTS = """
def test_counts_apples(figures, fuzz_counter):
    figures["apples"] = 3
    figures["apples"] = 5  # the last value is kept
    for _ in range(7):
        fuzz_counter.tick()

def test_counts_pears(figures):
    figures.record("pears", 4)
    figures["stones"] = "none"
"""


def section(out: str, title: str) -> list[str]:
    """The lines of a summary section, up to the next heading (or the closing line)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("=") and f" {title} " in line)
    body: list[str] = []
    for line in lines[start + 1 :]:
        if line.startswith("=") or " passed" in line:
            break
        body.append(line)
    return body


def by_test(lines: list[str]) -> dict[str, list[str]]:
    """The figures section as test → its figure lines."""
    grouped: dict[str, list[str]] = {}
    for line in lines:
        if line.startswith(" "):
            grouped[list(grouped)[-1]].append(line.strip())
        else:
            grouped[line] = []
    return grouped


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "two workers"])
def test_what_tests_record_reaches_the_summary(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, workers: list[str]
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makeconftest('pytest_plugins = ["tests.conftest"]')
    pytester.makepyfile(test_recording=RECORDING_TESTS)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", *workers)
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert by_test(section(out, "figures")) == {
        "test_recording.py::test_counts_apples": ["apples: 5"],
        "test_recording.py::test_counts_pears": ["pears: 4", "stones: none"],
    }
    assert [line.split() for line in section(out, "fuzz examples run")] == [
        ["7", "test_recording.py::test_counts_apples"],
        ["7", "total", "(normal", "run)"],
    ]
