"""Sanitize memory values before they are stored.

Memory values are written by the model (or echo what users typed) and are later pasted
back into the system prompt, so every value goes through :func:`sanitize_value` first:

1. :func:`strip_control_chars` - NUL, C0/C1 controls, lone surrogates and invisible code
   points (always a few, others between two token characters) are removed.  PostgreSQL
   rejects NUL and surrogates outright, and invisible characters can be used to split a
   secret so that redaction misses it.
2. :func:`bot.vocabulary.redaction.redact_secrets` - credentials and ``<private>`` regions
   become ``[REDACTED:<kind>]`` markers, so a secret that was pasted into chat never
   reaches the database or a later prompt.
3. :func:`strip_unknown_placeholders` - brace placeholders other than the prompt's own
   lose their braces, so stored text cannot smuggle template fields into the prompt.
   Removing braces can join text back together (``sk-{x}abc...``), so redaction runs again
   whenever this step changed anything.
4. :func:`truncate_graphemes` - values are capped at :data:`MAX_VALUE_CHARS` code points
   without splitting a grapheme cluster (or a redaction marker, or a kept placeholder).
5. Trailing whitespace is dropped.

Every regular expression here (and in :mod:`bot.vocabulary.redaction`) is written to run in
linear time (literal prefixes, token boundaries enforced with look-behinds, no nested
ambiguous repetition), because values can be arbitrarily large and adversarial.  The
module is pure Python and imports nothing from Discord or the database layer.
"""

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

MAX_VALUE_CHARS: Final = 1500
"""Longest stored memory value, in code points; keeps the prompt budget predictable."""

PROMPT_PLACEHOLDERS: Final[frozenset[str]] = frozenset(
    {"bot_name", "user_name", "guild_name", "channel_name", "date", "time"}
)
"""The placeholders the prompt template itself fills in; the only ones a value may keep."""

# A huge value is not processed whole: only a head of this many code points per allowed
# output code point is, cut where no token can straddle the cut (see `cut_safely`).  If
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

# Default_Ignorable code points (soft hyphen, ZWNJ, ZWJ, invisible operators, the
# combining grapheme joiner, variation selectors, Hangul fillers...) render as nothing.
# Between two token characters they carry no meaning and only split a secret so that the
# token patterns miss it (`sk-abc<U+00AD>def...`), so they are removed there.  Elsewhere
# they do matter and stay: ZWJ inside emoji sequences, VS16 and keycaps (`1<VS16><U+20E3>`:
# the keycap mark is not a token character), ZWNJ in Persian or Indic words.
# Token characters are `TOKEN_CHARS`, the alphabet of the tokens redaction hides.
# Braces count as well: removing a placeholder's braces later must not bring an invisible
# character between two token characters (`x<U+00AD>{y}` -> `x<U+00AD>y`), which would
# make the next sanitize change the text again.
_INVISIBLE_IN_TOKEN: Final = regex.compile(
    rf"(?<=[{TOKEN_CHARS}{{}}])\p{{Default_Ignorable_Code_Point}}+(?=[{TOKEN_CHARS}{{}}])"
)

# --------------------------------------------------------------------------------------
# Placeholders
# --------------------------------------------------------------------------------------

# Unknown placeholders are stripped pass by pass (the regexes depend on the allowed names,
# see `_placeholder_regexes`).  If the last pass still changed something, braces were
# nested (`{a{b}c}` -> `{abc}`), and a final pass keeps only the allowed placeholders.
_MAX_PLACEHOLDER_PASSES: Final = 2

# What a placeholder holds: a replacement field as in `str.format` - a name with attribute
# and index access, a conversion and a format spec (`x`, `x.y`, `0[0]`, `x!r`, `x:>10`,
# `d:%Y-%m-%d`, `!r`, `:>10`) - without whitespace, so prose and code in braces
# (`{ return 1; }`, `{"a": 1}`, `{a: 1}`, `{}`) is not one.  Double braces may pad it with
# spaces, as in Jinja or Mustache (`{{ x }}`).  Every part is possessive and stops at
# braces and whitespace, so a failed attempt costs at most the distance to the next brace.
_FIELD: Final = (
    r"(?=[\w!:])"
    r"(?:\w++(?:\.\w++|\[[^\[\]{}\s]*+\])*+)?+"
    r"(?:![A-Za-z]\w*+)?+"
    r"(?::[^{}\s]*+)?+"
)

# --------------------------------------------------------------------------------------
# Truncation
# --------------------------------------------------------------------------------------

# Spans that truncation must keep whole or drop whole: a half marker would look like a
# value (and be redacted again), a half placeholder would leave stray braces, and an
# `Authorization: Bearer` whose marker was cut off would make `Bearer` look like a value.
_ATOMIC: Final = regex.compile(
    r"(?:(?i:bearer|basic|token|bot|digest)[ \t]+[\"']?)?\[REDACTED:[a-z_]+\]|\{\w+\}"
)

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

# --------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------


def strip_control_chars(text: str) -> str:
    """Remove characters that must never be stored.

    ``\\r\\n`` and lone ``\\r`` become ``\\n``; ``\\n`` and ``\\t`` are kept.  Removed:
    C0/C1 controls (NUL breaks PostgreSQL text columns), lone surrogates (cannot be encoded
    as UTF-8), Unicode noncharacters, the BOM, zero-width space and word joiner (invisible,
    and they can split a secret so redaction misses it), bidi embedding/override/isolate
    controls (they make stored text display differently from what the model reads),
    stray tag characters (invisible "ASCII smuggling" of instructions) and any other
    invisible (Default_Ignorable) code point that sits between two token characters
    (``[A-Za-z0-9._~+/=-]`` or a brace), such as a soft hyphen or ZWNJ inside an API
    key.  Emoji, ZWJ sequences, keycaps, variation selectors, combining marks and all
    scripts are left alone.
    """
    if "\r" in text:
        text = _NEWLINES.sub("\n", text)
    if text.isascii():  # the common case; the full character class is much slower
        return _ASCII_FORBIDDEN.sub("", text)
    if _FORBIDDEN_OR_TAG.search(text) is not None:
        text = _TAGS.sub(r"\1", _FORBIDDEN.sub("", text))
    # Last, so that removing a forbidden character cannot bring an invisible one next to
    # a token character after this pass has run.
    return _INVISIBLE_IN_TOKEN.sub("", text)


def strip_unknown_placeholders(text: str, allowed: frozenset[str] = PROMPT_PLACEHOLDERS) -> str:
    """Take the braces off every placeholder that is not one of the prompt's own.

    ``{evil}``, ``{{evil}}``, ``{0}``, ``{x.y}``, ``{0[0]}``, ``{x!r}``, ``{x:>10}`` and
    ``{{ x }}`` become ``evil`` / ``0`` / ``x.y`` / ``0[0]`` / ``x!r`` / ``x:>10`` / ``x``,
    so stored text cannot smuggle template fields into the prompt.  Only an allowed name
    written as a plain name keeps its braces, exactly one pair of them: ``{{user_name}}`` is
    normalised to ``{user_name}``, the form the prompt fills; ``{user_name!r}`` and
    ``{{ user_name }}`` are not that form and lose theirs.  If removing braces creates a new
    placeholder (nesting such as ``{a{b}c}``), every brace that is not part of an allowed
    placeholder is dropped, so the result never contains an unknown one.  Braces around
    anything that is not a replacement field (``{ x }``, ``{"a": 1}``, ``{ return 1; }``,
    ``{}``) are prose or code, not placeholders, and are kept.
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
    where no token can straddle the cut (see `cut_safely`).  Only if redaction shrinks
    that head below ``limit`` is a larger head (up to everything) processed.  ``allowed``
    overrides the placeholders that may stay (see :func:`strip_unknown_placeholders`).
    """
    if limit < 0:
        raise ValueError("limit must be >= 0")
    text = strip_control_chars(text)
    bound = max(limit * _CUT_FACTOR, _MIN_CUT)
    while len(text) > bound:
        processed = _process(cut_safely(text, bound), allowed, cut=True)
        if len(processed) >= limit:
            break
        # Redaction collapsed the head (say, a huge private block), so text beyond the cut
        # would become visible: look further instead of guessing.
        bound *= 4
    else:
        processed = _process(text, allowed, cut=False)
    return _truncate(processed, limit, allowed)


# --------------------------------------------------------------------------------------
# Internals
# --------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=32)
def _placeholder_regexes(
    allowed: frozenset[str],
) -> tuple[regex.Pattern[str], regex.Pattern[str] | None, regex.Pattern[str]]:
    """Compile (unknown, non-canonical allowed, keep-only-allowed) for one allowed set.

    ``unknown`` keeps what is inside the braces of a placeholder that is not exactly an
    allowed name: ``{field}`` with any number of braces, or ``{{ field }}`` padded with
    spaces (spaces trimmed).  Every pattern ends with an alternative that consumes a whole
    run of ``{`` (keeping it via the branch-reset group), so placeholders are only tried at
    the first brace of a run and a million braces cost one match, not a million.
    """
    names = "|".join(regex.escape(name) for name in sorted(allowed, key=len, reverse=True))
    is_allowed = rf"(?:{names})\}}" if names else "(?!)"
    unknown = regex.compile(
        rf"(?|\{{++(?!{is_allowed})({_FIELD})\}}++"
        # Padded: `{{ x }}`, `{{ user_name }}`, `{{x }}`; `{{user_name}}` is left to the
        # normalisation below.
        rf"|\{{{{2,}}+(?:[ \t]++|(?!{is_allowed}))({_FIELD})[ \t]*+\}}{{2,}}+"
        rf"|(\{{+))"
    )
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
        # Taking braces off can also bring an invisible character that sat next to a
        # space inside them (`{{ <ZWJ>abc }}`) next to a token character, where
        # `strip_control_chars` would have removed it - so remove it here, as the next
        # sanitize would, before redacting the joined text.
        stripped = redact_secrets(_INVISIBLE_IN_TOKEN.sub("", stripped), cut=cut)
    return stripped


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
