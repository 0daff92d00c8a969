"""Hardening item 5: URL passwords with reserved characters are hidden; the lines
the new families must leave alone (label words in prose, Luhn-failing numbers, word
lists that are no seed) stay unchanged."""

from __future__ import annotations

import random
import string

import pytest
from mnemonic import Mnemonic

from bot.vocabulary.redaction import redaction_kinds
from bot.vocabulary.sanitize import sanitize_value

B62 = string.ascii_letters + string.digits


def draw(alphabet: str, length: int, seed: int = 11) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(length))


SECRET = "s3cretV4lue"
GITHUB = "ghp_" + draw(B62, 36)
CRED = "[REDACTED:credential]"


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


def test_a_token_in_a_spoiler_keeps_the_spoiler_bars() -> None:
    assert hidden(f"||{GITHUB}||", GITHUB) == "||[REDACTED:github_token]||"


# ------------------------------------------------------------------ payment cards


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
        " ".join(SEED_12.split()[:11]),
        "abandon ability able about above: the first words of the list",
        "I would like to travel abroad, maybe visit the ocean and enjoy a quiet holiday",
        "please remember to buy milk, bread, cheese, apple, orange, and some coffee today",
        "the team agreed that the cloud budget should cover every project this year",
    ],
)
def test_word_lists_that_are_no_seed_are_left_alone(text: str) -> None:
    assert sanitize_value(text) == text
