"""Redaction corpora generated at run time: provider tokens in context, and benign lines.

No credential is written in the repository: each family's tokens are drawn from its shape
(prefix, alphabet, length) with a seeded generator.  ``python -m tests.helpers.redaction_corpus``
prints the recall per family and the benign lines changed.
"""

from __future__ import annotations

import base64
import json
import random
import re
import string
from collections.abc import Callable
from dataclasses import dataclass

from bot.vocabulary.sanitize import sanitize_value

B62 = string.ascii_letters + string.digits
B64URL = B62 + "_-"
HEX = "0123456789abcdef"
UPPER_DIGITS = string.ascii_uppercase + string.digits
DIGITS = string.digits
BECH32 = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"
_MARKER = re.compile(r"\[REDACTED:[a-z_]+\]")
# How much of a secret may survive: no run of this many of its random characters.
WINDOW = 10


def _r(rng: random.Random, alphabet: str, length: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(length))


def _discord(rng: random.Random) -> str:
    snowflake = str(rng.randint(10**17, 10**19))
    first = base64.urlsafe_b64encode(snowflake.encode()).decode().rstrip("=")
    return f"{first}.{_r(rng, B64URL, 6)}.{_r(rng, B64URL, 38)}"


@dataclass(frozen=True)
class Family:
    """A token family: its name and how to draw one token (prefix included)."""

    name: str
    make: Callable[[random.Random], str]
    is_url: bool = False


def _shape(prefix: str, alphabet: str, length: int, suffix: str = "") -> Callable[..., str]:
    return lambda rng: prefix + _r(rng, alphabet, length) + suffix


FAMILIES: tuple[Family, ...] = (
    Family("openai_project", _shape("sk-proj-", B62, 48)),
    Family("openai_legacy", lambda r: f"sk-{_r(r, B62, 20)}T3BlbkFJ{_r(r, B62, 20)}"),
    Family("anthropic", _shape("sk-ant-api03-", B64URL, 93, "AA")),
    Family("github_pat", _shape("ghp_", B62, 36)),
    Family("github_oauth", _shape("gho_", B62, 36)),
    Family("github_app", _shape("ghs_", B62, 36)),
    Family("github_fine_grained", _shape("github_pat_", B62 + "_", 82)),
    Family("gitlab_pat", _shape("glpat-", B62, 20)),
    Family("gitlab_runner", _shape("glrt-", B62, 20)),
    Family(
        "slack_bot",
        lambda r: f"xoxb-{_r(r, DIGITS, 12)}-{_r(r, DIGITS, 12)}-{_r(r, B62, 24)}",
    ),
    Family(
        "slack_user",
        lambda r: (
            f"xoxp-{_r(r, DIGITS, 12)}-{_r(r, DIGITS, 12)}-{_r(r, DIGITS, 12)}-" + _r(r, HEX, 32)
        ),
    ),
    Family(
        "slack_webhook",
        lambda r: (
            "https://hooks.slack.com/services/T"
            + f"{_r(r, UPPER_DIGITS, 10)}/B{_r(r, UPPER_DIGITS, 10)}/{_r(r, B62, 24)}"
        ),
        is_url=True,
    ),
    Family(
        "discord_webhook",
        lambda r: f"https://discord.com/api/webhooks/{_r(r, DIGITS, 18)}/{_r(r, B64URL, 68)}",
        is_url=True,
    ),
    Family("discord_bot", _discord),
    Family("stripe_live", _shape("sk_live_", B62, 24)),
    Family("stripe_restricted", _shape("rk_live_", B62, 24)),
    Family("aws_access_key", _shape("AKIA", UPPER_DIGITS, 16)),
    Family("google_api", _shape("AIza", B64URL, 35)),
    Family("google_oauth", _shape("ya29.", B64URL, 60)),
    Family("google_client_secret", _shape("GOCSPX-", B64URL, 28)),
    Family("npm", _shape("npm_", B62, 36)),
    Family("huggingface", _shape("hf_", string.ascii_letters, 34)),
    Family("groq", _shape("gsk_", B62, 52)),
    Family("xai", _shape("xai-", B62, 80)),
    Family(
        "jwt",
        lambda r: f"eyJ{_r(r, B64URL, 20)}.eyJ{_r(r, B64URL, 30)}.{_r(r, B64URL, 43)}",
    ),
    Family("digitalocean", _shape("dop_v1_", HEX, 64)),
    Family("telegram_bot", lambda r: f"{_r(r, DIGITS, 10)}:AA{_r(r, B64URL, 33)}"),
    Family("sendgrid", lambda r: f"SG.{_r(r, B64URL, 22)}.{_r(r, B64URL, 43)}"),
    Family("twilio", _shape("SK", HEX, 32)),
    Family("mailgun", _shape("key-", HEX, 32)),
    Family("shopify", _shape("shpat_", HEX, 32)),
    Family("pypi", _shape("pypi-AgEIcHlwaS5vcmc", B64URL, 70)),
    Family("docker", _shape("dckr_pat_", B64URL, 27)),
    Family("linear", _shape("lin_api_", B62, 40)),
    Family("replicate", _shape("r8_", B62, 37)),
    Family("databricks", _shape("dapi", HEX, 32)),
    Family("doppler", _shape("dp.pt.", B62, 43)),
    Family("pulumi", _shape("pul-", HEX, 40)),
    Family("planetscale", _shape("pscale_tkn_", B62, 43)),
    Family("postman", lambda r: f"PMAK-{_r(r, HEX, 24)}-{_r(r, HEX, 34)}"),
    Family("sentry_user", _shape("sntryu_", HEX, 64)),
    Family("atlassian", _shape("ATATT3", B64URL, 186)),
    Family("age", _shape("AGE-SECRET-KEY-1", BECH32, 58)),
    Family("notion", lambda r: f"ntn_{_r(r, DIGITS, 11)}{_r(r, B62, 35)}"),
    Family("perplexity", _shape("pplx-", B62, 48)),
    Family("rubygems", _shape("rubygems_", HEX, 48)),
    Family("vault", _shape("hvs.", B64URL, 100)),
    Family("supabase", _shape("sbp_", HEX, 40)),
    Family("openrouter", _shape("sk-or-v1-", HEX, 64)),
    Family("figma", _shape("figd_", B64URL, 40)),
    Family("grafana_service_account", lambda r: f"glsa_{_r(r, B62, 32)}_{_r(r, HEX, 8)}"),
    Family("heroku", _shape("HRKU-AA", B64URL, 58)),
    Family("infracost", _shape("ico-", B62, 32)),
    Family("prefect", _shape("pnu_", B62, 36)),
    Family("shippo", _shape("shippo_live_", HEX, 40)),
    Family("sendinblue", lambda r: f"xkeysib-{_r(r, HEX, 64)}-{_r(r, B62, 16)}"),
    Family("square", _shape("sq0atp-", B64URL, 22)),
    Family("flyio", _shape("fo1_", B64URL, 43)),
    Family("easypost", _shape("EZAK", B62, 54)),
    Family("tailscale", lambda r: f"tskey-auth-{_r(r, B62, 12)}-{_r(r, B62, 30)}"),
    Family("langsmith", lambda r: f"lsv2_pt_{_r(r, HEX, 32)}_{_r(r, HEX, 10)}"),
)

# Letters that look like ASCII ones, to disguise a token's first letter.
_LOOKALIKE = {
    "s": "\u0455",  # Cyrillic dze
    "a": "\u0430",
    "e": "\u0435",
    "o": "\u043e",
    "p": "\u0440",
    "x": "\u0445",
}


def _disguise(token: str) -> str:
    """The token with its first look-alike letter Cyrillic, or its first letter fullwidth."""
    for index, char in enumerate(token):
        if char in _LOOKALIKE:
            return token[:index] + _LOOKALIKE[char] + token[index + 1 :]
    first = token[0]
    return chr(ord(first) + 0xFEE0) + token[1:] if "!" <= first <= "~" else token


def contexts(family: Family, token: str) -> dict[str, str]:
    """The token in each context a chat message or a memory note puts one."""
    half = len(token) // 2
    found = {
        "sentence": f"Here is the {family.name} credential {token} so keep it safe.",
        "code_block": f'```python\nclient = Client("{token}")\nclient.run()\n```',
        "json": json.dumps({"service": family.name, "value": token, "region": "eu"}),
        "yaml": f"service:\n  name: {family.name}\n  value: {token}\n  region: eu",
        "split_line": f"it is {token[:half]}\n{token[half:]} thanks",
        "split_space": f"it is {token[:half]} {token[half:]} thanks",
        "disguised": f"my {family.name} one: {_disguise(token)} ok",
    }
    found["url"] = (
        f"post to <{token}> later"
        if family.is_url
        else f"https://example.com/callback?state=ok&code={token}&page=2"
    )
    return found


def leaked(token: str, output: str) -> bool:
    """Whether ``WINDOW`` consecutive characters of the token survived (markers aside)."""
    output = _MARKER.sub(" ", output)
    return any(token[i : i + WINDOW] in output for i in range(len(token) - WINDOW + 1))


def token_cases(seed: int = 26, per_family: int = 3) -> list[tuple[str, str, str, str]]:
    """(family, context, token, text) for ``per_family`` tokens of each family."""
    rng = random.Random(seed)
    cases: list[tuple[str, str, str, str]] = []
    for family in FAMILIES:
        for _ in range(per_family):
            token = family.make(rng)
            for context, text in contexts(family, token).items():
                cases.append((family.name, context, token, text))
    return cases


# ------------------------------------------------------------------------ benign lines

_BENIGN_TEMPLATES = (
    # chat with trigger words
    "the key to {thing} is patience honestly",
    "I lost my keys at the {place} again",
    "pin this message pls",
    "pinned the {thing} notes in #general",
    "pin: 2024 roadmap",
    "Press key: Ctrl+Shift+P",
    "Shortcut key: Alt+F4",
    "Hotkey: Ctrl+Alt+T opens a terminal",
    "my password manager is {app}, highly recommend",
    "forgot my password again lol",
    "the password reset email never came for {name}",
    "use a passphrase with four random words",
    "boarding pass: 12A, gate B4",
    "pass the {food} please",
    "{name} passed the exam with 92 points",
    "the token economy in {game} is broken",
    "the bearer of good news today is {name}",
    "secret santa budget is 20 euros",
    "{name} kept it secret until {day}",
    "it's no secret that {name} loves {food}",
    "the API key page is under Settings > Developer",
    "rotate your tokens every 90 days",
    "the token limit is 128k for that model",
    "primary key on {table}.id, sort key is created_at",
    "GPIO pin 13 drives the LED on the {board}",
    "LED pin: 13",
    "requests pin: 2.31.0",
    "pin the version to 1.4.2 before {day}",
    "my PIN pad at the {place} was broken",
    "keyboard shortcut for search is Cmd+K",
    "café at 9? ☕ {name} is buying",
    "Café Müller on {day}, naïve plan but fine",
    "Привет, как дела? see you on {day}",
    "明日は雨です、{name}さん",
    "{name} said the key insight is to ship small",
    "tokens in NLP are subword units, {name} explained",
    "passwords should be at least 12 characters long",
    "security keys like YubiKey are great for {name}",
    "the secret ingredient is {food}",
    "access token expired, re-login fixed it",
    "we use task-management-system for sprint planning",
    "sk-learn is just sklearn, {name} uses it daily",
    "the ask-me-anything thread is pinned",
    "I'm off on {day}, ping {name} if anything breaks",
    # code-like (in code spans or fences, as people paste code)
    "`{{ user.name }}` renders the name in the {thing} template",
    "in LaTeX write $\\frac{{a}}{{b}}$ for {thing}",
    "the regex \\d{{3}}-\\d{{4}} matches phone numbers",
    "a{{2,3}} matches aa or aaa",
    "```python\ndef check(password: str) -> bool:\n    return verify(password, stored)\n```",
    "```python\ntoken = os.environ['API_TOKEN']\n```",
    "```python\napi_key = settings.API_KEY\n```",
    "```python\nif password == confirm_password:\n    save()\n```",
    "```python\nheaders = {{'Authorization': f'Bearer {{token}}'}}\n```",
    "`export GITHUB_TOKEN=$GITHUB_TOKEN` in the {thing} script",
    "`password: ${{DB_PASSWORD}}` goes in the compose file",
    "KEY_LENGTH = 32 bytes for {thing}",
    "git push origin main, then docker login registry.example.com",
    "`curl -u $USER:$PASS https://example.com` works in CI",
    "the private repo for {thing} moved to the org",
    "set max_tokens to 512 for {thing}",
    # prose
    "The key finding of the {thing} study was surprising.",
    "{name} moved to {place} in March and loves it.",
    "The team agreed to ship {thing} on {day}; {name} owns the docs.",
    "The PIN code feature for {thing} is still in review.",
    "Password policies were discussed; {name} wants passkeys instead.",
)
_FILL = {
    "thing": ["release", "roadmap", "onboarding", "billing", "search", "mobile app", "wiki"],
    "place": ["office", "gym", "station", "airport", "bakery", "library"],
    "app": ["Bitwarden", "1Password", "KeePassXC", "the browser one"],
    "name": ["Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi"],
    "food": ["salt", "bread", "cheese", "salsa", "cardamom"],
    "game": ["Eve Online", "Minecraft", "Stardew Valley"],
    "day": ["Monday", "Friday", "the weekend", "tomorrow"],
    "table": ["users", "orders", "events"],
    "board": ["Pico", "ESP32", "Arduino"],
}


def benign_lines(seed: int = 26, count: int = 540) -> list[str]:
    """``count`` chat-like, code-like and prose lines holding trigger words and no secret."""
    rng = random.Random(seed)
    lines: list[str] = []
    while len(lines) < count:
        template = _BENIGN_TEMPLATES[len(lines) % len(_BENIGN_TEMPLATES)]
        fill = {key: rng.choice(values) for key, values in _FILL.items()}
        lines.append(template.format(**fill))
    return lines


def figures() -> tuple[dict[str, tuple[int, int]], list[str]]:
    """Per family (redacted, total) over every context, and the benign lines changed."""
    recall: dict[str, tuple[int, int]] = {}
    for family, _context, token, text in token_cases():
        hidden, total = recall.get(family, (0, 0))
        recall[family] = (hidden + (not leaked(token, sanitize_value(text))), total + 1)
    changed = [line for line in benign_lines() if sanitize_value(line) != line]
    return recall, changed


def report() -> str:
    """The figures as text: recall per family, then the false positives."""
    recall, changed = figures()
    lines = [
        f"{name:28} {hidden}/{total} = {hidden / total:.3f}"
        for name, (hidden, total) in recall.items()
    ]
    hidden = sum(h for h, _ in recall.values())
    total = sum(t for _, t in recall.values())
    lines.append(f"families: {len(recall)}, secrets redacted: {hidden}/{total}")
    lines.append(f"benign lines changed: {len(changed)}/{len(benign_lines())}")
    lines += [f"  changed: {line!r}" for line in changed]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
