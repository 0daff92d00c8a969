"""Truncation never splits a grapheme or shows part of a secret, and huge or adversarial
inputs complete (completion and correctness; no timing assertions)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bot.vocabulary.sanitize import MAX_VALUE_CHARS, sanitize_value, truncate_graphemes
from tests.helpers.secret_samples import (
    E_ACUTE,
    FAMILY,
    FLAG_JP,
    FORBIDDEN,
    OPENAI,
    SCOTLAND,
    THUMBS_MEDIUM,
)


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("abcdef", 3, "abc"),
        ("abc", 3, "abc"),
        ("abc", 0, ""),
        ("abcdefgh" + FAMILY, 10, "abcdefgh"),
        ("abcdefgh" + FAMILY, 15, "abcdefgh" + FAMILY),
        ("abcdefgh" + FAMILY, 14, "abcdefgh"),
        ("abcd" + FLAG_JP + FLAG_JP, 5, "abcd"),
        ("abcd" + FLAG_JP + FLAG_JP, 7, "abcd" + FLAG_JP),
        ("abcd" + E_ACUTE, 5, "abcd"),
        ("abcd" + E_ACUTE, 6, "abcd" + E_ACUTE),
        ("ab" + THUMBS_MEDIUM, 3, "ab"),
        ("ab" + SCOTLAND, 8, "ab"),
        ("a" + "\u0301" * 50, 10, ""),  # one huge cluster: dropped whole
    ],
    ids=[
        "plain",
        "exact",
        "zero",
        "zwj_family_dropped",
        "zwj_family_kept",
        "zwj_family_one_short",
        "flag_dropped",
        "flag_kept",
        "combining_dropped",
        "combining_kept",
        "skin_tone",
        "tag_sequence",
        "zalgo",
    ],
)
def test_truncation_never_splits_a_grapheme(text: str, limit: int, expected: str) -> None:
    assert truncate_graphemes(text, limit) == expected
    assert sanitize_value(text, limit) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("x" * 1499 + THUMBS_MEDIUM, "x" * 1499),
        ("x" * 1493 + FAMILY, "x" * 1493 + FAMILY),
        ("x" * 1494 + FAMILY, "x" * 1494),
        ("x" * 1490 + " " + OPENAI, "x" * 1490),  # the marker is not cut in half
        ("x" * 1495 + "{user_name}", "x" * 1495),  # nor is a kept placeholder
        ("x" * 1499 + " y", "x" * 1499),  # trailing whitespace dropped
    ],
    ids=["skin_tone", "family_fits", "family_dropped", "marker", "placeholder", "whitespace"],
)
def test_values_are_capped_at_the_default_limit(text: str, expected: str) -> None:
    out = sanitize_value(text)
    assert out == expected
    assert len(out) <= MAX_VALUE_CHARS


def test_negative_limits_are_rejected() -> None:
    with pytest.raises(ValueError):
        sanitize_value("x", -1)
    with pytest.raises(ValueError):
        truncate_graphemes("x", -1)


MB = 1_000_000


HUGE = [
    ("plain_words", "hello world " * (MB // 12)),
    ("all_open_braces", "{" * MB),
    ("all_a", "a" * MB),
    ("many_sk_prefixes", "sk-" * (MB // 3)),
    ("many_placeholders", "{evil}" * (MB // 6)),
    ("nested_braces", "{a" * (MB // 4) + "}" * (MB // 4)),
    ("nul_then_secret", "\x00" * MB + OPENAI),
    ("all_dashes", "-" * MB),
    ("many_key_colons", "key: " * (MB // 5)),
    ("many_private_openers", "<private>" * (MB // 9)),
    ("jwt_like", "eyJ." * (MB // 4)),
    ("url_like", "://a:" * (MB // 5)),
]


@pytest.mark.parametrize("text", [h[1] for h in HUGE], ids=[h[0] for h in HUGE])
def test_huge_inputs_complete_and_are_capped(text: str) -> None:
    out = sanitize_value(text)
    assert len(out) <= MAX_VALUE_CHARS
    assert FORBIDDEN.search(out) is None
    assert OPENAI not in out
    assert "{evil}" not in out
    assert sanitize_value(out) == out


# A super-linear regex on a megabyte does not end in any useful time (it would hang the
# suite): each case runs in a child process, and one past the deadline fails.
_LINEAR_PROBE = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    from bot.vocabulary.redaction import redact_secrets
    from bot.vocabulary.sanitize import strip_control_chars, strip_unknown_placeholders
    MB = 1_000_000
    text = {expression}
    assert len(redact_secrets(text)) <= len(text) + 64
    strip_unknown_placeholders(text)
    strip_control_chars(text)
    print("ok")
    """
)


@pytest.mark.parametrize(
    "expression",
    [
        '"{" * MB + "}"',
        '"a" * MB',
        '"sk-" * (MB // 3)',
        '"<private>" * (MB // 9)',
        '("M" + "a" * 25 + ".") * (MB // 27)',
    ],
    ids=["braces", "all_a", "sk", "private", "discord_like"],
)
def test_public_helpers_are_linear_on_huge_inputs(expression: str) -> None:
    root = str(Path(__file__).resolve().parents[3])
    code = _LINEAR_PROBE.format(root=root, expression=expression)
    # A hang guard, not a timing assertion: each case takes well under a second.
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"no result within 60 s on {expression}: not linear")
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr[-800:]


def test_a_secret_straddling_the_cut_is_never_partly_visible() -> None:
    # The head (16 x limit) is cut where no token can straddle the cut.  Here a private
    # block collapses that head to a short marker, so the text after it - including a key
    # that straddles the cut - comes into view; it must be redacted, not half-visible.
    bound = MAX_VALUE_CHARS * 16
    key = "sk-" + "A1b2C3d4" * 10
    filler = "x " * ((bound - 40) // 2)
    text = "<private>" + filler + "</private> " + key + " tail"
    assert text.index(key) < bound < text.index(key) + len(key)  # it straddles the cut
    out = sanitize_value(text)
    assert out == "[REDACTED:private] [REDACTED:openai_key] tail"
    assert "A1b2" not in out


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        ("https://user:" + "p" * 200_000 + "@host/x", "https://[REDACTED:url_credentials]@host/x"),
        # A password runs to the end of its line, so what follows is on the next one.
        ("password=" + "p" * 200_000 + "\nend", "password=[REDACTED:credential]\nend"),
        ('password: "' + "p " * 100_000 + '" end', 'password: "[REDACTED:credential]" end'),
    ],
    ids=["url_userinfo", "unquoted_value", "quoted_value_with_spaces"],
)
def test_secrets_longer_than_the_head_are_still_redacted(tail: str, expected: str) -> None:
    # The private block collapses the first head; the secret after it is longer than any
    # head, so it runs into every cut until the whole text is processed.  No part of it may
    # be shown on the way.
    text = "<private>" + "x " * 12_000 + "</private> " + tail
    out = sanitize_value(text)
    assert out.startswith("[REDACTED:private] ")
    assert out == "[REDACTED:private] " + expected
    assert "pp" not in out and "p p" not in out


def test_a_long_value_without_collapse_shows_only_the_head() -> None:
    key = "sk-" + "Z9" * 20
    text = "word " * 4_799 + key + " more" * 1_000  # key straddles 24 000
    out = sanitize_value(text)
    assert out == ("word " * 300).rstrip()
    assert "Z9" not in out


def test_a_url_token_user_at_the_processing_cut_is_not_stored() -> None:
    # A token alone as a URL's user must not survive the cut that drops its `@`: the
    # long collapsed <private> block puts the `@` exactly at the first cut.
    token = "Zx81kQ02pLm7Yt5RaBcD"
    bound = MAX_VALUE_CHARS * 16  # sanitize_value's first cut
    leaked = []
    for filler in range(1400, 1500, 7):
        head = f"https://{token}"
        body = bound - len(head) - filler - len("<private></private>")
        text = (
            f"<private>{'x' * body}</private>"
            + ("word " * 400)[:filler]
            + head
            + "@gitlab.example.com/o/r.git and more"
        )
        assert text.index("@") == bound
        if token in sanitize_value(text):
            leaked.append(filler)
    assert leaked == []
