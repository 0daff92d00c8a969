"""Stored text can never open or close a ``<memory>`` fence the prompt did not write.

A tag is looked for in the text as a model reads it: after the same folding the
redaction uses (NFKC, look-alike letters, invisible characters dropped) and with HTML
entities of ``<`` and ``/`` read as those characters. Wherever one is found, its opening
``<`` (or look-alike, or entity) is replaced by ``[``; anything else is left as written.
"""

from __future__ import annotations

import functools
import re

from bot.vocabulary import fold

__all__ = ["DEFUSED_LT", "defuse"]

DEFUSED_LT = "["
_WORD = "memory"
# How far past an opener a tag's word may start (spaces, slashes, invisibles between).
_REACH = 24
_ENTITY = re.compile(r"&(?:lt|#0*60|#x0*3c|sol|#0*47|#x0*2f|nbsp|#0*160|#x0*a0);?", re.IGNORECASE)
_ENTITY_CHAR = {"lt": "<", "sol": "/", "nbsp": " "}
# Characters that do not stop a model from reading "< / memory" as a tag.
_BETWEEN = frozenset(" \t\r\n/\\")
# Openers besides those that fold to "<": angle brackets NFKC keeps apart.
_OPENERS = frozenset("<\u2039\u3008\u27e8\u2329\u276c\u276e\u29fc")
# Texts holding none of these cannot spell a tag (the fast path of almost every text).
_HINTS = frozenset("<&") | _OPENERS


def _entity_char(entity: str) -> str:
    body = entity.strip("&;").lower()
    if body in _ENTITY_CHAR:
        return _ENTITY_CHAR[body]
    number = int(body[2:], 16) if body.startswith("#x") else int(body[1:])
    return chr(number)


def _reads_as(text: str) -> list[tuple[str, int, int]]:
    """``text`` as a model reads it: ``(characters, start, end)`` pieces of the original."""
    pieces: list[tuple[str, int, int]] = []
    position = 0
    for match in _ENTITY.finditer(text):
        pieces += _folded(text, position, match.start())
        pieces.append((_entity_char(match.group()), match.start(), match.end()))
        position = match.end()
    pieces += _folded(text, position, len(text))
    return pieces


def _folded(text: str, start: int, end: int) -> list[tuple[str, int, int]]:
    pieces = []
    for index in range(start, end):
        char = text[index]
        read = char if char.isascii() else fold(char)
        if char in _OPENERS:
            read = "<"
        pieces.append((read.lower(), index, index + 1))
    return pieces


def _spells_tag(pieces: list[tuple[str, int, int]], opener: int) -> bool:
    """Whether the pieces after ``opener`` read as ``memory`` (spaces and slashes first)."""
    spelled = ""
    for read, _, _ in pieces[opener + 1 : opener + 1 + _REACH]:
        if not spelled and (not read or all(char in _BETWEEN for char in read)):
            continue
        spelled += read
        if len(spelled) >= len(_WORD):
            return spelled.startswith(_WORD)
        if not _WORD.startswith(spelled):
            return False
    return False


@functools.lru_cache(maxsize=8192)
def defuse(text: str) -> str:
    """``text`` with the opener of every memory tag it spells replaced by ``[``."""
    # Memory and recent messages repeat turn after turn: a cache keeps this off the path.
    if not any(char in _HINTS for char in text) and text.isascii():
        return text
    pieces = _reads_as(text)
    openers = [i for i, (read, _, _) in enumerate(pieces) if read == "<" and _spells_tag(pieces, i)]
    if not openers:
        return text
    out: list[str] = []
    position = 0
    for index in openers:
        _, start, end = pieces[index]
        out += [text[position:start], DEFUSED_LT]
        position = end
    out.append(text[position:])
    return "".join(out)
