"""Provider tokens recognised by shape: each kind's pattern, its gate words and its checks."""

from __future__ import annotations

import base64
import binascii
import itertools
from collections.abc import Set as AbstractSet
from typing import Final

import regex

from bot.vocabulary.redaction.alphabet import B64URL, WORD_START, WORD_TAIL

# One pattern per kind, applied in this order; each match is a whole token-like word.
TOKEN_PATTERNS: Final[tuple[tuple[str, regex.Pattern[str]], ...]] = tuple(
    (kind, regex.compile(pattern))
    for kind, pattern in (
        # Whoever has a webhook URL can post as the webhook.  The host may follow `//` or a
        # subdomain's `.` (`canary.discord.com`).
        (
            "discord_webhook",
            r"(?<![A-Za-z0-9_\-])(?i:discord(?:app)?\.com/api(?:/v\d+)?/webhooks/)"
            rf"\d+/[{B64URL}]{{20,}}{WORD_TAIL}",
        ),
        (
            "slack_webhook",
            r"(?<![A-Za-z0-9_.\-])(?i:hooks\.slack\.com/(?:services|workflows|triggers)/)"
            r"[A-Za-z0-9_\-]+(?:/[A-Za-z0-9_\-]+)+",
        ),
        ("anthropic_key", rf"{WORD_START}sk-ant-[{B64URL}]{{20,}}{WORD_TAIL}"),
        # A candidate only: see `is_token`.
        ("openai_key", rf"{WORD_START}sk-[{B64URL}]{{20,}}{WORD_TAIL}"),
        (
            "github_token",
            rf"{WORD_START}(?:gh[pousr]_[A-Za-z0-9]{{30,}}|github_pat_[A-Za-z0-9_]{{22,}})"
            rf"{WORD_TAIL}",
        ),
        (
            "gitlab_token",
            rf"{WORD_START}gl(?:pat|rt|dt|ptt|ft|cbt|soat)-[{B64URL}]{{20,}}{WORD_TAIL}",
        ),
        # `xoxe.xoxp-…` is a refresh token, `xoxe-…` a configuration token.
        (
            "slack_token",
            rf"{WORD_START}(?:xoxe\.)?(?:xox[abprse]|xapp)-[A-Za-z0-9\-]{{10,}}{WORD_TAIL}",
        ),
        (
            "stripe_key",
            rf"{WORD_START}(?:[sr]k_(?:live|test)_|whsec_)[A-Za-z0-9]{{16,}}{WORD_TAIL}",
        ),
        # Exactly 20 characters: a longer all-caps word (ASIAPACIFICSUMMIT2024) is none.
        ("aws_access_key", rf"{WORD_START}(?:AKIA|ASIA)[A-Z0-9]{{16}}(?![A-Za-z0-9])"),
        ("google_api_key", rf"{WORD_START}AIza[{B64URL}]{{35}}{WORD_TAIL}"),
        ("google_oauth_token", rf"{WORD_START}ya29\.[{B64URL}]{{20,}}{WORD_TAIL}"),
        ("google_client_secret", rf"{WORD_START}GOCSPX-[{B64URL}]{{20,}}{WORD_TAIL}"),
        ("npm_token", rf"{WORD_START}npm_[A-Za-z0-9]{{36}}{WORD_TAIL}"),
        ("huggingface_token", rf"{WORD_START}hf_[A-Za-z0-9]{{30,}}{WORD_TAIL}"),
        ("groq_key", rf"{WORD_START}gsk_[A-Za-z0-9]{{40,}}{WORD_TAIL}"),
        ("xai_key", rf"{WORD_START}xai-[A-Za-z0-9]{{40,}}{WORD_TAIL}"),
        ("jwt", rf"{WORD_START}eyJ[{B64URL}]{{5,}}\.[{B64URL}]{{5,}}\.{WORD_TAIL}"),
        # base64(user id) . base64(timestamp) . HMAC; a candidate only: see `is_token`.
        (
            "discord_token",
            rf"{WORD_START}[MNO][{B64URL}]{{22,26}}\.[{B64URL}]{{6}}\.[{B64URL}]{{27,}}"
            rf"{WORD_TAIL}",
        ),
    )
)

# Keywords: every match holds one of its kind's words, looked up in the lower-cased text
# (see `bot.vocabulary.redaction.keywords`), so a text without one skips the pattern.
TOKEN_KEYWORDS: Final[dict[str, tuple[str, ...]]] = {
    "discord_webhook": ("discord",),
    "slack_webhook": ("hooks.slack.com/",),
    "anthropic_key": ("sk-ant-",),
    "openai_key": ("sk-",),
    "github_token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "gitlab_token": ("glpat-", "glrt-", "gldt-", "glptt-", "glft-", "glcbt-", "glsoat-"),
    "slack_token": ("xox", "xapp-"),
    "stripe_key": ("k_live_", "k_test_", "whsec_"),
    "aws_access_key": ("akia", "asia"),
    "google_api_key": ("aiza",),
    "google_oauth_token": ("ya29.",),
    "google_client_secret": ("gocspx-",),
    "npm_token": ("npm_",),
    "huggingface_token": ("hf_",),
    "groq_key": ("gsk_",),
    "xai_key": ("xai-",),
    "jwt": ("eyj",),
}

# Real OpenAI keys (`sk-<48>`, `sk-proj-<~150>`, `sk-svcacct-...`) are random base62/64url:
# they hold a long run of letters and digits between their separators.
_ALNUM_RUN: Final = regex.compile(r"[A-Za-z0-9]{16,}")
_MIN_RANDOM_SWITCHES: Final = 4


def _kinds_by_word() -> dict[str, frozenset[str]]:
    """Each token keyword and the kinds whose patterns need it."""
    by_word: dict[str, set[str]] = {}
    for kind, words in TOKEN_KEYWORDS.items():
        for word in words:
            by_word.setdefault(word, set()).add(kind)
    return {word: frozenset(kinds) for word, kinds in by_word.items()}


_KINDS_BY_WORD: Final = _kinds_by_word()


def possible_token_kinds(text: str, words: AbstractSet[str]) -> set[str]:
    """The kinds whose pattern can match ``text``, which holds keywords ``words``."""
    kinds: set[str] = set()
    for word in words:
        found = _KINDS_BY_WORD.get(word)
        if found is not None:
            kinds.update(found)
    if may_hold_discord_token(text):
        kinds.add("discord_token")
    return kinds


def token_may_match(kind: str, text: str, words: AbstractSet[str]) -> bool:
    """Whether the pattern of token ``kind`` can match ``text``, which holds ``words``."""
    if kind == "discord_token":
        return may_hold_discord_token(text)
    return not words.isdisjoint(TOKEN_KEYWORDS[kind])


def may_hold_discord_token(text: str) -> bool:
    """Whether ``text`` has two dots seven apart, as the middle part of a Discord token."""
    # The middle part is `.` + six base64url characters (no `.`) + `.`.  The other parts
    # start anywhere an `[MNO]` does, so the engine would try them all over ordinary text.
    dot = text.find(".")
    while dot != -1:
        after = text.find(".", dot + 1)
        if after == dot + 7:
            return True
        dot = after
    return False


def is_token(kind: str, token: str) -> bool:
    """Whether a match of ``kind``'s pattern is a real token rather than a look-alike."""
    if kind == "openai_key":
        return _is_openai_key(token)
    if kind == "discord_token":
        return _is_discord_token(token)
    return True


def _is_openai_key(token: str) -> bool:
    """Whether an ``sk-...`` word holds a random-looking run of 16+ letters and digits."""
    # A generated run mixes letters and digits, and has both cases (base62) or keeps
    # switching between letters and digits (hex); `sk-8 park`, words joined by hyphens
    # and a word with a number glued on (`sk-roadmap2024-for-the-whole-team`) do neither.
    for run in _ALNUM_RUN.findall(token):
        if not any(char.isdigit() for char in run) or not any(char.isalpha() for char in run):
            continue
        if any(char.isupper() for char in run) and any(char.islower() for char in run):
            return True
        switches = sum(a.isdigit() != b.isdigit() for a, b in itertools.pairwise(run))
        if switches >= _MIN_RANDOM_SWITCHES:
            return True
    return False


def _is_discord_token(token: str) -> bool:
    """Whether the first part of a Discord-token-shaped word is a base64url user id."""
    # A bot token starts with the bot's snowflake (17 to 20 digits) in unpadded base64url;
    # a dotted code identifier of the same shape decodes to noise.
    first = token.split(".", 1)[0]
    try:
        decoded = base64.urlsafe_b64decode(first + "=" * (-len(first) % 4))
    except (binascii.Error, ValueError):
        return False
    return decoded.isascii() and decoded.isdigit() and 17 <= len(decoded) <= 20
