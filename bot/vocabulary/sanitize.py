"""Sanitize memory values before they are stored (SPEC §3): strip control characters,
redact secrets, strip unknown placeholders, truncate on a grapheme boundary."""

from __future__ import annotations

import functools
from typing import Final

import regex

from bot.vocabulary.redaction import TOKEN_CHARS, cut_safely, redact_secrets

__all__ = [
    "MAX_VALUE_CHARS",
    "PROMPT_PLACEHOLDERS",
    "sanitize_value",
    "strip_control_chars",
    "strip_unknown_placeholders",
    "truncate_graphemes",
]

# Every pattern here (as in bot.vocabulary.redaction) must run in linear time, since values
# can be huge and adversarial: literal prefixes, look-behinds, no nested ambiguous repetition.

MAX_VALUE_CHARS: Final = 1500
"""Longest stored memory value, in code points."""

PROMPT_PLACEHOLDERS: Final[frozenset[str]] = frozenset(
    {"bot_name", "user_name", "guild_name", "channel_name", "date", "time"}
)
"""The placeholders the prompt template fills in: the only ones a value may keep."""

# A huge value is sanitized by its head only: this many code points per code point kept,
# cut where no token straddles the cut; 4x more whenever redaction shrinks the head too far.
_HEAD_FACTOR: Final = 16
_MIN_HEAD: Final = 256

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

# Tag characters hide text from humans while the model reads it ("ASCII smuggling"); they
# are kept only inside a well-formed emoji tag sequence (the Scotland flag).
_TAGS: Final = regex.compile(
    r"(\U0001F3F4[\U000E0020-\U000E007E]{1,32}\U000E007F)|[\U000E0000-\U000E007F]+"
)

_ASCII_FORBIDDEN: Final = regex.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]+")
_FORBIDDEN_OR_TAG: Final = regex.compile(f"[{_FORBIDDEN_CHARS}" r"\U000E0000-\U000E007F]")

# Invisible (Default_Ignorable) code points between two token characters only split a
# secret so redaction misses it (`sk-abc<U+00AD>def`); elsewhere (emoji ZWJ sequences,
# keycaps, ZWNJ in Persian) they matter and stay. Braces count as token characters, so that
# taking a placeholder's braces off later cannot bring one next to a token character.
_INVISIBLE_IN_TOKEN: Final = regex.compile(
    rf"(?<=[{TOKEN_CHARS}{{}}])\p{{Default_Ignorable_Code_Point}}+(?=[{TOKEN_CHARS}{{}}])"
)

# A pass still changing text after these means nested braces (`{a{b}c}` -> `{abc}`); a
# final pass then keeps only the allowed placeholders.
_MAX_PLACEHOLDER_PASSES: Final = 2

# A placeholder is a bare identifier in braces (`{name}`, `{{name}}`).  Braces around
# anything else stay: a number or range (`\\d{4}`, `a{2,3}`), a format spec, a padded
# Jinja expression (`{{ user.name }}`), prose or code (`{ return 1; }`).
_NAME: Final = r"[^\W\d]\w*+"
# ... nor right after a LaTeX command or its previous group (`\\frac{a}{b}`), a sub- or
# superscript (`x^{n}`, `a_{ij}`), a `$` (a shell variable, `${TOKEN}`) or inside backticks.
_NOT_LATEX: Final = r"(?<!\\[A-Za-z]+(?:\{[^{}\n]{0,64}\})*|[\^_$])"
_CODE_SPAN: Final = regex.compile(r"```.*?(?:```|\Z)|`[^`\n]*+`", regex.DOTALL)

# Spans truncation keeps whole or drops whole: half a marker would look like a value, half
# a placeholder leaves stray braces, and `Bearer` without its marker looks like a value.
_KEEP_WHOLE: Final = regex.compile(
    r"(?:(?i:bearer|basic|token|bot|digest)[ \t]+[\"']?)?\[REDACTED:[a-z_]+\]|\{\w+\}"
)
_KEEP_WHOLE_WINDOW: Final = 512  # how far around a cut to look for one (markers are short)

_GRAPHEME: Final = regex.compile(r"\X")
_LAST_WHITESPACE: Final = regex.compile(r"(?r)\s")
# Between two Grapheme_Cluster_Break=Other characters, after LF/Control or before
# CR/LF/Control there is always a grapheme boundary (UAX #29 GB4, GB5, GB999).
_SURE_BOUNDARY: Final = regex.compile(
    r"(?r)(?<=[\p{GCB=Other}\p{GCB=LF}\p{GCB=Control}])"
    r"[\p{GCB=Other}\p{GCB=CR}\p{GCB=LF}\p{GCB=Control}]"
)
_STABILITY_ATTEMPTS: Final = 8


def strip_control_chars(text: str) -> str:
    """Normalise line breaks to ``\\n`` and remove the characters that must never be stored."""
    if "\r" in text:
        text = _NEWLINES.sub("\n", text)
    if text.isascii():  # the common case; the full character class is much slower
        return _ASCII_FORBIDDEN.sub("", text)
    if _FORBIDDEN_OR_TAG.search(text) is not None:
        text = _TAGS.sub(r"\1", _FORBIDDEN.sub("", text))
    # Last: removing a forbidden character can bring an invisible one next to a token.
    return _INVISIBLE_IN_TOKEN.sub("", text)


def strip_unknown_placeholders(text: str, allowed: frozenset[str] = PROMPT_PLACEHOLDERS) -> str:
    """Take the braces off every placeholder except an ``allowed`` name written ``{name}``.

    ``{{user_name}}`` becomes ``{user_name}``; braces around anything but a bare identifier
    (``{ x }``, ``{"a": 1}``, ``{2,3}``, ``{{ user.name }}``), after a LaTeX command or in
    backticks stay.
    """
    if "{" not in text or "}" not in text:
        return text
    if "`" in text:
        # Code spans keep their braces: strip only between them.
        pieces = _CODE_SPAN.split(text)
        spans = _CODE_SPAN.findall(text)
        out = [_strip_outside_code(pieces[0], allowed)]
        for span, piece in zip(spans, pieces[1:], strict=True):
            out += [span, _strip_outside_code(piece, allowed)]
        return "".join(out)
    return _strip_outside_code(text, allowed)


def _strip_outside_code(text: str, allowed: frozenset[str]) -> str:
    """`strip_unknown_placeholders` for text that holds no code span."""
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
    return all_braces.sub(r"\1", text)


def truncate_graphemes(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    """The longest prefix of at most ``limit`` code points that ends on a grapheme boundary."""
    if limit < 0:
        raise ValueError("limit must be >= 0")
    return text[: _cluster_end(text, limit)]


def sanitize_value(
    text: str,
    limit: int = MAX_VALUE_CHARS,
    *,
    allowed: frozenset[str] = PROMPT_PLACEHOLDERS,
) -> str:
    """``text`` safe to store, at most ``limit`` code points; sanitizing it again is a no-op."""
    if limit < 0:
        raise ValueError("limit must be >= 0")
    text = strip_control_chars(text)
    bound = max(limit * _HEAD_FACTOR, _MIN_HEAD)
    while len(text) > bound:
        processed = _process(cut_safely(text, bound), allowed, cut=True)
        if len(processed) >= limit:
            break
        # Redaction collapsed the head (a huge private block): text past the cut would show.
        bound *= 4
    else:
        processed = _process(text, allowed, cut=False)
    # Truncated after redaction, so a secret is never cut into a piece that no longer looks
    # like one.
    return _truncate(processed, limit, allowed)


@functools.lru_cache(maxsize=32)
def _placeholder_regexes(
    allowed: frozenset[str],
) -> tuple[regex.Pattern[str], regex.Pattern[str] | None, regex.Pattern[str]]:
    """The (unknown, non-canonical allowed, keep-only-allowed) patterns for one allowed set."""
    # Each pattern ends with an alternative that consumes a whole run of `{` (kept by the
    # branch-reset group), so a million braces cost one match, not a million.
    names = "|".join(regex.escape(name) for name in sorted(allowed, key=len, reverse=True))
    is_allowed = rf"(?:{names})\}}" if names else "(?!)"
    unknown = regex.compile(rf"(?|{_NOT_LATEX}\{{++(?!{is_allowed})({_NAME})\}}++|(\{{+))")
    if not names:
        return unknown, None, regex.compile(r"[{}]+")
    canonical = rf"(\{{(?:{names})\}})"
    non_canonical = regex.compile(rf"(?|\{{*{canonical}\}}*|(\{{+))")
    all_braces = regex.compile(rf"(?|\{{*{canonical}\}}*|\}}+|\{{+)")
    return unknown, non_canonical, all_braces


def _process(text: str, allowed: frozenset[str], *, cut: bool) -> str:
    """Redact, strip placeholders, and redact again if removing braces joined text."""
    redacted = redact_secrets(text, cut=cut)
    stripped = strip_unknown_placeholders(redacted, allowed)
    if stripped != redacted:
        # Taking braces off can bring an invisible character next to a token character
        # (`{{ <ZWJ>abc }}`): remove it as the next sanitize would, then redact again.
        stripped = redact_secrets(_INVISIBLE_IN_TOKEN.sub("", stripped), cut=cut)
    return stripped


def _cluster_end(text: str, limit: int) -> int:
    """The largest grapheme-cluster boundary that is <= ``limit``."""
    if len(text) <= limit:
        return len(text)
    # Segmenting from the start is slow in Python: start at the last sure boundary.
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
        window = (max(0, end - _KEEP_WHOLE_WINDOW), min(len(text), end + _KEEP_WHOLE_WINDOW))
        for span in _KEEP_WHOLE.finditer(text, *window):
            if span.start() >= end:
                break
            if span.end() > end:
                end = _cluster_end(text, span.start())
                moved = True
                break
    return end


def _truncate(processed: str, limit: int, allowed: frozenset[str]) -> str:
    """``processed`` cut to ``limit`` so that sanitizing the result again changes nothing."""
    end = _safe_end(processed, limit)
    out = processed[:end].rstrip()
    if out == processed:
        return out
    # A prefix can look different to the patterns than the whole did: drop its last word
    # until it is stable.
    for _ in range(_STABILITY_ATTEMPTS):
        if _process(out, allowed, cut=False) == out:
            return out
        boundary = _LAST_WHITESPACE.search(out)
        out = out[: boundary.start()].rstrip() if boundary else ""
    return ""
