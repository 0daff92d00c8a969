"""Rewrite bot/vocabulary/redaction/rules/gitleaks.toml from gitleaks' default configuration.

Usage::

    python scripts/update_token_rules.py                 # latest master from GitHub
    python scripts/update_token_rules.py --ref v8.28.0   # a tag or commit
    python scripts/update_token_rules.py --source gitleaks.toml --commit <sha>  # a local copy

Kept: the rules already shipped (by id) and any new rule whose pattern starts with a
distinctive literal prefix (`ghp_`, `dop_v1_`...); generic rules that match a key word and any
value (`generic-api-key`, the per-provider "name = value" rules) are left out, since chat is full
of such lines.  Descriptions, paths and allowlists are dropped.  Review the printed list of
added and removed rules, run the tests (`tests/unit/test_redaction_corpus.py`), then commit.
"""

from __future__ import annotations

import argparse
import json
import re
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

RULES_DIR = Path(__file__).resolve().parents[1] / "bot/vocabulary/redaction/rules"
OUT = RULES_DIR / "gitleaks.toml"
RAW = "https://raw.githubusercontent.com/gitleaks/gitleaks/{ref}/config/gitleaks.toml"
COMMIT_API = "https://api.github.com/repos/gitleaks/gitleaks/commits/{ref}"
HEADER = """\
# Provider token rules from gitleaks' default configuration (config/gitleaks.toml).
# Source: https://github.com/gitleaks/gitleaks, commit {commit}
# Licence: MIT (LICENSE-gitleaks beside this file).
# Rewritten by scripts/update_token_rules.py: only rules whose secret has a distinctive shape
# (a prefix, or a provider name before it) are kept; paths, descriptions and allowlists are
# dropped. Do not edit by hand: add missing forms to local.toml instead.
"""
# Never shipped: they match a key word and any value.
EXCLUDED = frozenset({"generic-api-key", "curl-auth-header", "curl-auth-user", "jwt"})
# A pattern that starts (after `(?i)`, `\b` and an opening group) with 3+ literal characters.
_DISTINCTIVE = re.compile(r"^(?:\(\?i\))?(?:\\b)?\(*(?:\?:)?[A-Za-z0-9_~]{3}")


def fetch(url: str) -> bytes:
    """The body at ``url``."""
    with urllib.request.urlopen(url, timeout=30) as response:
        body: bytes = response.read()
    return body


def select(upstream: list[dict[str, Any]], shipped: set[str]) -> list[dict[str, Any]]:
    """The upstream rules to ship: those shipped before and new distinctive ones."""
    kept = []
    for rule in upstream:
        if "regex" not in rule or not rule.get("keywords") or rule["id"] in EXCLUDED:
            continue
        if rule["id"] in shipped or _DISTINCTIVE.match(rule["regex"]):
            kept.append(rule)
    return kept


def _string(value: str) -> str:
    """A TOML string for ``value``: literal when it can be, else basic (JSON escapes)."""
    return f"'''{value}'''" if "'''" not in value and "\n" not in value else json.dumps(value)


def render(rules: list[dict[str, Any]], commit: str) -> str:
    """The rule file's text."""
    parts = [HEADER.format(commit=commit)]
    for rule in rules:
        lines = ["[[rules]]", f"id = {json.dumps(rule['id'])}", f"regex = {_string(rule['regex'])}"]
        if "entropy" in rule:
            lines.append(f"entropy = {rule['entropy']:g}")
        lines.append(f"keywords = {json.dumps([k.lower() for k in rule['keywords']])}")
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ref", default="master")
    parser.add_argument("--source", type=Path, help="a local copy of config/gitleaks.toml")
    parser.add_argument("--commit", help="the commit the local copy is from")
    args = parser.parse_args()
    if args.source is not None:
        text, commit = args.source.read_text("utf-8"), args.commit or "unknown"
    else:
        text = fetch(RAW.format(ref=args.ref)).decode("utf-8")
        commit = json.loads(fetch(COMMIT_API.format(ref=args.ref)))["sha"]
    shipped = {rule["id"] for rule in tomllib.loads(OUT.read_text("utf-8"))["rules"]}
    rules = select(tomllib.loads(text)["rules"], shipped)
    ids = {rule["id"] for rule in rules}
    print("added:", sorted(ids - shipped) or "none")
    print("removed:", sorted(shipped - ids) or "none")
    OUT.write_text(render(rules, commit), encoding="utf-8")
    print(f"wrote {len(rules)} rules from {commit} to {OUT}")


if __name__ == "__main__":
    main()
