"""The passes' gates: a keyword scan that skips a pass must only skip one that would
find nothing, whatever the case folding or near misses of the text."""

from __future__ import annotations

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.vocabulary.redaction import context_rules, engine, keywords, provider_rules, token_rules
from bot.vocabulary.sanitize import sanitize_value
from tests.helpers.secret_samples import (
    AWS_ID,
    AWS_SECRET,
    DISCORD,
    GITHUB,
    JWT,
    OPENAI,
    POSITIVES,
    WEBHOOK_TOKEN,
)

# Every case-insensitive pass with its gate (the text `keywords.scan` sees is the one the
# pass sees).
FOLDED_GATES = [
    (context_rules.REGION_OPEN, context_rules.REGION_GATE),
    (context_rules.URL_CREDENTIALS, context_rules.URL_GATE),
    (context_rules.URL_CREDENTIALS_AT_CUT, context_rules.URL_GATE),
    (context_rules.URL_TOKEN_USERINFO, context_rules.URL_GATE),
    (context_rules.URL_TOKEN_USERINFO_AT_CUT, context_rules.URL_GATE),
    (context_rules.PASSWORD, context_rules.PASSWORD_GATE),
    (context_rules.PASSWORD_STATED, context_rules.PASSWORD_GATE),
    (context_rules.CREDENTIAL_STATED, context_rules.CREDENTIAL_GATE),
    (context_rules.PIN, context_rules.PIN_GATE),
    (context_rules.CREDENTIAL, context_rules.CREDENTIAL_GATE),
    (context_rules.BEARER, context_rules.BEARER_GATE),
]


GATE_WORDS = tuple({word for _pattern, words in FOLDED_GATES for word in words})


# The webhook patterns are case-insensitive too; their gates use only caseless characters.
WEBHOOK_GATE_CHARS = {
    char
    for kind in ("discord_webhook", "slack_webhook")
    for word in token_rules.TOKEN_KEYWORDS[kind]
    for char in word
}


def test_gate_words_fold_like_the_regex_engine_except_for_two_letters() -> None:
    # A gate looks its words up in `text.lower()`: a character the engine's IGNORECASE
    # takes for one of theirs must lower to exactly that character (one code point, so a
    # word stays a substring), or a pass could be skipped that matches.  Two letters do
    # not, and a text holding one runs every pass.
    chars = sorted(set("".join(GATE_WORDS)) | WEBHOOK_GATE_CHARS)
    every = "".join(chr(c) for c in range(0x80, 0x110000) if not 0xD800 <= c <= 0xDFFF)
    folded_only_by_regex = {
        found.group()
        for char in chars
        for found in regex.finditer(f"(?i){regex.escape(char)}", every)
        if found.group().lower() != char
    }
    assert folded_only_by_regex == set(keywords._FOLDED_ONLY_BY_REGEX)
    assert {char.lower() for char in WEBHOOK_GATE_CHARS} == WEBHOOK_GATE_CHARS


def closed_gates(text: str) -> list[str]:
    """The passes whose pattern matches ``text`` although their gate is closed (the
    property every gate must have: it only skips a pass that finds nothing)."""
    found = keywords.scan(text)
    closed = [
        pattern.pattern[:40]
        for pattern, words in FOLDED_GATES
        if pattern.search(text) and not engine._may_hold(found, words)
    ]
    closed += [
        kind
        for kind, pattern in token_rules.TOKEN_PATTERNS
        if pattern.search(text) and not token_rules.token_may_match(kind, text, found)
    ]
    chosen = provider_rules.rules_for(found)
    closed += [
        rule.id
        for number, rule in enumerate(provider_rules.RULES)
        if number not in chosen and rule.pattern.search(text)
    ]
    return closed


GATE_EDGE_CASES = [
    # Dots before and after the token: the gate must look past dot pairs that are not 7 apart.
    f"v1.2.3 is out... e.g. {DISCORD}. Done.",
    f"...{DISCORD}...",
    f"a.b.c.d.e.f {DISCORD}",
    # The shortest parts the Discord pattern takes.
    "M" + "A" * 22 + ".abcdef." + "B" * 27,
    "github_pat_" + "A" * 22,
    f"snake_case_name = 1; {GITHUB}",
    f"(ASIA{'Y' * 16})",
    "my p\u0130n is 4821",
    "author\u0130zation: Bearer abc",
    "\u017fecret: Zx81kQ02pLm7Yt5R",
    "BEARER abcdef123456xyz",
    "HTTPS://alice:pw@example.com",
    f"HTTPS://DISCORD.COM/API/WEBHOOKS/1/{WEBHOOK_TOKEN}",
]


@pytest.mark.parametrize("text", [p[1] for p in POSITIVES] + GATE_EDGE_CASES)
def test_no_gate_closes_on_a_text_its_pass_matches(text: str) -> None:
    for variant in (text, text.upper(), text.lower(), text.swapcase(), text.title()):
        assert closed_gates(variant) == [], variant


# Near misses of the gated passes: real secrets and labels, and copies with one character
# changed, dropped, doubled or inserted (a dot moved, a prefix broken, the case changed, a
# letter the engine folds unlike `lower()`), glued with words that hold the gates' words.
SECRETS_AND_LABELS = [
    DISCORD,
    "MTIzNDU2Nzg5MDEyMzQ1Njc.GxYz12.AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "NzE2MDk0MzI4NjM3NDc0ODE2.XsMW5A.7Ylf1bd6nrXoW8U1yIOoLuKkLVw",
    GITHUB,
    "gho_" + "x" * 36,
    "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGH",
    AWS_ID,
    "ASIAY34FZKBOKMUTVV7A",
    AWS_SECRET,
    OPENAI,
    "sk-ant-api03-AbCdEf123456_ghIJkl-7890mnopQRst",
    "glpat-xYz123AbC456dEf789gH",
    "xoxe.xoxp-1-Mi0yLTE3NjgwNjQ0ODQyMDgtMTc2",
    "xapp-1-A0123456789-1234567890123-abcdef01",
    "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
    "whsec_4eC39HqLyjWDarjtT1zdp7dc",
    "AIzaSyD-1234567890abcdefghijklmnopqrstu",
    "ya29.a0AfH6SMBx1234567890abcdefghijklmnopqrstuvwxyz",
    "GOCSPX-AbCdEfGhIjKlMnOpQrStUvWxYz01",
    "npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
    "gsk_" + "Ab1Cd2Ef3Gh4" * 5,
    "xai-" + "Zz9Yy8Xx7Ww6" * 7,
    JWT,
    f"discord.com/api/webhooks/123456789012345678/{WEBHOOK_TOKEN}",
    "hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
    "https://alice:s3cr3tpass@example.com/r",
    "https://Zx81kQ02pLm7Yt5RaBcD@gitlab.example.com/o/r.git",
    "Bearer abcdef123456xyz",
    "Authorization: Bearer abc",
    "<private>",
    "password: ",
    "my pin is ",
    "secret: ",
    "API key is ",
]


NEAR_MISS_CHARS = st.sampled_from(
    [".", "_", "-", "/", ":", " ", "A", "I", "K", "S", "a", "0", "\u0130", "\u017f", "\u212a"]
)


@st.composite
def near_miss(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(SECRETS_AND_LABELS))
    text = draw(st.sampled_from([text, text.upper(), text.lower(), text.swapcase()]))
    at = draw(st.integers(0, len(text)))
    edit = draw(st.sampled_from(["keep", "drop", "double", "insert", "replace"]))
    char = draw(NEAR_MISS_CHARS)
    if edit == "drop":
        return text[:at] + text[at + 1 :]
    if edit == "double":
        return text[: at + 1] + text[at:]
    if edit == "insert":
        return text[:at] + char + text[at:]
    if edit == "replace":
        return text[:at] + char + text[at + 1 :]
    return text


SECRETISH = st.lists(
    st.one_of(
        near_miss(),
        st.sampled_from(
            [
                *GATE_WORDS,
                "PassWord",
                "API_KEY",
                "\u017fecret",
                "pa\u017f\u017fword",
                "pİn",
                "authorİzation",
                "Token",
                "Bearer ",
                " is ",
                " was ",
                ": ",
                "=",
                "@",
                "...",
                ".GhJkLm.",
                "<private>",
                "sk_live_",
                "rk_test_",
                "whsec_",
                "Zx81kQ02pLm7Yt5R",
                "4821",
                "hunter2",
                "\n",
                ". ",
                " ",
            ]
        ),
    ),
    max_size=8,
).map("".join)


@given(text=SECRETISH)
@settings(max_examples=300, deadline=None)
def test_no_gate_closes_on_a_near_miss_its_pass_matches(text: str) -> None:
    assert closed_gates(text) == []


@given(text=SECRETISH)
@settings(max_examples=300, deadline=None)
def test_the_gates_never_change_what_is_redacted(text: str) -> None:
    gated = sanitize_value(text)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine, "scan", lambda _text: keywords.ALL_WORDS)
        patch.setattr(
            engine,
            "possible_token_kinds",
            lambda _text, _words: {kind for kind, _ in token_rules.TOKEN_PATTERNS},
        )
        patch.setattr(provider_rules, "rules_for", lambda _found: range(len(provider_rules.RULES)))
        ungated = sanitize_value(text)
    assert gated == ungated


def test_a_long_s_in_the_key_word_still_hides_the_secret() -> None:
    # The engine reads `ſecret` as `secret`; lower() does not, so the gate lets it through.
    assert "Zx81kQ02pLm7Yt5R" not in sanitize_value("my \u017fecret: Zx81kQ02pLm7Yt5R")


@pytest.mark.parametrize(
    ("text", "secret"),
    [("my p\u0130n is 4821", "4821"), ("author\u0130zation: Bearer abc", "abc")],
    ids=["pin", "authorization"],
)
def test_a_dotted_capital_i_in_the_key_word_still_hides_the_secret(text: str, secret: str) -> None:
    # The engine reads `İ` as `i`; its lower() is `i` plus a combining dot, which would
    # break the gate's word apart.
    assert secret not in sanitize_value(text)
