"""Tokens of a text estimated per script, shaped after cl100k_base, for models with no tokenizer.

Byte classes find the ASCII pieces a BPE pre-tokenizer makes (words, groups of up to three
digits, punctuation runs, line breaks), each about one token; characters outside ASCII are
weighed by script: a CJK character is a token or more, where characters / 4 counted a quarter.
The weights were fitted on mixed samples against cl100k_base (docs/scaling.md gives the
error); a model's own tokenizer differs, and :class:`~bot.llm.tokens.Calibration` scales to it.
"""

from __future__ import annotations

import math
import re
from typing import Final

import regex

__all__ = ["SCRIPT_WEIGHTS", "estimate_tokens"]


def _byte_classes() -> bytes:
    """A ``bytes.translate`` table: each byte to its class letter (see ``_KINDS``)."""
    table = bytearray(b" " * 256)
    for value in range(256):
        char = chr(value)
        if value >= 0xC0:
            table[value] = ord("u")  # the first byte of a character outside ASCII
        elif value >= 0x80:
            table[value] = ord("c")  # a continuation byte
        elif char.isalpha():
            table[value] = ord("a")
        elif char.isdigit():
            table[value] = ord("0")
        elif char in "\r\n":
            table[value] = ord("n")
        elif char.isspace() or value < 0x20 or value == 0x7F:
            table[value] = ord(" ")
        else:
            table[value] = ord(".")
    return bytes(table)


_BYTE_CLASSES: Final = _byte_classes()
_KINDS: Final = b"a0.n uc"
_NON_ASCII: Final = re.compile(r"[^\x00-\x7f]+")

# Tokens per character outside ASCII, by script, against cl100k_base; the first pattern that
# matches a character decides (Latin before other letters: accented letters split words).
_SCRIPTS: Final[tuple[tuple[str, regex.Pattern[str]], ...]] = (
    ("H", regex.compile(r"\p{Han}")),
    ("K", regex.compile(r"[\p{Hiragana}\p{Katakana}\u30fc]")),
    ("G", regex.compile(r"\p{Hangul}")),
    ("C", regex.compile(r"\p{Cyrillic}")),
    ("L", regex.compile(r"\p{Latin}")),
    ("E", regex.compile(r"[\p{Extended_Pictographic}\p{Regional_Indicator}\U0001f3fb-\U0001f3ff]")),
    ("J", regex.compile(r"[\u200d\ufe0f]")),  # emoji joiners and presentation selectors
    ("A", regex.compile(r"[\p{L}\p{M}]")),  # other alphabets: Greek, Arabic, Hebrew, Thai…
)
SCRIPT_WEIGHTS: Final = {
    "H": 1.25,
    "K": 1.0,
    "G": 1.3,
    "C": 0.45,
    "L": 0.7,
    "E": 2.6,
    "J": 2.0,
    "A": 1.0,
    "S": 1.0,  # symbols and punctuation outside ASCII (→, —, 。)
}
"""Tokens per character outside ASCII, by script letter (S: anything the patterns miss)."""
_SCRIPT_CACHE_SIZE: Final = 65_536


class _ScriptOf(dict[int, str]):
    """Code point to script letter for ``str.translate``, remembered up to a bound."""

    def __missing__(self, code_point: int) -> str:
        char = chr(code_point)
        script = next((name for name, pattern in _SCRIPTS if pattern.match(char)), "S")
        if len(self) < _SCRIPT_CACHE_SIZE:
            self[code_point] = script
        return script


_SCRIPT_OF: Final = _ScriptOf()


def _runs(classes: bytes, kind: int) -> int:
    """How many runs of ``kind`` ``classes`` holds: each starts after another class."""
    one = bytes([kind])
    runs = sum(classes.count(bytes([other]) + one) for other in _KINDS if other != kind)
    return runs + (classes[:1] == one)


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` estimated per script (about cl100k_base's count)."""
    if not text:
        return 0
    # bytes.translate and bytes.count run in C: a few µs per thousand characters.
    classes = text.encode("utf-8", "surrogatepass").translate(_BYTE_CLASSES)
    words = _runs(classes, ord("a"))
    # Common words are one token with their space; long, rare ones split, and a run far
    # longer than words are (a key, base64, "aaaa…") takes a token every few letters.
    letters = classes.count(b"a")
    total = 0.85 * words + 0.03 * letters + max(0, letters - 8 * words) / 4
    digits = _runs(classes, ord("0"))
    total += digits + (classes.count(b"0") - digits) / 3  # cl100k groups up to 3 digits
    punctuation = _runs(classes, ord("."))
    total += 1.1 * punctuation + 0.2 * (classes.count(b".") - punctuation)
    total -= 0.9 * classes.count(b".a")  # one mark before a word joins its token ("(self")
    total += _runs(classes, ord("n")) + classes.count(b"n ")  # breaks, then indentation
    if b"u" in classes:
        scripts = "".join(_NON_ASCII.findall(text)).translate(_SCRIPT_OF)
        total += sum(weight * scripts.count(name) for name, weight in SCRIPT_WEIGHTS.items())
    return max(1, math.ceil(total))
