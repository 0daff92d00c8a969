"""Sanitize memory values before they are stored.

Memory values are written by the model (or echo what users typed) and are later pasted
back into the system prompt, so every value goes through :func:`sanitize_value` first:

1. :func:`strip_control_chars` - NUL, C0/C1 controls, lone surrogates and a few invisible
   code points are removed.  PostgreSQL rejects NUL and surrogates outright, and invisible
   characters can be used to split a secret so that redaction misses it.
2. :func:`redact_secrets` - credentials and ``<private>`` regions become
   ``[REDACTED:<kind>]`` markers, so a secret that was pasted into chat never reaches the
   database or a later prompt.
3. :func:`strip_unknown_placeholders` - brace placeholders other than the prompt's own
   lose their braces, so stored text cannot smuggle template fields into the prompt.
   Removing braces can join text back together (``sk-{x}abc...``), so redaction runs again
   whenever this step changed anything.
4. :func:`truncate_graphemes` - values are capped at :data:`MAX_VALUE_CHARS` code points
   without splitting a grapheme cluster (or a redaction marker, or a kept placeholder).
5. Trailing whitespace is dropped.

Every regular expression here is written to run in linear time (literal prefixes, token
boundaries enforced with look-behinds, no nested ambiguous repetition), because values can
be arbitrarily large and adversarial.  The module is pure Python and imports nothing from
Discord or the database layer.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Final, TypeVar, cast

import regex

__all__ = [
    "MAX_VALUE_CHARS",
    "PROMPT_PLACEHOLDERS",
    "redact_leaves",
    "redact_secrets",
    "redaction_kinds",
    "sanitize_value",
    "strip_control_chars",
    "strip_unknown_placeholders",
    "truncate_graphemes",
]

T = TypeVar("T")

MAX_VALUE_CHARS: Final = 1500
"""Longest stored memory value, in code points; keeps the prompt budget predictable."""

PROMPT_PLACEHOLDERS: Final[frozenset[str]] = frozenset(
    {"bot_name", "user_name", "guild_name", "channel_name", "date", "time"}
)
"""The placeholders the prompt template itself fills in; the only ones a value may keep."""

# A huge value is not processed whole: only a head of this many code points per allowed
# output code point is, cut where no token can straddle the cut (see `_cut_safely`).  If
# redaction shrinks that head below the limit, a 4x larger head is tried, up to the whole
# text (every pass is linear, so even that stays fast).
_CUT_FACTOR: Final = 16
_MIN_CUT: Final = 256

# --------------------------------------------------------------------------------------
# Control characters
# --------------------------------------------------------------------------------------

_NEWLINES: Final = regex.compile(r"\r\n?")

_NONCHARACTERS: Final = "".join(
    f"\\U{plane + 0xFFFE:08X}\\U{plane + 0xFFFF:08X}" for plane in range(0x10000, 0x110000, 0x10000)
)

_FORBIDDEN_CHARS: Final = (
    r"\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"  # C0/C1 controls except \t and \n (\r is normalised)
    r"\u200b\u2060\ufeff"  # zero-width space, word joiner, BOM: invisible, used to split tokens
    r"\u202a-\u202e\u2066-\u2069"  # bidi embeddings/overrides/isolates: visual spoofing
    r"\ud800-\udfff"  # lone surrogates: not encodable as UTF-8, PostgreSQL refuses them
    r"\ufdd0-\ufdef\ufffe\uffff" + _NONCHARACTERS  # Unicode noncharacters
)
_FORBIDDEN: Final = regex.compile(f"[{_FORBIDDEN_CHARS}]+")

# Tag characters hide text from humans while the model still reads it ("ASCII smuggling").
# They are kept only inside a well-formed emoji tag sequence (e.g. the Scotland flag).
_TAGS: Final = regex.compile(
    r"(\U0001F3F4[\U000E0020-\U000E007E]{1,32}\U000E007F)|[\U000E0000-\U000E007F]+"
)

_ASCII_FORBIDDEN: Final = regex.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]+")
_FORBIDDEN_OR_TAG: Final = regex.compile(f"[{_FORBIDDEN_CHARS}" r"\U000E0000-\U000E007F]")

# --------------------------------------------------------------------------------------
# Placeholders
# --------------------------------------------------------------------------------------

# Unknown placeholders are stripped pass by pass (the regexes depend on the allowed names,
# see `_placeholder_regexes`).  If the last pass still changed something, braces were
# nested (`{a{b}c}` -> `{abc}`), and a final pass keeps only the allowed placeholders.
_MAX_PLACEHOLDER_PASSES: Final = 2

# --------------------------------------------------------------------------------------
# Redaction
# --------------------------------------------------------------------------------------

_MARKER_PREFIX: Final = "[REDACTED:"
_MARKER: Final = regex.compile(r"\[REDACTED:[a-z_]+\]")

# Spans that truncation must keep whole or drop whole: a half marker would look like a
# value (and be redacted again), a half placeholder would leave stray braces, and an
# `Authorization: Bearer` whose marker was cut off would make `Bearer` look like a value.
_ATOMIC: Final = regex.compile(
    r"(?:(?i:bearer|basic|token|bot|digest)[ \t]+[\"']?)?\[REDACTED:[a-z_]+\]|\{\w+\}"
)

# Region openers (phase 1).  Regions are closed by a separate search so that an unclosed
# region simply runs to the end of the text.
_REGION_OPEN: Final = regex.compile(
    r"(?P<private>(?i:<[ \t]*private[ \t]*>))"
    r"|(?P<private_key>-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----)"
)
_PRIVATE_CLOSE: Final = regex.compile(r"(?i:<[ \t]*/[ \t]*private[ \t]*>)")
_PEM_END: Final = regex.compile(r"-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----")

# Characters that make up token-like words.  Every token pattern refuses to start right
# after one of them (so `task-management` never yields an `sk-` key) and swallows any of
# them that follow the secret, so a match always covers a whole word.  That makes
# redaction idempotent (the character after a marker is one no pattern starts after, just
# like before the replacement) and never leaves half a token behind.
_U: Final = r"A-Za-z0-9_.\-"
_LB: Final = rf"(?<![{_U}])"
_TAIL: Final = rf"[{_U}]*"
_B64U: Final = r"A-Za-z0-9_\-"
# Bearer-token characters; a superset of _U.  Cutting between two of them could split a
# token, so input is only ever cut next to some other character (see `_cut_safely`).
_BC: Final = r"A-Za-z0-9._~+/=\-"
_BC_CHAR: Final = regex.compile(rf"[{_BC}]")
_LAST_NON_BC: Final = regex.compile(rf"(?r)[^{_BC}]")

# Userinfo of a URL: `://user:pass@`.  The password part is greedy up to the last `@`
# before the path, so an unescaped `@` in a password does not leak its tail.
_URL_CREDENTIALS: Final = regex.compile(r"://(?!\[REDACTED:)[^\s/?#@:\[\]]*:[^\s/?#\[\]]*@")
# Same, for input that was cut: a userinfo running into the cut has lost its `@`.
_URL_CREDENTIALS_AT_CUT: Final = regex.compile(
    r"://(?!\[REDACTED:)[^\s/?#@:\[\]]*:[^\s/?#\[\]]*(?:@|\Z)"
)

# One pattern per kind, applied in this order.  Each match is a whole token-like word.
_TOKEN_PATTERNS: Final[tuple[tuple[str, regex.Pattern[str]], ...]] = tuple(
    (kind, regex.compile(pattern))
    for kind, pattern in (
        ("anthropic_key", rf"{_LB}sk-ant-[{_B64U}]{{20,}}{_TAIL}"),
        # 20+ characters including a digit, so `sk-8 park` and hyphenated slugs stay.
        ("openai_key", rf"{_LB}sk-(?=[A-Za-z_\-]*[0-9])[{_B64U}]{{20,}}{_TAIL}"),
        (
            "github_token",
            rf"{_LB}(?:gh[pousr]_[A-Za-z0-9]{{30,}}|github_pat_[A-Za-z0-9_]{{22,}}){_TAIL}",
        ),
        ("gitlab_token", rf"{_LB}glpat-[{_B64U}]{{20,}}{_TAIL}"),
        ("slack_token", rf"{_LB}(?:xox[abprs]|xapp)-[A-Za-z0-9\-]{{10,}}{_TAIL}"),
        ("aws_access_key", rf"{_LB}(?:AKIA|ASIA)[A-Z0-9]{{16}}{_TAIL}"),
        ("google_api_key", rf"{_LB}AIza[{_B64U}]{{35}}{_TAIL}"),
        ("npm_token", rf"{_LB}npm_[A-Za-z0-9]{{36}}{_TAIL}"),
        ("jwt", rf"{_LB}eyJ[{_B64U}]{{5,}}\.[{_B64U}]{{5,}}\.{_TAIL}"),
        # base64(user id) . base64(timestamp) . HMAC
        (
            "discord_token",
            rf"{_LB}[MNO][{_B64U}]{{23,27}}\.[{_B64U}]{{6}}\.[{_B64U}]{{27,}}{_TAIL}",
        ),
    )
)

# Key words that make `<word> = value` / `<word>: value` a credential.  The word must start
# a segment of the key (`db_password`, `x-api-key`, `clientSecret`, `--token`) and be its
# last segment (the separator follows), so `tokenizer`, `keyboard`, `monkey:` or "the
# secret ingredient" never qualify.  The match starts at the separator and checks the key
# with a look-behind: the engine then only stops at `:` and `=`, which keeps the common
# case fast, and the key itself (kept verbatim) is not part of the replacement.
_SECRET_WORDS: Final = r"password|passwd|passphrase|pwd|secret|token|apikey|key|authorization"
_SEGMENT_START: Final = r"(?:(?<![A-Za-z0-9])|(?<=[a-z0-9])(?=[A-Z]))"
_SCHEMES: Final = r"(?i:bearer|basic|token|bot|digest)"
_CREDENTIAL: Final = regex.compile(
    rf"(?<={_SEGMENT_START}(?i:{_SECRET_WORDS})[\"']?[ \t]*)"
    r"(?P<sep>(?::=|=>|[:=])[ \t]*)"
    # `Authorization: Bearer x` keeps the scheme.  Without a token after it, the scheme
    # word itself is the value (as it would be in a truncated copy, which keeps this
    # idempotent); a scheme followed by a marker is already redacted.
    rf"(?P<scheme>(?:{_SCHEMES}[ \t]+)?)"
    rf"(?![\"']?\[REDACTED:|{_SCHEMES}[ \t]+[\"']?\[REDACTED:)"
    r"(?P<value>\"(?!\[REDACTED:)(?:[^\"\\\n]|\\.)+(?P<dq>\")?"
    r"|'(?!\[REDACTED:)(?:[^'\\\n]|\\.)+(?P<sq>')?"
    r"|[^\s\"']\S*)"
)
# Which key a credential match belongs to, checked on the text just before the separator.
_AUTHORIZATION_BEFORE: Final = regex.compile(r"(?i:authorization)[\"']?[ \t]*\Z")
_AWS_SECRET_BEFORE: Final = regex.compile(
    r"(?i:aws[_.\-]?secret[_.\-]?access[_.\-]?key)[\"']?[ \t]*\Z"
)
# A dict key is secret-looking if its last segment is a secret word (same rule as above)...
_SECRET_DICT_KEY: Final = regex.compile(rf"{_SEGMENT_START}(?i:{_SECRET_WORDS})\Z")
# ... except that in structured data a bare `key` (`sort_key`, `cache_key`) is usually not
# secret; only these qualified names are.
_SECRET_KEY_SUFFIX: Final = regex.compile(
    r"(?i:(?:api|secret|private|access|signing|encryption|auth|master|client|ssh)[ _.\-]?key)\Z"
)

# A bare `Bearer <token>`: the token must look like one (a digit, or 20+ characters), so
# "the bearer instrument" stays.
_BEARER: Final = regex.compile(
    rf"{_LB}(?P<word>(?i:bearer)[ \t]+)(?!\[REDACTED:)"
    rf"(?:(?=[A-Za-z._~+/=\-]*[0-9])[{_BC}]{{8,}}|[{_BC}]{{20,}})"
)

# Sentence punctuation after an unquoted value is kept visible: `password: hunter2.`
_VALUE_TRAILING_PUNCT: Final = ".,;:)]}>"

_GRAPHEME: Final = regex.compile(r"\X")
_LAST_WHITESPACE: Final = regex.compile(r"(?r)\s")
# A position between two characters of Grapheme_Cluster_Break "Other" (letters, CJK,
# punctuation, emoji...), or after LF/Control, or before CR/LF/Control is always a
# grapheme boundary (UAX #29 GB4, GB5, GB999): no rule joins such a pair.
_SURE_BOUNDARY: Final = regex.compile(
    r"(?r)(?<=[\p{GCB=Other}\p{GCB=LF}\p{GCB=Control}])"
    r"[\p{GCB=Other}\p{GCB=CR}\p{GCB=LF}\p{GCB=Control}]"
)
# How far around the cut to look for a span that must not be split (markers are short).
_ATOMIC_WINDOW: Final = 512
_STABILITY_ATTEMPTS: Final = 8


def _marker(kind: str) -> str:
    return f"{_MARKER_PREFIX}{kind}]"


# --------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------


def strip_control_chars(text: str) -> str:
    """Remove characters that must never be stored.

    ``\\r\\n`` and lone ``\\r`` become ``\\n``; ``\\n`` and ``\\t`` are kept.  Removed:
    C0/C1 controls (NUL breaks PostgreSQL text columns), lone surrogates (cannot be encoded
    as UTF-8), Unicode noncharacters, the BOM, zero-width space and word joiner (invisible,
    and they can split a secret so redaction misses it), bidi embedding/override/isolate
    controls (they make stored text display differently from what the model reads) and
    stray tag characters (invisible "ASCII smuggling" of instructions).  Emoji, ZWJ
    sequences, variation selectors, combining marks and all scripts are left alone.
    """
    if "\r" in text:
        text = _NEWLINES.sub("\n", text)
    if text.isascii():  # the common case; the full character class is much slower
        return _ASCII_FORBIDDEN.sub("", text)
    if _FORBIDDEN_OR_TAG.search(text) is None:
        return text
    return _TAGS.sub(r"\1", _FORBIDDEN.sub("", text))


def strip_unknown_placeholders(text: str, allowed: frozenset[str] = PROMPT_PLACEHOLDERS) -> str:
    """Take the braces off every placeholder that is not one of the prompt's own.

    ``{evil}``, ``{{evil}}`` and ``{0}`` become ``evil`` / ``0``, so stored text cannot
    smuggle template fields into the prompt.  An allowed name keeps exactly one pair of
    braces: ``{{user_name}}`` is normalised to ``{user_name}``, the form the prompt fills.
    If removing braces creates a new placeholder (nesting such as ``{a{b}c}``), every brace
    that is not part of an allowed placeholder is dropped, so the result never contains an
    unknown one.  Otherwise braces around anything that is not a plain word (``{ x }``,
    ``{"a": 1}``, ``{x.y}``) are not placeholders and are kept.
    """
    if "{" not in text or "}" not in text:
        return text
    unknown, non_canonical, all_braces = _placeholder_regexes(allowed)
    for _ in range(_MAX_PLACEHOLDER_PASSES):
        stripped = unknown.sub(r"\1", text)
        if non_canonical is not None and any(name in stripped for name in allowed):
            stripped = non_canonical.sub(r"\1", stripped)
        if stripped == text:
            return text
        text = stripped
    # Still changing after the passes: nested placeholders.  Keep only allowed ones.
    return all_braces.sub(r"\1", text)


def redact_secrets(text: str) -> str:
    """Replace private regions and credentials with ``[REDACTED:<kind>]`` markers.

    Kinds: ``private`` (``<private>...</private>``, an unclosed one runs to the end),
    ``private_key`` (PEM; a block without END runs to the end), ``url_credentials``
    (scheme and host stay), ``credential`` (``key = value``, ``key: value``, JSON-style;
    the key stays), ``authorization`` (an ``Authorization:`` header; the scheme stays),
    ``aws_secret_key``, ``bearer``, ``openai_key``, ``anthropic_key``, ``github_token``,
    ``gitlab_token``, ``slack_token``, ``aws_access_key``, ``google_api_key``,
    ``npm_token``, ``jwt`` and ``discord_token``.

    Prose such as "my password is strong" has no assignment and is left alone.  Redaction
    is idempotent, so already-redacted text passes through unchanged.
    """
    return _redact(text)[0]


def redaction_kinds(text: str) -> list[str]:
    """List the kind of every redaction :func:`redact_secrets` would make.

    One entry per redaction (regions first, then the other kinds pass by pass), meant for
    audit counters: it reports *that* something was redacted, never the value.
    """
    return _redact(text)[1]


def truncate_graphemes(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    """Return the longest prefix of at most ``limit`` code points that ends on a grapheme
    cluster boundary, so a ZWJ family, a flag or a letter with its accents is kept whole or
    dropped whole instead of being rendered as a broken glyph."""
    if limit < 0:
        raise ValueError("limit must be >= 0")
    return text[: _cluster_end(text, limit)]


def sanitize_value(
    text: str,
    limit: int = MAX_VALUE_CHARS,
    *,
    allowed: frozenset[str] = PROMPT_PLACEHOLDERS,
) -> str:
    """Run the whole pipeline on one memory value; the result is safe to store.

    Order: strip control characters -> redact secrets -> strip unknown placeholders (and
    redact again if that joined anything) -> truncate to ``limit`` code points on a
    grapheme boundary (never inside a marker or a kept placeholder) -> drop trailing
    whitespace.  Truncation comes after redaction, so a secret is never cut into a piece
    that no longer looks like one.  The result is idempotent: sanitizing it again changes
    nothing.

    Huge inputs are not processed whole: only a head of ``16 * limit`` code points is, cut
    where no token can straddle the cut (see `_cut_safely`).  Only if redaction shrinks
    that head below ``limit`` is a larger head (up to everything) processed.  ``allowed``
    overrides the placeholders that may stay (see :func:`strip_unknown_placeholders`).
    """
    if limit < 0:
        raise ValueError("limit must be >= 0")
    text = strip_control_chars(text)
    bound = max(limit * _CUT_FACTOR, _MIN_CUT)
    while len(text) > bound:
        processed = _process(_cut_safely(text, bound), allowed, cut=True)
        if len(processed) >= limit:
            break
        # Redaction collapsed the head (say, a huge private block), so text beyond the cut
        # would become visible: look further instead of guessing.
        bound *= 4
    else:
        processed = _process(text, allowed, cut=False)
    return _truncate(processed, limit, allowed)


def redact_leaves(obj: T) -> T:
    """Redact every string inside nested dicts, lists and tuples; return a new structure.

    Redaction must see individual values, never serialized JSON: a marker must not break
    the JSON syntax, and a pattern must not run across two values.  Because a leaf cannot
    see its key, a string stored under a secret-looking key (``password``, ``api_key``,
    ``clientSecret``, ``access_token``, ``authorization``...) is replaced entirely.  A bare
    ``key`` (or ``sort_key``, ``cache_key``) is not treated as secret in structured data.
    Dict keys are never changed; other objects (numbers, ``None``...) are returned as is.
    """
    return cast(T, _redact_obj(obj, under_secret_key=False))


# --------------------------------------------------------------------------------------
# Internals
# --------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=32)
def _placeholder_regexes(
    allowed: frozenset[str],
) -> tuple[regex.Pattern[str], regex.Pattern[str] | None, regex.Pattern[str]]:
    """Compile (unknown, non-canonical allowed, keep-only-allowed) for one allowed set.

    Every pattern ends with an alternative that consumes a whole run of ``{`` (keeping it
    via the branch-reset group), so placeholders are only tried at the first brace of a
    run and a million braces cost one match, not a million.
    """
    names = "|".join(regex.escape(name) for name in sorted(allowed, key=len, reverse=True))
    is_allowed = rf"(?:{names})\}}" if names else "(?!)"
    unknown = regex.compile(rf"(?|\{{++(?!{is_allowed})(\w+)\}}++|(\{{+))")
    if not names:
        return unknown, None, regex.compile(r"[{}]+")
    canonical = rf"(\{{(?:{names})\}})"
    non_canonical = regex.compile(rf"(?|\{{*{canonical}\}}*|(\{{+))")
    all_braces = regex.compile(rf"(?|\{{*{canonical}\}}*|\}}+|\{{+)")
    return unknown, non_canonical, all_braces


def _process(text: str, allowed: frozenset[str], *, cut: bool) -> str:
    """Redact, strip placeholders, and redact again if removing braces joined text."""
    redacted = _redact(text, cut=cut)[0]
    stripped = strip_unknown_placeholders(redacted, allowed)
    if stripped != redacted:
        stripped = _redact(stripped, cut=cut)[0]
    return stripped


_Replacer = Callable[[regex.Match[str], str, bool], tuple[str, str | None]]


def _redact(text: str, *, cut: bool = False) -> tuple[str, list[str]]:
    """Redact ``text``; ``cut`` means it is the head of a longer text (see `_cut_safely`).

    Passes run in a fixed order: regions, URL credentials, token kinds, ``key = value``,
    bare ``Bearer``.  Each pass is one regex with a literal-ish start, so a value without
    any candidate is scanned quickly; later passes never match inside an earlier marker.
    """
    kinds: list[str] = []
    text = _redact_regions(text, kinds)
    if not text:
        return text, kinds

    def sub(pattern: regex.Pattern[str], replace: _Replacer, kind: str) -> None:
        nonlocal text
        if pattern.search(text) is None:
            return

        def replace_one(match: regex.Match[str]) -> str:
            replacement, reported = replace(match, kind, cut)
            if reported is not None:
                kinds.append(reported)
            return replacement

        text = pattern.sub(replace_one, text)

    sub(_URL_CREDENTIALS_AT_CUT if cut else _URL_CREDENTIALS, _replace_url, "url_credentials")
    for kind, pattern in _TOKEN_PATTERNS:
        sub(pattern, _replace_token, kind)
    sub(_CREDENTIAL, _replace_credential, "credential")
    sub(_BEARER, _replace_bearer, "bearer")
    return text, kinds


def _redact_regions(text: str, kinds: list[str]) -> str:
    """Phase 1: ``<private>`` regions and PEM private keys, each up to its closer or EOF."""
    pieces: list[str] = []
    pos = 0
    while True:
        opener = _REGION_OPEN.search(text, pos)
        if opener is None:
            break
        kind = "private" if opener.group("private") is not None else "private_key"
        closer = (_PRIVATE_CLOSE if kind == "private" else _PEM_END).search(text, opener.end())
        pieces.append(text[pos : opener.start()])
        pieces.append(_marker(kind))
        kinds.append(kind)
        if closer is None:
            pos = len(text)
            break
        pos = closer.end()
    if not pieces:
        return text
    pieces.append(text[pos:])
    return "".join(pieces)


def _replace_token(match: regex.Match[str], kind: str, cut: bool) -> tuple[str, str | None]:
    token = match.group()
    core = token.rstrip(".")  # a sentence-ending dot is not part of the secret
    return _marker(kind) + token[len(core) :], kind


def _replace_url(match: regex.Match[str], kind: str, cut: bool) -> tuple[str, str | None]:
    at = "@" if match.group().endswith("@") else ""
    return f"://{_marker(kind)}{at}", kind


def _replace_bearer(match: regex.Match[str], kind: str, cut: bool) -> tuple[str, str | None]:
    return match.group("word") + _marker(kind), kind


def _replace_credential(match: regex.Match[str], kind: str, cut: bool) -> tuple[str, str | None]:
    before = match.string[max(0, match.start() - 40) : match.start()]
    if _AUTHORIZATION_BEFORE.search(before):
        kind = "authorization"
    elif _AWS_SECRET_BEFORE.search(before):
        kind = "aws_secret_key"
    prefix = match.group("sep") + match.group("scheme")
    value = match.group("value")
    if value[0] in "\"'":
        closed = match.group("dq") is not None or match.group("sq") is not None
        return prefix + value[0] + _marker(kind) + (value[0] if closed else ""), kind
    if cut and match.end() == len(match.string):
        # The value runs into the cut: it may continue, so nothing of it stays visible.
        return prefix + _marker(kind), kind
    core = value.rstrip(_VALUE_TRAILING_PUNCT)
    if not core:
        return match.group(), None
    return prefix + _marker(kind) + value[len(core) :], kind


def _cut_safely(text: str, bound: int) -> str:
    """Return a head of ``text`` of at most ``bound`` code points that splits no token.

    A token cut in half may no longer match its pattern (``sk-abc`` is too short to be a
    key) and would then be stored in the clear, so the head only ends next to a character
    outside every token alphabet (whitespace, punctuation such as ``$ , ; { }``...); the
    word that straddles ``bound`` is dropped.  Secrets that can span such characters stay
    safe: an unclosed ``<private>`` region, PEM block or quoted value is redacted to the
    end, an unquoted ``key=value`` redacts whatever part of the value is present, and a URL
    userinfo that runs into the cut is redacted without its ``@`` (``cut=True`` passes).
    """
    if not _BC_CHAR.match(text, bound - 1) or not _BC_CHAR.match(text, bound):
        return text[:bound]
    boundary = _LAST_NON_BC.search(text, 0, bound)
    return text[: boundary.end()] if boundary else ""


def _cluster_end(text: str, limit: int) -> int:
    """Largest grapheme-cluster boundary that is <= ``limit``."""
    if len(text) <= limit:
        return len(text)
    # Segmenting from the start is slow in Python; start from the last position at or
    # before ``limit`` that is certainly a boundary - segmentation never looks back past it.
    anchor = _SURE_BOUNDARY.search(text, 0, limit + 1)
    start = anchor.start() if anchor else 0
    end = start
    for cluster in _GRAPHEME.finditer(text, start):
        if cluster.end() > limit:
            break
        end = cluster.end()
    return end


def _safe_end(text: str, limit: int) -> int:
    """Like `_cluster_end`, but never inside a redaction marker or a kept placeholder."""
    end = _cluster_end(text, limit)
    moved = True
    while moved and end < len(text):
        moved = False
        window = (max(0, end - _ATOMIC_WINDOW), min(len(text), end + _ATOMIC_WINDOW))
        for span in _ATOMIC.finditer(text, *window):
            if span.start() >= end:
                break
            if span.end() > end:
                end = _cluster_end(text, span.start())
                moved = True
                break
    return end


def _truncate(processed: str, limit: int, allowed: frozenset[str]) -> str:
    """Cut ``processed`` to ``limit`` so that sanitizing the result again changes nothing.

    `_safe_end` covers the known cases; as a last guard a shortened result that the
    pipeline would still change (a prefix can look different to the patterns than the whole
    did) loses its last word until it is stable.
    """
    end = _safe_end(processed, limit)
    out = processed[:end].rstrip()
    if out == processed:
        return out
    for _ in range(_STABILITY_ATTEMPTS):
        if _process(out, allowed, cut=False) == out:
            return out
        boundary = _LAST_WHITESPACE.search(out)
        out = out[: boundary.start()].rstrip() if boundary else ""
    return ""


def _is_secret_dict_key(key: object) -> bool:
    if not isinstance(key, str):
        return False
    name = key.strip().strip("\"'")
    if _SECRET_DICT_KEY.search(name) is None:
        return False
    return not name.lower().endswith("key") or _SECRET_KEY_SUFFIX.search(name) is not None


def _redact_obj(obj: object, *, under_secret_key: bool) -> object:
    if isinstance(obj, str):
        if under_secret_key and obj and _MARKER.fullmatch(obj) is None:
            return _marker("credential")
        return redact_secrets(obj)
    if isinstance(obj, dict):
        return {
            key: _redact_obj(value, under_secret_key=under_secret_key or _is_secret_dict_key(key))
            for key, value in obj.items()
        }
    if isinstance(obj, list):
        return [_redact_obj(item, under_secret_key=under_secret_key) for item in obj]
    if isinstance(obj, tuple):
        return tuple(_redact_obj(item, under_secret_key=under_secret_key) for item in obj)
    return obj
