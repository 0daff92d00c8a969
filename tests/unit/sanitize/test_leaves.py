"""``redact_leaves`` redacts the strings of nested data and the values of secret keys."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from bot.vocabulary.redaction import redact_leaves, redact_secrets
from tests.helpers.secret_samples import GITHUB, OPENAI


def test_redact_leaves_walks_nested_json_and_respects_secret_keys() -> None:
    obj: dict[str, Any] = {
        "user": "bob",
        "password": "hunter2",
        "nested": {
            "api_key": "abc",
            "items": [OPENAI, ("tuple", GITHUB), {"clientSecret": "shh"}],
            "Authorization": "Bearer xyz",
        },
        "note": "token=abc123 and more",
        "secret": ["a", {"deep": "b"}],
        "count": 3,
        "none": None,
        "flag": True,
    }
    before = copy.deepcopy(obj)
    out = redact_leaves(obj)
    assert obj == before  # a new structure; the input is untouched
    assert out["user"] == "bob"
    assert out["password"] == "[REDACTED:credential]"
    assert out["nested"]["api_key"] == "[REDACTED:credential]"
    assert out["nested"]["items"][0] == "[REDACTED:openai_key]"
    assert out["nested"]["items"][1] == ("tuple", "[REDACTED:github_token]")
    assert out["nested"]["items"][2] == {"clientSecret": "[REDACTED:credential]"}
    assert out["nested"]["Authorization"] == "[REDACTED:credential]"
    assert out["note"] == "token=[REDACTED:credential] and more"
    assert out["secret"] == ["[REDACTED:credential]", {"deep": "[REDACTED:credential]"}]
    assert (out["count"], out["none"], out["flag"]) == (3, None, True)
    assert redact_leaves({"PGPASSWORD": "hunter2"}) == {"PGPASSWORD": "[REDACTED:credential]"}
    assert redact_leaves({"DB_PASS": "hunter2"}) == {"DB_PASS": "[REDACTED:credential]"}
    assert list(out) == list(obj)  # keys untouched, order kept
    assert redact_leaves(out) == out


@pytest.mark.parametrize(
    "obj",
    [
        {"key": "favorite_color", "value": "blue"},
        {"sort_key": "date", "cache_key": "u:1"},
        {"password": ""},
        {"password": 12345},
        {"tokens": 500, "max_tokens": 20, "token_type": "bearer"},
        ["plain", ("tuple",), {"nested": ["x"]}],
        "just text",
        42,
    ],
    ids=["bare_key", "key_suffixes", "empty", "number", "token_words", "containers", "str", "int"],
)
def test_redact_leaves_leaves_ordinary_data_alone(obj: object) -> None:
    assert redact_leaves(obj) == obj


def test_redact_leaves_sees_values_serialized_json_would_hide() -> None:
    # The dict-level rule catches what leaf redaction alone cannot see.
    assert redact_secrets("hunter2") == "hunter2"
    assert redact_leaves({"password": "hunter2"}) == {"password": "[REDACTED:credential]"}
    assert redact_leaves({"api key": "abc"}) == {"api key": "[REDACTED:credential]"}
    assert redact_leaves({"session_key": "s"}) == {"session_key": "[REDACTED:credential]"}
    assert redact_leaves({"primary_key": "id"}) == {"primary_key": "id"}
