"""Redaction of structured data, leaf by leaf, with the values of secret-looking keys hidden."""

from __future__ import annotations

from typing import Final, TypeVar, cast

import regex

from bot.vocabulary.redaction.alphabet import MARKER, marker
from bot.vocabulary.redaction.context_rules import PASS_SEGMENT, QUALIFIED_KEY, SECRET_WORDS
from bot.vocabulary.redaction.engine import redact_secrets

T = TypeVar("T")

# A dict key is secret-looking if its last segment is a secret word (`password`, `api_key`,
# `clientSecret`, `access_token`, `authorization`...) ...
_SECRET_DICT_KEY: Final = regex.compile(rf"(?:{SECRET_WORDS}|{PASS_SEGMENT})\Z")
# ... except that a bare `key` (`sort_key`, `cache_key`) needs a qualifier.
_SECRET_KEY_SUFFIX: Final = regex.compile(rf"{QUALIFIED_KEY}\Z")


def redact_leaves(obj: T) -> T:
    """Return a copy of nested dicts, lists and tuples with every string redacted."""
    # Never serialized JSON: a marker must not break its syntax, nor a pattern run across
    # two values.  A leaf cannot see its key, so one under a secret-looking key is hidden
    # whole.  Dict keys, numbers and None are kept as they are.
    return cast(T, _redact_obj(obj, under_secret_key=False))


def _is_secret_dict_key(key: object) -> bool:
    if not isinstance(key, str):
        return False
    name = key.strip().strip("\"'")
    if _SECRET_DICT_KEY.search(name) is None:
        return False
    return not name.lower().endswith("key") or _SECRET_KEY_SUFFIX.search(name) is not None


def _redact_obj(obj: object, *, under_secret_key: bool) -> object:
    if isinstance(obj, str):
        if under_secret_key and obj and MARKER.fullmatch(obj) is None:
            return marker("credential")
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
