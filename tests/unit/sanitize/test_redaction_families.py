"""Hardening item 5: URL userinfo with reserved characters, password labels in other
languages, missed layouts, payment cards and seed phrases, and over-redaction."""

from __future__ import annotations

import random
import string

import pytest
from mnemonic import Mnemonic

from bot.vocabulary import redaction
from bot.vocabulary.redaction import redact_secrets, redaction_kinds
from bot.vocabulary.sanitize import sanitize_value

B62 = string.ascii_letters + string.digits


def draw(alphabet: str, length: int, seed: int = 11) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(length))


SECRET = "s3cretV4lue"
GITHUB = "ghp_" + draw(B62, 36)
CRED = "[REDACTED:credential]"
# The findings not fixed yet on this branch: strict, so each one reports when it is fixed.
NOT_YET = pytest.mark.xfail(strict=True, reason="hardening item 5: not fixed yet")


def hidden(text: str, secret: str) -> str:
    """The sanitized text, after checking the secret is gone and a second pass is a no-op."""
    out = sanitize_value(text)
    assert secret not in out, out
    assert sanitize_value(out) == out
    assert redaction_kinds(out) == []
    return out


# ------------------------------------------------------------------ URL userinfo


@pytest.mark.parametrize("char", ["#", "?", "/", "[", "]", " ", "@"])
def test_a_url_password_with_a_reserved_character_is_hidden_whole(char: str) -> None:
    text = f"postgres://app:Xy9{char}kLm2Qw@db:5432/x"
    assert hidden(text, "kLm2Qw") == "postgres://[REDACTED:url_credentials]@db:5432/x"


@pytest.mark.parametrize(
    "text",
    [
        "https://user:pw@mastodon.social/@alice",
        "see https://example.com/a:b and mail bob@example.com",
        "https://example.com:8080/path?q=1#top",
    ],
)
def test_the_host_and_path_after_the_userinfo_stay(text: str) -> None:
    out = sanitize_value(text)
    if "user:pw" in text:
        assert out == "https://[REDACTED:url_credentials]@mastodon.social/@alice"
    else:
        assert out == text


# ------------------------------------------------------------------ password labels


LABELLED = [
    ("french", "mot de passe : {s}"),
    ("french_mdp", "mdp: {s}"),
    ("french_stated", "mon mot de passe est {s}"),
    ("german", "Passwort: {s}"),
    ("german_kennwort", "Kennwort = {s}"),
    ("german_stated", "Das Passwort ist {s}"),
    ("spanish", "contraseña: {s}"),
    ("spanish_stated", "la contraseña es {s}"),
    ("portuguese", "senha: {s}"),
    ("portuguese_stated", "a senha é {s}"),
    ("italian", "parola d'ordine: {s}"),
    ("italian_stated", "la password è {s}"),
    ("dutch", "wachtwoord: {s}"),
    ("polish", "hasło: {s}"),
    ("polish_stated", "moje hasło to {s}"),
    ("russian", "пароль: {s}"),
    ("russian_dash", "пароль — {s}"),
    ("turkish", "şifre: {s}"),
    ("japanese_topic", "パスワードは {s}"),
    ("japanese_glued", "パスワードは{s}です"),
    ("japanese_fullwidth_colon", "パスワード：{s}"),
    ("chinese", "密码：{s}"),
    ("chinese_stated", "我的密码是{s}"),
    ("chinese_traditional", "密碼: {s}"),
    ("korean", "비밀번호: {s}"),
    ("korean_topic", "비밀번호는 {s}"),
    ("swedish", "lösenord: {s}"),
    ("finnish", "salasana: {s}"),
    ("czech", "heslo: {s}"),
    ("vietnamese", "mật khẩu: {s}"),
    ("indonesian", "kata sandi: {s}"),
    ("greek", "κωδικός: {s}"),
    ("ukrainian", "пароль від wifi: {s}"),
    ("german_qualifier", "Passwort für das WLAN: {s}"),
]


@pytest.mark.parametrize("template", [t for _, t in LABELLED], ids=[n for n, _ in LABELLED])
@NOT_YET
def test_password_labels_in_other_languages_hide_the_value(template: str) -> None:
    out = hidden(template.format(s=SECRET), SECRET)
    assert CRED in out


def test_at_least_twelve_languages_have_labels() -> None:
    languages = {name.split("_")[0] for name, _ in LABELLED}
    assert len(languages) >= 12


@pytest.mark.parametrize(
    "text",
    [
        "I forgot my Passwort again",
        "Das Passwort ist falsch, sagt die Seite",
        "Mot de passe oublié : cliquez ici",
        "le mot de passe est trop court",
        "la contraseña es segura",
        "Esqueci a senha de novo",
        "wachtwoord vergeten? geen probleem",
        "Zapomniałem hasła do poczty",
        "Забыл пароль от почты",
        "パスワードを忘れました",
        "パスワードは忘れました",
        "我忘记密码了",
        "비밀번호를 잊어버렸어요",
        "şifremi unuttum yine",
        "Salasana on liian lyhyt",
        "the mot de passe field is on the left",
    ],
)
def test_label_words_in_ordinary_sentences_are_left_alone(text: str) -> None:
    assert sanitize_value(text) == text


# ------------------------------------------------------------------ layouts


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("password:\n hunter2xyz", f"password:\n {CRED}"),
        ("Passwort:\nhunter2xyz\nnext", f"Passwort:\n{CRED}\nnext"),
        (f"| password | {SECRET} |", f"| password | {CRED} |"),
        (f"| **Password** | `{SECRET}` |", f"| **Password** | `{CRED}` |"),
        (
            f"| user | password |\n|---|---|\n| bob | {SECRET} |",
            f"| user | password |\n|---|---|\n| bob | {CRED} |",
        ),
        (f"{SECRET} is my password", f"{CRED} is my password"),
        (f"{SECRET} was the old wifi password.", f"{CRED} was the old wifi password."),
        (f"password: ||{SECRET}|| ok", f"password: ||{CRED}|| ok"),
        ("my api key is ||Zx81kQ02pLm7Yt5R||", f"my api key is ||{CRED}||"),
        ("password: hunter2 is a famous meme", f"password: {CRED} is a famous meme"),
        (
            "the password is hunter2 and the user is bob",
            f"the password is {CRED} and the user is bob",
        ),
    ],
    ids=[
        "next_line",
        "next_line_german",
        "table_row",
        "table_row_emphasis",
        "table_column",
        "before_label",
        "before_label_qualified",
        "spoiler_value",
        "spoiler_stated_key",
        "value_ends_at_whitespace",
        "stated_value_ends_at_whitespace",
    ],
)
@NOT_YET
def test_values_in_other_layouts_are_hidden(text: str, expected: str) -> None:
    assert sanitize_value(text) == expected
    assert sanitize_value(expected) == expected


@pytest.mark.parametrize(
    "text",
    [
        "Password:\nReset it in the settings page",
        "| field | description |\n|---|---|\n| password | the user's password |",
        "| password | string | required |",
        "Bitwarden is my password manager",
        "this is my password",
        "2024 was my password year",
        "a || b || c",
        "`token = a || b`",
    ],
)
def test_layout_look_alikes_are_left_alone(text: str) -> None:
    assert sanitize_value(text) == text


@pytest.mark.parametrize(
    "text",
    [
        f"it is {GITHUB[:14]}\n{GITHUB[14:28]}\n{GITHUB[28:]} thanks",
        f"it is ghp_\n{GITHUB[4:]} thanks",
        f"it is ghp_ {GITHUB[4:]} thanks",
    ],
    ids=["three_lines", "after_prefix_newline", "after_prefix_space"],
)
@NOT_YET
def test_a_token_split_over_lines_or_after_its_prefix_is_hidden(text: str) -> None:
    out = hidden(text, GITHUB[20:30])
    assert "[REDACTED:github_token]" in out
    assert out.endswith(" thanks")


@NOT_YET
def test_jwt_parts_separated_by_spaced_dots_are_hidden() -> None:
    jwt = [
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9",
        "eyJzdWIiOiIxMjM0NTY3ODkwIn0",
        "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    ]
    out = hidden("cookie " + " . ".join(jwt) + " ok", jwt[2])
    assert out == "cookie [REDACTED:jwt] ok"


def test_a_token_in_a_spoiler_keeps_the_spoiler_bars() -> None:
    assert hidden(f"||{GITHUB}||", GITHUB) == "||[REDACTED:github_token]||"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("password=hunter2xyz.txt", f"password={CRED}.txt"),
        ("wifi_password_Tr0ub4dor.png", f"wifi_password_{CRED}.png"),
        (f"{GITHUB}.txt", "[REDACTED:github_token].txt"),
        ("my_password_is_hunter2.jpg", f"my_password_is_{CRED}.jpg"),
        ("password_reset_guide.pdf", "password_reset_guide.pdf"),
        ("password-protected.zip", "password-protected.zip"),
        ("cat.png", "cat.png"),
    ],
)
@NOT_YET
def test_a_file_name_passes_through_redaction(name: str, expected: str) -> None:
    assert redaction.redact_file_name(name) == expected
    assert redaction.redact_file_name(expected) == expected


# ------------------------------------------------------------------ payment cards


@pytest.mark.parametrize(
    "text",
    [
        "card 4111 1111 1111 1111 exp 12/29",
        "card 4111-1111-1111-1111",
        "4111111111111111",
        "amex 3782 822463 10005 thanks",
        "mc: 5555555555554444.",
        "discover 6011 0009 9013 9424",
        "diners 3056 930902 5904",
    ],
)
@NOT_YET
def test_a_luhn_valid_card_number_is_hidden(text: str) -> None:
    out = sanitize_value(text)
    assert "[REDACTED:payment_card]" in out
    assert sanitize_value(out) == out
    digits = "".join(c for c in out if c.isdigit())
    assert len(digits) < 12


@pytest.mark.parametrize(
    "text",
    [
        "order 4111 1111 1111 1112 shipped",  # fails Luhn
        "call +1 415 555 2671 after 5",
        "ISBN 978-3-16-148410-0",
        "ISBN 9783161484100",
        "user 123456789012345678 said hi",  # a Discord snowflake
        "tracking 1Z999AA10123456784",
        "4111 1111 1111 1111 1111 1111",  # too long for a card
        "timestamp 1765123456789 ms",
        "version 4.1.1.1111.1111.1111",
    ],
)
def test_card_like_numbers_that_are_no_card_are_left_alone(text: str) -> None:
    assert sanitize_value(text) == text


# ------------------------------------------------------------------ seed phrases

# Drawn at run time from seeded entropy: no seed phrase is written in the repository.
_BIP39 = Mnemonic("english")
SEED_12 = _BIP39.to_mnemonic(random.Random(12).randbytes(16))
SEED_24 = _BIP39.to_mnemonic(random.Random(24).randbytes(32))


@pytest.mark.parametrize(
    "text",
    [
        f"my seed: {SEED_12}",
        f"{SEED_24}",
        "\n".join(f"{n}. {word}" for n, word in enumerate(SEED_12.split(), 1)),
        f"backup words {SEED_12.replace(' ', ', ')} ok",
        SEED_12.title(),
    ],
    ids=["twelve", "twenty_four", "numbered_list", "commas", "capitalised"],
)
@NOT_YET
def test_a_seed_phrase_is_hidden(text: str) -> None:
    out = sanitize_value(text)
    assert "[REDACTED:seed_phrase]" in out
    words = set(SEED_12.split()) | set(SEED_24.split())
    left = [w for w in out.lower().replace(",", " ").replace(".", " ").split() if w in words]
    assert len(left) <= 1, out
    assert sanitize_value(out) == out


@pytest.mark.parametrize(
    "text",
    [
        " ".join(SEED_12.split()[:11]),
        "abandon ability able about above: the first words of the list",
        "I would like to travel abroad, maybe visit the ocean and enjoy a quiet holiday",
        "please remember to buy milk, bread, cheese, apple, orange, and some coffee today",
        "the team agreed that the cloud budget should cover every project this year",
    ],
)
def test_word_lists_that_are_no_seed_are_left_alone(text: str) -> None:
    assert sanitize_value(text) == text


@NOT_YET
def test_redact_secrets_reports_the_new_kinds() -> None:
    kinds = redaction_kinds(f"4111 1111 1111 1111 and {SEED_12}")
    assert sorted(kinds) == ["payment_card", "seed_phrase"]
    assert redact_secrets("nothing here") == "nothing here"
