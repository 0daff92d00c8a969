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

# Before redacting a huge value we look at only this many code points per allowed output
# code point.  The cut is made on a whitespace boundary so no token is split (see
# `_cut_at_boundary`); if redaction shrinks the kept head below the limit we fall back to
# processing the whole text, which is still linear.
_CUT_FACTOR: Final = 16
_MIN_CUT: Final = 256

# --------------------------------------------------------------------------------------
# Control characters
# --------------------------------------------------------------------------------------

_NEWLINES: Final = regex.compile(r"\r\n?")

_NONCHARACTERS: Final = "".join(
    f"\\U{plane + 0xFFFE:08X}\\U{plane + 0xFFFF:08X}" for plane in range(0x10000, 0x110000, 0x10000)
)

_FORBIDDEN: Final = regex.compile(
    "["
    r"\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"  # C0/C1 controls except \t and \n (\r is normalised)
    r"\u200b\u2060\ufeff"  # zero-width space, word joiner, BOM: invisible, used to split tokens
    r"\u202a-\u202e\u2066-\u2069"  # bidi embeddings/overrides/isolates: visual spoofing
    r"\ud800-\udfff"  # lone surrogates: not encodable as UTF-8, PostgreSQL refuses them
    r"\ufdd0-\ufdef\ufffe\uffff" + _NONCHARACTERS + "]"  # Unicode noncharacters
)

# Tag characters hide text from humans while the model still reads it ("ASCII smuggling").
# They are kept only inside a well-formed emoji tag sequence (e.g. the Scotland flag).
_TAGS: Final = regex.compile(
    r"(\U0001F3F4[\U000E0020-\U000E007E]{1,32}\U000E007F)|[\U000E0000-\U000E007F]"
)

# --------------------------------------------------------------------------------------
# Placeholders
# --------------------------------------------------------------------------------------

# Placeholder regexes depend on the allowed names; see `_placeholder_regexes`.  Each one
# has a last alternative that consumes a whole run of `{` at once, so a placeholder can
# only start at the first brace of a run and a run of a million braces is one match.
_MAX_PLACEHOLDER_PASSES: Final = 2

# --------------------------------------------------------------------------------------
# Redaction
# --------------------------------------------------------------------------------------

_MARKER_PREFIX: Final = "[REDACTED:"
_MARKER: Final = regex.compile(r"\[REDACTED:[a-z_]+\]")

# Spans that truncation must keep whole or drop whole: a half marker would look like a
# value (and be redacted again), a half placeholder would leave stray braces.
_ATOMIC: Final = regex.compile(r"\[REDACTED:[a-z_]+\]|\{\w+\}")

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
# last segment (it is followed by the separator), so `tokenizer`, `keyboard`, `monkey:` or
# "the secret ingredient" never qualify.  The match starts at the key word, which lets the
# engine scan for it quickly.
_SECRET_WORDS: Final = r"password|passwd|passphrase|pwd|secret|token|apikey|key|authorization"
_SEGMENT_START: Final = r"(?:(?<![A-Za-z0-9])|(?<=[a-z0-9])(?=[A-Z]))"
_CREDENTIAL: Final = regex.compile(
    rf"{_SEGMENT_START}(?P<key>(?i:{_SECRET_WORDS}))"
    r"(?P<sep>[\"']?[ \t]*(?::=|=>|[:=])[ \t]*)"
    # `Authorization: Bearer x` keeps the scheme; atomic so it cannot be given back and
    # then redacted as the value on a second pass.
    r"(?P<scheme>(?>(?:(?i:bearer|basic|token|bot|digest)[ \t]+)?))"
    r"(?!\[REDACTED:)"
    r"(?P<value>\"(?:[^\"\\\n]|\\.)+(?P<dq>\")?"
    r"|'(?:[^'\\\n]|\\.)+(?P<sq>')?"
    r"|[^\s\"']\S*)"
)
_AWS_SECRET_KEY_NAME: Final = regex.compile(r"(?i:aws[_.\-]?secret[_.\-]?access[_.\-]?key)\Z")
# A dict key is secret-looking if its last segment is a secret word (same rule as above)...
_SECRET_DICT_KEY: Final = regex.compile(rf"{_SEGMENT_START}(?i:{_SECRET_WORDS})\Z")
# ... except that in structured data a bare `key` (`sort_key`, `cache_key`) is usually not
# secret; only these qualified names are.
_SECRET_KEY_SUFFIX: Final = regex.compile(
    r"(?i:(?:api|secret|private|access|signing|encryption|auth|master|client|ssh)[_.\-]?key)\Z"
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
    and they can split a secret so redaction misses it), bidi override/isolate controls
    (they make stored text display differently from what the model reads) and stray tag
    characters (invisible "ASCII smuggling" of instructions).  Emoji, ZWJ sequences,
    variation selectors, combining marks and all scripts are left alone.
    """
    text = _NEWLINES.sub("\n", text)
    text = _FORBIDDEN.sub("", text)
    return _TAGS.sub(r"\1", text)


def strip_unknown_placeholders(text: str, allowed: frozenset[str] = PROMPT_PLACEHOLDERS) -> str:
    """Take the braces off every placeholder that is not one of the prompt's own.

    ``{evil}``, ``{{evil}}`` and ``{0}`` become ``evil`` / ``0``.  An allowed name keeps
    exactly one pair of braces, so ``{{user_name}}`` is normalised to ``{user_name}``.
    Within a word that contained a placeholder all other braces are dropped too: otherwise
    ``{a{b}c}`` would turn into a brand-new ``{abc}``.  Braces with spaces inside
    (``{ x }``) or with non-word characters (``{"a": 1}``, ``{x.y}``) are not placeholders
    and are kept.
    """
    if "{" not in text or "}" not in text:
        return text

    def rewrite_run(run_match: regex.Match[str]) -> str:
        run = run_match.group()
        pieces: list[str] = []
        last = 0
        for match in _PLACEHOLDER.finditer(run):
            pieces.append(_drop_braces(run[last : match.start()]))
            name = match.group(1)
            pieces.append(f"{{{name}}}" if name in allowed else name)
            last = match.end()
        if not pieces:
            return run
        pieces.append(_drop_braces(run[last:]))
        return "".join(pieces)

    return _BRACE_RUN.sub(rewrite_run, text)


def redact_secrets(text: str) -> str:
    """Replace private regions and credentials with ``[REDACTED:<kind>]`` markers.

    Kinds: ``private`` (``<private>...</private>``, unclosed runs to the end),
    ``private_key`` (PEM, a block without END runs to the end), ``url_credentials``,
    ``credential`` (``key = value`` / ``key: value`` / JSON-style, the key stays visible),
    ``authorization`` (``Authorization:`` header value), ``aws_secret_key``, ``bearer``,
    ``openai_key``, ``anthropic_key``, ``github_token``, ``gitlab_token``, ``slack_token``,
    ``aws_access_key``, ``google_api_key``, ``npm_token``, ``jwt``, ``discord_token``.

    Prose such as "my password is strong" has no assignment and is left alone; redaction
    is idempotent, so already-redacted text passes through unchanged.
    """
    return _redact(text)[0]


def redaction_kinds(text: str) -> list[str]:
    """List the kind of every redaction :func:`redact_secrets` would make, in order.

    Meant for audit counters: it reports *that* something was redacted, never the value.
    """
    return _redact(text)[1]


def truncate_graphemes(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    """Return the longest prefix of at most ``limit`` code points that ends on a grapheme
    cluster boundary, so a ZWJ family, a flag or a letter with its accents is kept whole or
    dropped whole instead of being rendered as broken glyphs."""
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
    whitespace.  Truncation comes after redaction so a secret is never cut into a piece
    that no longer looks like a secret.  The function is idempotent.
    """
    if limit < 0:
        raise ValueError("limit must be >= 0")
    text = strip_control_chars(text)
    bound = max(limit * _CUT_FACTOR, _MIN_CUT)
    if len(text) > bound:
        processed = _process(_cut_at_boundary(text, bound), allowed)
        if len(processed) < limit:
            # Redaction collapsed the head (e.g. a huge private block), so text beyond the
            # cut would become visible: process everything instead of guessing.
            processed = _process(text, allowed)
    else:
        processed = _process(text, allowed)
    return processed[: _safe_end(processed, limit)].rstrip()


def redact_leaves(obj: T) -> T:
    """Redact every string inside nested dicts, lists and tuples; return a new structure.

    Redaction must see individual values, never serialized JSON (``"password": "x"`` is
    only recognisable as text, and a marker must not break the JSON syntax).  Because a
    leaf cannot see its key, a string stored under a secret-looking key (``password``,
    ``api_key``, ``clientSecret``, ``token``, ``authorization``...) is replaced entirely.
    A bare ``key`` (or ``sort_key``) is not treated as secret in structured data.  Dict
    keys themselves are never changed; other objects are returned as they are.
    """
    return cast(T, _redact_obj(obj, under_secret_key=False))


# --------------------------------------------------------------------------------------
# Internals
# --------------------------------------------------------------------------------------


def _drop_braces(text: str) -> str:
    return text.replace("{", "").replace("}", "")


def _process(text: str, allowed: frozenset[str]) -> str:
    """Redact, strip placeholders, and redact again if removing braces joined text."""
    redacted = _redact(text)[0]
    stripped = strip_unknown_placeholders(redacted, allowed)
    if stripped != redacted:
        stripped = _redact(stripped)[0]
    return stripped


def _redact(text: str) -> tuple[str, list[str]]:
    kinds: list[str] = []
    text = _redact_regions(text, kinds)
    if not text:
        return text, kinds

    def replace(match: regex.Match[str]) -> str:
        kind = match.lastgroup
        if kind is None or kind not in _TOKEN_KINDS:  # pragma: no cover - defensive
            return match.group()
        replacement, reported = _REPLACERS.get(kind, _replace_token)(match, kind)
        if reported is not None:
            kinds.append(reported)
        return replacement

    tokens = _tokens_for(text)
    if tokens is None:
        return text, kinds
    return tokens.sub(replace, text), kinds


# Cheap substring tests that every match of a kind must contain (``None``: always run).
# Ordinary prose contains none of them, so most values skip the token scan entirely; a
# value that might hold a secret is scanned with an alternation of only the kinds whose
# trigger it contains (same alternation order, so the same leftmost matches).
_TRIGGERS: Final[dict[str, tuple[str, ...] | None]] = {
    "url_credentials": ("://",),
    "anthropic_key": ("sk-ant-",),
    "openai_key": ("sk-",),
    "github_token": ("gh", "github_pat_"),
    "gitlab_token": ("glpat-",),
    "slack_token": ("xox", "xapp-"),
    "aws_access_key": ("akia", "asia"),
    "google_api_key": ("aiza",),
    "npm_token": ("npm_",),
    "jwt": ("eyj",),
    "discord_token": (".",),
    "credential": ("pass", "pwd", "secret", "token", "key", "authorization"),
    "bearer": ("bearer",),
}
_PATTERN_OF: Final = dict(_TOKEN_PATTERNS)


@functools.lru_cache(maxsize=256)
def _compiled_for(kinds: tuple[str, ...]) -> regex.Pattern[str]:
    return regex.compile("|".join(f"(?P<{kind}>{_PATTERN_OF[kind]})" for kind in kinds))


def _tokens_for(text: str) -> regex.Pattern[str] | None:
    lowered = text.lower()
    kinds = tuple(
        kind
        for kind in _TOKEN_KINDS
        if (triggers := _TRIGGERS.get(kind)) is None or any(t in lowered for t in triggers)
    )
    if not kinds:
        return None
    if "discord_token" in kinds and not _DISCORD_SHAPE.search(text):
        kinds = tuple(kind for kind in kinds if kind != "discord_token")
    return _compiled_for(kinds) if kinds else None


# A Discord bot token's middle segment: six base64url characters between two dots.
_DISCORD_SHAPE: Final = regex.compile(r"\.[A-Za-z0-9_\-]{6}\.")


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


def _replace_token(match: regex.Match[str], kind: str) -> tuple[str, str | None]:
    token = match.group()
    core = token.rstrip(".")  # a sentence-ending dot is not part of the secret
    return _marker(kind) + token[len(core) :], kind


def _replace_url(match: regex.Match[str], kind: str) -> tuple[str, str | None]:
    return f"://{_marker(kind)}@", kind


def _replace_bearer(match: regex.Match[str], kind: str) -> tuple[str, str | None]:
    return match.group("bearer_word") + _marker(kind), kind


def _replace_credential(match: regex.Match[str], kind: str) -> tuple[str, str | None]:
    key = match.group("cred_key")
    prefix = key + match.group("cred_sep") + match.group("cred_scheme")
    if _AWS_SECRET_KEY_NAME.search(key):
        kind = "aws_secret_key"
    elif _AUTHORIZATION_KEY_NAME.search(key):
        kind = "authorization"
    value = match.group("cred_value")
    if value[0] in "\"'":
        closed = match.group("cred_dq") is not None or match.group("cred_sq") is not None
        return prefix + value[0] + _marker(kind) + (value[0] if closed else ""), kind
    core = value.rstrip(_VALUE_TRAILING_PUNCT)
    if not core:
        return match.group(), None
    return prefix + _marker(kind) + value[len(core) :], kind


_REPLACERS: Final = {
    "url_credentials": _replace_url,
    "bearer": _replace_bearer,
    "credential": _replace_credential,
}


def _cut_at_boundary(text: str, bound: int) -> str:
    """Cut ``text`` to at most ``bound`` code points without splitting a token.

    A token cut in half may no longer match its pattern (``sk-abc`` is too short to be a
    key) and could surface once truncation shows the end of the head, so the word that
    straddles the cut is dropped entirely.  Multi-word secrets are safe too: regions and
    quoted values without their closer are redacted to the end.
    """
    head = text[:bound]
    if _WHITESPACE.match(text, bound) or _WHITESPACE.match(head, bound - 1):
        return head
    last_space = _LAST_WHITESPACE.search(head)
    return head[: last_space.end()] if last_space else ""


def _cluster_end(text: str, limit: int) -> int:
    """Largest grapheme-cluster boundary that is <= ``limit``."""
    if len(text) <= limit:
        return len(text)
    end = 0
    for cluster in _GRAPHEME.finditer(text):
        if cluster.end() > limit:
            break
        end = cluster.end()
    return end


def _safe_end(text: str, limit: int) -> int:
    """Like :func:`_cluster_end`, but never inside a redaction marker or kept placeholder."""
    end = _cluster_end(text, limit)
    moved = True
    while moved and end < len(text):
        moved = False
        for span in _ATOMIC.finditer(text):
            if span.start() >= end:
                break
            if span.end() > end:
                end = _cluster_end(text, span.start())
                moved = True
                break
    return end


def _is_secret_dict_key(key: object) -> bool:
    if not isinstance(key, str):
        return False
    name = key.strip().strip("\"'")
    if _KEY_NAME_RE.fullmatch(name) is None:
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
