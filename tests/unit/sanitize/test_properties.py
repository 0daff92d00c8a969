"""Properties of ``sanitize_value`` and the redaction over generated texts built from
secrets, labels, braces and hard characters (more examples under ``--fuzz``)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.vocabulary.redaction import redact_secrets
from bot.vocabulary.sanitize import (
    MAX_VALUE_CHARS,
    sanitize_value,
    strip_control_chars,
    strip_unknown_placeholders,
)
from tests.helpers.fuzz import memory_value_problems
from tests.helpers.secret_samples import (
    AWS_SECRET,
    DISCORD,
    E_ACUTE,
    FAMILY,
    FLAG_JP,
    FORBIDDEN,
    GITHUB,
    JWT,
    KEYCAP_ONE,
    OPENAI,
    WEBHOOK_TOKEN,
)

FRAGMENTS = st.sampled_from(
    [
        OPENAI,
        GITHUB,
        DISCORD,
        JWT,
        "AKIAIOSFODNN7EXAMPLE",
        "password=",
        "password: ",
        '"password": "',
        "Bearer ",
        "Authorization: Bearer ",
        "https://",
        "user:pw@",
        "://",
        "<private>",
        "</private>",
        "-----BEGIN RSA PRIVATE KEY-----",
        "-----END RSA PRIVATE KEY-----",
        "[REDACTED:jwt]",
        "[REDACT",
        "{",
        "}",
        "{user_name}",
        "{{evil}}",
        "{x}",
        "{x!r}",
        "{0[0]}",
        "{x:>10}",
        "{{ x }}",
        "{{ user_name }}",
        "-----begin private key-----",
        "password: correct horse",
        "password is ",
        " is on the ",
        "PIN is 4",
        "pin: 12",
        " 34",
        " mm",
        "was sent ",
        "pw: ",
        "key: ",
        "Secret: ",
        "token=",
        "=>",
        ":=",
        "&u=",
        "sk-2024-annual-planning-notes-v2",
        "\u00ad",
        "\u200c",
        "\u200d",
        "\ufe0f",
        KEYCAP_ONE,
        " ",
        "\n",
        "\r\n",
        "\t",
        "\x00",
        "\x1b",
        "\ud800",
        "\ufeff",
        "\u200b",
        "\U000e0041",
        FAMILY,
        FLAG_JP,
        E_ACUTE,
        "\u0301",
        "sk-",
        "-",
        ".",
        ":",
        "=",
        "@",
        "/",
        '"',
        "x",
        "Z9",
        # Labels in Markdown, qualifiers, notes, stated keys, AWS pairs and code.
        "**",
        "`",
        "__",
        " [None]",
        "DB_PASS=",
        " for the ",
        " (wifi)",
        "API key is ",
        " was ",
        "==",
        "self.",
        "()",
        "['",
        "confirm_password",
        AWS_SECRET,
        "ya29.",
        "xoxe.",
        "discord.com/api/webhooks/1/",
        WEBHOOK_TOKEN,
    ]
)


TEXTS = st.lists(
    st.one_of(FRAGMENTS, st.text(max_size=8), st.characters(codec=None)), max_size=40
).map("".join)


@pytest.mark.fuzz
@settings(max_examples=300, deadline=None)
@given(text=TEXTS, limit=st.sampled_from([0, 1, 5, 17, 40, 300, MAX_VALUE_CHARS]))
def test_sanitize_value_properties(text: str, limit: int) -> None:
    out = sanitize_value(text, limit)
    assert len(out) <= limit
    assert FORBIDDEN.search(out) is None
    assert out == out.rstrip()
    assert sanitize_value(out, limit) == out  # idempotent
    out.encode("utf-8")
    assert memory_value_problems(out, ()) == []  # the invariant the fuzz suites check
    for secret in (OPENAI, GITHUB, DISCORD, JWT):
        if f" {secret} " in f" {strip_control_chars(text)} ":
            assert secret not in out


@pytest.mark.fuzz
@settings(max_examples=200, deadline=None)
@given(text=TEXTS)
def test_redaction_is_idempotent(text: str) -> None:
    once = redact_secrets(text)
    assert redact_secrets(once) == once
    stripped = strip_unknown_placeholders(text)
    assert strip_unknown_placeholders(stripped) == stripped
