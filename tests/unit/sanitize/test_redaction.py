"""Redaction catches every kind of secret, keeps the text around it, and counts what
it hid without ever carrying a value."""

from __future__ import annotations

import pytest

from bot.vocabulary.redaction import redact_secrets, redaction_kinds
from bot.vocabulary.sanitize import sanitize_value
from tests.helpers.secret_samples import OPENAI, POSITIVES


@pytest.mark.parametrize(
    ("text", "secret", "kind"), [p[1:] for p in POSITIVES], ids=[p[0] for p in POSITIVES]
)
def test_each_secret_kind_is_redacted(text: str, secret: str, kind: str) -> None:
    redacted = redact_secrets(text)
    assert secret not in redacted
    assert f"[REDACTED:{kind}]" in redacted
    assert kind in redaction_kinds(text)
    assert secret not in sanitize_value(text)
    assert redact_secrets(redacted) == redacted  # idempotent
    assert redaction_kinds(redacted) == []  # nothing left to count


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "before <private>x</private> after", "before [REDACTED:private] after", id="private"
        ),
        pytest.param(
            "<private>a <private>b</private> c</private> d <private>e</private> f",
            "[REDACTED:private] d [REDACTED:private] f",
            id="private_nested_then_another",
        ),
        pytest.param(
            "https://alice:pw@example.com/a",
            "https://[REDACTED:url_credentials]@example.com/a",
            id="url",
        ),
        pytest.param("password: hunter2.", "password: [REDACTED:credential].", id="assignment"),
        pytest.param(
            "password: correct horse battery staple",
            "password: [REDACTED:credential]",
            id="passphrase",
        ),
        pytest.param(
            "password: hunter2. Then we left.",
            "password: [REDACTED:credential]. Then we left.",
            id="password_sentence_end",
        ),
        pytest.param(
            "pwd: a b c\nnext line", "pwd: [REDACTED:credential]\nnext line", id="password_line_end"
        ),
        pytest.param(
            "My wifi password is Tr0ub4dor&3. The router is blue.",
            "My wifi password is [REDACTED:credential]. The router is blue.",
            id="password_stated_sentence_end",
        ),
        pytest.param(
            "my PIN is 4821 and I bank online",
            "my PIN is [REDACTED:credential] and I bank online",
            id="pin_digits_only",
        ),
        pytest.param(
            "PIN: 4821, LED pin: 13",
            "PIN: [REDACTED:credential], LED pin: 13",
            id="pin_only_the_pin",
        ),
        pytest.param(
            "?password=x y&user=bob",
            "?password=[REDACTED:credential]&user=bob",
            id="password_query_param",
        ),
        pytest.param(
            "secret: opensesame\nnext", "secret: [REDACTED:credential]\nnext", id="secret_line_end"
        ),
        pytest.param(
            '{"password": "x", "n": 1}', '{"password": "[REDACTED:credential]", "n": 1}', id="json"
        ),
        pytest.param(
            "Authorization: Bearer abc",
            "Authorization: Bearer [REDACTED:authorization]",
            id="authorization",
        ),
        pytest.param(f"({OPENAI}), ok", "([REDACTED:openai_key]), ok", id="token_punct"),
        pytest.param(
            "-----BEGIN EC PRIVATE KEY-----\nAB\n-----END EC PRIVATE KEY-----\nz",
            "[REDACTED:private_key]\nz",
            id="pem",
        ),
    ],
)
def test_redaction_keeps_the_surrounding_text(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected


@pytest.mark.parametrize(
    "text",
    ["password=>0", "token=>abc123", "password:=0 x", "api_key := opensesame", "secret=>x1y2z3"],
)
def test_two_character_separators_stay_redacted(text: str) -> None:
    # `=>` must not be re-read as `=` followed by a value starting with `>`.
    once = sanitize_value(text)
    assert "[REDACTED:credential]" in once
    assert sanitize_value(once) == once
    assert redaction_kinds(once) == []


def test_a_token_recognised_once_is_hidden_where_it_is_glued_to_other_text_too() -> None:
    # Alone, `0sk-…` is not recognisable (glued to a word); its twin standing free is.
    text = f"0{OPENAI}key: {OPENAI}"
    assert redact_secrets(text) == "0[REDACTED:openai_key]key: [REDACTED:openai_key]"
    assert redaction_kinds(text) == ["openai_key", "openai_key"]
    assert redact_secrets(f"0{OPENAI}key") == f"0{OPENAI}key", "not recognisable alone"


def test_a_key_that_a_hidden_glued_token_ends_is_hidden_in_the_same_pass() -> None:
    # Once the glued `sk-…` is a marker, the AWS key id before it ends there and is one;
    # found only by a second sanitize, the first would not have been idempotent.
    text = f"{OPENAI} AKIAIOSFODNN7EXAMPLE{OPENAI}"
    once = redact_secrets(text)
    assert once == "[REDACTED:openai_key] [REDACTED:aws_access_key][REDACTED:openai_key]"
    assert redact_secrets(once) == once
    assert redaction_kinds(text) == ["openai_key", "openai_key", "aws_access_key"]


def test_redaction_kinds_count_every_redaction_and_never_carry_values() -> None:
    text = f"{OPENAI} and {OPENAI} with password=hunter2 <private>x"
    kinds = redaction_kinds(text)
    assert sorted(kinds) == ["credential", "openai_key", "openai_key", "private"]
    assert not any("hunter2" in kind or "sk-" in kind for kind in kinds)
