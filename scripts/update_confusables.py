"""Rewrite bot/vocabulary/redaction/rules/confusables.txt from Unicode's confusables data.

The data comes from the `confusable-homoglyphs` package (Unicode TR39 confusables.txt):
each character that looks like one ASCII letter, digit or token symbol is mapped to it.
Cyrillic and Greek letters TR39 maps to another non-ASCII letter (`к` -> `ĸ`) take their
`anyascii` transliteration when that is one ASCII letter.

Usage: ``pip install confusable-homoglyphs anyascii && python scripts/update_confusables.py``
"""

from __future__ import annotations

import json
import unicodedata
from importlib.resources import files
from pathlib import Path

from anyascii import anyascii

OUT = Path(__file__).resolve().parents[1] / "bot/vocabulary/redaction/rules/confusables.txt"
SYMBOLS = "-_.:/=+~<>"


def table() -> dict[str, str]:
    """Each non-ASCII character and the ASCII character it is confused with."""
    data = json.loads((files("confusable_homoglyphs") / "confusables.json").read_text("utf-8"))
    mapping: dict[str, str] = {}
    for char, glyphs in data.items():
        if len(char) != 1 or char.isascii():
            continue
        ascii_glyphs = [
            g["c"] for g in glyphs if len(g["c"]) == 1 and (g["c"].isalnum() or g["c"] in SYMBOLS)
        ]
        ascii_glyphs = [g for g in ascii_glyphs if g.isascii()]
        if ascii_glyphs:
            mapping[char] = ascii_glyphs[0]
    for code in range(0x370, 0x530):
        char = chr(code)
        name = unicodedata.name(char, "")
        if char in mapping or not name.startswith(("CYRILLIC", "GREEK")) or not char.isalpha():
            continue
        spelled = anyascii(char)
        if len(spelled) == 1 and spelled.isalpha():
            mapping[char] = spelled
    # NFKC runs first: a character it already folds needs no entry.
    return {
        char: target
        for char, target in mapping.items()
        if unicodedata.normalize("NFKC", char) == char
    }


def main() -> None:
    lines = [
        "# Characters that look like an ASCII letter, digit or symbol, and that character.",
        "# Derived from Unicode TR39 confusables (via confusable-homoglyphs) by",
        "# scripts/update_confusables.py; do not edit by hand.  Format: code point, ASCII.",
    ]
    lines += [f"{ord(char):04X} {target}" for char, target in sorted(table().items())]
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines) - 3} characters to {OUT}")


if __name__ == "__main__":
    main()
