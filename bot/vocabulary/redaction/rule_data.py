"""Provider token rules loaded from data: gitleaks' rule set and local additions."""

# The rules are gitleaks' (Go RE2 syntax); `translate_re2` rewrites what Python's `regex`
# reads differently.  See rules/gitleaks.toml for the source and scripts/update_token_rules.py.

from __future__ import annotations

import importlib.resources
import tomllib
from dataclasses import dataclass
from typing import Any, Final

import regex

RULE_FILES: Final = ("gitleaks.toml", "local.toml")
# Marker kinds are `[a-z_]+`: a rule id's digits are spelled out or dropped.
_ID_WORDS: Final = (("1password", "onepassword"),)


@dataclass(frozen=True)
class TokenRule:
    """One provider token rule: its marker kind, pattern, keywords and minimum entropy."""

    id: str
    kind: str
    pattern: regex.Pattern[str]
    keywords: tuple[str, ...]
    entropy: float


def translate_re2(pattern: str) -> str:
    """``pattern`` (Go RE2) rewritten so that Python's ``regex`` reads it the same way."""
    # RE2 scopes a flag group set mid-pattern (`dp\.pt\.(?i)[a-z]`) to the rest of the
    # enclosing group; Python applies it to the whole pattern or refuses it.  It becomes a
    # scoped group `(?i:...)` closed where the enclosing group closes.  RE2's `\z` is `\Z`.
    out: list[str] = []
    # For each open group: how many scoped flag groups to close with it.
    pending: list[int] = [0]
    index, in_class = 0, False
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            pair = pattern[index : index + 2]
            out.append(r"\Z" if pair == r"\z" and not in_class else pair)
            index += 2
            continue
        if in_class:
            in_class = char != "]"
            out.append(char)
            index += 1
            continue
        if char == "[":
            in_class = True
            out.append(char)
            # A `]` right after `[` or `[^` is a literal member.
            if pattern.startswith("^", index + 1):
                out.append("^")
                index += 1
            if pattern.startswith("]", index + 1):
                out.append("]")
                index += 1
            index += 1
            continue
        flags = regex.match(r"\(\?([a-zA-Z]+)\)", pattern[index:])
        if flags is not None and index > 0:
            out.append(f"(?{flags.group(1)}:")
            pending[-1] += 1
            index += flags.end()
            continue
        if char == "(":
            pending.append(0)
        elif char == ")":
            out.append(")" * pending.pop())
        out.append(char)
        index += 1
    out.append(")" * pending.pop())
    return "".join(out)


# gitleaks ends most secrets with a quote, whitespace, `;`, an escaped newline or the end;
# in chat a token is as often followed by `&`, `,`, `)` or `.`: any character that cannot
# continue the token ends it.
_GITLEAKS_TERMINATORS: Final = (
    r"""(?:[\x60'"\s;]|\\[nr]|$|\b)""",
    r"""(?:[\x60'"\s;]|\\[nr]|$)""",
)
_TERMINATOR: Final = r"(?![A-Za-z0-9_\-])"


def loosen_terminator(pattern: str) -> str:
    """``pattern`` with gitleaks' secret terminator replaced by "no token character next"."""
    for terminator in _GITLEAKS_TERMINATORS:
        pattern = pattern.replace(terminator, _TERMINATOR)
    return pattern


def rule_kind(rule_id: str) -> str:
    """The marker kind of rule ``rule_id`` (``gitlab-pat`` -> ``gitlab_pat``)."""
    for digits, words in _ID_WORDS:
        rule_id = rule_id.replace(digits, words)
    return regex.sub(r"[^a-z]+", "_", rule_id.lower()).strip("_")


def _read(name: str) -> list[dict[str, Any]]:
    """The ``[[rules]]`` of one rule file shipped in the package."""
    text = (importlib.resources.files(__package__) / "rules" / name).read_text("utf-8")
    rules: list[dict[str, Any]] = tomllib.loads(text).get("rules", [])
    return rules


def parse_rules(raw_rules: list[dict[str, Any]]) -> list[TokenRule]:
    """Compiled rules from raw ``[[rules]]`` tables; a later rule replaces one of its id."""
    by_id: dict[str, TokenRule] = {}
    for raw in raw_rules:
        if "regex" not in raw:
            continue  # a rule on file paths only
        keywords = tuple(word.lower() for word in raw.get("keywords", ()))
        by_id[raw["id"]] = TokenRule(
            id=raw["id"],
            kind=rule_kind(raw["id"]),
            pattern=regex.compile(loosen_terminator(translate_re2(raw["regex"]))),
            keywords=keywords,
            entropy=float(raw.get("entropy", 0.0)),
        )
    return list(by_id.values())


def load_rules() -> list[TokenRule]:
    """Every shipped rule, local ones replacing gitleaks rules of the same id."""
    raw: list[dict[str, Any]] = []
    for name in RULE_FILES:
        raw.extend(_read(name))
    return parse_rules(raw)
