"""The redaction passes: each rule's pattern run over the text in a fixed order, behind its gate."""

from __future__ import annotations

from collections.abc import Iterable
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
    passes = _Passes(text, words, kinds, cut)
    _redact_url_userinfo(passes)
    _redact_tokens(passes)
    _redact_credentials(passes)
    return passes.text, kinds


class _Passes:
    """One text on its way through the passes: the text so far, the kinds reported and
    each token redacted (whole match -> its kind)."""

    __slots__ = ("cut", "found", "kinds", "lowered", "text", "words")

    def __init__(self, text: str, words: AbstractSet[str], kinds: list[str], cut: bool) -> None:
        self.text = text
        self.words = words
        self.kinds = kinds
        self.cut = cut
        self.found: dict[str, str] = {}
        # `text.lower()`, kept for the anchored passes while the text keeps its length.
        self.lowered: str | None = None

    def sub(
        self,
        pattern: regex.Pattern[str],
        replace: Replacer,
        kind: str,
        *,
        token: bool,
        gate: tuple[str, ...] | None = None,
    ) -> None:
        """Run ``pattern`` over the text (unless no ``gate`` word is in it)."""
        if gate is not None and self.words.isdisjoint(gate):
            return
        # One scan: the matches `pattern.sub` would replace, judged in order.
        found = self.found if token else None
        matches = pattern.finditer(self.text)
        self.text = _replace_matches(self.text, matches, replace, kind, self.cut, self.kinds, found)

    def anchored(
        self,
        pattern: regex.Pattern[str],
        replace: Replacer,
        word_finders: dict[str, regex.Pattern[str]],
        *,
        at_word_start: bool = False,
    ) -> None:
        """Like :meth:`sub` for a credential pass, tried only next to its key words (the
        finders of the keywords the scan found)."""
        present = [finder for word, finder in word_finders.items() if word in self.words]
        if not present:
            return
        text = self.text
        if self.lowered is None or len(self.lowered) != len(text):
            self.lowered = text.lower()
        matches = anchored_matches(
            pattern, text, self.lowered, present, at_word_start=at_word_start
        )
        changed = _replace_matches(text, matches, replace, "credential", self.cut, self.kinds)
        if changed is not text:
            self.text, self.lowered = changed, None


def _redact_url_userinfo(passes: _Passes) -> None:
    """Passwords and tokens in the userinfo of URLs."""
    cut = passes.cut
    passes.sub(
        URL_CREDENTIALS_AT_CUT if cut else URL_CREDENTIALS,
        replace_url,
        "url_credentials",
        token=False,
        gate=URL_GATE,
    )
    passes.sub(
        URL_TOKEN_USERINFO_AT_CUT if cut else URL_TOKEN_USERINFO,
        replace_url_token,
        "url_credentials",
        token=False,
        gate=URL_GATE,
    )


def _redact_tokens(passes: _Passes) -> None:
    """Tokens by their shape, then wherever else they stand, then split over a break."""
    swept, rounds = True, 0
    while swept and rounds < _MAX_SWEEP_ROUNDS:
        rounds += 1
        possible = possible_token_kinds(passes.text, passes.words)
        for kind, pattern in TOKEN_PATTERNS:
            if kind in possible:
                passes.sub(pattern, replace_token, kind, token=True)
        passes.text = redact_provider_tokens(passes.text, passes.words, passes.kinds, passes.found)
        passes.text = _redact_aws_secret_pairs(passes.text, passes.kinds, passes.found)
        # A token recognised once is hidden everywhere, also glued to other text (`0sk-…`)
        # where its shape alone would not give it away.  A marker put there can end the
        # word before it (an `AKIA…` glued to `sk-…`), so the token passes run again.
        swept = _sweep_found(passes)
    if may_be_split(passes.text, passes.words):
        passes.text = join_split_tokens(passes.text, _redact, passes.kinds)
    if passes.found:
        passes.text = swallow_token_tails(passes.text)


def _sweep_found(passes: _Passes) -> bool:
    """Hide each long token found so far wherever else it stands; whether any was."""
    found, swept = passes.found, False
    for secret in sorted(found, key=len, reverse=True):
        if len(secret) >= _MIN_SWEPT_SECRET and secret in passes.text:
            passes.kinds.extend([found[secret]] * passes.text.count(secret))
            passes.text = passes.text.replace(secret, marker(found[secret]))
            swept = True
    return swept


def _redact_credentials(passes: _Passes) -> None:
    """Passwords, PINs, keyed secrets and bearer tokens, by the words next to them."""
    passes.sub(PASSWORD, replace_password, "credential", token=False, gate=PASSWORD_GATE)
    passes.sub(PASSWORD_STATED, replace_password, "credential", token=False, gate=PASSWORD_GATE)
    passes.sub(CLI_PASSWORD, replace_pair, "credential", token=False, gate=CLI_GATE)
    passes.sub(USER_PASS, replace_pair, "credential", token=False, gate=USER_PASS_GATE)
    passes.anchored(PASSWORD_SPACED, replace_spaced, _PASSWORD_FINDERS)
    passes.anchored(CREDENTIAL_STATED, replace_stated_credential, _CREDENTIAL_FINDERS)
    passes.anchored(PIN, replace_pin, _PIN_FINDERS, at_word_start=True)
    passes.sub(CREDENTIAL, replace_credential, "credential", token=False, gate=CREDENTIAL_GATE)
    passes.anchored(KEY_SPACED, replace_spaced, KEY_SPACED_FINDERS)
    passes.sub(BEARER, replace_bearer, "bearer", token=False, gate=BEARER_GATE)


def _replace_matches(
    text: str,
    matches: Iterable[regex.Match[str]],
    replace: Replacer,
    kind: str,
    cut: bool,
    kinds: list[str],
    found: dict[str, str] | None = None,
) -> str:
    """``text`` with each of ``matches`` (in order, not overlapping) judged by ``replace``;
    with ``found``, each match hidden whole under its kind's marker is noted there."""
    pieces: list[str] = []
    pos = 0
    for match in matches:
        replacement, reported = replace(match, kind, cut)
        if reported is None:
            continue
        kinds.append(reported)
        if found is not None and replacement == marker(reported):
            found[match.group(0)] = reported
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
