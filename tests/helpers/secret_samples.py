"""Secrets and hard text for the sanitizing tests: made-up keys in the shapes the
redaction knows, emoji and scripts that must survive, and a text of every kind of
secret with the part that must disappear marked."""

from __future__ import annotations

import regex

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


# Every kind of secret the redaction catches: a text of that kind by case name, with
# the part that must disappear between ⟦ and ⟧.
REDACTED: dict[str, dict[str, str]] = {
    "openai_key": {
        "openai": f"my key is ⟦{OPENAI}⟧ please",
        "openai_project": "sk-proj-⟦Ab12Cd34Ef56Gh78⟧Ij90Kl12Mn34",
        "openai_sentence_end": f"Use ⟦{OPENAI}⟧.",
        "openai_legacy_48": f"OPENAI_API_KEY ⟦{OPENAI_LEGACY}⟧",
        "openai_project_long": (
            "key sk-proj-⟦x9Kq2_Lm7ZpR4tV⟧-b1Nc8Kd5Wg0Hy3JsA6fQe"
            + "T3BlbkFJ"
            + "u2Io5Pa8Sd1Fg4Hj ok"
        ),
        "openai_svcacct": "sk-svcacct-⟦Qw8Er2Ty6Ui0Op4⟧As8Df2Gh6Jk",
        # Lower-case hex (no upper case): random because it keeps switching letters/digits.
        "sk_hex": "sk-⟦3f9a0b7c1d2e4f5a⟧6b7c8d9e0f1a2b3c",
        "openai_after_slug": "sk-notes-⟦" + OPENAI[3:] + "⟧",
    },
    "anthropic_key": {
        "anthropic": "sk-ant-api03-⟦AbCdEf123456⟧_ghIJkl-7890mnopQRst",
    },
    "github_token": {
        "github_ghp": f"token ⟦{GITHUB}⟧ here",
        "github_gho": "⟦gho_" + "x" * 36 + "⟧",
        "github_ghu": "⟦ghu_" + "Y1" * 18 + "⟧",
        "github_ghs": "(⟦ghs_" + "a2" * 18 + "⟧)",
        "github_ghr": "⟦ghr_" + "Zz9" * 12 + "⟧",
        "github_pat": "github_pat_⟦11ABCDEFG0123456789⟧_abcdefghijklmnopqrstuvwxyzABCDEFGH",
    },
    "gitlab_token": {
        "gitlab": "glpat-⟦xYz123AbC456dEf789gH⟧",
        "gitlab_runner": "glrt-⟦AbCdEfGhIjKlMnOpQrSt⟧",
        "gitlab_deploy": "gldt-⟦AbCdEfGhIjKlMnOpQrSt⟧",
        "gitlab_trigger": "glptt-⟦0123456789abcdef⟧0123456789abcdef01234567",
        "gitlab_feed": "glft-⟦AbCdEfGhIjKlMnOpQrSt⟧",
        "gitlab_ci_build": "glcbt-64_⟦AbCdEfGhIjKlMnOpQrSt⟧",
        "gitlab_service": "glsoat-⟦AbCdEfGhIjKlMnOpQrSt⟧",
    },
    "slack_token": {
        "slack_xoxb": "xoxb-123456789012-⟦1234567890123⟧-AbCdEfGh",
        "slack_xoxp": "xoxp-123456789012-⟦abcdefghij⟧",
        "slack_xoxa": "xoxa-2-⟦123456789012⟧-abcdef",
        "slack_xoxr": "xoxr-⟦123456789012⟧-abcdef",
        "slack_xapp": "xapp-1-⟦A0123456789⟧-1234567890123-abcdef01",
        "slack_xoxe_refresh": "xoxe.xoxp-1-⟦Mi0yLTE3⟧NjgwNjQ0ODQyMDgtMTc2",
        "slack_xoxe": "xoxe-1-⟦My0xLTE3⟧NjgwNjQ0ODQyMDgt",
    },
    "slack_webhook": {
        "slack_webhook": (
            "post to https://hooks.slack.com/services/T00000000/B00000000/"
            "⟦XXXXXXXXXXXXXXXXXXXXXXXX⟧."
        ),
    },
    "discord_webhook": {
        "discord_webhook": (
            f"https://discord.com/api/webhooks/123456789012345678/⟦{WEBHOOK_TOKEN}⟧"
        ),
        "discord_webhook_canary_app": (
            f"<https://canary.discordapp.com/api/v10/webhooks/1234567890/⟦{WEBHOOK_TOKEN}⟧?wait=1>"
        ),
    },
    "google_oauth_token": {
        "google_oauth": "ya29.⟦a0AfH6SMBx1234567890⟧abcdefghijklmnopqrstuvwxyz",
    },
    "google_client_secret": {
        "google_client_secret": "GOCSPX-⟦AbCdEfGhIjKlMnOpQrStUvWxYz01⟧",
    },
    "stripe_key": {
        "stripe_live": "sk_live_⟦4eC39HqLyjWD⟧arjtT1zdp7dc",
        "stripe_test": "sk_test_⟦4eC39HqLyjWD⟧arjtT1zdp7dc",
        "stripe_restricted": "rk_live_⟦4eC39HqLyjWD⟧arjtT1zdp7dc",
        "stripe_webhook": "whsec_⟦4eC39HqLyjWD⟧arjtT1zdp7dc",
    },
    "aws_access_key": {
        "aws_akia": "id ⟦AKIAIOSFODNN7EXAMPLE⟧ ok",
        "aws_asia": "⟦ASIAY34FZKBOKMUTVV7A⟧",
    },
    "aws_secret_key": {
        "aws_secret": "aws_secret_access_key = ⟦wJalrXUtnFEMI⟧/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "aws_secret_env": "AWS_SECRET_ACCESS_KEY=⟦wJalrXUtnFEMI⟧/K7MDENG/bPxRfiCYEXAMPLEKEY",
        # An AWS secret access key has no prefix; next to its key id it is recognised.
        "aws_configure": (
            f"AWS Access Key ID [None]: {AWS_ID}\nAWS Secret Access Key [None]: ⟦{AWS_SECRET}⟧"
        ),
        "aws_console_csv": f"Access key ID,Secret access key\n{AWS_ID},⟦{AWS_SECRET}⟧",
        "aws_pair": f"aws keys: {AWS_ID} / ⟦{AWS_SECRET}⟧.",
        "aws_secret_line_before": f"⟦{AWS_SECRET}⟧\n{AWS_ID}",
        "aws_secret_label_note": f"AWS Secret Access Key [None]: ⟦{AWS_SECRET}⟧",
    },
    "google_api_key": {
        "google": "AIza⟦SyD-1234567890⟧abcdefghijklmnopqrstu",
    },
    "npm_token": {
        "npm": "npm_⟦AbCdEfGhIjKl⟧MnOpQrStUvWxYz0123456789",
    },
    "huggingface_token": {
        "huggingface": "HF: hf_⟦AbCdEfGhIjKl⟧MnOpQrStUvWxYz01234567",
    },
    "groq_key": {
        "groq": "gsk_⟦Ab1Cd2Ef3Gh4⟧" + "Ab1Cd2Ef3Gh4" * 4,
    },
    "xai_key": {
        "xai": "key xai-⟦Zz9Yy8Xx7Ww6⟧" + "Zz9Yy8Xx7Ww6" * 6,
    },
    "url_credentials": {
        # git takes a token alone as the URL's user.
        "url_token_user_hex": (
            "git clone https://⟦0123456789abcdef⟧0123456789abcdef01234567@github.com/o/r"
        ),
        "url_token_user": "remote: https://⟦Zx81kQ02pLm7⟧Yt5RaBcD@gitlab.example.com/o/r.git",
        "url_credentials": "clone https://⟦alice:s3cr3tpass⟧@example.com/repo.git",
        "url_at_in_password": "postgres://bob:⟦p@ss⟧@db.example.com:5432/app",
        "url_empty_user": "redis://:⟦hunter2⟧@cache:6379",
    },
    "credential": {
        # An assignment holds its value whatever follows it on the line.
        "env_token_then_command": "export GITHUB_TOKEN=⟦mytokenvalue⟧ && ./deploy.sh",
        "env_secret_then_command": "SECRET=⟦correcthorse⟧ ./run.sh",
        "set_token_then_prose": "set API_TOKEN=⟦supersecretvalue⟧ then restart",
        "password_equals": "password=⟦hunter2⟧",
        "password_colon": "password: ⟦hunter2⟧",
        "password_upper": "PASSWORD = ⟦hunter2⟧",
        "password_sentence": "my password: ⟦hunter2⟧.",
        "passwd": "passwd=⟦letmein⟧",
        "pwd": "pwd: ⟦qwerty123⟧",
        # A passphrase has spaces: a password's value runs to the end of its line or sentence.
        "passphrase_words": "password: correct ⟦horse battery staple⟧",
        "passphrase_key": "passphrase = open the ⟦pod bay doors⟧",
        "password_words_equals": "wifi password=⟦two words here⟧",
        "password_markdown": "**Password:** hunter2 ⟦hunter3⟧",
        # Markdown emphasis or code around the label (the model writes its notes in Markdown).
        "password_bold_label": "**Password**: ⟦hunter2⟧",
        "password_bold_list_item": "- **Wifi password**: ⟦Tr0ub4dor⟧&3",
        "password_underscore_bold": "__password__⟦: x⟧",
        "password_code_label": "`password`: ⟦hunter2⟧",
        "api_key_bold_label": "**API key**: ⟦Zx81kQ02pLm7Yt5R⟧",
        "token_italic_label": "*token*: ⟦abc123def456⟧",
        "password_bold_stated": "the **password** is ⟦hunter2⟧",
        "pin_bold_label": "**PIN**: ⟦4821⟧",
        # Deliberate: a password field's value is redacted even when it looks harmless.
        "password_ask_bob": "password: ⟦ask Bob⟧",
        "password_query": "https://x.test/login?password=⟦hunter2⟧&user=bob",
        "secret": "secret: ⟦opensesame⟧",
        "token": "token=⟦abcdef⟧",
        "secret_number": "secret: ⟦1234⟧",
        "token_sentence": "my token: ⟦abc123xyz⟧, keep it safe",
        "secret_mid_sentence": "Secret: ⟦Zq9vXw7Lm2⟧ do not share",
        "key": "key=⟦value123⟧",
        "key_token_shaped": "the key = ⟦a1b2c3d4⟧ for the door",
        "key_symbols": "Key: ⟦Hunter#Pass⟧!x",
        "key_long_number": "key: ⟦12345678901234567890⟧",
        "api_key_prose_label": "API key: ⟦Qw3rTy9Uiop42⟧ (ask Bob)",
        "api_key_lone_word": "API key: ⟦opensesame⟧",
        "secret_key_env": "SECRET_KEY=⟦django-insecure-abc⟧",
        "api_key": "api_key=⟦abc123def⟧",
        "apikey": "apikey: ⟦xyz789⟧",
        "client_secret": "client_secret=⟦shh123⟧",
        "access_token": "access_token: ⟦tok123⟧",
        "env_var": "DB_PASSWORD=⟦hunter2⟧",
        "cli_flag": "run --token=⟦abc123⟧ now",
        "header_dash": "x-api-key: ⟦abc123⟧",
        "camel_case": "clientSecret: ⟦shhh⟧",
        "json_password": '{"password": "⟦hunter2⟧", "user": "bob"}',
        "json_password_spaces": '{"password": "⟦correct horse⟧ battery", "user": "bob"}',
        "json_api_key": '{"api_key": "⟦abc⟧", "n": 1}',
        "json_api_key_spaces": '{"api_key": "⟦abc def⟧"}',
        "json_token_prose": '{"token": "⟦ask Bob⟧"}',
        "json_bare_key_token": '{"key": "⟦value123⟧"}',
        "json_escaped_quote": '{"password": "hun\\"⟦ter2⟧"}',
        "python_dict": "{'api_key': '⟦abc 123⟧'}",
        "unclosed_quote": 'password = "correct ⟦horse⟧ battery',
        "query_string": "https://x.test/cb?token=⟦abc123⟧&x=1",
        # The key word may end a key written as one word (libpq's PGPASSWORD and friends).
        "pgpassword": "export PGPASSWORD=⟦hunter2⟧ && psql -h db",
        "mysqlpassword_lower": "mysqlpassword=⟦hunter22⟧",
        "adminpassword_colon": "ADMINPASSWORD: ⟦hunter22⟧",
        # `.env` files shorten it to PASS, as the last segment of the name.
        "env_pass": "DB_PASS=⟦hunter2⟧",
        "env_pass_colon": "SMTP_PASS: ⟦hunter2⟧",
        "env_pass_three_segments": "MYSQL_ROOT_PASS=⟦hunter2⟧",
        "env_pass_quoted": "db_pass = '⟦hunter2⟧'",
        "githubtoken": "GITHUBTOKEN=⟦abcdef123456⟧",
        "csrftoken": "csrftoken=⟦Zx81kQ02pLm7⟧",
        # Passwords stated in words, and the other password words.
        "password_is": "My wifi password is ⟦Tr0ub4dor&3⟧",
        "password_is_word": "the password is ⟦swordfish⟧",
        "password_was": "my old password was ⟦hunter2⟧",
        "password_is_now": "The password is now ⟦hunter2⟧",
        "password_is_colon": "password is: correct ⟦horse⟧ battery staple",
        "password_is_quoted": 'the password is "open ⟦sesame⟧" ok',
        "passcode_is": "my passcode is ⟦4821⟧",
        "passcode_colon": "Passcode: ⟦4821⟧",
        "passphrase_is": "my passphrase is purple ⟦monkey⟧ dishwasher",
        "pwd_was": "the pwd was ⟦hunter2⟧",
        "pw_colon": "pw: ⟦hunter2⟧",
        "pw_is": "wifi pw is ⟦hunter2⟧",
        "pin_is": "my PIN is ⟦4821⟧",
        "pin_code_colon": "pin code: ⟦0000⟧",
        "pin_equals": "SIM pin=⟦1234⟧",
        "pin_spaced": "my pin is 12 ⟦34⟧.",
        "pin_colon": "PIN: ⟦4821⟧",
        "pin_code_equals": "pin code=⟦0000⟧",
        "pin_eight_digits": "my pin is ⟦12345678⟧",
        # A plain word is what a password looks like, even one that names a password.
        "password_is_password": "router login: admin / password⟦: password⟧",
        "password_capitalised_word": "password: ⟦Password123⟧",
        "password_pascal_case": "password: ⟦MyPassword⟧",
        "attribute_key_literal": "x.password = ⟦hunter2⟧",
        # A key, token or secret stated in words, with a token-shaped value.
        "api_key_is": "my API key is ⟦Zx81kQ02pLm7Yt5R⟧.",
        "bot_token_is": "the bot token is ⟦abc123def456⟧, ok",
        "secret_key_was": "her secret key was ⟦Zx81kQ02pLm7Yt5R⟧",
        "token_is_now": "the token is now ⟦Zx81kQ02pLm7⟧",
        # A short qualifier between the password word and its separator or "is".
        "password_for": "WiFi password for guests: ⟦hunter2⟧",
        "password_paren": "password (wifi): ⟦hunter2⟧",
        "password_of_the": "Password of the router: ⟦admin123⟧",
        "password_to_is": "the password to the server is ⟦hunter2⟧",
        "password_for_it_is_now": "the password for it is now ⟦hunter2⟧",
        # Prose is told by its first word; a value that looks like a secret is one.
        "password_is_phrase": "my password is correct ⟦horse⟧ battery staple",
        "password_is_participle_digit": "the password is ⟦Changed123⟧",
        "password_is_speed": "the wifi password is ⟦speed⟧",
    },
    "jwt": {
        "jwt": f"cookie ⟦{JWT}⟧",
        "jwt_payload_part": (
            "x=eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0"
            ".⟦SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c⟧"
        ),
    },
    "discord_token": {
        "discord": f"bot token ⟦{DISCORD}⟧",
        "discord_seg": (
            "'MTA4NzY1NDMyMTA5ODc2NTQzMg.⟦GhJkLm⟧.abcdefghijklmnopqrstuvwxyz0123456789AB'"
        ),
        # The first part is the bot's user id in base64: 17 to 20 digits.
        "discord_17_digit_id": (
            "⟦MTIzNDU2Nzg5MDEyMzQ1Njc⟧.GxYz12.AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
        ),
        "discord_20_digit_id": (
            "⟦MTIzNDU2Nzg5MDEyMzQ1Njc4OTA⟧.GxYz12.AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
        ),
        "discord_old_token": "NzE2MDk0MzI4NjM3NDc0ODE2.XsMW5A.⟦7Ylf1bd6nrXoW8U1yIOoLuKkLVw⟧",
    },
    "private": {
        "private": "before <private>⟦my diary entry⟧</private> after",
        "private_multiline": "<PRIVATE>\n⟦line one⟧\nline two\n</Private> ok",
        "private_unclosed": "note <private>everything after this\n⟦and more⟧",
        "private_spaced": "a < private >⟦hidden⟧< / private > b",
        "private_nested": "<private>diary <private>note</private> ⟦SECRET PART⟧</private> after",
        "private_nested_unclosed": "<private>a <private>b</private> ⟦c tail⟧",
    },
    "private_key": {
        "pem": (
            f"-----BEGIN RSA PRIVATE KEY-----\n⟦{PEM_BODY}⟧\n-----END RSA PRIVATE KEY-----\nafter"
        ),
        "pem_no_end": f"key:\n-----BEGIN PRIVATE KEY-----\n⟦{PEM_BODY}⟧",
        "pem_lowercase": (
            f"-----begin private key-----\n⟦{PEM_BODY}⟧\n-----end private key-----\nafter"
        ),
        "pem_lower_no_end": f"-----begin rsa private key-----\n⟦{PEM_BODY}⟧",
        "pem_mixed_case": f"-----Begin Ec Private Key-----\n⟦{PEM_BODY}⟧",
        "pem_openssh": (
            f"-----BEGIN OPENSSH PRIVATE KEY-----\n⟦{PEM_BODY}⟧\n-----END OPENSSH PRIVATE KEY-----"
        ),
    },
    "authorization": {
        "authorization_bold_label": "**Authorization**: Bearer ⟦abc123⟧",
        "authorization_bearer": "Authorization: Bearer ⟦abc.def-ghi⟧",
        "authorization_basic": "Authorization: Basic ⟦dXNlcjpwYXNz⟧",
        "authorization_curl": "curl -H 'Authorization: Bearer ⟦abc123xyz⟧' https://api.test",
    },
    "bearer": {
        "bearer_digit": "send Bearer ⟦abcdef123456xyz⟧ with it",
        "bearer_long": "bearer ⟦abcdefghijklmnopqrstuvwxyz⟧",
    },
}


def unmarked(marked: str) -> tuple[str, str]:
    """``marked`` without its ⟦ ⟧, and the secret they enclose."""
    head, rest = marked.split("⟦")
    secret, tail = rest.split("⟧")
    return head + secret + tail, secret


# (id, text, secret that must disappear, kind)
POSITIVES = [
    (name, *unmarked(marked), kind)
    for kind, cases in REDACTED.items()
    for name, marked in cases.items()
]
