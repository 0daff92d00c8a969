"""Secrets recognised by their context: regions, URL userinfo, credentials after a key word."""

# Every pattern runs in linear time (literal starts, look-behind boundaries, no nested
# ambiguous repetition): values can be huge and adversarial.

from __future__ import annotations

from typing import Final

import regex

from bot.vocabulary.redaction.alphabet import TOKEN_CHARS, WORD_START

# ------------------------------------------------------------------ regions

# Region openers; a separate search finds the closer, so an unclosed region runs to the
# end.  PEM armour is caseless: a lower-cased key is just as secret.
# An opening tag may carry attributes (`<private reason="x">`).
_PRIVATE_OPEN: Final = r"(?i:<[ \t]*private(?:[ \t]+[^<>\n]{0,200})?[ \t]*>)"
REGION_OPEN: Final = regex.compile(
    rf"(?P<private>{_PRIVATE_OPEN})"
    r"|(?P<private_key>(?i:-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----))"
)
# `<private>` regions nest: a closer ends the innermost one, so the tail of an outer
# region (`<private>a <private>b</private> c</private>`) stays hidden.
PRIVATE_TAG: Final = regex.compile(rf"(?P<open>{_PRIVATE_OPEN})|(?i:<[ \t]*/[ \t]*private[ \t]*>)")
PEM_END: Final = regex.compile(r"(?i:-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----)")

# ------------------------------------------------------------------ URL userinfo

# `://user:pass@host`: the password runs to the last `@` that a host follows (a name or
# `[v6]`, a port, then no more host characters), so `#`, `?`, `/`, `[`, `]` or an `@` in it
# does not leak its tail.  An `@` with no host after it belongs to the password.
# The password never runs over another `://` and the host is bounded (DNS labels of 63),
# so a text of many `://x:` stays linear.
_HOST: Final = r"(?:[\w\-]{1,63}+(?:\.[\w\-]{1,63}+){0,8}+|\[[0-9A-Fa-f:.]{2,45}+\])"
_HOST_AFTER: Final = rf"{_HOST}(?::\d{{1,5}})?(?![\w\-@:]|\.\w)"
# No password starts like a port and a path (`http://localhost:3000/@alice`).
_USERINFO_USER: Final = r"://(?!\[REDACTED:)[^\s/?#@:\[\]]*:(?!\d{1,5}[/?#])"
_USERINFO_PASSWORD: Final = rf"(?:[^\s@:]++|:(?!//)|@(?!{_HOST_AFTER}))*+"
# A space in the password only when the host goes on as a URL's does (a port or a path),
# so "https://a:b and mail bob@example.com" keeps its words.
_SPACED_PASSWORD: Final = (
    rf"[^\s@]{{1,64}}+(?:[ \t][^\s@]{{1,64}}+){{1,3}}+(?=@{_HOST}(?::\d|[/?#]))"
)
URL_CREDENTIALS: Final = regex.compile(
    rf"{_USERINFO_USER}(?:{_SPACED_PASSWORD}|{_USERINFO_PASSWORD})@"
)
# For input that was cut: a userinfo running into the cut has lost its `@`.
URL_CREDENTIALS_AT_CUT: Final = regex.compile(
    rf"{_USERINFO_USER}(?:{_SPACED_PASSWORD}|{_USERINFO_PASSWORD})(?:@|\Z)"
)
# A token alone in the userinfo, as git takes one (`https://<token>@github.com/…`); only a
# long, token-shaped user counts, so `https://bob@host` stays.
URL_TOKEN_USERINFO: Final = regex.compile(r"://(?!\[REDACTED:)(?P<user>[^\s/?#@:\[\]]{16,})@")
URL_TOKEN_USERINFO_AT_CUT: Final = regex.compile(
    r"://(?!\[REDACTED:)(?P<user>[^\s/?#@:\[\]]{16,})(?:@|\Z)"
)

# ------------------------------------------------------------------ AWS secret keys

# 40 characters of base64 mixing digits and both cases: too common a shape alone, but a
# secret on the line of its (already redacted) key id or up to two lines around it, as in
# the console's CSV (`AKIA…,wJalr…`), `aws configure` or "keys: AKIA… / wJalr…".
AWS_KEY_ID_MARKER: Final = "[REDACTED:aws_access_key]"
AWS_SECRET_CANDIDATE: Final = regex.compile(
    r"(?<![A-Za-z0-9/+=_.\-])"
    r"(?=[A-Za-z0-9/+]{0,39}[0-9])(?=[A-Za-z0-9/+]{0,39}[a-z])(?=[A-Za-z0-9/+]{0,39}[A-Z])"
    r"[A-Za-z0-9/+]{40}"
    r"(?![A-Za-z0-9/+=_\-]|\.[A-Za-z0-9/+=_\-])"
)

# ------------------------------------------------------------------ key words

# Key words that make `<word> = value` / `<word>: value` a credential.  The word must end
# the key, so `tokenizer`, `keyboard`, `passwords:` never qualify.  Most may end a one-word
# key (`PGPASSWORD`, `csrftoken`); the short ones (`key`, `pwd`) must start a segment of it
# (`db_pwd`, `x-api-key`, `clientKey`), so `monkey:` or `OLDPWD=` do not.  A match starts
# at the separator and checks the key by look-behind: the scan then only stops at `:` and
# `=`, and the key (kept verbatim) is not part of the replacement.
SEGMENT_START: Final = r"(?:(?<![A-Za-z0-9])|(?<=[a-z0-9])(?=[A-Z]))"
PASSWORD_WORDS: Final = rf"(?i:password|passwd|passphrase|passcode)|{SEGMENT_START}(?i:pwd|pw)"
# `.env` files shorten it to `pass` (`DB_PASS=`): only as the last segment after `_`, so
# "boarding pass: 12A" or "bypass: on" stay.
# So may a URL query (`?user=x&pass=y`) and a device or account before it ("wifi pass:",
# "root pass ->").
_PASS_QUALIFIERS: Final = (
    r"wi-?fi|wlan|router|db|admin|root|login|ssh|vpn|e?mail|server|account|user|guest"
    r"|network|sudo"
)
PASS_SEGMENT: Final = (
    r"(?:(?<=[A-Za-z0-9]_)|(?<=[?&;])"
    rf"|(?<=(?<![A-Za-z0-9])(?i:{_PASS_QUALIFIERS})[ _\-]?))(?i:pass)"
)
OTHER_SECRET_WORDS: Final = rf"(?i:secret|token|apikey|authorization)|{SEGMENT_START}(?i:key)"
SECRET_WORDS: Final = f"{PASSWORD_WORDS}|{OTHER_SECRET_WORDS}"
_SCHEMES: Final = r"(?i:bearer|basic|token|bot|digest)"
# A quote or Markdown emphasis may close the key (`"password": x`, `**Password**: x`):
# the model writes its notes in Markdown, and a bold label must not hide the value.
_KEY_END: Final = r"(?:[\"']|[*_`]{1,3})?"
# ... then a short note in brackets, as the AWS CLI prompts `AWS Secret Access Key [None]:`.
KEY_TAIL: Final = rf"{_KEY_END}(?:[ \t]*\[(?!REDACTED:)[^\[\]\n]{{0,32}}\])?[ \t]*"
# `key` alone (`sort_key`, "primary key") names no secret; a qualified key (`api_key`,
# `apiKey`, `SECRET_KEY`...) does, here and for the dict keys of `redact_leaves`.
_KEY_QUALIFIERS: Final = (
    r"api|secret|private|access|signing|encryption|auth|master|client|ssh|app|consumer|session"
)
QUALIFIED_KEY: Final = rf"{SEGMENT_START}(?i:(?:{_KEY_QUALIFIERS})[ _.\-]?key)"
# Atomic, so `=>` is never retried as `=` (the `>` of a redacted `key=>[REDACTED:...]`
# would start a new value); `==` compares, it assigns nothing.
_SEPARATOR: Final = r"(?P<sep>(?>:=|=>|[:=](?!=))[ \t]*+)"
# A quoted value is taken whole, escapes included; an unclosed quote runs to the line end.
_QUOTED_VALUE: Final = (
    r"\"(?!\[REDACTED:)(?:[^\"\\\n]|\\.)+(?P<dq>\")?"
    r"|'(?!\[REDACTED:)(?:[^'\\\n]|\\.)+(?P<sq>')?"
)
# "is", "was", "is:", "is now / still / set to / changed to"; atomic, so a prose word after
# "now" is not retried as the value "now ...".
_STATED: Final = (
    r"(?>[ \t]+(?i:is|was)(?:[ \t]*+:)?[ \t]++"
    r"(?:(?i:now|still|set[ \t]+to|changed[ \t]+to)[ \t]++)?)"
)

# ------------------------------------------------------------------ passwords

# A person chose a password and a passphrase may have spaces: the value runs to a sentence
# end (`.!?` before whitespace), the next query parameter (`&user=`) or the line end.  It
# also hides the odd harmless value ("password: ask Bob"): for passwords the safe side.
_PASSWORD_STOP: Final = r"[.!?](?:\s|\Z)|&[\w.\-]+="
_PASSWORD_VALUE: Final = (
    # Runs of characters that cannot start a stop are taken whole; only `.!?&` are checked.
    rf"(?P<value>{_QUOTED_VALUE}|(?=[^\s\"'])(?:[^\n.!?&]++|(?!{_PASSWORD_STOP})[^\n])+)"
)
# "WiFi password for guests: x", "the password to the server is x", "password (wifi): x":
# a preposition and up to three short words, or a short parenthesis; bounded, so the
# look-behind stays cheap.
_PASSWORD_QUALIFIER: Final = (
    r"(?:[ \t]{1,3}(?i:for|of|to|on|at|in|from)"
    r"(?:[ \t]{1,3}(?!(?i:is|was)(?![\w\-]))[\w\-]{1,24}){1,3}"
    r"|[ \t]{0,3}\([^()\n]{1,32}\))"
)
# People type arrows and dashes too ("root password -> x", "Password — x", "pw - x"); a
# hyphen only between spaces, so `password-protected` is no separator.
_PASSWORD_SEPARATOR: Final = (
    r"(?P<sep>(?>:=|=>|->|[:=](?!=)|[\u2014\u2013\u2192]|(?<=[ \t])-(?=[ \t]))[ \t]*+)"
)
PASSWORD: Final = regex.compile(
    # The redundant look-ahead gives the engine a fast scan for a separator's first char.
    r"(?=[:=\-\u2014\u2013\u2192])"
    rf"(?<=(?:{PASSWORD_WORDS}|{PASS_SEGMENT})(?:{_KEY_END}{_PASSWORD_QUALIFIER})?{KEY_TAIL})"
    rf"{_PASSWORD_SEPARATOR}"
    r"(?![\"']?\[REDACTED:)"
    rf"{_PASSWORD_VALUE}"
)
# A password stated in words ("my wifi password is Tr0ub4dor&3"), unless its first word
# makes the sentence prose about it ("is on the fridge", "is too short", "is strong"), a
# past participle ("was sent to you") or a length ("is 12 characters long").  Singular only:
# "passwords are hashed" is prose.
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
# A regular participle: all letters, 4+, ending in "ed" but not "-eed" ("red", "speed" may
# be the password); a value with a digit, symbol or mixed case never is one.  A password
# that is a lone participle ("is accepted") stays visible: "was accepted" is common prose.
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
# After a dash or an arrow a sentence often goes on about the password ("password - reset
# it on Monday"): a value that starts like prose is no password there.
PROSE_VALUE: Final = regex.compile(
    rf"(?:(?:(?i:{_PROSE_AFTER_PASSWORD})|{_PARTICIPLE})(?![\w'\-])|{_LENGTH_VALUE})"
)
PASSWORD_STATED: Final = regex.compile(
    # The redundant look-ahead gives the engine a fast first-character scan; the match
    # starts at the key word (kept verbatim in `sep`).
    rf"(?=(?i:p[aw]))(?P<sep>(?:{PASSWORD_WORDS})(?:{_KEY_END}{_PASSWORD_QUALIFIER})?"
    rf"{_KEY_END}{_STATED})"
    r"(?![\"']?\[REDACTED:)"
    rf"(?!(?:(?i:{_PROSE_AFTER_PASSWORD})|{_PARTICIPLE})(?![\w'\-])|{_LENGTH_VALUE})"
    rf"{_PASSWORD_VALUE}"
)

# No separator at all ("pw hunter2", "wifi pass Tr0ub4dor", "passcode 482913"): one word,
# redacted only if it looks generated (see the replacer), so "pass the salt" stays.
PASSWORD_SPACED: Final = regex.compile(
    rf"(?<=(?:{PASSWORD_WORDS}|{PASS_SEGMENT}){_KEY_END})(?P<sep>[ \t]++)"
    r"(?![\"']?\[REDACTED:)(?P<value>[^\s\"'\[]\S*+)"
)

# ------------------------------------------------------------------ PINs

# "pin" is an ordinary word too ("LED pin: 13", "requests pin: 2.31.0", "the pin is 2
# inches long"): the value is whole words of digits (up to four groups: "12 34") with no
# decimal, version part or unit after it; the replacement then wants 4 to 8 digits.
_PIN_UNITS: Final = """
    mm cm inch inches ft feet foot mil mils volt volts ma amp amps ohm ohms kohm hz khz mhz
    rpm long wide deep tall high
    """
PIN: Final = regex.compile(
    rf"(?P<sep>{SEGMENT_START}(?i:pin)(?:[ \t]+(?i:code|number))?"
    rf"{_KEY_END}(?:{_STATED}|[ \t]*+(?>:=|=>|[:=](?!=))[ \t]*+))"
    r"(?P<value>\d{1,8}+(?:[ \t]\d{1,8}+){0,3}+)"
    r"(?![\w\-]|[.,:/]\d)"
    rf"(?![ \t]+(?i:{'|'.join(_PIN_UNITS.split())})(?![\w'\-]))"
)

# ------------------------------------------------------------------ keys, tokens, secrets

# Their value is one word, redacted only if it looks secret: in prose these words are
# mostly not about credentials ("the key = happiness", "Secret: the butler did it").
CREDENTIAL: Final = regex.compile(
    rf"(?<=(?:{OTHER_SECRET_WORDS}){KEY_TAIL})"
    rf"{_SEPARATOR}"
    # `Authorization: Bearer x` keeps the scheme.  A scheme with no token after it is the
    # value itself (as in a truncated copy, which keeps this idempotent).
    rf"(?P<scheme>(?:{_SCHEMES}[ \t]+)?)"
    rf"(?![\"']?\[REDACTED:|{_SCHEMES}[ \t]+[\"']?\[REDACTED:)"
    rf"(?P<value>{_QUOTED_VALUE}|[^\s\"']\S*)"
)
# "my API key is Zx81kQ02pLm7Yt5R": the value must be token-shaped ("the key is patience").
# The match starts at the space before "is"/"was" and checks the key word by look-behind:
# its letters are too common in text for a fast scan on them.
CREDENTIAL_STATED: Final = regex.compile(
    rf"(?=[ \t]+(?i:is|was)[ \t:])(?<=(?:{OTHER_SECRET_WORDS}){_KEY_END})(?P<sep>{_STATED})"
    r"(?![\"']?\[REDACTED:)"
    r"(?P<value>[^\s\"'\[]\S*)"
)
# A bare `Bearer <token>`: a digit or 20+ characters, so "the bearer instrument" stays.
BEARER: Final = regex.compile(
    rf"{WORD_START}(?P<word>(?i:bearer)[ \t]+)(?!\[REDACTED:)"
    rf"(?:(?=[A-Za-z._~+/=\-]*[0-9])[{TOKEN_CHARS}]{{8,}}|[{TOKEN_CHARS}]{{20,}})"
)

# ------------------------------------------------------------------ gates

# A pass runs only when the text holds a word every match of its pattern contains, looked
# up case-insensitively (see the engine's `_fold`).
REGION_GATE: Final = ("private",)
URL_GATE: Final = ("://",)
PASSWORD_GATE: Final = ("pass", "pw")
CREDENTIAL_GATE: Final = ("secret", "token", "key", "authorization")
PIN_GATE: Final = ("pin",)
BEARER_GATE: Final = ("bearer",)
GATE_WORDS: Final = (
    REGION_GATE + URL_GATE + PASSWORD_GATE + CREDENTIAL_GATE + PIN_GATE + BEARER_GATE
)
