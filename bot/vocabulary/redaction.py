"""Redact secrets from text before it is stored or shown to a model again.

Memory values, facts and chat messages are pasted back into later prompts, and users
paste secrets into chat: API keys and tokens, passwords, PINs, private keys, credentials
in URLs, or text they mark ``<private>``.  :func:`redact_secrets` replaces each with a
``[REDACTED:<kind>]`` marker, so a secret never reaches the database or a later prompt;
the marker says *that* something was hidden, never what (:func:`redaction_kinds` lists
the kinds, for audit counters).  :func:`redact_leaves` does the same inside structured
data, which must be redacted leaf by leaf: a marker must not break serialized JSON, and
a leaf cannot see the key that makes it a secret.

Passes run in a fixed order: ``<private>`` regions and PEM private keys, URL userinfo,
token kinds (each by its prefix and shape), AWS secret keys next to their key id, ``key =
value`` and "my password is ..." credentials, bare ``Bearer`` tokens.  Every token match
covers a whole token-like word, so redaction is idempotent and never leaves half a token
behind.  Prose that merely talks about keys or passwords ("the key is patience",
"boarding pass: 12A", ``self.password = password``) is left alone; only for passwords
is a false positive taken as the safe side.

The sanitizer (:mod:`bot.memory.sanitize`) runs this as one step of its pipeline.  It
processes a huge value only in heads that :func:`cut_safely` cuts so that no token
straddles the cut, and redacts such a head with ``cut=True``: a value that runs into the
cut may go on, so none of it stays visible.  :data:`TOKEN_CHARS` is the alphabet of
those tokens; the sanitizer also removes invisible characters between two of them, which
could split a secret so that its pattern misses it.

Every regular expression here is written to run in linear time (literal prefixes, token
boundaries enforced with look-behinds, no nested ambiguous repetition), because values can
be arbitrarily large and adversarial; the slowest passes only run when the text holds a
word every match of theirs needs.  The module is pure Python and imports nothing from
Discord, the database layer or the sanitizer.
"""

from __future__ import annotations

import base64
import binascii
import itertools
from collections.abc import Callable
from typing import Final, TypeVar, cast

import regex

__all__ = [
    "TOKEN_CHARS",
    "cut_safely",
    "redact_leaves",
    "redact_secrets",
    "redaction_kinds",
]

T = TypeVar("T")

_MARKER_PREFIX: Final = "[REDACTED:"
_MARKER: Final = regex.compile(r"\[REDACTED:[a-z_]+\]")

# Region openers (phase 1).  Regions are closed by a separate search so that an unclosed
# region simply runs to the end of the text.  PEM armour is matched case-insensitively: a
# key pasted through something that lower-cased it (`-----begin private key-----`) is
# just as secret.
_REGION_OPEN: Final = regex.compile(
    r"(?P<private>(?i:<[ \t]*private[ \t]*>))"
    r"|(?P<private_key>(?i:-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----))"
)
# `<private>` regions nest: a closer ends only the innermost open one, so the tail of an
# outer region (`<private>a <private>b</private> c</private>`) stays hidden.
_PRIVATE_TAG: Final = regex.compile(
    r"(?P<open>(?i:<[ \t]*private[ \t]*>))|(?i:<[ \t]*/[ \t]*private[ \t]*>)"
)
_PEM_END: Final = regex.compile(r"(?i:-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----)")

# Characters that make up token-like words.  Every token pattern refuses to start right
# after one of them (so `task-management` never yields an `sk-` key) and swallows any of
# them that follow the secret, so a match always covers a whole word.  That makes
# redaction idempotent (the character after a marker is one no pattern starts after, just
# like before the replacement) and never leaves half a token behind.
_U: Final = r"A-Za-z0-9_.\-"
_LB: Final = rf"(?<![{_U}])"
_TAIL: Final = rf"[{_U}]*"
_B64U: Final = r"A-Za-z0-9_\-"
# Token characters: the bearer-token alphabet, a superset of _U and of every token
# pattern's.  Cutting between two of them could split a token, so input is only ever cut
# next to some other character (see `cut_safely`).
TOKEN_CHARS: Final = r"A-Za-z0-9._~+/=\-"
_TOKEN_CHAR: Final = regex.compile(rf"[{TOKEN_CHARS}]")
_LAST_NON_TOKEN_CHAR: Final = regex.compile(rf"(?r)[^{TOKEN_CHARS}]")

# Userinfo of a URL: `://user:pass@`.  The password part is greedy up to the last `@`
# before the path, so an unescaped `@` in a password does not leak its tail.
_URL_CREDENTIALS: Final = regex.compile(r"://(?!\[REDACTED:)[^\s/?#@:\[\]]*:[^\s/?#\[\]]*@")
# Same, for input that was cut: a userinfo running into the cut has lost its `@`.
_URL_CREDENTIALS_AT_CUT: Final = regex.compile(
    r"://(?!\[REDACTED:)[^\s/?#@:\[\]]*:[^\s/?#\[\]]*(?:@|\Z)"
)

# A token alone in a URL's userinfo, as git takes one: `https://<token>@github.com/…`.
# Only a long, token-shaped user (see `_replace_url_token`): `https://bob@host` stays.
_URL_TOKEN_USERINFO: Final = regex.compile(r"://(?!\[REDACTED:)(?P<user>[^\s/?#@:\[\]]{16,})@")
# Same, for input that was cut: the token may have lost its `@` to the cut.
_URL_TOKEN_USERINFO_AT_CUT: Final = regex.compile(
    r"://(?!\[REDACTED:)(?P<user>[^\s/?#@:\[\]]{16,})(?:@|\Z)"
)

# One pattern per kind, applied in this order.  Each match is a whole token-like word.
_TOKEN_PATTERNS: Final[tuple[tuple[str, regex.Pattern[str]], ...]] = tuple(
    (kind, regex.compile(pattern))
    for kind, pattern in (
        # Webhook URLs carry their secret in the path: whoever has the URL can post as the
        # webhook.  The host may follow `//` or a subdomain's `.` (`canary.discord.com`).
        (
            "discord_webhook",
            r"(?<![A-Za-z0-9_\-])(?i:discord(?:app)?\.com/api(?:/v\d+)?/webhooks/)"
            rf"\d+/[{_B64U}]{{20,}}{_TAIL}",
        ),
        (
            "slack_webhook",
            r"(?<![A-Za-z0-9_.\-])(?i:hooks\.slack\.com/(?:services|workflows|triggers)/)"
            r"[A-Za-z0-9_\-]+(?:/[A-Za-z0-9_\-]+)+",
        ),
        ("anthropic_key", rf"{_LB}sk-ant-[{_B64U}]{{20,}}{_TAIL}"),
        # Only a candidate: `_is_openai_key` also wants a random-looking run in it, so
        # `sk-8 park` and words joined by hyphens (`sk-2024-annual-planning-notes-v2`) stay.
        ("openai_key", rf"{_LB}sk-[{_B64U}]{{20,}}{_TAIL}"),
        (
            "github_token",
            rf"{_LB}(?:gh[pousr]_[A-Za-z0-9]{{30,}}|github_pat_[A-Za-z0-9_]{{22,}}){_TAIL}",
        ),
        (
            "gitlab_token",
            rf"{_LB}gl(?:pat|rt|dt|ptt|ft|cbt|soat)-[{_B64U}]{{20,}}{_TAIL}",
        ),
        # `xoxe.xoxp-…` is a refresh token, `xoxe-…` a configuration token.
        (
            "slack_token",
            rf"{_LB}(?:xoxe\.)?(?:xox[abprse]|xapp)-[A-Za-z0-9\-]{{10,}}{_TAIL}",
        ),
        ("stripe_key", rf"{_LB}(?:[sr]k_(?:live|test)_|whsec_)[A-Za-z0-9]{{16,}}{_TAIL}"),
        # Exactly 20 characters: a longer all-caps word (ASIAPACIFICSUMMIT2024) is none.
        ("aws_access_key", rf"{_LB}(?:AKIA|ASIA)[A-Z0-9]{{16}}(?![A-Za-z0-9])"),
        ("google_api_key", rf"{_LB}AIza[{_B64U}]{{35}}{_TAIL}"),
        ("google_oauth_token", rf"{_LB}ya29\.[{_B64U}]{{20,}}{_TAIL}"),
        ("google_client_secret", rf"{_LB}GOCSPX-[{_B64U}]{{20,}}{_TAIL}"),
        ("npm_token", rf"{_LB}npm_[A-Za-z0-9]{{36}}{_TAIL}"),
        ("huggingface_token", rf"{_LB}hf_[A-Za-z0-9]{{30,}}{_TAIL}"),
        ("groq_key", rf"{_LB}gsk_[A-Za-z0-9]{{40,}}{_TAIL}"),
        ("xai_key", rf"{_LB}xai-[A-Za-z0-9]{{40,}}{_TAIL}"),
        ("jwt", rf"{_LB}eyJ[{_B64U}]{{5,}}\.[{_B64U}]{{5,}}\.{_TAIL}"),
        # base64(user id) . base64(timestamp) . HMAC; only a candidate: `_is_discord_token`
        # also wants the first part to decode to a user id, so dotted code identifiers
        # (`NotificationServiceHandler.handle.process_incoming_message_queue_items`) stay.
        (
            "discord_token",
            rf"{_LB}[MNO][{_B64U}]{{22,26}}\.[{_B64U}]{{6}}\.[{_B64U}]{{27,}}{_TAIL}",
        ),
    )
)
# An AWS secret access key has no prefix of its own: 40 characters of base64 (`/` and `+`
# included) mixing digits, upper and lower case.  Alone that shape is too common to hide,
# but next to its key id - on the same line or the one before or after, as in the console's
# CSV (`AKIA…,wJalr…`), `aws configure` or "keys: AKIA… / wJalr…" - it is the secret.
# The key id is already a marker when this pass runs (see `_redact_aws_secret_pairs`).
_AWS_KEY_ID_MARKER: Final = "[REDACTED:aws_access_key]"
_AWS_SECRET_CANDIDATE: Final = regex.compile(
    r"(?<![A-Za-z0-9/+=_.\-])"
    r"(?=[A-Za-z0-9/+]{0,39}[0-9])(?=[A-Za-z0-9/+]{0,39}[a-z])(?=[A-Za-z0-9/+]{0,39}[A-Z])"
    r"[A-Za-z0-9/+]{40}"
    r"(?![A-Za-z0-9/+=_\-]|\.[A-Za-z0-9/+=_\-])"
)
# Real OpenAI keys (`sk-<48>`, `sk-proj-<~150>`, `sk-svcacct-...`) are random base62/64url,
# so they contain a long run of letters and digits between their `-`/`_` separators.
_ALNUM_RUN: Final = regex.compile(r"[A-Za-z0-9]{16,}")
_MIN_RANDOM_SWITCHES: Final = 4

# Key words that make `<word> = value` / `<word>: value` a credential.  The word must end
# the key (the separator follows), so `tokenizer`, `keyboard`, `passwords:` or "the secret
# ingredient" never qualify.  Most may end a key written as one word too (`PGPASSWORD`,
# `GITHUBTOKEN`, `csrftoken`); the short or common ones (`key`, `pwd`) must start a segment
# of it (`db_pwd`, `x-api-key`, `clientKey`), so `monkey:` or `OLDPWD=` do not qualify.
# Each match starts at the separator and checks the key with a look-behind: the engine
# then only stops at `:` and `=`, which keeps the common case fast, and the key itself
# (kept verbatim) is not part of the replacement.
#
# What counts as the value depends on the key word:
# - password words: a person chose it and a passphrase may have spaces, so the value runs
#   to the end of its line or sentence (`_PASSWORD`).  This also hides the odd harmless
#   value ("password: ask Bob"); for passwords a false positive is the safe side.
# - key, token, secret, authorization: one word, and only if it looks like a secret (see
#   `_replace_credential`), because in prose these words are mostly not about credentials
#   ("the key = happiness", "Secret: the butler did it", "token: 5 tokens left").
_SEGMENT_START: Final = r"(?:(?<![A-Za-z0-9])|(?<=[a-z0-9])(?=[A-Z]))"
_PASSWORD_WORDS: Final = rf"(?i:password|passwd|passphrase|passcode)|{_SEGMENT_START}(?i:pwd|pw)"
# `.env` files shorten it to `pass` (`DB_PASS=`, `SMTP_PASS:`): only as the last segment of
# an identifier after `_`, so "boarding pass: 12A" or "bypass: on" stay.
_PASS_SEGMENT: Final = r"(?<=[A-Za-z0-9]_)(?i:pass)"
_OTHER_SECRET_WORDS: Final = rf"(?i:secret|token|apikey|authorization)|{_SEGMENT_START}(?i:key)"
_SECRET_WORDS: Final = f"{_PASSWORD_WORDS}|{_OTHER_SECRET_WORDS}"
_SCHEMES: Final = r"(?i:bearer|basic|token|bot|digest)"
# What may close a key before its separator: a quote (`"password": "x"`) or Markdown
# emphasis or code (`**Password**: x`, `__token__: x`, `` `password`: x ``) - the model
# writes its notes in Markdown, and a bold label must not hide the value.
_KEY_END: Final = r"(?:[\"']|[*_`]{1,3})?"
# ... then a short note in brackets may come before the separator, as the AWS CLI prompts
# `AWS Secret Access Key [None]: ...`.
_KEY_TAIL: Final = rf"{_KEY_END}(?:[ \t]*\[(?!REDACTED:)[^\[\]\n]{{0,32}}\])?[ \t]*"
# Atomic: `=>` must not be retried as `=` (nor `:=` as `:`), or the `>` of an already
# redacted `key=>[REDACTED:...]` would look like the start of a new value.  `==` compares
# (`if password == confirm_password:`); it assigns nothing.
_SEPARATOR: Final = r"(?P<sep>(?>:=|=>|[:=](?!=))[ \t]*+)"
# A quoted value (JSON, a dict, a shell assignment) is taken whole, escapes included; an
# unclosed quote runs to the end of the line.
_QUOTED_VALUE: Final = (
    r"\"(?!\[REDACTED:)(?:[^\"\\\n]|\\.)+(?P<dq>\")?"
    r"|'(?!\[REDACTED:)(?:[^'\\\n]|\\.)+(?P<sq>')?"
)
# Where an unquoted password ends: a sentence end (`.`, `!`, `?` before whitespace or the
# end), or the next parameter of a query string (`&user=`); a newline or the end of the
# text end it anyway.
_PASSWORD_STOP: Final = r"[.!?](?:\s|\Z)|&[\w.\-]+="
# A password word may be qualified before its separator or "is": "WiFi password for
# guests: x", "Password of the router: x", "the password to the server is x", "password
# (wifi): x" - a preposition and up to three short words, or a short parenthesis, on the
# same line.  Bounded, so the look-behind stays cheap; "is"/"was" end the qualifier.
_PASSWORD_QUALIFIER: Final = (
    r"(?:[ \t]{1,3}(?i:for|of|to|on|at|in|from)"
    r"(?:[ \t]{1,3}(?!(?i:is|was)(?![\w\-]))[\w\-]{1,24}){1,3}"
    r"|[ \t]{0,3}\([^()\n]{1,32}\))"
)
_PASSWORD: Final = regex.compile(
    rf"(?<=(?:{_PASSWORD_WORDS}|{_PASS_SEGMENT})(?:{_KEY_END}{_PASSWORD_QUALIFIER})?{_KEY_TAIL})"
    rf"{_SEPARATOR}"
    r"(?![\"']?\[REDACTED:)"
    # Runs of characters that cannot start a stop are taken whole; only `.!?&` are checked.
    rf"(?P<value>{_QUOTED_VALUE}|(?=[^\s\"'])(?:[^\n.!?&]++|(?!{_PASSWORD_STOP})[^\n])+)"
)
# A password stated in words: "my wifi password is Tr0ub4dor&3", "my old pwd was hunter2",
# "the passcode is now 4821".  The value runs to the end of its line or sentence, as after
# `password:`, unless its first word makes the sentence prose about the password rather
# than the password itself ("is on the fridge", "is in the drawer", "is the same as
# before", "is too short", "is strong"), says what happened to it (a past participle: "is
# printed on the router", "was sent to you", "was accepted") or gives a length ("is 12
# characters long").  The key word is singular ("passwords are hashed" is prose).  The match
# starts at the key word (kept verbatim in ``sep``): a literal start keeps the scan fast.
_PROSE_AFTER_PASSWORD_TEXT: Final = """
    a an the this that these those my your his her its our their some any no none not
    never it there here what which who whose how where when why whatever something
    nothing anything everything same different one another other
    on in at by for from to with without under over behind inside outside near next of
    about above below into onto like as than after before since until up down out off
    through between beside somewhere nowhere anywhere everywhere
    too so very quite really pretty still now also just only always probably definitely
    already again more less much way kind sort almost actually literally totally even
    usually currently supposed then later often sometimes apparently obviously clearly
    hopefully supposedly indeed rarely automatically easily
    and or but because if
    strong weak long short secure insecure safe unsafe simple easy hard complex
    complicated wrong incorrect invalid valid expired expiring required needed mandatory
    optional missing empty blank unknown forgotten lost compromised leaked stolen shared
    known changed reset saved stored written set hashed encrypted protected hidden secret
    private personal mine yours hers ours theirs fine ok okay good bad great terrible
    awful new old being been going gonna getting due used working broken case all
    lowercase uppercase numeric alphanumeric random unique generated available visible
    """
_PROSE_AFTER_PASSWORD: Final = "|".join(_PROSE_AFTER_PASSWORD_TEXT.split())
# Past participles: a regular one is an all-letters word ending in "ed" (lower case, or
# capitalised), at least four letters and not "-eed" ("red", "speed" and "seed" may well be
# the password); an irregular one is listed.  A value with a digit, a symbol or mixed case
# (`Tr0ub4dor&3`, `hunter2`) is never one, so it stays redacted.  A password that really is
# a lone participle ("the password is accepted") is left visible: that reading is rare,
# and "the password was accepted" is a common sentence.
_IRREGULAR_PARTICIPLES_TEXT: Final = """
    sent kept given shown made taken chosen gotten spoken frozen beaten fallen drawn seen
    done found held left told sold put read bought brought built caught taught thought
    meant spent hung stuck begun driven ridden written shaken worn torn sworn grown thrown
    blown flown withheld mistaken forgiven overwritten rewritten
    """
_PARTICIPLE: Final = (
    r"(?:[A-Za-z][a-z]*[a-df-z]ed"
    rf"|(?i:{'|'.join(_IRREGULAR_PARTICIPLES_TEXT.split())}))"
)
_LENGTH_VALUE: Final = r"\d+[ \t]+(?i:characters|chars|letters|digits|numbers|symbols)\b"
# "is", "was", "is:", and "is now / still / set to / changed to" before the value; atomic,
# so a prose word after "now" cannot be retried as the value "now ...".
_STATED: Final = (
    r"(?>[ \t]+(?i:is|was)(?:[ \t]*+:)?[ \t]++"
    r"(?:(?i:now|still|set[ \t]+to|changed[ \t]+to)[ \t]++)?)"
)
_PASSWORD_STATED: Final = regex.compile(
    # The look-ahead is redundant but gives the engine a fast first-character scan.
    rf"(?=(?i:p[aw]))(?P<sep>(?:{_PASSWORD_WORDS})(?:{_KEY_END}{_PASSWORD_QUALIFIER})?"
    rf"{_KEY_END}{_STATED})"
    r"(?![\"']?\[REDACTED:)"
    rf"(?!(?:(?i:{_PROSE_AFTER_PASSWORD})|{_PARTICIPLE})(?![\w'\-])|{_LENGTH_VALUE})"
    rf"(?P<value>{_QUOTED_VALUE}|(?=[^\s\"'])(?:[^\n.!?&]++|(?!{_PASSWORD_STOP})[^\n])+)"
)
# A PIN: "my PIN is 4821", "pin code: 0000", "SIM pin=1234", "my pin is 12 34".  "pin" is
# also an ordinary word: a hardware pin ("LED pin: 13", "GPIO pin is 17"), a length ("the
# pin is 2 inches long"), a version pin ("requests pin: 2.31.0"), "pin: this message".  So
# the value is digits only, as whole words (up to four groups: "12 34"), not followed by a
# word character, a decimal or version part or a unit; `_replace_pin` then wants 4 to 8
# digits in all.
_PIN_UNITS: Final = """
    mm cm inch inches ft feet foot mil mils volt volts ma amp amps ohm ohms kohm hz khz mhz
    rpm long wide deep tall high
    """
_PIN: Final = regex.compile(
    rf"(?P<sep>{_SEGMENT_START}(?i:pin)(?:[ \t]+(?i:code|number))?"
    rf"{_KEY_END}(?:{_STATED}|[ \t]*+(?>:=|=>|[:=](?!=))[ \t]*+))"
    r"(?P<value>\d{1,8}+(?:[ \t]\d{1,8}+){0,3}+)"
    r"(?![\w\-]|[.,:/]\d)"
    rf"(?![ \t]+(?i:{'|'.join(_PIN_UNITS.split())})(?![\w'\-]))"
)
_MIN_PIN_DIGITS: Final = 4
_MAX_PIN_DIGITS: Final = 8
_TRAILING_SPACE: Final = regex.compile(r"[ \t]*\Z")
_CREDENTIAL: Final = regex.compile(
    rf"(?<=(?:{_OTHER_SECRET_WORDS}){_KEY_TAIL})"
    rf"{_SEPARATOR}"
    # `Authorization: Bearer x` keeps the scheme.  Without a token after it, the scheme
    # word itself is the value (as it would be in a truncated copy, which keeps this
    # idempotent); a scheme followed by a marker is already redacted.
    rf"(?P<scheme>(?:{_SCHEMES}[ \t]+)?)"
    rf"(?![\"']?\[REDACTED:|{_SCHEMES}[ \t]+[\"']?\[REDACTED:)"
    rf"(?P<value>{_QUOTED_VALUE}|[^\s\"']\S*)"
)
# A key, token or secret stated in words: "my API key is Zx81kQ02pLm7Yt5R", "the bot token
# was abc123def".  These words are common in prose ("the key is patience", "my secret is
# that I like cats"), so only a one-word value shaped like a token counts (see
# `_replace_stated_credential`).  The match starts at the space before "is"/"was" and
# checks the key word with a look-behind: these words' letters are too common in text for
# a fast scan on them.
_CREDENTIAL_STATED: Final = regex.compile(
    rf"(?=[ \t]+(?i:is|was)[ \t:])(?<=(?:{_OTHER_SECRET_WORDS}){_KEY_END})(?P<sep>{_STATED})"
    r"(?![\"']?\[REDACTED:)"
    r"(?P<value>[^\s\"'\[]\S*)"
)
# Which key a credential match belongs to, checked on the text just before the separator
# (searched with `endpos` at the separator, so the look-behinds still see the real text).
_KEY_WINDOW: Final = 64
# The key is an attribute (`self.password =`): the line is code.
_ATTRIBUTE_KEY_BEFORE: Final = regex.compile(r"\.[A-Za-z_][A-Za-z0-9_]*+[\"']?[ \t]*\Z")
# The key is compared (`if password == confirm_password: ok`): the `:` ends a condition.
_COMPARED_KEY_BEFORE: Final = regex.compile(r"[=!]==?[ \t]*[A-Za-z_][A-Za-z0-9_]*+[ \t]*\Z")
_AUTHORIZATION_BEFORE: Final = regex.compile(rf"(?i:authorization){_KEY_TAIL}\Z")
_AWS_SECRET_BEFORE: Final = regex.compile(
    rf"(?i:aws[ _.\-]?secret[ _.\-]?access[ _.\-]?key){_KEY_TAIL}\Z"
)
# `key` alone (or `sort_key`, "primary key", "Answer key") names no secret; a qualified
# key (`api_key`, `x-api-key`, `apiKey`, "API key", `SECRET_KEY`...) does.  The same names
# decide which dict keys `redact_leaves` treats as secret.
_KEY_QUALIFIERS: Final = (
    r"api|secret|private|access|signing|encryption|auth|master|client|ssh|app|consumer|session"
)
_QUALIFIED_KEY: Final = rf"{_SEGMENT_START}(?i:(?:{_KEY_QUALIFIERS})[ _.\-]?key)"
_KEY_BEFORE: Final = regex.compile(rf"{_SEGMENT_START}(?i:key){_KEY_TAIL}\Z")
_QUALIFIED_KEY_BEFORE: Final = regex.compile(rf"{_QUALIFIED_KEY}{_KEY_TAIL}\Z")
# A dict key is secret-looking if its last segment is a secret word (same rule as above)...
_SECRET_DICT_KEY: Final = regex.compile(rf"(?:{_SECRET_WORDS}|{_PASS_SEGMENT})\Z")
# ... except that a bare `key` (`sort_key`, `cache_key`) needs a qualifier.
_SECRET_KEY_SUFFIX: Final = regex.compile(rf"{_QUALIFIED_KEY}\Z")
# After a one-word value of a token/secret key: nothing else on the line.
_LINE_END: Final = regex.compile(r"[ \t]*(?:\n|\Z)")
# An environment variable glued to a bare `=`, where a shell assignment stands (a line's
# start, after a space, `;`, `&` or `|`): `export GITHUB_TOKEN=x && ./deploy.sh`.
_SHELL_ASSIGNED_KEY: Final = regex.compile(r"(?<![^\s;&|])[A-Z][A-Z0-9_]*\Z")
# Values of an assignment that hold no secret: a reference to one, a placeholder, a literal.
_NOT_A_SECRET_VALUE: Final = regex.compile(
    r"[$<%{]|(?:None|True|False|true|false|null|nil|undefined)\Z"
)
# Value shapes (see `_looks_like_token`).
_MIN_TOKEN_CHARS: Final = 6
_MIN_MIXED_CLASS_CHARS: Final = 8
_MIN_NUMBER_TOKEN_DIGITS: Final = 16
_MIN_LONE_VALUE_CHARS: Final = 4
# Punctuation that joins or ends words in prose (`well-being`, `Alice's`, `B,C`); it does
# not make a word look generated.
_PROSE_PUNCT: Final = "-.,;:'\"()[]"

# A bare `Bearer <token>`: the token must look like one (a digit, or 20+ characters), so
# "the bearer instrument" stays.
_BEARER: Final = regex.compile(
    rf"{_LB}(?P<word>(?i:bearer)[ \t]+)(?!\[REDACTED:)"
    rf"(?:(?=[A-Za-z._~+/=\-]*[0-9])[{TOKEN_CHARS}]{{8,}}|[{TOKEN_CHARS}]{{20,}})"
)

# Code that uses a secret, rather than holding one: `self.password = password`, `api_key =
# os.environ['API_KEY']`, `def check(password: str) -> bool:`, `token = get_token()`.  An
# unquoted value that is such an expression is no secret (see `_is_code_value`); a literal
# secret in code is quoted, and quoted values are always redacted.
_IDENT_CHAIN: Final = regex.compile(r"[A-Za-z_][A-Za-z0-9_]*+(?:\.[A-Za-z_][A-Za-z0-9_]*+)*+")
# What may follow an expression that is the whole value (the end, or code punctuation).
_CODE_VALUE_END: Final = regex.compile(r"[ \t]*+(?:[),;|=#]|\Z)")
_CODE_RECEIVERS: Final = frozenset(
    {"self", "this", "cls", "os", "config", "settings", "env", "process", "request", "args"}
    | {"options", "opts", "ctx", "params", "kwargs", "creds", "credentials"}
)
_TYPE_NAMES: Final = frozenset(
    {"str", "bytes", "int", "bool", "float", "string", "String", "number", "Any", "any"}
    | {"Optional", "SecretStr", "SecretBytes", "None", "object", "char"}
)
_SECRET_NAME_SEGMENTS: Final = frozenset(
    {"password", "passwd", "passphrase", "passcode", "pwd", "pw", "pass", "token", "secret"}
    | {"key", "apikey", "credential", "credentials", "auth"}
)
_IDENT_SEGMENTS: Final = regex.compile(r"_+|(?<=[a-z0-9])(?=[A-Z])")

# Sentence punctuation after an unquoted value is kept visible: `password: hunter2.`
_VALUE_TRAILING_PUNCT: Final = ".,;:)]}>"


def _marker(kind: str) -> str:
    return f"{_MARKER_PREFIX}{kind}]"


# --------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------


def redact_secrets(text: str, *, cut: bool = False) -> str:
    """Replace private regions and credentials with ``[REDACTED:<kind>]`` markers.

    Kinds: ``private`` (``<private>...</private>``, nested ones included; an unclosed one
    runs to the end),
    ``private_key`` (PEM; a block without END runs to the end), ``url_credentials``
    (scheme and host stay), ``credential`` (``key = value``, ``key: value``, JSON-style;
    the key stays), ``authorization`` (an ``Authorization:`` header; the scheme stays),
    ``aws_secret_key``, ``bearer``, ``openai_key``, ``anthropic_key``, ``github_token``,
    ``gitlab_token``, ``slack_token``, ``slack_webhook``, ``stripe_key``,
    ``aws_access_key``, ``google_api_key``, ``google_oauth_token``,
    ``google_client_secret``, ``npm_token``, ``huggingface_token``, ``groq_key``,
    ``xai_key``, ``jwt``, ``discord_token`` and ``discord_webhook``. A long token-shaped
    user alone in a URL (``https://<token>@github.com``) is a ``url_credentials`` too.

    A password's value (``password``, ``passwd``, ``passphrase``, ``passcode``, ``pwd``,
    ``pw``) is redacted up to the end of its line or sentence, spaces included, after a
    separator (``password: x``) or stated in words (``my password is x``, ``the pwd was
    x``) - unless, in words, it starts with prose about the password ("is on the fridge",
    "is too short", "is the same as before", "is strong", "is 12 characters long") or a
    past participle ("is printed on the router", "was sent to you", "was accepted").  A
    PIN (``PIN: 4821``, ``my pin is 4821``) is redacted only when it is 4 to 8 digits as
    whole words ("LED pin: 13", "requests pin: 2.31.0", "the pin is 2 inches long" stay).
    The value of a ``key``, ``token`` or ``secret`` is one word and is redacted only if it
    looks like a secret: token-shaped (``abc123``), or for anything but a bare ``key`` a
    lone word ending the line (``secret: opensesame``) or assigned (``SECRET=opensesame &&
    ./run.sh``), or a quoted string; stated in words
    (``my API key is x``) it must be token-shaped.  So "my password is strong", "the key =
    happiness", "the key is patience" and "Secret: the butler did it" are left alone, and
    so is code that uses a secret rather than holding one (``self.password = password``,
    ``api_key = os.environ['API_KEY']``, ``if password == confirm_password:``).
    Redaction is idempotent, so already-redacted text passes through unchanged.

    ``cut`` says that ``text`` is a head `cut_safely` took from a longer text: a value
    that runs into its end may go on there, so none of it stays visible.
    """
    return _redact(text, cut=cut)[0]


def redaction_kinds(text: str) -> list[str]:
    """List the kind of every redaction :func:`redact_secrets` would make.

    One entry per redaction (regions first, then the other kinds pass by pass), meant for
    audit counters: it reports *that* something was redacted, never the value.
    """
    return _redact(text)[1]


def redact_leaves(obj: T) -> T:
    """Redact every string inside nested dicts, lists and tuples; return a new structure.

    Redaction must see individual values, never serialized JSON: a marker must not break
    the JSON syntax, and a pattern must not run across two values.  Because a leaf cannot
    see its key, a string stored under a secret-looking key (``password``, ``api_key``,
    ``clientSecret``, ``access_token``, ``authorization``...) is replaced entirely.  A bare
    ``key`` (or ``sort_key``, ``cache_key``) is not treated as secret in structured data.
    Dict keys are never changed; other objects (numbers, ``None``...) are returned as is.
    """
    return cast(T, _redact_obj(obj, under_secret_key=False))


def cut_safely(text: str, bound: int) -> str:
    """Return a head of ``text`` of at most ``bound`` code points that splits no token.

    A token cut in half may no longer match its pattern (``sk-abc`` is too short to be a
    key) and would then be stored in the clear, so the head only ends next to a character
    outside every token alphabet (whitespace, punctuation such as ``$ , ; { }``...); the
    word that straddles ``bound`` is dropped.  Secrets that can span such characters stay
    safe: an unclosed ``<private>`` region, PEM block or quoted value is redacted to the
    end, an unquoted ``key=value`` redacts whatever part of the value is present, and a URL
    userinfo that runs into the cut is redacted without its ``@`` (``cut=True`` passes).
    """
    if not _TOKEN_CHAR.match(text, bound - 1) or not _TOKEN_CHAR.match(text, bound):
        return text[:bound]
    boundary = _LAST_NON_TOKEN_CHAR.search(text, 0, bound)
    return text[: boundary.end()] if boundary else ""


# --------------------------------------------------------------------------------------
# Internals
# --------------------------------------------------------------------------------------

# Gates for the slowest passes (most text holds no candidate for them): a pass runs only
# when the text, as that pass sees it, holds a word that every match of its pattern
# contains. Case-insensitive words are looked up in `str.lower()` of the text, which for
# their letters folds exactly as the regex engine's IGNORECASE does, except that the
# engine also takes the long s for an s and the dotted capital I for an i (whose
# `lower()` is two code points, `i` and a combining dot, so `pİn` would not hold `pin`):
# a text holding either runs every pass (a test scans every code point to prove there is
# no other such letter).  Words without letters (`://`) fold to themselves.
_REGION_WORDS: Final = ("private",)
_URL_GATE: Final = ("://",)
_PASSWORD_GATE: Final = ("pass", "pw")
_CREDENTIAL_GATE: Final = ("secret", "token", "key", "authorization")
_PIN_GATE: Final = ("pin",)
_BEARER_GATE: Final = ("bearer",)
_FOLDED_ONLY_BY_REGEX: Final = "\u017f\u0130"
# Token kinds: every match holds, as written, one word of each group (the webhook kinds'
# letters are case-insensitive, so only their `/` is used).  A one-character group comes
# first where there is one: `in` finds a character several times faster than a word, and
# a word costs about as much as a pattern with a plain literal prefix (`sk-`, `eyJ`).
_TOKEN_GATES: Final[dict[str, tuple[tuple[str, ...], ...]]] = {
    "discord_webhook": (("/",),),
    "slack_webhook": (("/",),),
    "anthropic_key": (("-",), ("sk-ant-",)),
    "openai_key": (("-",), ("sk-",)),
    # `gh[pousr]_…` or `github_pat_…`.
    "github_token": (("_",), ("gh", "github_pat_")),
    "gitlab_token": (("-",), ("gl",)),
    "slack_token": (("-",), ("xox", "xapp-")),
    # `[sr]k_live_…`, `[sr]k_test_…` or `whsec_…`.
    "stripe_key": (("_",), ("k_live_", "k_test_", "whsec_")),
    "aws_access_key": (("AKIA", "ASIA"),),
    "google_api_key": (("AIza",),),
    "google_oauth_token": (("ya29.",),),
    "google_client_secret": (("-",), ("GOCSPX-",)),
    "npm_token": (("_",), ("npm_",)),
    "huggingface_token": (("_",), ("hf_",)),
    "groq_key": (("_",), ("gsk_",)),
    "xai_key": (("-",), ("xai-",)),
    "jwt": (("eyJ",),),
}


def _fold(text: str) -> str | None:
    """The text as the case-insensitive gates see it; None: every pass must run."""
    if not text.isascii() and any(char in text for char in _FOLDED_ONLY_BY_REGEX):
        return None
    return text.lower()


def _may_hold(folded: str | None, words: tuple[str, ...]) -> bool:
    """Whether a case-insensitive pattern that needs one of ``words`` can match the text
    that `_fold` turned into ``folded``."""
    return folded is None or any(word in folded for word in words)


def _token_may_match(kind: str, text: str) -> bool:
    """Whether the pattern of token ``kind`` can match ``text`` (see `_TOKEN_GATES`)."""
    if kind == "discord_token":
        return _may_hold_discord_token(text)
    for group in _TOKEN_GATES.get(kind, ()):
        for word in group:
            if word in text:
                break
        else:
            return False
    return True


def _may_hold_discord_token(text: str) -> bool:
    """Whether ``text`` has two dots seven apart, as the middle part of a Discord token.

    The pattern needs `.` + six base64url characters (which exclude `.`) + `.`: the next
    dot after some dot is exactly seven further.  Its other parts start anywhere an
    `[MNO]` does, so the engine tries them all over ordinary text; prose has few dots.
    """
    dot = text.find(".")
    while dot != -1:
        after = text.find(".", dot + 1)
        if after == dot + 7:
            return True
        dot = after
    return False


_Replacer = Callable[[regex.Match[str], str, bool], tuple[str, str | None]]
# Shorter tokens are not swept elsewhere in the text: too likely to occur by chance.
_MIN_SWEPT_SECRET: Final = 16
# Rounds of token passes and sweep (see `_redact`); a bound keeps the work linear.
_MAX_SWEEP_ROUNDS: Final = 8


def _redact(text: str, *, cut: bool = False) -> tuple[str, list[str]]:
    """Redact ``text``; ``cut`` means it is the head of a longer text (see `cut_safely`).

    Passes run in a fixed order: regions, URL credentials, token kinds, ``key = value``,
    bare ``Bearer``.  Each pass is one regex with a literal-ish start, so a value without
    any candidate is scanned quickly; later passes never match inside an earlier marker.
    """
    kinds: list[str] = []
    # Folding costs about as much as a fast pass: once per text, not once per gate (most
    # texts come out of every pass unchanged, as the same object).
    # Two passes share each of the password and credential gates: their verdicts too.
    folded_text, folded = text, _fold(text)
    verdicts: dict[tuple[str, ...], bool] = {}

    def may_hold(words: tuple[str, ...]) -> bool:
        nonlocal folded_text, folded
        if folded_text is not text:
            folded_text, folded = text, _fold(text)
            verdicts.clear()
        verdict = verdicts.get(words)
        if verdict is None:
            verdict = verdicts[words] = _may_hold(folded, words)
        return verdict

    text = _redact_regions(text, kinds, folded)
    if not text:
        return text, kinds

    found: dict[str, str] = {}  # each token redacted (whole match) -> its kind

    def sub(
        pattern: regex.Pattern[str],
        replace: _Replacer,
        kind: str,
        *,
        token: bool,
        gate: tuple[str, ...] | None = None,
    ) -> None:
        nonlocal text
        if gate is not None and not may_hold(gate):
            return
        if pattern.search(text) is None:
            return

        def replace_one(match: regex.Match[str]) -> str:
            replacement, reported = replace(match, kind, cut)
            if reported is not None:
                kinds.append(reported)
                if token and replacement == _marker(reported):
                    found[match.group(0)] = reported
            return replacement

        text = pattern.sub(replace_one, text)

    sub(
        _URL_CREDENTIALS_AT_CUT if cut else _URL_CREDENTIALS,
        _replace_url,
        "url_credentials",
        token=False,
        gate=_URL_GATE,
    )
    sub(
        _URL_TOKEN_USERINFO_AT_CUT if cut else _URL_TOKEN_USERINFO,
        _replace_url_token,
        "url_credentials",
        token=False,
        gate=_URL_GATE,
    )
    swept, rounds = True, 0
    while swept and rounds < _MAX_SWEEP_ROUNDS:
        rounds += 1
        for kind, pattern in _TOKEN_PATTERNS:
            if _token_may_match(kind, text):
                sub(pattern, _replace_token, kind, token=True)
        text = _redact_aws_secret_pairs(text, kinds, found)
        # A token recognised once is hidden everywhere, also where it is glued to other
        # text (`0sk-…`, `…KEYsk-…`) and its shape alone would not have given it away.
        # A marker put there can end the word before it (`AKIA…EXAMPLE` glued to `sk-…`
        # is an AWS key id once the `sk-…` is a marker), so the token passes run again,
        # as the next sanitize would.  Every round hides at least one more secret; only a
        # contrived chain of keys glued to one another needs more than two.
        swept = False
        for secret in sorted(found, key=len, reverse=True):
            if len(secret) >= _MIN_SWEPT_SECRET and secret in text:
                kinds.extend([found[secret]] * text.count(secret))
                text = text.replace(secret, _marker(found[secret]))
                swept = True
    sub(_PASSWORD, _replace_password, "credential", token=False, gate=_PASSWORD_GATE)
    sub(_PASSWORD_STATED, _replace_password, "credential", token=False, gate=_PASSWORD_GATE)
    sub(
        _CREDENTIAL_STATED,
        _replace_stated_credential,
        "credential",
        token=False,
        gate=_CREDENTIAL_GATE,
    )
    sub(_PIN, _replace_pin, "credential", token=False, gate=_PIN_GATE)
    sub(_CREDENTIAL, _replace_credential, "credential", token=False, gate=_CREDENTIAL_GATE)
    sub(_BEARER, _replace_bearer, "bearer", token=False, gate=_BEARER_GATE)
    return text, kinds


def _redact_aws_secret_pairs(text: str, kinds: list[str], found: dict[str, str]) -> str:
    """Hide AWS secret access keys on the lines around an (already hidden) AWS key id."""
    if _AWS_KEY_ID_MARKER not in text:
        return text
    lines = text.split("\n")
    near: set[int] = set()
    for number, line in enumerate(lines):
        if _AWS_KEY_ID_MARKER in line:
            near.update((number - 1, number, number + 1))

    def replace(match: regex.Match[str]) -> str:
        kinds.append("aws_secret_key")
        found[match.group()] = "aws_secret_key"
        return _marker("aws_secret_key")

    for number in sorted(near):
        if 0 <= number < len(lines):
            lines[number] = _AWS_SECRET_CANDIDATE.sub(replace, lines[number])
    return "\n".join(lines)


def _redact_regions(text: str, kinds: list[str], folded: str | None) -> str:
    """Phase 1: ``<private>`` regions and PEM private keys, each up to its closer or EOF.

    ``folded`` is `_fold` of ``text``."""
    if not _may_hold(folded, _REGION_WORDS):
        return text
    pieces: list[str] = []
    pos = 0
    while True:
        opener = _REGION_OPEN.search(text, pos)
        if opener is None:
            break
        kind = "private" if opener.group("private") is not None else "private_key"
        pieces.append(text[pos : opener.start()])
        pieces.append(_marker(kind))
        kinds.append(kind)
        end = _private_end(text, opener.end()) if kind == "private" else _pem_end(text, opener)
        if end is None:
            pos = len(text)
            break
        pos = end
    if not pieces:
        return text
    pieces.append(text[pos:])
    return "".join(pieces)


def _private_end(text: str, pos: int) -> int | None:
    """End of the closer that balances a ``<private>`` opened before ``pos`` (None: EOF)."""
    depth = 1
    for tag in _PRIVATE_TAG.finditer(text, pos):
        depth += 1 if tag.group("open") is not None else -1
        if depth == 0:
            return tag.end()
    return None


def _pem_end(text: str, opener: regex.Match[str]) -> int | None:
    """End of the END line of a PEM private key (None: the block runs to EOF)."""
    closer = _PEM_END.search(text, opener.end())
    return closer.end() if closer is not None else None


def _replace_token(match: regex.Match[str], kind: str, cut: bool) -> tuple[str, str | None]:
    token = match.group()
    if kind == "openai_key" and not _is_openai_key(token):
        return token, None
    if kind == "discord_token" and not _is_discord_token(token):
        return token, None
    core = token.rstrip(".")  # a sentence-ending dot is not part of the secret
    return _marker(kind) + token[len(core) :], kind


def _replace_url(match: regex.Match[str], kind: str, cut: bool) -> tuple[str, str | None]:
    at = "@" if match.group().endswith("@") else ""
    return f"://{_marker(kind)}{at}", kind


def _replace_url_token(match: regex.Match[str], kind: str, cut: bool) -> tuple[str, str | None]:
    if not _looks_like_token(match.group("user")):
        return match.group(), None
    at = "@" if match.group().endswith("@") else ""
    return f"://{_marker(kind)}{at}", kind


def _replace_bearer(match: regex.Match[str], kind: str, cut: bool) -> tuple[str, str | None]:
    return match.group("word") + _marker(kind), kind


def _replace_password(match: regex.Match[str], kind: str, cut: bool) -> tuple[str, str | None]:
    """A password's value is always redacted: quoted, or to the end of line or sentence."""
    prefix = match.group("sep")
    value = match.group("value")
    if value[0] in "\"'":
        return prefix + _redact_quoted(match, kind), kind
    if cut and match.end() == len(match.string):
        # The value runs into the cut: it may continue, so nothing of it stays visible.
        return prefix + _marker(kind), kind
    if _key_is_compared(match) or _is_code_value(value, _key_is_attribute(match)):
        return match.group(), None
    core = value.rstrip(_VALUE_TRAILING_PUNCT + " \t")
    if not core:
        return match.group(), None
    return prefix + _marker(kind) + value[len(core) :], kind


def _replace_pin(match: regex.Match[str], kind: str, cut: bool) -> tuple[str, str | None]:
    """A PIN is 4 to 8 digits; fewer or more is a pin number, a count, a length..."""
    digits = sum(char.isdigit() for char in match.group("value"))
    # A value that runs into the cut may go on ("pin is 12 " of "pin is 12 34"): hidden.
    at_cut = cut and _TRAILING_SPACE.match(match.string, match.end()) is not None
    if not at_cut and not _MIN_PIN_DIGITS <= digits <= _MAX_PIN_DIGITS:
        return match.group(), None
    return match.group("sep") + _marker(kind), kind


def _replace_credential(match: regex.Match[str], kind: str, cut: bool) -> tuple[str, str | None]:
    """Redact the value of a key/token/secret/authorization field if it looks secret.

    An ``Authorization`` value is always a credential.  Otherwise a quoted value is redacted
    unless the key is a bare ``key`` (then the quoted text must look like a token, the
    same as in `redact_leaves`), and an unquoted one-word value is redacted if it looks
    like a token (`_looks_like_token`), or - for token, secret and qualified keys - if it
    is the last word on its line (`secret: opensesame`, `clientSecret: shhh`), as a value
    in a config line or a note would be.  "Secret: the butler did it" is a sentence.
    """
    string = match.string
    window = (max(0, match.start() - _KEY_WINDOW), match.start())
    always = False
    if _AUTHORIZATION_BEFORE.search(string, *window):
        kind, always = "authorization", True
    elif _AWS_SECRET_BEFORE.search(string, *window):
        kind = "aws_secret_key"
    bare_key = _KEY_BEFORE.search(string, *window) is not None
    bare_key = bare_key and _QUALIFIED_KEY_BEFORE.search(string, *window) is None
    prefix = match.group("sep") + match.group("scheme")
    value = match.group("value")
    if value[0] in "\"'":
        closed = match.group("dq") is not None or match.group("sq") is not None
        if bare_key and not _looks_like_token(value[1:-1] if closed else value[1:]):
            return match.group(), None
        return prefix + _redact_quoted(match, kind), kind
    if cut and match.end() == len(string):
        # The value runs into the cut: it may continue, so nothing of it stays visible.
        return prefix + _marker(kind), kind
    if _key_is_compared(match) or _is_code_value(value, _key_is_attribute(match)):
        return match.group(), None
    core = value.rstrip(_VALUE_TRAILING_PUNCT)
    if not core:
        return match.group(), None
    lone = (
        not bare_key
        and len(core) >= _MIN_LONE_VALUE_CHARS
        and not _NOT_A_SECRET_VALUE.match(core)
        and (_LINE_END.match(string, match.end()) is not None or _is_shell_assignment(match))
    )
    if not (always or lone or _looks_like_token(core)):
        return match.group(), None
    return prefix + _marker(kind) + value[len(core) :], kind


def _is_shell_assignment(match: regex.Match[str]) -> bool:
    """``GITHUB_TOKEN=value && ./deploy.sh``: an environment variable assigned in a shell
    line holds its value, whatever follows it (``f(token=None)``, ``token=enabled`` in
    prose, ``API_TOKEN=$API_TOKEN`` do not)."""
    if match.group("sep") != "=":
        return False
    start = max(0, match.start() - _KEY_WINDOW)
    return _SHELL_ASSIGNED_KEY.search(match.string, start, match.start()) is not None


def _replace_stated_credential(
    match: regex.Match[str], kind: str, cut: bool
) -> tuple[str, str | None]:
    """A key/token/secret stated in words is redacted only if its value looks like a token."""
    prefix = match.group("sep")
    if cut and match.end() == len(match.string):
        # The value runs into the cut: it may continue, so nothing of it stays visible.
        return prefix + _marker(kind), kind
    value = match.group("value")
    core = value.rstrip(_VALUE_TRAILING_PUNCT)
    if not _looks_like_token(core):
        return match.group(), None
    return prefix + _marker(kind) + value[len(core) :], kind


def _key_is_attribute(match: regex.Match[str]) -> bool:
    """Whether the key before a separator match is an attribute (``self.password``)."""
    window = (max(0, match.start() - _KEY_WINDOW), match.start())
    return _ATTRIBUTE_KEY_BEFORE.search(match.string, *window) is not None


def _key_is_compared(match: regex.Match[str]) -> bool:
    """Whether the key before a separator match is the right side of ``==`` / ``!=``."""
    window = (max(0, match.start() - _KEY_WINDOW), match.start())
    return _COMPARED_KEY_BEFORE.search(match.string, *window) is not None


def _is_code_value(value: str, key_is_attribute: bool) -> bool:
    """Whether an unquoted value is a code expression that names a secret, not the secret.

    Yes: a call or subscript (``getpass()``, ``os.environ['API_KEY']``); an attribute of
    a usual receiver or named after a secret (``self.token``, ``settings.SECRET_KEY``); a
    type annotation (``password: str)``); a variable named after a secret
    (``confirm_password``, ``API_KEY``, ``apiKey``, or ``password`` itself when the key is
    an attribute: ``self.password = password``).  No: a plain word (``hunter2``,
    ``Password123``, ``MyPassword``, ``password``) - that is what a password looks like.
    """
    chain = _IDENT_CHAIN.match(value)
    if chain is None:
        return False
    rest = value[chain.end() :]
    if rest.startswith(("(", "[")):
        return True
    if _CODE_VALUE_END.match(rest) is None:
        return False
    parts = chain.group().split(".")
    if len(parts) > 1:
        return parts[0] in _CODE_RECEIVERS or _names_a_secret(parts[-1])
    name = parts[0]
    if name in _TYPE_NAMES:
        return True
    if not _names_a_secret(name):
        return False
    compound = "_" in name or (name[0].islower() and name.lower() != name)
    return compound or key_is_attribute


def _names_a_secret(name: str) -> bool:
    """Whether an identifier is made of letter-only segments, one of them a secret word."""
    segments = [segment for segment in _IDENT_SEGMENTS.split(name) if segment]
    return (
        bool(segments)
        and all(segment.isalpha() for segment in segments)
        and any(segment.lower() in _SECRET_NAME_SEGMENTS for segment in segments)
    )


def _redact_quoted(match: regex.Match[str], kind: str) -> str:
    """The marker in place of a quoted value, inside the same quotes (an unclosed quote
    stays unclosed, so the result reads like the input)."""
    value = match.group("value")
    closed = match.group("dq") is not None or match.group("sq") is not None
    return value[0] + _marker(kind) + (value[0] if closed else "")


def _looks_like_token(value: str) -> bool:
    """Whether one word is shaped like a generated secret rather than like prose.

    Yes: letters mixed with digits in 6+ characters (`abc123`, `Tr0ub4dor`, `a1b2c3d4`),
    three of lower case / upper case / digits / symbols in 8+ characters (`Hunter#Pass`),
    or a number of 16+ digits.  No: words ("happiness", "Alice", "asc", "id"), short
    numbers ("5", "2024"), hyphenated or quoted prose (`well-being`, `Alice's`).
    """
    if len(value) < _MIN_TOKEN_CHARS or any(char.isspace() for char in value):
        return False
    lower = upper = digit = symbol = False
    for char in value:
        if char.isdigit():
            digit = True
        elif char.islower():
            lower = True
        elif char.isupper():
            upper = True
        elif not char.isalnum() and char not in _PROSE_PUNCT:
            symbol = True
    if digit and (lower or upper):
        return True
    if len(value) >= _MIN_MIXED_CLASS_CHARS and lower + upper + digit + symbol >= 3:
        return True
    return value.isdigit() and len(value) >= _MIN_NUMBER_TOKEN_DIGITS


def _is_openai_key(token: str) -> bool:
    """Whether an ``sk-...`` word holds a random-looking run of 16+ letters and digits.

    A generated run mixes letters and digits, and has both letter cases (base62) or keeps
    switching between letters and digits (lower-case hex); a word with a number glued on
    (`sk-roadmap2024-for-the-whole-team`) does neither.
    """
    for run in _ALNUM_RUN.findall(token):
        if not any(char.isdigit() for char in run) or not any(char.isalpha() for char in run):
            continue
        if any(char.isupper() for char in run) and any(char.islower() for char in run):
            return True
        switches = sum(a.isdigit() != b.isdigit() for a, b in itertools.pairwise(run))
        if switches >= _MIN_RANDOM_SWITCHES:
            return True
    return False


def _is_discord_token(token: str) -> bool:
    """Whether the first part of a Discord-token-shaped word is a base64url user id.

    A bot token starts with the bot's snowflake id (17 to 20 decimal digits) in unpadded
    base64url; a code identifier that merely has the token's shape decodes to noise.
    """
    first = token.split(".", 1)[0]
    try:
        decoded = base64.urlsafe_b64decode(first + "=" * (-len(first) % 4))
    except (binascii.Error, ValueError):
        return False
    return decoded.isascii() and decoded.isdigit() and 17 <= len(decoded) <= 20


def _is_secret_dict_key(key: object) -> bool:
    if not isinstance(key, str):
        return False
    name = key.strip().strip("\"'")
    if _SECRET_DICT_KEY.search(name) is None:
        return False
    return not name.lower().endswith("key") or _SECRET_KEY_SUFFIX.search(name) is not None


def _redact_obj(obj: object, *, under_secret_key: bool) -> object:
    if isinstance(obj, str):
        if under_secret_key and obj and _MARKER.fullmatch(obj) is None:
            return _marker("credential")
        return redact_secrets(obj)
    if isinstance(obj, dict):
        return {
            key: _redact_obj(value, under_secret_key=under_secret_key or _is_secret_dict_key(key))
            for key, value in obj.items()
        }
    if isinstance(obj, list):
        return [_redact_obj(item, under_secret_key=under_secret_key) for item in obj]
    if isinstance(obj, tuple):
        return tuple(_redact_obj(item, under_secret_key=under_secret_key) for item in obj)
    return obj
