"""The redaction passes: each rule's pattern run over the text in a fixed order, behind its gate."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Final

import regex

from bot.vocabulary.redaction.alphabet import marker
from bot.vocabulary.redaction.anchors import anchored_matches, finders
from bot.vocabulary.redaction.context_rules import (
    AWS_KEY_ID_MARKER,
    AWS_SECRET_CANDIDATE,
    BEARER,
    BEARER_GATE,
    CREDENTIAL,
    CREDENTIAL_GATE,
    CREDENTIAL_STATED,
    PASSWORD,
    PASSWORD_GATE,
    PASSWORD_SPACED,
    PASSWORD_STATED,
    PEM_END,
    PIN,
    PRIVATE_TAG,
    REGION_GATE,
    REGION_OPEN,
    URL_CREDENTIALS,
    URL_CREDENTIALS_AT_CUT,
    URL_GATE,
    URL_TOKEN_USERINFO,
    URL_TOKEN_USERINFO_AT_CUT,
)
from bot.vocabulary.redaction.credential_forms import (
    CLI_GATE,
    CLI_PASSWORD,
    KEY_SPACED,
    KEY_SPACED_FINDERS,
    USER_PASS,
    USER_PASS_GATE,
)
from bot.vocabulary.redaction.keywords import scan
from bot.vocabulary.redaction.normalize import view
from bot.vocabulary.redaction.provider_rules import redact_provider_tokens
from bot.vocabulary.redaction.replacements import (
    Replacer,
    replace_bearer,
    replace_credential,
    replace_pair,
    replace_password,
    replace_pin,
    replace_spaced,
    replace_stated_credential,
    replace_token,
    replace_url,
    replace_url_token,
)
from bot.vocabulary.redaction.split_tokens import (
    join_split_tokens,
    may_be_split,
    swallow_token_tails,
)
from bot.vocabulary.redaction.token_rules import TOKEN_PATTERNS, possible_token_kinds

# Shorter tokens are not swept elsewhere in the text: too likely to occur by chance.
_MIN_SWEPT_SECRET: Final = 16
# Key words the anchored credential passes start next to (see `anchors`).
_KEY_END_CHARS: Final = "[\"'*_`]{0,3}+"
_CREDENTIAL_FINDERS: Final = finders(
    {word: word for word in ("secret", "token", "key", "authorization")},
    rf"{_KEY_END_CHARS}[ \t]++(?:is|was)[ \t:]",
)
_PIN_FINDERS: Final = finders(
    {"pin": "pin"},
    rf"(?:[ \t]+(?:code|number))?{_KEY_END_CHARS}(?:[ \t]++(?:is|was)[ \t:]|[ \t]*+[:=])",
)
_PASSWORD_FINDERS: Final = finders(
    {"pass": "pass(?:word|wd|phrase|code)?", "pw": "pwd?"},
    rf"{_KEY_END_CHARS}[ \t]++[^\s]{{4}}",
)
# How many lines before or after an AWS key id its secret may be ("keys:\n id\n\n secret").
_AWS_PAIR_LINES: Final = 2
# Rounds of token passes and sweep; a bound keeps the work linear.
_MAX_SWEEP_ROUNDS: Final = 8


def redact_secrets(text: str, *, cut: bool = False) -> str:
    """Replace private regions and credentials in ``text`` with ``[REDACTED:<kind>]`` markers."""
    # Idempotent: already-redacted text passes through unchanged.  `cut`: `text` is a head
    # `cut_safely` took from a longer text, so a value running into its end is hidden whole.
    return _redact_view(text, cut=cut)[0]


def redaction_kinds(text: str) -> list[str]:
    """The kind of every redaction `redact_secrets` would make, for audit counters."""
    return _redact_view(text)[1]


def _redact_view(text: str, *, cut: bool = False) -> tuple[str, list[str]]:
    """`_redact` run on the normalized view; the original's spelling kept where unchanged."""
    folded = view(text)
    if folded is None:
        return _redact(text, cut=cut)
    redacted, kinds = _redact(folded.text, cut=cut)
    if redacted == folded.text:
        return text, kinds
    return folded.restore(redacted), kinds


def _may_hold(words: AbstractSet[str], gate: tuple[str, ...]) -> bool:
    """Whether a text holding ``words`` (its `scan`) may hold a match that needs a gate word."""
    return not words.isdisjoint(gate)


def _redact(text: str, *, cut: bool = False) -> tuple[str, list[str]]:
    """The redacted text and the kind of each redaction, regions first."""
    # Each pass is one regex with a literal-ish start, so text without a candidate is
    # scanned quickly; no pass matches inside an earlier marker.
    kinds: list[str] = []
    # One keyword scan: redaction only puts markers in, whose words (`[REDACTED:slack_token]`)
    # never form a key word before a separator, so what it finds stays a superset.
    words = scan(text)

    text = _redact_regions(text, kinds, words)
    if not text:
        return text, kinds

    found: dict[str, str] = {}  # each token redacted (whole match) -> its kind

    def sub(
        pattern: regex.Pattern[str],
        replace: Replacer,
        kind: str,
        *,
        token: bool,
        gate: tuple[str, ...] | None = None,
    ) -> None:
        nonlocal text
        if gate is not None and words.isdisjoint(gate):
            return
        # One scan: the matches `pattern.sub` would replace, judged in order.
        pieces: list[str] = []
        pos = 0
        for match in pattern.finditer(text):
            replacement, reported = replace(match, kind, cut)
            if reported is None:
                continue
            kinds.append(reported)
            if token and replacement == marker(reported):
                found[match.group(0)] = reported
            pieces += [text[pos : match.start()], replacement]
            pos = match.end()
        if pieces:
            pieces.append(text[pos:])
            text = "".join(pieces)

    lowered: str | None = None

    def anchored(
        pattern: regex.Pattern[str],
        replace: Replacer,
        word_finders: dict[str, regex.Pattern[str]],
        *,
        at_word_start: bool = False,
    ) -> None:
        # Like `sub` for a credential pass, tried only next to its key words (the finders
        # of the keywords the scan found).
        nonlocal text, lowered
        present = [finder for word, finder in word_finders.items() if word in words]
        if not present:
            return
        if lowered is None or len(lowered) != len(text):
            lowered = text.lower()
        matches = anchored_matches(pattern, text, lowered, present, at_word_start=at_word_start)
        changed = _replace_matches(text, matches, replace, cut, kinds)
        if changed is not text:
            text, lowered = changed, None

    sub(
        URL_CREDENTIALS_AT_CUT if cut else URL_CREDENTIALS,
        replace_url,
        "url_credentials",
        token=False,
        gate=URL_GATE,
    )
    sub(
        URL_TOKEN_USERINFO_AT_CUT if cut else URL_TOKEN_USERINFO,
        replace_url_token,
        "url_credentials",
        token=False,
        gate=URL_GATE,
    )
    swept, rounds = True, 0
    while swept and rounds < _MAX_SWEEP_ROUNDS:
        rounds += 1
        possible = possible_token_kinds(text, words)
        for kind, pattern in TOKEN_PATTERNS:
            if kind in possible:
                sub(pattern, replace_token, kind, token=True)
        text = redact_provider_tokens(text, words, kinds, found)
        text = _redact_aws_secret_pairs(text, kinds, found)
        # A token recognised once is hidden everywhere, also glued to other text (`0sk-…`)
        # where its shape alone would not give it away.  A marker put there can end the
        # word before it (an `AKIA…` glued to `sk-…`), so the token passes run again.
        swept = False
        for secret in sorted(found, key=len, reverse=True):
            if len(secret) >= _MIN_SWEPT_SECRET and secret in text:
                kinds.extend([found[secret]] * text.count(secret))
                text = text.replace(secret, marker(found[secret]))
                swept = True
    if may_be_split(text, words):
        text = join_split_tokens(text, _redact, kinds)
    if found:
        text = swallow_token_tails(text)
    sub(PASSWORD, replace_password, "credential", token=False, gate=PASSWORD_GATE)
    sub(PASSWORD_STATED, replace_password, "credential", token=False, gate=PASSWORD_GATE)
    sub(CLI_PASSWORD, replace_pair, "credential", token=False, gate=CLI_GATE)
    sub(USER_PASS, replace_pair, "credential", token=False, gate=USER_PASS_GATE)
    anchored(PASSWORD_SPACED, replace_spaced, _PASSWORD_FINDERS)
    anchored(CREDENTIAL_STATED, replace_stated_credential, _CREDENTIAL_FINDERS)
    anchored(PIN, replace_pin, _PIN_FINDERS, at_word_start=True)
    sub(CREDENTIAL, replace_credential, "credential", token=False, gate=CREDENTIAL_GATE)
    anchored(KEY_SPACED, replace_spaced, KEY_SPACED_FINDERS)
    sub(BEARER, replace_bearer, "bearer", token=False, gate=BEARER_GATE)
    return text, kinds


def _replace_matches(
    text: str, matches: list[regex.Match[str]], replace: Replacer, cut: bool, kinds: list[str]
) -> str:
    """``text`` with each of ``matches`` (in order, not overlapping) judged by ``replace``."""
    pieces: list[str] = []
    pos = 0
    for match in matches:
        replacement, reported = replace(match, "credential", cut)
        if reported is None:
            continue
        kinds.append(reported)
        pieces += [text[pos : match.start()], replacement]
        pos = match.end()
    if not pieces:
        return text
    pieces.append(text[pos:])
    return "".join(pieces)


def _redact_aws_secret_pairs(text: str, kinds: list[str], found: dict[str, str]) -> str:
    """Hide AWS secret access keys on the lines around an (already hidden) AWS key id."""
    if AWS_KEY_ID_MARKER not in text:
        return text
    lines = text.split("\n")
    near: set[int] = set()
    for number, line in enumerate(lines):
        if AWS_KEY_ID_MARKER in line:
            near.update(range(number - _AWS_PAIR_LINES, number + _AWS_PAIR_LINES + 1))

    def replace(match: regex.Match[str]) -> str:
        kinds.append("aws_secret_key")
        found[match.group()] = "aws_secret_key"
        return marker("aws_secret_key")

    for number in sorted(near):
        if 0 <= number < len(lines):
            lines[number] = AWS_SECRET_CANDIDATE.sub(replace, lines[number])
    return "\n".join(lines)


def _redact_regions(text: str, kinds: list[str], words: AbstractSet[str]) -> str:
    """``<private>`` regions and PEM private keys, each up to its closer or the end."""
    if not _may_hold(words, REGION_GATE):
        return text
    pieces: list[str] = []
    pos = 0
    while True:
        opener = REGION_OPEN.search(text, pos)
        if opener is None:
            break
        kind = "private" if opener.group("private") is not None else "private_key"
        pieces.append(text[pos : opener.start()])
        pieces.append(marker(kind))
        kinds.append(kind)
        end = _private_end(text, opener.end()) if kind == "private" else _pem_end(text, opener)
        if end is None:
            pos = len(text)
            break
        pos = end
    if not pieces:
        return text
    pieces.append(text[pos:])
    return "".join(pieces)


def _private_end(text: str, pos: int) -> int | None:
    """End of the closer that balances a ``<private>`` opened before ``pos`` (None: EOF)."""
    depth = 1
    for tag in PRIVATE_TAG.finditer(text, pos):
        depth += 1 if tag.group("open") is not None else -1
        if depth == 0:
            return tag.end()
    return None


def _pem_end(text: str, opener: regex.Match[str]) -> int | None:
    """End of the END line of a PEM private key (None: the block runs to EOF)."""
    closer = PEM_END.search(text, opener.end())
    return closer.end() if closer is not None else None
