"""Control and invisible characters are stripped, and none can split a secret."""

from __future__ import annotations

import pytest

from bot.vocabulary.sanitize import sanitize_value, strip_control_chars
from tests.helpers.secret_samples import (
    DISCORD,
    E_ACUTE,
    FAMILY,
    FAMILY_WWG,
    FLAG_JP,
    KEYCAP_ONE,
    OPENAI,
    SCOTLAND,
    THUMBS_MEDIUM,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("a\x00b", "ab", id="nul"),
        pytest.param("\x00" * 5, "", id="only_nul"),
        pytest.param("a\x01\x07\x1b[31mb", "a[31mb", id="c0"),
        pytest.param("a\r\nb", "a\nb", id="crlf"),
        pytest.param("a\rb", "a\nb", id="lone_cr"),
        pytest.param("a\tb\nc", "a\tb\nc", id="tab_newline_kept"),
        pytest.param("a\x7f\x85\x9fb", "ab", id="del_c1"),
        pytest.param("a\ud800b\udfff", "ab", id="lone_surrogates"),
        pytest.param("\ufeffhello", "hello", id="bom"),
        pytest.param("zero\u200bwidth\u2060joiner", "zerowidthjoiner", id="zero_width"),
        pytest.param("abc\u202edef\u2066x\u2069", "abcdefx", id="bidi"),
        pytest.param("x\uffff\U0010ffff\U0001fffe\ufdd0y", "xy", id="noncharacters"),
        # Tag-character smuggling.
        pytest.param("hi\U000e0049\U000e0047\U000e004e", "hi", id="tag_smuggling"),
        pytest.param(
            f"{FAMILY} {FLAG_JP} {SCOTLAND}",
            f"{FAMILY} {FLAG_JP} {SCOTLAND}",
            id="emoji_sequences_kept",
        ),
        pytest.param(
            f"caf{E_ACUTE} \u2764\ufe0f {THUMBS_MEDIUM}",
            f"caf{E_ACUTE} \u2764\ufe0f {THUMBS_MEDIUM}",
            id="combining_and_selectors_kept",
        ),
        pytest.param("مرحبا שלום 日本語 नमस्ते", "مرحبا שלום 日本語 नमस्ते", id="scripts_kept"),
        # Invisible characters between two token characters go; elsewhere they stay.
        pytest.param("zw\u200cnj", "zwnj", id="zwnj_ascii_removed"),
        pytest.param("co\u00adoperate", "cooperate", id="soft_hyphen_ascii_removed"),
        pytest.param("a\u200b\u00adb", "ab", id="mixed_invisibles_removed"),
        pytest.param("می\u200cخواهم", "می\u200cخواهم", id="zwnj_persian_kept"),  # Persian ZWNJ
        pytest.param("क्\u200dष", "क्\u200dष", id="zwj_devanagari_kept"),  # Devanagari ZWJ
        pytest.param(
            f"{KEYCAP_ONE} #\ufe0f\u20e3 {FAMILY_WWG}",
            f"{KEYCAP_ONE} #\ufe0f\u20e3 {FAMILY_WWG}",
            id="keycaps_and_zwj_family_kept",
        ),
        pytest.param(f"a {KEYCAP_ONE}b", f"a {KEYCAP_ONE}b", id="keycap_before_letter_kept"),
        pytest.param("x \u00ad y", "x \u00ad y", id="soft_hyphen_between_spaces_kept"),
    ],
)
def test_control_characters(text: str, expected: str) -> None:
    assert strip_control_chars(text) == expected
    assert sanitize_value(text) == expected.rstrip()
    sanitize_value(text).encode("utf-8")  # storable


def test_invisible_characters_cannot_split_a_secret() -> None:
    text = "sk-abcdefghij\u200b1234567890\x00KLMNOP"
    assert "KLMNOP" not in sanitize_value(text)
    assert sanitize_value(text) == "[REDACTED:openai_key]"


# ZWJ and ZWNJ are word characters (`\w`), so they can be part of a placeholder's name.
@pytest.mark.parametrize("splitter", ["\u200d", "\u200c"], ids=["zwj", "zwnj"])
def test_an_invisible_character_in_a_placeholder_cannot_split_a_secret(splitter: str) -> None:
    # Inside the braces it is next to a brace, which counts as a token character; once the
    # braces are gone it is between two token characters, and must go then too (once).
    once = sanitize_value(f"sk-abcdefghij{{{{{splitter}x1234567890KLMNOP}}}}")
    assert once == "[REDACTED:openai_key]"
    assert sanitize_value(once) == once


# Default_Ignorable code points that used to pass through and split a token.
SPLITTERS = {
    "soft_hyphen": "\u00ad",
    "zwnj": "\u200c",
    "zwj": "\u200d",
    "function_application": "\u2061",
    "invisible_times": "\u2062",
    "invisible_separator": "\u2063",
    "invisible_plus": "\u2064",
    "cgj": "\u034f",
    "mongolian_vowel_separator": "\u180e",
    "vs1": "\ufe00",
    "vs16": "\ufe0f",
    "hangul_filler": "\u3164",
    "halfwidth_hangul_filler": "\uffa0",
    "lrm": "\u200e",
    "two_in_a_row": "\u00ad\u200c",
}


@pytest.mark.parametrize(
    ("secret", "at", "kind"),
    [(OPENAI, 13, "openai_key"), (DISCORD, 20, "discord_token"), (DISCORD, 27, "discord_token")],
    ids=["openai", "discord", "discord_after_dot"],
)
@pytest.mark.parametrize("splitter", list(SPLITTERS.values()), ids=list(SPLITTERS))
def test_no_invisible_character_can_split_a_secret(
    secret: str, at: int, kind: str, splitter: str
) -> None:
    text = f"token {secret[:at]}{splitter}{secret[at:]} ok"
    out = sanitize_value(text)
    assert out == f"token [REDACTED:{kind}] ok"
    assert secret[at:] not in out and secret[:at] not in out
