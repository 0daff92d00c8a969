"""Issue 26: normalized matching, password forms, false positives, rule data from gitleaks."""

from __future__ import annotations

import importlib.resources
import random
import string

import pytest
import regex

from bot.vocabulary.redaction import normalize, provider_rules, rule_data
from bot.vocabulary.sanitize import sanitize_value

B62 = string.ascii_letters + string.digits


def draw(alphabet: str, length: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(length))


SECRET = "Tr0ub4dor" + draw(B62, 6)  # a chosen password, made at run time
KEY = "sk-proj-" + draw(B62, 48)

# ------------------------------------------------------------------ normalized view


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Cyrillic `ѕ` and `к`, fullwidth `ｓｋ－`: the key reads the same to a person.
        (f"key \u0455k{KEY[2:]} ok", "key [REDACTED:openai_key] ok"),
        (f"key \uff53\uff4b\uff0d{KEY[3:]} ok", "key [REDACTED:openai_key] ok"),
        (f"pass\u200bword: {SECRET}", "pass\u200bword: [REDACTED:credential]"),
        ("\uff1cprivate\uff1ehidden\uff1c/private\uff1e shown", "[REDACTED:private] shown"),
        ('<private reason="tax">hidden</private> shown', "[REDACTED:private] shown"),
        ("<PRIVATE class='x'>a\nb</private>", "[REDACTED:private]"),
    ],
    ids=["cyrillic", "fullwidth", "zero_width_key_word", "fullwidth_tag", "attributes", "attr2"],
)
def test_disguised_secrets_are_redacted(text: str, expected: str) -> None:
    assert sanitize_value(text) == strip_zero_width(expected)


def strip_zero_width(text: str) -> str:
    return text.replace("\u200b", "")  # strip_control_chars removes it before redaction


def test_the_original_spelling_stays_wherever_nothing_was_redacted() -> None:
    text = f"Caf\u00e9 \uff21\uff22\uff23 na\u00efve \u0455k{KEY[2:]} \u00fcber \U0001f600 fin"
    out = sanitize_value(text)
    kept = "Caf\u00e9 \uff21\uff22\uff23 na\u00efve "
    assert out == kept + "[REDACTED:openai_key] \u00fcber \U0001f600 fin"
    assert sanitize_value(out) == out


def test_a_text_without_secret_is_returned_as_written() -> None:
    text = "\uff21\uff22\uff23 \u0455\u0435\u0441ret santa, \u00e9t\u00e9 \U0001f600"
    assert sanitize_value(text) == text


def test_ascii_text_needs_no_view() -> None:
    assert normalize.view("plain ascii text") is None
    assert normalize.fold("plain") == "plain"


def test_the_view_folds_nfkc_look_alikes_and_invisibles() -> None:
    assert normalize.fold("\uff53\uff4b\uff0d x") == "sk- x"
    assert normalize.fold("\u0455\u043a") == "sk"
    assert normalize.fold("a\u200b\u00adb") == "ab"
    assert normalize.fold("caf\u00e9") == "caf\u00e9"  # accents are no look-alikes


def test_view_positions_map_back_to_the_original() -> None:
    folded = normalize.view("a\u200bb\uff43d")
    assert folded is not None
    assert folded.text == "abcd"
    assert [folded.origin(i) for i in range(4)] == [0, 2, 3, 4]


# ------------------------------------------------------------------ password forms


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            f"https://host/login?user=bob&pass={SECRET}&next=1",
            "https://host/login?user=bob&pass=[REDACTED:credential]&next=1",
        ),
        (
            f"docker login -u bob -p {SECRET} registry.example.com",
            "docker login -u bob -p [REDACTED:credential] registry.example.com",
        ),
        (
            f"curl -u admin:{SECRET} https://api.example.com",
            "curl -u admin:[REDACTED:credential] https://api.example.com",
        ),
        (f"psql --password {SECRET} -h db", "psql --password [REDACTED:credential] -h db"),
        (f"wifi pass: {SECRET}", "wifi pass: [REDACTED:credential]"),
        (f"root password -> {SECRET}", "root password -> [REDACTED:credential]"),
        (f"Password \u2014 {SECRET}", "Password \u2014 [REDACTED:credential]"),
        (f"password - {SECRET}", "password - [REDACTED:credential]"),
        (f"creds: admin:{SECRET}", "creds: admin:[REDACTED:credential]"),
        (f"apikey {draw('0123456789abcdef', 32)}", "apikey [REDACTED:credential]"),
        (f"pw {SECRET}", "pw [REDACTED:credential]"),
        ("passcode 482913", "passcode [REDACTED:credential]"),
        (f"mysql -u root -p{SECRET} shop", "mysql -u root -p[REDACTED:credential] shop"),
        (f"sshpass -p {SECRET} ssh host", "sshpass -p [REDACTED:credential] ssh host"),
    ],
    ids=[
        "url_pass",
        "docker_login",
        "curl_user",
        "psql_password",
        "wifi_pass",
        "arrow",
        "em_dash",
        "spaced_hyphen",
        "creds_pair",
        "apikey_no_separator",
        "pw_space",
        "passcode_space",
        "mysql_glued",
        "sshpass",
    ],
)
def test_password_forms_people_paste_are_redacted(text: str, expected: str) -> None:
    assert sanitize_value(text) == expected


def test_an_aws_secret_two_lines_from_its_key_id_is_redacted() -> None:
    key_id = "AKIA" + draw(string.ascii_uppercase + string.digits, 16)
    secret = draw(B62, 37) + "a1Z"
    out = sanitize_value(f"keys: {key_id}\nand the other one\n{secret}")
    assert secret not in out and "[REDACTED:aws_secret_key]" in out


# ------------------------------------------------------------------ false positives


@pytest.mark.parametrize(
    "text",
    [
        "Press key: Ctrl+Shift+P",
        "Shortcut key: Alt+F4",
        "pin: 2024 roadmap",
        "```python\nheaders = {'Authorization': f'Bearer {token}'}\n```",
        "Authorization: Bearer ${API_TOKEN}",
        "password: ${DB_PASSWORD}",
        "curl -u $USER:$PASS https://example.com",
        "boarding pass: 12A",
        "pass the salt please",
        "primary key 12345678901234567890 is fine",
        "password - reset it on Monday please",
        "Password \u2014 the one on the fridge",
        "wifi password -> same as last year",
        "use sk-learn for that",
        "\\frac{a}{b} and {{ user.name }} and a{2,3} and \\d{4}",
    ],
)
def test_harmless_lines_are_left_alone(text: str) -> None:
    assert sanitize_value(text) == text


# ------------------------------------------------------------------ rule data


def test_every_shipped_rule_compiles_with_a_marker_kind_and_keywords() -> None:
    rules = rule_data.load_rules()
    assert len(rules) >= 100
    for rule in rules:
        assert regex.fullmatch(r"[a-z_]+", rule.kind), rule.id
        assert rule.keywords, rule.id
        assert all(word == word.lower() for word in rule.keywords)


def test_local_rules_replace_gitleaks_rules_of_the_same_id() -> None:
    vault = [rule for rule in rule_data.load_rules() if rule.id == "vault-service-token"]
    assert len(vault) == 1 and vault[0].keywords == ("hvs.",)


def test_the_rule_files_ship_with_the_package_and_name_their_source() -> None:
    rules = importlib.resources.files("bot.vocabulary.redaction") / "rules"
    header = (rules / "gitleaks.toml").read_text("utf-8")[:600]
    assert "github.com/gitleaks/gitleaks" in header
    assert regex.search(r"commit [0-9a-f]{40}", header)
    assert "MIT" in header
    assert "MIT License" in (rules / "LICENSE-gitleaks").read_text("utf-8")
    assert (rules / "local.toml").is_file() and (rules / "confusables.txt").is_file()


@pytest.mark.parametrize(
    ("re2", "python"),
    [
        (r"dp\.pt\.(?i)[a-z0-9]{43}", r"dp\.pt\.(?i:[a-z0-9]{43})"),
        (r"\b(p8e-(?i)[a-z0-9]{32})(?:x|$)", r"\b(p8e-(?i:[a-z0-9]{32}))(?:x|$)"),
        (r"(?i)\bab(?:c|\z)", r"(?i)\bab(?:c|\Z)"),
        (r"[(?i)]x", r"[(?i)]x"),  # inside a class it is no flag group
        (r"a(?-i:B)c", r"a(?-i:B)c"),
    ],
)
def test_re2_patterns_are_translated_for_python(re2: str, python: str) -> None:
    assert rule_data.translate_re2(re2) == python
    regex.compile(python)


def test_gitleaks_terminators_accept_any_non_token_character() -> None:
    pattern = regex.compile(
        rule_data.loosen_terminator(r"""\b(ab_[0-9]{4})(?:[\x60'"\s;]|\\[nr]|$)""")
    )
    assert pattern.search("x=ab_1234&y").group(1) == "ab_1234"
    assert pattern.search("ab_12345") is None


def test_the_keyword_index_selects_rules_only_for_their_keywords() -> None:
    assert provider_rules.rules_for(set()) == []
    chosen = provider_rules.rules_for({"dop_v1_"})
    assert [provider_rules.RULES[n].id for n in chosen] == ["digitalocean-pat"]


def test_entropy_is_computed_in_bits_per_character() -> None:
    assert provider_rules.shannon_entropy("aaaa") == 0.0
    assert provider_rules.shannon_entropy("abcd") == 2.0


@pytest.mark.parametrize(
    "text",
    [
        "my \u017fecret is Zx81kQ02pLm7Yt5R",
        "my P\u0130N is 4821",
        "api \u017fecret Zx81kQ02pLm7Yt5Rq9",
    ],
    ids=["long_s_stated", "dotted_i_pin", "long_s_spaced"],
)
def test_passes_run_next_to_key_words_the_engine_folds_differently(text: str) -> None:
    # The anchored passes find key words in `str.lower()`; these two letters fold otherwise.
    out = sanitize_value(text)
    assert "Zx81kQ02pLm7Yt5R" not in out and "4821" not in out
