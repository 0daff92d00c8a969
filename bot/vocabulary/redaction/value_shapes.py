"""Whether a value after a key word looks like a generated secret, or like prose or code."""

from __future__ import annotations

from typing import Final

import regex

_MIN_TOKEN_CHARS: Final = 6
_MIN_MIXED_CLASS_CHARS: Final = 8
_MIN_NUMBER_TOKEN_DIGITS: Final = 16
# Punctuation that joins or ends words in prose (`well-being`, `Alice's`, `B,C`).
_PROSE_PUNCT: Final = "-.,;:'\"()[]"

# Code that uses a secret rather than holding one: `self.password = password`, `api_key =
# os.environ['API_KEY']`, `def check(password: str)`, `token = get_token()`.  A literal
# secret in code is quoted, and quoted values are always redacted.
_IDENT_CHAIN: Final = regex.compile(r"[A-Za-z_][A-Za-z0-9_]*+(?:\.[A-Za-z_][A-Za-z0-9_]*+)*+")
# What may follow an expression that is the whole value (the end, or code punctuation).
_CODE_VALUE_END: Final = regex.compile(r"[ \t]*+(?:[),;|=#]|\Z)")
_CODE_RECEIVERS: Final = frozenset(
    {"self", "this", "cls", "os", "config", "settings", "env", "process", "request", "args"}
    | {"options", "opts", "ctx", "params", "kwargs", "creds", "credentials"}
)
_TYPE_NAMES: Final = frozenset(
    {"str", "bytes", "int", "bool", "float", "string", "String", "number", "Any", "any"}
    | {"Optional", "SecretStr", "SecretBytes", "None", "object", "char"}
)
_SECRET_NAME_SEGMENTS: Final = frozenset(
    {"password", "passwd", "passphrase", "passcode", "pwd", "pw", "pass", "token", "secret"}
    | {"key", "apikey", "credential", "credentials", "auth"}
)
_IDENT_SEGMENTS: Final = regex.compile(r"_+|(?<=[a-z0-9])(?=[A-Z])")


# A keyboard shortcut ("Press key: Ctrl+Shift+P") or a template reference (`${TOKEN}`,
# `{{ token }}`, `<password>`, an f-string `f'Bearer {token}'`): no secret in either.
_KEY_COMBO: Final = regex.compile(
    r"(?i:ctrl|control|alt|shift|cmd|command|option|opt|meta|super|win|fn|hyper|mod)"
    r"[+\-](?:[A-Za-z0-9]{1,3}+|[A-Za-z]++)(?:[+\-](?:[A-Za-z0-9]{1,3}+|[A-Za-z]++))*+\Z"
)
_TEMPLATE_REFERENCE: Final = regex.compile(
    r"\$\{?[A-Za-z_]\w*+\}?\Z|\{\{?[ \t]*[A-Za-z_][\w.]*+[ \t]*\}\}?\Z|<[A-Za-z_][\w\- ]*+>\Z"
    r"|%\(?\w*+\)?s\Z|[fF][rR]?[\"']"
)


def is_key_combo(value: str) -> bool:
    """Whether a value is a keyboard shortcut (``Ctrl+Shift+P``, ``Alt+F4``)."""
    return _KEY_COMBO.match(value) is not None


def is_template_reference(value: str) -> bool:
    """Whether a value names a secret filled in elsewhere (``${TOKEN}``, ``f'{token}'``)."""
    return _TEMPLATE_REFERENCE.match(value) is not None


def looks_like_token(value: str) -> bool:
    """Whether one word is shaped like a generated secret rather than like prose."""
    # Yes: letters and digits in 6+ characters (`abc123`, `Tr0ub4dor`), three of lower /
    # upper / digit / symbol in 8+ (`Hunter#Pass`), 16+ digits.  No: words ("happiness",
    # "asc"), short numbers ("2024"), hyphenated or quoted prose (`well-being`, `Alice's`).
    if len(value) < _MIN_TOKEN_CHARS or any(char.isspace() for char in value):
        return False
    lower = upper = digit = symbol = False
    for char in value:
        if char.isdigit():
            digit = True
        elif char.islower():
            lower = True
        elif char.isupper():
            upper = True
        elif not char.isalnum() and char not in _PROSE_PUNCT:
            symbol = True
    if digit and (lower or upper):
        return True
    if len(value) >= _MIN_MIXED_CLASS_CHARS and lower + upper + digit + symbol >= 3:
        return True
    return value.isdigit() and len(value) >= _MIN_NUMBER_TOKEN_DIGITS


def is_code_value(value: str, key_is_attribute: bool) -> bool:
    """Whether an unquoted value is a code expression that names a secret, not the secret."""
    # Yes: a call or subscript (`getpass()`, `os.environ['API_KEY']`), an attribute of a
    # usual receiver or named after a secret (`settings.SECRET_KEY`), a type (`password:
    # str)`), a variable named after a secret (`confirm_password`, `apiKey`, or `password`
    # itself after `self.password =`).  No: a plain word (`hunter2`, `MyPassword`,
    # `password`): that is what a password looks like.
    chain = _IDENT_CHAIN.match(value)
    if chain is None:
        return False
    rest = value[chain.end() :]
    if rest.startswith(("(", "[")):
        return True
    if _CODE_VALUE_END.match(rest) is None:
        return False
    parts = chain.group().split(".")
    if len(parts) > 1:
        return parts[0] in _CODE_RECEIVERS or _names_a_secret(parts[-1])
    name = parts[0]
    if name in _TYPE_NAMES:
        return True
    if not _names_a_secret(name):
        return False
    compound = "_" in name or (name[0].islower() and name.lower() != name)
    return compound or key_is_attribute


def _names_a_secret(name: str) -> bool:
    """Whether an identifier is made of letter-only segments, one of them a secret word."""
    segments = [segment for segment in _IDENT_SEGMENTS.split(name) if segment]
    return (
        bool(segments)
        and all(segment.isalpha() for segment in segments)
        and any(segment.lower() in _SECRET_NAME_SEGMENTS for segment in segments)
    )
