"""Credentials in the shapes people paste: CLI flags, `user:pass` pairs, spaced separators."""

# Each pattern's `sep` group is kept verbatim and its `value` group hidden.  Like the other
# context rules, every pattern starts with a literal or a look-behind and runs in linear time.

from __future__ import annotations

from typing import Final

import regex

from bot.vocabulary.redaction.anchors import finders
from bot.vocabulary.redaction.context_rules import SEGMENT_START

# `docker login -u me -p <secret>`, `sshpass -p <secret>`, `mysql -u root -p<secret>`.
CLI_PASSWORD: Final = regex.compile(
    r"(?P<sep>(?<![\w\-])(?:"
    r"(?:docker|podman|buildah|skopeo|helm|oras|nerdctl)[ \t]+(?:registry[ \t]+)?login\b"
    r"[^\n|;&]*?[ \t](?:-p|--password)(?:[ \t]+|=)"
    r"|sshpass[ \t]+-p[ \t]*"
    r"|(?:mysql|mysqldump|mysqladmin|mariadb)\b[^\n|;&]*?[ \t]-p(?=[^\s\-])"
    r"))(?P<value>(?!\[REDACTED:)[^\s\-\"'][^\s]*|\"[^\"\n]*\"|'[^'\n]*')"
)
CLI_GATE: Final = ("login", "sshpass", "mysql", "mariadb")

# `curl -u admin:<secret>`, `--user admin:<secret>`, `wget --password`... and a `user:pass`
# pair after "creds", "credentials" or "login" ("creds: admin:<secret>").
USER_PASS: Final = regex.compile(
    r"(?P<sep>(?:(?<![\w\-])(?:-u|--user)(?:[ \t]+|=)"
    rf"|{SEGMENT_START}(?i:creds?|credentials|logins?)[\"'*]{{0,3}}[ \t]*"
    r"(?>:=|=>|->|[:=\u2014\u2013\u2192])[ \t]*)"
    r"[\"']?[^\s:\"'@/\[\]]{1,64}:)"
    r"(?P<value>(?!\[REDACTED:|//)[^\s\"']+)"
)
USER_PASS_GATE: Final = ("-u", "--user", "cred", "login")

# A secret word, whitespace and a token-shaped value with no separator ("apikey 3f9a…",
# "access token ghx81…"): judged by the value's shape (see the replacer).  A bare "key" is
# too common ("primary key 1234…"): it needs a qualifier.
KEY_SPACED: Final = regex.compile(
    r"(?<=(?<![A-Za-z0-9])(?i:(?:api|access|secret|auth|private)[ _\-]?key|apikey"
    r"|(?:(?:api|access|auth|bot)[ _\-]?)?token|secret))"
    r"(?P<sep>[ \t]++)(?P<value>[A-Za-z0-9_\-+/=]{16,}+)(?![^\s.,;:)\]])"
)
KEY_SPACED_GATE: Final = ("key", "token", "secret")
KEY_SPACED_FINDERS: Final = finders(
    {word: word for word in KEY_SPACED_GATE}, r"[ \t]++[a-z0-9_\-+/=]{16}"
)
