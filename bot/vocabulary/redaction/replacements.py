"""What replaces each match of a redaction pattern, once it is judged a secret or not."""

# Every replacer takes (match, kind, cut) and returns (replacement, kind reported or None:
# the match was no secret and is returned as it was).  `cut`: the text is a head that
# `cut_safely` took, so a value running into its end may go on and is hidden whole.

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import regex

from bot.vocabulary.redaction.alphabet import marker
from bot.vocabulary.redaction.context_rules import (
    KEY_TAIL,
    PROSE_VALUE,
    QUALIFIED_KEY,
    SEGMENT_START,
)
from bot.vocabulary.redaction.token_rules import is_token
from bot.vocabulary.redaction.value_shapes import (
    is_code_value,
    is_key_combo,
    is_template_reference,
    looks_like_token,
)

Replacer = Callable[[regex.Match[str], str, bool], tuple[str, str | None]]

# The key a credential match belongs to is checked on the text just before the separator
# (searched with `endpos` there, so look-behinds still see the real text).
_KEY_WINDOW: Final = 64
_ATTRIBUTE_KEY_BEFORE: Final = regex.compile(r"\.[A-Za-z_][A-Za-z0-9_]*+[\"']?[ \t]*\Z")
# `if password == confirm_password: ok`: the `:` ends a condition.
_COMPARED_KEY_BEFORE: Final = regex.compile(r"[=!]==?[ \t]*[A-Za-z_][A-Za-z0-9_]*+[ \t]*\Z")
_AUTHORIZATION_BEFORE: Final = regex.compile(rf"(?i:authorization){KEY_TAIL}\Z")
_AWS_SECRET_BEFORE: Final = regex.compile(
    rf"(?i:aws[ _.\-]?secret[ _.\-]?access[ _.\-]?key){KEY_TAIL}\Z"
)
_KEY_BEFORE: Final = regex.compile(rf"{SEGMENT_START}(?i:key){KEY_TAIL}\Z")
_QUALIFIED_KEY_BEFORE: Final = regex.compile(rf"{QUALIFIED_KEY}{KEY_TAIL}\Z")
# After a one-word value of a token/secret key: nothing else on the line.
_LINE_END: Final = regex.compile(r"[ \t]*(?:\n|\Z)")
# An environment variable glued to a bare `=` where a shell assignment stands (a line's
# start, after a space, `;`, `&` or `|`): `export GITHUB_TOKEN=x && ./deploy.sh`.
_SHELL_ASSIGNED_KEY: Final = regex.compile(r"(?<![^\s;&|])[A-Z][A-Z0-9_]*\Z")
# Values that hold no secret: a reference to one, a placeholder, a literal.
_NOT_A_SECRET_VALUE: Final = regex.compile(
    r"[$<%{]|(?:None|True|False|true|false|null|nil|undefined)\Z"
)
_MIN_LONE_VALUE_CHARS: Final = 4
# Separators after which a password's value must not read as prose (see PROSE_VALUE).
_PROSE_SEPARATORS: Final = frozenset({"-", "->", "\u2014", "\u2013", "\u2192"})
_YEAR: Final = regex.compile(r"(?:19|20)\d\d")
_WORD_AFTER: Final = regex.compile(r"[ \t]+[A-Za-z]")
_PASSCODE_BEFORE: Final = regex.compile(r"(?i:code)[\"'*_`]*[ \t]*\Z")
_MIN_PIN_DIGITS: Final = 4
_MAX_PIN_DIGITS: Final = 8
_TRAILING_SPACE: Final = regex.compile(r"[ \t]*\Z")
# Sentence punctuation after an unquoted value stays visible: `password: hunter2.`
_VALUE_TRAILING_PUNCT: Final = ".,;:)]}>"


def replace_token(match: regex.Match[str], kind: str, cut: bool) -> tuple[str, str | None]:
    """A provider token, unless its kind's checks find a look-alike."""
    token = match.group()
    if not is_token(kind, token):
        return token, None
    core = token.rstrip(".")  # a sentence-ending dot is not part of the secret
    return marker(kind) + token[len(core) :], kind


def replace_url(match: regex.Match[str], kind: str, cut: bool) -> tuple[str, str | None]:
    """URL userinfo; scheme and host stay."""
    at = "@" if match.group().endswith("@") else ""
    return f"://{marker(kind)}{at}", kind


def replace_url_token(match: regex.Match[str], kind: str, cut: bool) -> tuple[str, str | None]:
    """A user alone in a URL, if it is token-shaped."""
    if not looks_like_token(match.group("user")):
        return match.group(), None
    at = "@" if match.group().endswith("@") else ""
    return f"://{marker(kind)}{at}", kind


def replace_bearer(match: regex.Match[str], kind: str, cut: bool) -> tuple[str, str | None]:
    """A bare bearer token; the word ``Bearer`` stays."""
    return match.group("word") + marker(kind), kind


def replace_password(match: regex.Match[str], kind: str, cut: bool) -> tuple[str, str | None]:
    """A password's value: quoted, or to the end of its line or sentence."""
    prefix = match.group("sep")
    value = match.group("value")
    if value[0] in "\"'":
        return prefix + _redact_quoted(match, kind), kind
    if prefix.strip() in _PROSE_SEPARATORS and PROSE_VALUE.match(value):
        return match.group(), None  # "password - reset it on Monday"
    if cut and match.end() == len(match.string):
        return prefix + marker(kind), kind
    if _key_is_compared(match) or is_code_value(value, _key_is_attribute(match)):
        return match.group(), None
    # `password: ${DB_PASSWORD}` names where the password comes from.
    if is_template_reference(value.split(None, 1)[0].rstrip(_VALUE_TRAILING_PUNCT + "`")):
        return match.group(), None
    core = value.rstrip(_VALUE_TRAILING_PUNCT + " \t")
    if not core:
        return match.group(), None
    return prefix + marker(kind) + value[len(core) :], kind


def replace_pin(match: regex.Match[str], kind: str, cut: bool) -> tuple[str, str | None]:
    """A PIN of 4 to 8 digits; fewer or more is a pin number, a count, a length..."""
    digits = sum(char.isdigit() for char in match.group("value"))
    # A value that runs into the cut may go on ("pin is 12 " of "pin is 12 34"): hidden.
    at_cut = cut and _TRAILING_SPACE.match(match.string, match.end()) is not None
    if not at_cut and not _MIN_PIN_DIGITS <= digits <= _MAX_PIN_DIGITS:
        return match.group(), None
    if _YEAR.fullmatch(match.group("value")) and _WORD_AFTER.match(match.string, match.end()):
        return match.group(), None  # "pin: 2024 roadmap" pins a message about a year
    return match.group("sep") + marker(kind), kind


def replace_credential(match: regex.Match[str], kind: str, cut: bool) -> tuple[str, str | None]:
    """The value of a key/token/secret/authorization field, if it looks secret."""
    string = match.string
    window = (max(0, match.start() - _KEY_WINDOW), match.start())
    always = False
    if _AUTHORIZATION_BEFORE.search(string, *window):
        kind, always = "authorization", True
    elif _AWS_SECRET_BEFORE.search(string, *window):
        kind = "aws_secret_key"
    bare_key = _KEY_BEFORE.search(string, *window) is not None
    bare_key = bare_key and _QUALIFIED_KEY_BEFORE.search(string, *window) is None
    prefix = match.group("sep") + match.group("scheme")
    value = match.group("value")
    if is_template_reference(value) or is_key_combo(value.rstrip(_VALUE_TRAILING_PUNCT)):
        return match.group(), None
    if value[0] in "\"'":
        # Quoted: a secret, except after a bare `key` it must look like a token (as in
        # `redact_leaves`).
        closed = match.group("dq") is not None or match.group("sq") is not None
        if bare_key and not looks_like_token(value[1:-1] if closed else value[1:]):
            return match.group(), None
        return prefix + _redact_quoted(match, kind), kind
    if cut and match.end() == len(string):
        return prefix + marker(kind), kind
    if _key_is_compared(match) or is_code_value(value, _key_is_attribute(match)):
        return match.group(), None
    core = value.rstrip(_VALUE_TRAILING_PUNCT)
    if not core:
        return match.group(), None
    # Unquoted: token-shaped, or (but after a bare `key`) the last word of its line or a
    # shell assignment, as in a config line (`secret: opensesame`); "Secret: the butler
    # did it" is a sentence.
    lone = (
        not bare_key
        and len(core) >= _MIN_LONE_VALUE_CHARS
        and not _NOT_A_SECRET_VALUE.match(core)
        and (_LINE_END.match(string, match.end()) is not None or _is_shell_assignment(match))
    )
    if not (always or lone or looks_like_token(core)):
        return match.group(), None
    return prefix + marker(kind) + value[len(core) :], kind


def replace_stated_credential(
    match: regex.Match[str], kind: str, cut: bool
) -> tuple[str, str | None]:
    """A key/token/secret stated in words, if its value looks like a token."""
    prefix = match.group("sep")
    if cut and match.end() == len(match.string):
        return prefix + marker(kind), kind
    value = match.group("value")
    core = value.rstrip(_VALUE_TRAILING_PUNCT)
    if not looks_like_token(core) or is_key_combo(core) or is_template_reference(core):
        return match.group(), None
    return prefix + marker(kind) + value[len(core) :], kind


def replace_spaced(match: regex.Match[str], kind: str, cut: bool) -> tuple[str, str | None]:
    """A secret after its key word and a space only: hidden if it looks generated."""
    value = match.group("value")
    core = value.rstrip(_VALUE_TRAILING_PUNCT)
    code = _PASSCODE_BEFORE.search(match.string, max(0, match.start() - _KEY_WINDOW), match.start())
    pin_like = code is not None and core.isdigit() and len(core) >= _MIN_PIN_DIGITS
    if not (pin_like or looks_like_token(core)) or is_key_combo(core):
        return match.group(), None
    if is_template_reference(core) or is_code_value(value, False):
        return match.group(), None
    return match.group("sep") + marker(kind) + value[len(core) :], kind


def replace_pair(match: regex.Match[str], kind: str, cut: bool) -> tuple[str, str | None]:
    """The password of a ``user:password`` pair or a CLI password flag."""
    value = match.group("value")
    if value[0] in "\"'":
        return match.group("sep") + value[0] + marker(kind) + value[0], kind
    core = value.rstrip(_VALUE_TRAILING_PUNCT)
    if not core or _NOT_A_SECRET_VALUE.match(core) or is_template_reference(core):
        return match.group(), None
    return match.group("sep") + marker(kind) + value[len(core) :], kind


def _is_shell_assignment(match: regex.Match[str]) -> bool:
    """Whether the match is an environment variable assigned in a shell line."""
    # `GITHUB_TOKEN=value && ./deploy.sh` holds its value, whatever follows it;
    # `f(token=None)` or `token=enabled` in prose do not.
    if match.group("sep") != "=":
        return False
    start = max(0, match.start() - _KEY_WINDOW)
    return _SHELL_ASSIGNED_KEY.search(match.string, start, match.start()) is not None


def _key_is_attribute(match: regex.Match[str]) -> bool:
    """Whether the key before a separator match is an attribute (``self.password``)."""
    window = (max(0, match.start() - _KEY_WINDOW), match.start())
    return _ATTRIBUTE_KEY_BEFORE.search(match.string, *window) is not None


def _key_is_compared(match: regex.Match[str]) -> bool:
    """Whether the key before a separator match is the right side of ``==`` / ``!=``."""
    window = (max(0, match.start() - _KEY_WINDOW), match.start())
    return _COMPARED_KEY_BEFORE.search(match.string, *window) is not None


def _redact_quoted(match: regex.Match[str], kind: str) -> str:
    """The marker inside the value's quotes (an unclosed quote stays unclosed)."""
    value = match.group("value")
    closed = match.group("dq") is not None or match.group("sq") is not None
    return value[0] + marker(kind) + (value[0] if closed else "")
