"""The view of a text the rules match on: NFKC, look-alike letters folded, invisibles gone."""

# A Cyrillic `ѕk-…`, a fullwidth `＜private＞` or a zero-width space inside `pass​word` reads
# the same to a person as the ASCII form.  The rules see the folded view; the stored text
# keeps the original wherever nothing was redacted (see `restore`).

from __future__ import annotations

import bisect
import functools
import importlib.resources
import unicodedata
from typing import Final

import regex

MARKER_SPLIT: Final = regex.compile(r"(\[REDACTED:[a-z_]+\])")
_NON_ASCII_RUN: Final = regex.compile(r"[^\x00-\x7f]+")
_INVISIBLE: Final = regex.compile(r"\p{Default_Ignorable_Code_Point}")


def _confusables() -> dict[str, str]:
    """The look-alike table shipped in rules/confusables.txt."""
    text = (importlib.resources.files(__package__) / "rules" / "confusables.txt").read_text("utf-8")
    table: dict[str, str] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            code, target = line.split(" ", 1)
            table[chr(int(code, 16))] = target
    return table


_CONFUSABLES: Final = _confusables()


@functools.lru_cache(maxsize=8192)
def fold_char(char: str) -> str:
    """What one non-ASCII character reads as: NFKC, then look-alikes folded to ASCII."""
    if _INVISIBLE.match(char):
        return ""
    return "".join(_CONFUSABLES.get(c, c) for c in unicodedata.normalize("NFKC", char))


def fold(text: str) -> str:
    """``text`` as the rules see it (the normalized view without its position map)."""
    if text.isascii():
        return text
    return _NON_ASCII_RUN.sub(lambda run: "".join(map(fold_char, run.group())), text)


class View:
    """A normalized view of a text and where each of its positions came from."""

    def __init__(self, text: str) -> None:
        self.original = text
        pieces: list[str] = []
        # Segments (view start, original start) where a folded non-ASCII run begins or ends;
        # between two, positions advance together (ASCII) or map per character.
        self._view_starts: list[int] = [0]
        self._origins: list[int] = [0]
        self._exact: list[bool] = [True]
        view_pos = orig_pos = 0
        for run in _NON_ASCII_RUN.finditer(text):
            pieces.append(text[orig_pos : run.start()])
            view_pos += run.start() - orig_pos
            for offset, char in enumerate(run.group()):
                folded = fold_char(char)
                self._view_starts.append(view_pos)
                self._origins.append(run.start() + offset)
                self._exact.append(False)
                pieces.append(folded)
                view_pos += len(folded)
            orig_pos = run.end()
            self._view_starts.append(view_pos)
            self._origins.append(orig_pos)
            self._exact.append(True)
        pieces.append(text[orig_pos:])
        self.text = "".join(pieces)

    def origin(self, position: int) -> int:
        """The original position of view position ``position`` (a character's start)."""
        index = bisect.bisect_right(self._view_starts, position) - 1
        if self._exact[index]:
            return self._origins[index] + position - self._view_starts[index]
        return self._origins[index]

    def restore(self, changed: str) -> str:
        """``changed`` (the view with spans replaced by markers) in the original's spelling."""
        # Redaction only replaces spans with markers, so the text between two markers of
        # `changed` is a piece of the view; each piece is taken from the original.  Were a
        # piece found early (inside a replaced span), the result still reads as `changed`.
        pieces: list[str] = []
        pos = 0
        parts = MARKER_SPLIT.split(changed)
        last = len(parts) - 1
        for index, part in enumerate(parts):
            if index % 2:  # a marker: kept if the view has it here, else inserted
                if self.text.startswith(part, pos):
                    pieces.append(self._original(pos, pos + len(part)))
                    pos += len(part)
                else:
                    pieces.append(part)
                continue
            if index == last and part:
                start = len(self.text) - len(part)
            elif self.text.startswith(part, pos):
                start = pos
            else:
                start = self.text.find(part, pos)
            if start < pos:
                return changed  # not a redaction of this view: keep the folded spelling
            pieces.append(self._original(start, start + len(part)))
            pos = start + len(part)
        return "".join(pieces)

    def _original(self, start: int, end: int) -> str:
        """The original text of view span ``start``-``end``."""
        stop = len(self.original) if end == len(self.text) else self.origin(end)
        return self.original[self.origin(start) : stop]


def view(text: str) -> View | None:
    """The normalized view of ``text``, or None when it reads exactly as written."""
    if text.isascii():
        return None
    folded = View(text)
    return None if folded.text == text else folded
