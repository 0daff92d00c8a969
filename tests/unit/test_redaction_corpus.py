"""Redaction over corpora generated at run time (issue 26): every secret, no benign line.

The totals print in the run's "figures" section; recall per family prints with ``-s`` or
``python -m tests.helpers.redaction_corpus``.
"""

from __future__ import annotations

import random

import pytest

from bot.vocabulary.sanitize import sanitize_value
from tests.conftest import Figures
from tests.helpers.redaction_corpus import (
    FAMILIES,
    benign_lines,
    contexts,
    leaked,
    report,
    token_cases,
)

CASES = token_cases()


def test_the_corpora_are_as_large_as_the_issue_asks() -> None:
    assert len(FAMILIES) >= 40
    family = FAMILIES[0]
    assert {"sentence", "code_block", "json", "yaml", "url", "split_line"} <= set(
        contexts(family, family.make(random.Random(1)))
    )
    assert len(benign_lines()) >= 500


@pytest.mark.parametrize("family", [f.name for f in FAMILIES])
def test_every_generated_token_of_a_family_is_redacted(family: str) -> None:
    leaks = [
        (context, sanitize_value(text))
        for name, context, token, text in CASES
        if name == family and leaked(token, sanitize_value(text))
    ]
    assert leaks == []


@pytest.mark.parametrize("family", [f.name for f in FAMILIES[::6]])
def test_redacting_a_family_again_changes_nothing(family: str) -> None:
    outputs = [sanitize_value(text) for name, _c, _t, text in CASES if name == family]
    assert [sanitize_value(out) for out in outputs] == outputs


def test_no_benign_line_changes() -> None:
    changed = [line for line in benign_lines() if sanitize_value(line) != line]
    assert changed == []


def test_the_report_prints_recall_and_false_positives(figures: Figures) -> None:
    text = report()
    print(text)
    lines = text.splitlines()
    figures.record("token families", len(FAMILIES))
    figures.record(
        "lowest recall of a family", min(line.rsplit("= ", 1)[1] for line in lines[: len(FAMILIES)])
    )
    figures.record("secrets redacted", lines[-2].split("secrets redacted: ")[1])
    figures.record("benign lines changed", lines[-1].split(": ")[1])
    assert f"families: {len(FAMILIES)}" in text
    assert "benign lines changed: 0/" in text
    assert all(line.endswith("= 1.000") for line in text.splitlines()[: len(FAMILIES)])
