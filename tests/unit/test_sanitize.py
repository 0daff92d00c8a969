"""Memory value sanitizing: control characters, redaction, placeholders, truncation."""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.vocabulary.redaction import (
    context_rules,
    engine,
    keywords,
    provider_rules,
    redact_leaves,
    redact_secrets,
    redaction_kinds,
    token_rules,
)
from bot.vocabulary.sanitize import (
    MAX_VALUE_CHARS,
    PROMPT_PLACEHOLDERS,
    sanitize_value,
    strip_control_chars,
    strip_unknown_placeholders,
    truncate_graphemes,
)
from tests.helpers.fuzz import memory_value_problems

# Characters that must never survive sanitizing (\t and \n are allowed).
FORBIDDEN = regex.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufeff\u200b\u2060\u202a-\u202e\u2066-\u2069"
    r"\ufdd0-\ufdef\ufffe\uffff]"
)

FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"  # 7 code points
FLAG_JP = "\U0001f1ef\U0001f1f5"
SCOTLAND = "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f"
THUMBS_MEDIUM = "\U0001f44d\U0001f3fd"
E_ACUTE = "e\u0301"

OPENAI = "sk-abcdefghij1234567890KLMNOP"
OPENAI_LEGACY = "sk-" + "T3BlbkFJ" + "q7Xz2Lm9Pw4Rt8Vb1Nc6Kd3Hy5Gs0Ja7Qe2Wf9Uo4Ip1Za"
OPENAI_PROJECT = "sk-proj-x9Kq2_Lm7ZpR4tV-b1Nc8Kd5Wg0Hy3JsA6fQe" + "T3BlbkFJ" + "u2Io5Pa8Sd1Fg4Hj"
GITHUB = "ghp_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5"
DISCORD = "MTA4NzY1NDMyMTA5ODc2NTQzMg.GhJkLm.abcdefghijklmnopqrstuvwxyz0123456789AB"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
WEBHOOK_TOKEN = "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-AbCdEfGhIjKlMnOpQrStUvWxYz012345"
AWS_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
PEM_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"
KEYCAP_ONE = "1\ufe0f\u20e3"
FAMILY_WWG = "\U0001f469\u200d\U0001f469\u200d\U0001f467"


# --------------------------------------------------------------------------------------
# Redaction: every kind is caught
# --------------------------------------------------------------------------------------

POSITIVES = [
    # (id, text, secret that must disappear, kind)
    ("openai", f"my key is {OPENAI} please", OPENAI, "openai_key"),
    ("openai_project", "sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34", "Ab12Cd34Ef56Gh78", "openai_key"),
    ("openai_sentence_end", f"Use {OPENAI}.", OPENAI, "openai_key"),
    ("openai_legacy_48", f"OPENAI_API_KEY {OPENAI_LEGACY}", OPENAI_LEGACY, "openai_key"),
    ("openai_project_long", f"key {OPENAI_PROJECT} ok", "x9Kq2_Lm7ZpR4tV", "openai_key"),
    ("openai_svcacct", "sk-svcacct-Qw8Er2Ty6Ui0Op4As8Df2Gh6Jk", "Qw8Er2Ty6Ui0Op4", "openai_key"),
    # Lower-case hex (no upper case): random because it keeps switching letters/digits.
    ("sk_hex", "sk-3f9a0b7c1d2e4f5a6b7c8d9e0f1a2b3c", "3f9a0b7c1d2e4f5a", "openai_key"),
    ("openai_after_slug", "sk-notes-" + OPENAI[3:], OPENAI[3:], "openai_key"),
    ("anthropic", "sk-ant-api03-AbCdEf123456_ghIJkl-7890mnopQRst", "AbCdEf123456", "anthropic_key"),
    ("github_ghp", f"token {GITHUB} here", GITHUB, "github_token"),
    ("github_gho", "gho_" + "x" * 36, "gho_" + "x" * 36, "github_token"),
    ("github_ghu", "ghu_" + "Y1" * 18, "ghu_" + "Y1" * 18, "github_token"),
    ("github_ghs", "(ghs_" + "a2" * 18 + ")", "ghs_" + "a2" * 18, "github_token"),
    ("github_ghr", "ghr_" + "Zz9" * 12, "ghr_" + "Zz9" * 12, "github_token"),
    (
        "github_pat",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGH",
        "11ABCDEFG0123456789",
        "github_token",
    ),
    ("gitlab", "glpat-xYz123AbC456dEf789gH", "xYz123AbC456dEf789gH", "gitlab_token"),
    ("slack_xoxb", "xoxb-123456789012-1234567890123-AbCdEfGh", "1234567890123", "slack_token"),
    ("slack_xoxp", "xoxp-123456789012-abcdefghij", "abcdefghij", "slack_token"),
    ("slack_xoxa", "xoxa-2-123456789012-abcdef", "123456789012", "slack_token"),
    ("slack_xoxr", "xoxr-123456789012-abcdef", "123456789012", "slack_token"),
    ("slack_xapp", "xapp-1-A0123456789-1234567890123-abcdef01", "A0123456789", "slack_token"),
    ("slack_xoxe_refresh", "xoxe.xoxp-1-Mi0yLTE3NjgwNjQ0ODQyMDgtMTc2", "Mi0yLTE3", "slack_token"),
    ("slack_xoxe", "xoxe-1-My0xLTE3NjgwNjQ0ODQyMDgt", "My0xLTE3", "slack_token"),
    (
        "slack_webhook",
        "post to https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX.",
        "XXXXXXXXXXXXXXXXXXXXXXXX",
        "slack_webhook",
    ),
    (
        "discord_webhook",
        f"https://discord.com/api/webhooks/123456789012345678/{WEBHOOK_TOKEN}",
        WEBHOOK_TOKEN,
        "discord_webhook",
    ),
    (
        "discord_webhook_canary_app",
        f"<https://canary.discordapp.com/api/v10/webhooks/1234567890/{WEBHOOK_TOKEN}?wait=1>",
        WEBHOOK_TOKEN,
        "discord_webhook",
    ),
    ("gitlab_runner", "glrt-AbCdEfGhIjKlMnOpQrSt", "AbCdEfGhIjKlMnOpQrSt", "gitlab_token"),
    ("gitlab_deploy", "gldt-AbCdEfGhIjKlMnOpQrSt", "AbCdEfGhIjKlMnOpQrSt", "gitlab_token"),
    (
        "gitlab_trigger",
        "glptt-0123456789abcdef0123456789abcdef01234567",
        "0123456789abcdef",
        "gitlab_token",
    ),
    ("gitlab_feed", "glft-AbCdEfGhIjKlMnOpQrSt", "AbCdEfGhIjKlMnOpQrSt", "gitlab_token"),
    ("gitlab_ci_build", "glcbt-64_AbCdEfGhIjKlMnOpQrSt", "AbCdEfGhIjKlMnOpQrSt", "gitlab_token"),
    ("gitlab_service", "glsoat-AbCdEfGhIjKlMnOpQrSt", "AbCdEfGhIjKlMnOpQrSt", "gitlab_token"),
    (
        "google_oauth",
        "ya29.a0AfH6SMBx1234567890abcdefghijklmnopqrstuvwxyz",
        "a0AfH6SMBx1234567890",
        "google_oauth_token",
    ),
    (
        "google_client_secret",
        "GOCSPX-AbCdEfGhIjKlMnOpQrStUvWxYz01",
        "AbCdEfGhIjKlMnOpQrStUvWxYz01",
        "google_client_secret",
    ),
    ("stripe_live", "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "4eC39HqLyjWD", "stripe_key"),
    ("stripe_test", "sk_test_4eC39HqLyjWDarjtT1zdp7dc", "4eC39HqLyjWD", "stripe_key"),
    ("stripe_restricted", "rk_live_4eC39HqLyjWDarjtT1zdp7dc", "4eC39HqLyjWD", "stripe_key"),
    ("stripe_webhook", "whsec_4eC39HqLyjWDarjtT1zdp7dc", "4eC39HqLyjWD", "stripe_key"),
    ("aws_akia", "id AKIAIOSFODNN7EXAMPLE ok", "AKIAIOSFODNN7EXAMPLE", "aws_access_key"),
    ("aws_asia", "ASIAY34FZKBOKMUTVV7A", "ASIAY34FZKBOKMUTVV7A", "aws_access_key"),
    (
        "aws_secret",
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI",
        "aws_secret_key",
    ),
    (
        "aws_secret_env",
        "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI",
        "aws_secret_key",
    ),
    # An AWS secret access key has no prefix; next to its key id it is recognised.
    (
        "aws_configure",
        f"AWS Access Key ID [None]: {AWS_ID}\nAWS Secret Access Key [None]: {AWS_SECRET}",
        AWS_SECRET,
        "aws_secret_key",
    ),
    (
        "aws_console_csv",
        f"Access key ID,Secret access key\n{AWS_ID},{AWS_SECRET}",
        AWS_SECRET,
        "aws_secret_key",
    ),
    ("aws_pair", f"aws keys: {AWS_ID} / {AWS_SECRET}.", AWS_SECRET, "aws_secret_key"),
    ("aws_secret_line_before", f"{AWS_SECRET}\n{AWS_ID}", AWS_SECRET, "aws_secret_key"),
    (
        "aws_secret_label_note",
        f"AWS Secret Access Key [None]: {AWS_SECRET}",
        AWS_SECRET,
        "aws_secret_key",
    ),
    ("google", "AIzaSyD-1234567890abcdefghijklmnopqrstu", "SyD-1234567890", "google_api_key"),
    ("npm", "npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "AbCdEfGhIjKl", "npm_token"),
    (
        "huggingface",
        "HF: hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
        "AbCdEfGhIjKl",
        "huggingface_token",
    ),
    ("groq", "gsk_" + "Ab1Cd2Ef3Gh4" * 5, "Ab1Cd2Ef3Gh4", "groq_key"),
    ("xai", "key xai-" + "Zz9Yy8Xx7Ww6" * 7, "Zz9Yy8Xx7Ww6", "xai_key"),
    # git takes a token alone as the URL's user.
    (
        "url_token_user_hex",
        "git clone https://0123456789abcdef0123456789abcdef01234567@github.com/o/r",
        "0123456789abcdef",
        "url_credentials",
    ),
    (
        "url_token_user",
        "remote: https://Zx81kQ02pLm7Yt5RaBcD@gitlab.example.com/o/r.git",
        "Zx81kQ02pLm7",
        "url_credentials",
    ),
    # An assignment holds its value whatever follows it on the line.
    (
        "env_token_then_command",
        "export GITHUB_TOKEN=mytokenvalue && ./deploy.sh",
        "mytokenvalue",
        "credential",
    ),
    ("env_secret_then_command", "SECRET=correcthorse ./run.sh", "correcthorse", "credential"),
    (
        "set_token_then_prose",
        "set API_TOKEN=supersecretvalue then restart",
        "supersecretvalue",
        "credential",
    ),
    ("jwt", f"cookie {JWT}", JWT, "jwt"),
    ("jwt_payload_part", f"x={JWT}", "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c", "jwt"),
    ("discord", f"bot token {DISCORD}", DISCORD, "discord_token"),
    ("discord_seg", f"'{DISCORD}'", "GhJkLm", "discord_token"),
    # The first part is the bot's user id in base64: 17 to 20 digits.
    (
        "discord_17_digit_id",
        "MTIzNDU2Nzg5MDEyMzQ1Njc.GxYz12.AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
        "MTIzNDU2Nzg5MDEyMzQ1Njc",
        "discord_token",
    ),
    (
        "discord_20_digit_id",
        "MTIzNDU2Nzg5MDEyMzQ1Njc4OTA.GxYz12.AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
        "MTIzNDU2Nzg5MDEyMzQ1Njc4OTA",
        "discord_token",
    ),
    (
        "discord_old_token",
        "NzE2MDk0MzI4NjM3NDc0ODE2.XsMW5A.7Ylf1bd6nrXoW8U1yIOoLuKkLVw",
        "7Ylf1bd6nrXoW8U1yIOoLuKkLVw",
        "discord_token",
    ),
    ("private", "before <private>my diary entry</private> after", "my diary entry", "private"),
    ("private_multiline", "<PRIVATE>\nline one\nline two\n</Private> ok", "line one", "private"),
    ("private_unclosed", "note <private>everything after this\nand more", "and more", "private"),
    ("private_spaced", "a < private >hidden< / private > b", "hidden", "private"),
    (
        "private_nested",
        "<private>diary <private>note</private> SECRET PART</private> after",
        "SECRET PART",
        "private",
    ),
    ("private_nested_unclosed", "<private>a <private>b</private> c tail", "c tail", "private"),
    (
        "pem",
        f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----\nafter",
        PEM_BODY,
        "private_key",
    ),
    ("pem_no_end", f"key:\n-----BEGIN PRIVATE KEY-----\n{PEM_BODY}", PEM_BODY, "private_key"),
    (
        "pem_lowercase",
        f"-----begin private key-----\n{PEM_BODY}\n-----end private key-----\nafter",
        PEM_BODY,
        "private_key",
    ),
    ("pem_lower_no_end", f"-----begin rsa private key-----\n{PEM_BODY}", PEM_BODY, "private_key"),
    ("pem_mixed_case", f"-----Begin Ec Private Key-----\n{PEM_BODY}", PEM_BODY, "private_key"),
    (
        "pem_openssh",
        f"-----BEGIN OPENSSH PRIVATE KEY-----\n{PEM_BODY}\n-----END OPENSSH PRIVATE KEY-----",
        PEM_BODY,
        "private_key",
    ),
    (
        "url_credentials",
        "clone https://alice:s3cr3tpass@example.com/repo.git",
        "alice:s3cr3tpass",
        "url_credentials",
    ),
    (
        "url_at_in_password",
        "postgres://bob:p@ss@db.example.com:5432/app",
        "p@ss",
        "url_credentials",
    ),
    ("url_empty_user", "redis://:hunter2@cache:6379", "hunter2", "url_credentials"),
    ("password_equals", "password=hunter2", "hunter2", "credential"),
    ("password_colon", "password: hunter2", "hunter2", "credential"),
    ("password_upper", "PASSWORD = hunter2", "hunter2", "credential"),
    ("password_sentence", "my password: hunter2.", "hunter2", "credential"),
    ("passwd", "passwd=letmein", "letmein", "credential"),
    ("pwd", "pwd: qwerty123", "qwerty123", "credential"),
    # A passphrase has spaces: a password's value runs to the end of its line or sentence.
    (
        "passphrase_words",
        "password: correct horse battery staple",
        "horse battery staple",
        "credential",
    ),
    ("passphrase_key", "passphrase = open the pod bay doors", "pod bay doors", "credential"),
    ("password_words_equals", "wifi password=two words here", "two words here", "credential"),
    ("password_markdown", "**Password:** hunter2 hunter3", "hunter3", "credential"),
    # Markdown emphasis or code around the label (the model writes its notes in Markdown).
    ("password_bold_label", "**Password**: hunter2", "hunter2", "credential"),
    ("password_bold_list_item", "- **Wifi password**: Tr0ub4dor&3", "Tr0ub4dor", "credential"),
    ("password_underscore_bold", "__password__: x", ": x", "credential"),
    ("password_code_label", "`password`: hunter2", "hunter2", "credential"),
    ("api_key_bold_label", "**API key**: Zx81kQ02pLm7Yt5R", "Zx81kQ02pLm7Yt5R", "credential"),
    ("token_italic_label", "*token*: abc123def456", "abc123def456", "credential"),
    ("password_bold_stated", "the **password** is hunter2", "hunter2", "credential"),
    ("pin_bold_label", "**PIN**: 4821", "4821", "credential"),
    (
        "authorization_bold_label",
        "**Authorization**: Bearer abc123",
        "abc123",
        "authorization",
    ),
    # Deliberate: a password field's value is redacted even when it looks harmless.
    ("password_ask_bob", "password: ask Bob", "ask Bob", "credential"),
    ("password_query", "https://x.test/login?password=hunter2&user=bob", "hunter2", "credential"),
    ("secret", "secret: opensesame", "opensesame", "credential"),
    ("token", "token=abcdef", "abcdef", "credential"),
    ("secret_number", "secret: 1234", "1234", "credential"),
    ("token_sentence", "my token: abc123xyz, keep it safe", "abc123xyz", "credential"),
    ("secret_mid_sentence", "Secret: Zq9vXw7Lm2 do not share", "Zq9vXw7Lm2", "credential"),
    ("key", "key=value123", "value123", "credential"),
    ("key_token_shaped", "the key = a1b2c3d4 for the door", "a1b2c3d4", "credential"),
    ("key_symbols", "Key: Hunter#Pass!x", "Hunter#Pass", "credential"),
    ("key_long_number", "key: 12345678901234567890", "12345678901234567890", "credential"),
    ("api_key_prose_label", "API key: Qw3rTy9Uiop42 (ask Bob)", "Qw3rTy9Uiop42", "credential"),
    ("api_key_lone_word", "API key: opensesame", "opensesame", "credential"),
    ("secret_key_env", "SECRET_KEY=django-insecure-abc", "django-insecure-abc", "credential"),
    ("api_key", "api_key=abc123def", "abc123def", "credential"),
    ("apikey", "apikey: xyz789", "xyz789", "credential"),
    ("client_secret", "client_secret=shh123", "shh123", "credential"),
    ("access_token", "access_token: tok123", "tok123", "credential"),
    ("env_var", "DB_PASSWORD=hunter2", "hunter2", "credential"),
    ("cli_flag", "run --token=abc123 now", "abc123", "credential"),
    ("header_dash", "x-api-key: abc123", "abc123", "credential"),
    ("camel_case", "clientSecret: shhh", "shhh", "credential"),
    ("json_password", '{"password": "hunter2", "user": "bob"}', "hunter2", "credential"),
    (
        "json_password_spaces",
        '{"password": "correct horse battery", "user": "bob"}',
        "correct horse",
        "credential",
    ),
    ("json_api_key", '{"api_key": "abc", "n": 1}', "abc", "credential"),
    ("json_api_key_spaces", '{"api_key": "abc def"}', "abc def", "credential"),
    ("json_token_prose", '{"token": "ask Bob"}', "ask Bob", "credential"),
    ("json_bare_key_token", '{"key": "value123"}', "value123", "credential"),
    ("json_escaped_quote", r'{"password": "hun\"ter2"}', "ter2", "credential"),
    ("python_dict", "{'api_key': 'abc 123'}", "abc 123", "credential"),
    ("unclosed_quote", 'password = "correct horse battery', "horse", "credential"),
    ("query_string", "https://x.test/cb?token=abc123&x=1", "abc123", "credential"),
    (
        "authorization_bearer",
        "Authorization: Bearer abc.def-ghi",
        "abc.def-ghi",
        "authorization",
    ),
    ("authorization_basic", "Authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz", "authorization"),
    (
        "authorization_curl",
        "curl -H 'Authorization: Bearer abc123xyz' https://api.test",
        "abc123xyz",
        "authorization",
    ),
    ("bearer_digit", "send Bearer abcdef123456xyz with it", "abcdef123456xyz", "bearer"),
    ("bearer_long", "bearer abcdefghijklmnopqrstuvwxyz", "abcdefghijklmnopqrstuvwxyz", "bearer"),
    # The key word may end a key written as one word (libpq's PGPASSWORD and friends).
    ("pgpassword", "export PGPASSWORD=hunter2 && psql -h db", "hunter2", "credential"),
    ("mysqlpassword_lower", "mysqlpassword=hunter22", "hunter22", "credential"),
    ("adminpassword_colon", "ADMINPASSWORD: hunter22", "hunter22", "credential"),
    # `.env` files shorten it to PASS, as the last segment of the name.
    ("env_pass", "DB_PASS=hunter2", "hunter2", "credential"),
    ("env_pass_colon", "SMTP_PASS: hunter2", "hunter2", "credential"),
    ("env_pass_three_segments", "MYSQL_ROOT_PASS=hunter2", "hunter2", "credential"),
    ("env_pass_quoted", "db_pass = 'hunter2'", "hunter2", "credential"),
    ("githubtoken", "GITHUBTOKEN=abcdef123456", "abcdef123456", "credential"),
    ("csrftoken", "csrftoken=Zx81kQ02pLm7", "Zx81kQ02pLm7", "credential"),
    # Passwords stated in words, and the other password words.
    ("password_is", "My wifi password is Tr0ub4dor&3", "Tr0ub4dor&3", "credential"),
    ("password_is_word", "the password is swordfish", "swordfish", "credential"),
    ("password_was", "my old password was hunter2", "hunter2", "credential"),
    ("password_is_now", "The password is now hunter2", "hunter2", "credential"),
    ("password_is_colon", "password is: correct horse battery staple", "horse", "credential"),
    ("password_is_quoted", 'the password is "open sesame" ok', "sesame", "credential"),
    ("passcode_is", "my passcode is 4821", "4821", "credential"),
    ("passcode_colon", "Passcode: 4821", "4821", "credential"),
    ("passphrase_is", "my passphrase is purple monkey dishwasher", "monkey", "credential"),
    ("pwd_was", "the pwd was hunter2", "hunter2", "credential"),
    ("pw_colon", "pw: hunter2", "hunter2", "credential"),
    ("pw_is", "wifi pw is hunter2", "hunter2", "credential"),
    ("pin_is", "my PIN is 4821", "4821", "credential"),
    ("pin_code_colon", "pin code: 0000", "0000", "credential"),
    ("pin_equals", "SIM pin=1234", "1234", "credential"),
    ("pin_spaced", "my pin is 12 34.", "34", "credential"),
    ("pin_colon", "PIN: 4821", "4821", "credential"),
    ("pin_code_equals", "pin code=0000", "0000", "credential"),
    ("pin_eight_digits", "my pin is 12345678", "12345678", "credential"),
    # A plain word is what a password looks like, even one that names a password.
    (
        "password_is_password",
        "router login: admin / password: password",
        ": password",
        "credential",
    ),
    ("password_capitalised_word", "password: Password123", "Password123", "credential"),
    ("password_pascal_case", "password: MyPassword", "MyPassword", "credential"),
    ("attribute_key_literal", "x.password = hunter2", "hunter2", "credential"),
    # A key, token or secret stated in words, with a token-shaped value.
    ("api_key_is", "my API key is Zx81kQ02pLm7Yt5R.", "Zx81kQ02pLm7Yt5R", "credential"),
    ("bot_token_is", "the bot token is abc123def456, ok", "abc123def456", "credential"),
    ("secret_key_was", "her secret key was Zx81kQ02pLm7Yt5R", "Zx81kQ02pLm7Yt5R", "credential"),
    ("token_is_now", "the token is now Zx81kQ02pLm7", "Zx81kQ02pLm7", "credential"),
    # A short qualifier between the password word and its separator or "is".
    ("password_for", "WiFi password for guests: hunter2", "hunter2", "credential"),
    ("password_paren", "password (wifi): hunter2", "hunter2", "credential"),
    ("password_of_the", "Password of the router: admin123", "admin123", "credential"),
    ("password_to_is", "the password to the server is hunter2", "hunter2", "credential"),
    ("password_for_it_is_now", "the password for it is now hunter2", "hunter2", "credential"),
    # Prose is told by its first word; a value that looks like a secret is one.
    ("password_is_phrase", "my password is correct horse battery staple", "horse", "credential"),
    ("password_is_participle_digit", "the password is Changed123", "Changed123", "credential"),
    ("password_is_speed", "the wifi password is speed", "speed", "credential"),
]


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
        ("before <private>x</private> after", "before [REDACTED:private] after"),
        (
            "<private>a <private>b</private> c</private> d <private>e</private> f",
            "[REDACTED:private] d [REDACTED:private] f",
        ),
        ("https://alice:pw@example.com/a", "https://[REDACTED:url_credentials]@example.com/a"),
        ("password: hunter2.", "password: [REDACTED:credential]."),
        ("password: correct horse battery staple", "password: [REDACTED:credential]"),
        (
            "password: hunter2. Then we left.",
            "password: [REDACTED:credential]. Then we left.",
        ),
        ("pwd: a b c\nnext line", "pwd: [REDACTED:credential]\nnext line"),
        (
            "My wifi password is Tr0ub4dor&3. The router is blue.",
            "My wifi password is [REDACTED:credential]. The router is blue.",
        ),
        ("my PIN is 4821 and I bank online", "my PIN is [REDACTED:credential] and I bank online"),
        ("PIN: 4821, LED pin: 13", "PIN: [REDACTED:credential], LED pin: 13"),
        ("?password=x y&user=bob", "?password=[REDACTED:credential]&user=bob"),
        ("secret: opensesame\nnext", "secret: [REDACTED:credential]\nnext"),
        ('{"password": "x", "n": 1}', '{"password": "[REDACTED:credential]", "n": 1}'),
        ("Authorization: Bearer abc", "Authorization: Bearer [REDACTED:authorization]"),
        (f"({OPENAI}), ok", "([REDACTED:openai_key]), ok"),
        (
            "-----BEGIN EC PRIVATE KEY-----\nAB\n-----END EC PRIVATE KEY-----\nz",
            "[REDACTED:private_key]\nz",
        ),
    ],
    ids=[
        "private",
        "private_nested_then_another",
        "url",
        "assignment",
        "passphrase",
        "password_sentence_end",
        "password_line_end",
        "password_stated_sentence_end",
        "pin_digits_only",
        "pin_only_the_pin",
        "password_query_param",
        "secret_line_end",
        "json",
        "authorization",
        "token_punct",
        "pem",
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


# --------------------------------------------------------------------------------------
# Redaction: no false positives
# --------------------------------------------------------------------------------------

NEGATIVES = [
    ("slug", "task-management-system-for-teams"),
    ("slug_sk_inside", "risk-assessment-framework-for-large-teams"),
    ("slug_sk_start_no_digit", "sk-management-system-for-large-teams"),
    ("desk_lamp", "I bought a desk-lamp"),
    ("sk8_park", "meet at the sk-8 park"),
    ("sk_learn", "sk-learn is a library"),
    ("password_prose", "my password is strong"),
    ("password_reset", "The password reset worked"),
    ("passwords_plural", "passwords: many"),
    ("secret_ingredient", "the secret ingredient is love"),
    ("tokenizer", "tokenizer settings"),
    ("token_count", "token count: 500"),
    ("keyboard", "keyboard shortcuts"),
    ("key_points", "key points: none"),
    ("keys_plural", "The keys: a, b"),
    ("monkey", "monkey: banana"),
    ("turkey_caps", "TURKEY: roasted"),
    ("url_colon_path", "https://example.com/a:b"),
    ("url_port", "https://example.com:8080/path"),
    ("url_user_only", "ssh://git@github.com/org/repo.git"),
    ("scp_style", "git@github.com:org/repo.git"),
    ("dotted", "e.g. this.that.other"),
    ("version", "version 1.2.3"),
    ("snowflake", "user 123456789012345678 said hi"),
    ("mention", "<@123456789012345678> and <#98765432109876543>"),
    ("bearer_prose", "the bearer instrument"),
    ("bearer_bonds", "Bearer bonds are old"),
    ("akia_word", "AKIA is not a key"),
    ("eyj_word", "eyJ alone"),
    ("short_ghp", "ghp_short"),
    ("xoxo", "xoxo-gossip-girl"),
    ("npm_install", "npm_install"),
    ("url_plain_user", "clone https://bob@bitbucket.org/team/repo.git"),
    ("url_git_user", "ssh://git@github.com/o/r.git"),
    ("url_long_plain_user", "https://firstname.lastname@example.com/page"),
    ("token_variable_passed", "client = Client(token=token, retries=3)"),
    ("keyword_defaults", "def connect(host, token=None, secret=False): pass"),
    ("keyword_literal", "client = Client(secret=True, retries=3)"),
    ("shell_reference", "API_TOKEN=$API_TOKEN docker compose up"),
    ("shell_placeholder", "FOO_SECRET=<your-secret> then run it"),
    ("reference_ends_line", "export API_TOKEN=$API_TOKEN"),
    ("literal_ends_line", "secret: None"),
    ("lowercase_setting_prose", "set token=enabled in the config and restart"),
    ("hf_word", "the hf_model loader"),
    ("spaced_token_prose", "the token = thing we discussed yesterday"),
    ("webhook_docs", "see https://discord.com/api/webhooks docs"),
    ("slack_hooks_host", "hooks.slack.com/services is the host"),
    ("ya29_word", "the ya29 group"),
    ("stripe_word", "sk_live_events and rk_test_mode"),
    ("gitlab_word", "glpat-short and glrt-abc"),
    ("mission", "Mission.Control.Center"),
    # Dotted code identifiers have a Discord token's shape, but no user id in front.
    (
        "dotted_call",
        "call NotificationServiceHandler.handle.process_incoming_message_queue_items()",
    ),
    ("dotted_path", "OrderProcessingServiceImpl.submit.validateCustomerShippingAddress"),
    ("assignment_other", "a = b, x: y"),
    ("emoji", f"feeling \U0001f600 {FAMILY} {FLAG_JP}"),
    ("japanese", "日本語のテキスト: こんにちは"),
    ("placeholder", "{user_name} likes tea"),
    # Prose around key words: only a token-shaped value (or, for token/secret/qualified
    # keys, a lone last word) is a credential; a bare `key` needs a token-shaped value.
    ("key_happiness", "the key = happiness"),
    ("key_be_kind", "The key: be kind."),
    ("key_alice", "Key: Alice leads the launch"),
    ("musical_key", "Musical key: C major"),
    ("answer_key", "Answer key: B, C, A"),
    ("token_count_left", "token: 5 tokens left"),
    ("secret_butler", "Secret: the butler did it"),
    ("api_key_ask_bob", "API key: ask Bob for it"),
    ("sort_key", "sort_key=asc"),
    ("primary_key", "primary key = id"),
    ("key_year", "Key: 2024 was the year"),
    ("key_hyphenated", "The key: well-being matters"),
    ("key_possessive", "Key: Alice's idea"),
    ("json_bare_key", '{"key": "favorite color", "sort_key": "date"}'),
    ("secret_prose", "my secret is that I like cats"),
    # Words joined by hyphens are not an OpenAI key, even with digits in them.
    ("sk_planning_slug", "sk-2024-annual-planning-notes-v2"),
    ("sk_word_with_year", "sk-roadmap2024-for-the-whole-team"),
    ("sk_long_lower_word", "sk-internationalization2024-plan"),
    ("hex_colour", "colour #ff8800 and #A1B2C3"),
    ("sha256", "sha 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"),
    ("uuid", "id 123e4567-e89b-12d3-a456-426614174000"),
    ("long_word", "supercalifragilisticexpialidocious antidisestablishmentarianism"),
    ("url_plain", "see https://example.com/docs/page?id=2&sort=asc#top"),
    ("keycap_emoji", f"press {KEYCAP_ONE} then {FAMILY_WWG}"),
    # Longer than an AWS key id (exactly 20): an all-caps word, not a key.
    ("asia_word", "Registration for ASIAPACIFICCONFERENCE2024 opens Monday"),
    # `key` and `pwd` must start a segment: these are no credentials.
    ("monkey", "monkey: abcdef123456"),
    ("oldpwd", "OLDPWD=/home/alice/projects"),
    ("passwords_plural", "passwords: must be long"),
    # A password word followed by "is" and prose about the password, not the password.
    ("password_on_fridge", "The wifi password is on the fridge"),
    ("password_in_drawer", "the password is in the drawer"),
    ("password_same", "my password is the same as before"),
    ("password_too_short", "My password is too short"),
    ("password_now_on", "the password is now on the fridge"),
    ("password_required", "The password is required for login"),
    ("password_was_changed", "my password was changed yesterday"),
    ("password_length", "my password is 12 characters long"),
    ("password_nowhere", "the password is nowhere to be found"),
    ("passwords_are", "passwords are hashed with argon2"),
    ("password_reset_is", "The password reset is broken"),
    ("passcode_is_six_digits", "the passcode is 6 digits"),
    # ... or a past participle: what happened to the password, or where it is.
    ("password_printed", "the wifi password is printed on the back of the router"),
    ("password_located", "the password is located in the vault"),
    ("pw_sent", "pw was sent to you by email"),
    ("password_accepted", "the password was accepted"),
    ("password_now_printed", "the password is now printed on the receipt"),
    ("password_written", "my password is written in my notebook"),
    ("pin_message", "pin: this message"),
    ("pin_this", "Pin this message: 42"),
    ("pin_in_map", "the pin is in the map at 4 o'clock"),
    ("pin_word", "the pin is bent"),
    ("spin", "the spin is 42 rpm"),
    ("pinned", "pinned: 3 messages"),
    # A PIN is 4 to 8 digits as whole words: not a hardware pin, a length or a version.
    ("pin_led", "LED pin: 13"),
    ("pin_gpio", "GPIO pin is 17"),
    ("pin_length", "the pin is 2 inches long"),
    ("pin_length_mm", "the pin is 2500 mm long"),
    ("pin_version", "requests pin: 2.31.0"),
    ("pin_nine_digits", "pin: 123456789"),
    ("pin_time", "the pin is 12:30 on the map"),
    ("pwned", "pwned is 1 word"),
    # Code that uses a secret rather than holding one (a literal would be quoted).
    ("code_comparison", "if password == confirm_password: ok"),
    ("code_not_equal", "if token != expected_token: raise"),
    ("code_attribute_assignment", "self.password = password"),
    ("code_annotation", "def check(password: str) -> bool:"),
    ("code_subscript", "api_key = os.environ['API_KEY']"),
    ("code_call", "password = getpass.getpass()"),
    ("code_settings", "token = settings.API_TOKEN"),
    ("code_variable", "password = new_password"),
    ("code_camel_variable", "apiKey: apiKey,"),
    # Key words stated in words with a value that is no token.
    ("key_is_patience", "the key is patience"),
    ("key_is_year", "The key is 2024"),
    ("token_is_expired", "the token is now expired"),
    ("token_is_valid", "Token is valid"),
    ("secret_is_out", "the secret is out"),
    # A qualified password word followed by prose is still prose.
    ("password_for_on_fridge", "the password for the wifi is on the fridge"),
    ("password_for_changed", "The password for this account was changed yesterday"),
    ("password_for_printed", "password for guests is printed on the card"),
    ("password_many_words", "reset the password for all users in the org today: done"),
    # `pass` is a password word only as the last segment of an identifier.
    ("boarding_pass", "boarding pass: 12A"),
    ("bypass", "bypass: enabled"),
    ("pass_not_last", "DB_PASS_FILE=/run/secrets/db"),
]


@pytest.mark.parametrize("text", [n[1] for n in NEGATIVES], ids=[n[0] for n in NEGATIVES])
def test_ordinary_text_is_not_redacted(text: str) -> None:
    assert redact_secrets(text) == text
    assert redaction_kinds(text) == []
    assert sanitize_value(text) == text


# --------------------------------------------------------------------------------------
# Placeholders
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{user_name} likes tea", "{user_name} likes tea"),
        ("{date} at {time}", "{date} at {time}"),
        ("{evil}", "evil"),
        ("{{evil}}", "evil"),
        ("{{{evil}}}", "evil"),
        ("{0}", "{0}"),  # a number: a regex quantifier, no placeholder
        ("{USER_NAME}", "USER_NAME"),
        ("{user_name2}", "user_name2"),
        # Decision: an allowed name keeps exactly one pair of braces (the form the prompt fills).
        ("{{user_name}}", "{user_name}"),
        ("{{{bot_name}}}", "{bot_name}"),
        ("{user_name}{evil}", "{user_name}evil"),
        # Nesting would create a new placeholder; all non-allowed braces go instead.
        ("{a{b}c}", "abc"),
        ("{a{b}{user_name}c}", "{ab{user_name}c}"),
        ("{a{user_name}c}", "{a{user_name}c}"),  # no unknown placeholder in there
        # Replacement fields with access, conversion or format spec are placeholders too.
        # Only a bare identifier is a placeholder: access, conversion or spec is not one.
        ("{x.y}", "{x.y}"),
        ("{x!r}", "{x!r}"),
        ("{x:>10}", "{x:>10}"),
        ("{0[0]}", "{0[0]}"),
        ("{a.b[0]!s:^8}", "{a.b[0]!s:^8}"),
        ("{d:%Y-%m-%d}", "{d:%Y-%m-%d}"),
        ("{!r} {:>10}", "{!r} {:>10}"),
        ("{{x.y}}", "{{x.y}}"),
        # Only an allowed name written plainly survives.
        ("{user_name!r}", "{user_name!r}"),
        ("{user_name.__class__}", "{user_name.__class__}"),
        ("{user_name:>10}", "{user_name:>10}"),
        # Jinja/Mustache style: double braces padded with spaces stay (SPEC §3).
        ("{{ x }}", "{{ x }}"),
        ("Hi {{ name }}!", "Hi {{ name }}!"),
        ("{{ user_name }}", "{{ user_name }}"),
        ("{{user_name }}", "{{user_name }}"),
        ("{{ x.y }}", "{{ x.y }}"),
        # LaTeX groups, regex quantifiers and code spans keep their braces.
        ("\\frac{a}{b} {c}", "\\frac{a}{b} c"),
        ("x^{n} a_{ij}", "x^{n} a_{ij}"),
        ("\\d{4} a{2,3}", "\\d{4} a{2,3}"),
        ("`{x}` {y}", "`{x}` y"),
        # Not placeholders (prose or code in braces): kept.
        ("{ x }", "{ x }"),
        ('{"a": 1}', '{"a": 1}'),
        ("{a: 1, b: 2}", "{a: 1, b: 2}"),
        ("function() { return 1; }", "function() { return 1; }"),
        ("if (x) { y(); }", "if (x) { y(); }"),
        ("{{ two words }}", "{{ two words }}"),
        ("{}", "{}"),
        ("{evil", "{evil"),
        ("evil}", "evil}"),
        ("no braces", "no braces"),
    ],
    ids=[
        "allowed",
        "allowed_two",
        "single",
        "double",
        "triple",
        "positional",
        "case_sensitive",
        "longer_name",
        "allowed_double",
        "allowed_triple",
        "mixed",
        "nested",
        "nested_allowed",
        "allowed_inside_braces",
        "attribute",
        "conversion",
        "format_spec",
        "index",
        "everything",
        "date_spec",
        "auto_numbered",
        "double_attribute",
        "allowed_conversion",
        "allowed_attribute",
        "allowed_format_spec",
        "jinja",
        "jinja_in_prose",
        "jinja_allowed",
        "jinja_allowed_trailing_space",
        "jinja_attribute",
        "latex",
        "latex_scripts",
        "regex_quantifiers",
        "code_span",
        "spaces",
        "json",
        "object_literal",
        "js_function",
        "js_block",
        "jinja_two_words",
        "empty",
        "unclosed",
        "unopened",
        "none",
    ],
)
def test_unknown_placeholders_lose_their_braces(text: str, expected: str) -> None:
    assert strip_unknown_placeholders(text) == expected
    assert strip_unknown_placeholders(expected) == expected


def test_the_allowed_set_can_be_overridden() -> None:
    assert "bot_name" in PROMPT_PLACEHOLDERS
    allowed = frozenset({"foo"})
    assert strip_unknown_placeholders("{foo} {user_name}", allowed) == "{foo} user_name"
    assert strip_unknown_placeholders("{foo} {x}", frozenset()) == "foo x"
    assert sanitize_value("{foo} {user_name}", allowed=allowed) == "{foo} user_name"


@pytest.mark.parametrize(
    ("text", "hidden"),
    [
        ("sk-{x}abcdefghij1234567890KLMN", "abcdefghij1234567890KLMN"),
        ("<{private}>my diary", "my diary"),
        ("pass{word}: hunter2", "hunter2"),
    ],
    ids=["token_joined", "private_tag_joined", "key_joined"],
)
def test_stripping_braces_cannot_unhide_a_secret(text: str, hidden: str) -> None:
    assert hidden not in sanitize_value(text)
    assert "[REDACTED:" in sanitize_value(text)


# --------------------------------------------------------------------------------------
# Control characters
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a\x00b", "ab"),
        ("\x00" * 5, ""),
        ("a\x01\x07\x1b[31mb", "a[31mb"),
        ("a\r\nb", "a\nb"),
        ("a\rb", "a\nb"),
        ("a\tb\nc", "a\tb\nc"),
        ("a\x7f\x85\x9fb", "ab"),
        ("a\ud800b\udfff", "ab"),
        ("\ufeffhello", "hello"),
        ("zero\u200bwidth\u2060joiner", "zerowidthjoiner"),
        ("abc\u202edef\u2066x\u2069", "abcdefx"),
        ("x\uffff\U0010ffff\U0001fffe\ufdd0y", "xy"),
        ("hi\U000e0049\U000e0047\U000e004e", "hi"),  # tag-character smuggling
        (f"{FAMILY} {FLAG_JP} {SCOTLAND}", f"{FAMILY} {FLAG_JP} {SCOTLAND}"),
        (
            f"caf{E_ACUTE} \u2764\ufe0f {THUMBS_MEDIUM}",
            f"caf{E_ACUTE} \u2764\ufe0f {THUMBS_MEDIUM}",
        ),
        ("مرحبا שלום 日本語 नमस्ते", "مرحبا שלום 日本語 नमस्ते"),
        # Invisible characters between two token characters go; elsewhere they stay.
        ("zw\u200cnj", "zwnj"),
        ("co\u00adoperate", "cooperate"),
        ("a\u200b\u00adb", "ab"),
        ("می\u200cخواهم", "می\u200cخواهم"),  # Persian ZWNJ
        ("क्\u200dष", "क्\u200dष"),  # Devanagari ZWJ
        (f"{KEYCAP_ONE} #\ufe0f\u20e3 {FAMILY_WWG}", f"{KEYCAP_ONE} #\ufe0f\u20e3 {FAMILY_WWG}"),
        (f"a {KEYCAP_ONE}b", f"a {KEYCAP_ONE}b"),
        ("x \u00ad y", "x \u00ad y"),
    ],
    ids=[
        "nul",
        "only_nul",
        "c0",
        "crlf",
        "lone_cr",
        "tab_newline_kept",
        "del_c1",
        "lone_surrogates",
        "bom",
        "zero_width",
        "bidi",
        "noncharacters",
        "tag_smuggling",
        "emoji_sequences_kept",
        "combining_and_selectors_kept",
        "scripts_kept",
        "zwnj_ascii_removed",
        "soft_hyphen_ascii_removed",
        "mixed_invisibles_removed",
        "zwnj_persian_kept",
        "zwj_devanagari_kept",
        "keycaps_and_zwj_family_kept",
        "keycap_before_letter_kept",
        "soft_hyphen_between_spaces_kept",
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


# --------------------------------------------------------------------------------------
# Truncation
# --------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------
# Huge and adversarial inputs (completion and correctness; no timing assertions)
# --------------------------------------------------------------------------------------

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
    root = str(Path(__file__).resolve().parents[2])
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


# --------------------------------------------------------------------------------------
# redact_leaves
# --------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------

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


# --------------------------------------------------------------- the passes' gates

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
