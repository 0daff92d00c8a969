"""Quality gates on a summarizer answer, before anything is stored (issue: small models).

A small model may copy the transcript instead of condensing it, run past the cap, leave
out the newest messages, or echo the HTML entities its server's template escaped. Such an
answer is rejected (and asked for once more); a rejected summary never marks messages as
covered, so the raw messages keep their place in the prompt.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from bot.llm import unescape_new_entities
from bot.llm.escaping import ENTITY
from bot.memory import VALUE_LIMIT, dated_lines
from bot.vocabulary import RawMessage

__all__ = ["SummaryRejected", "checked_summary"]

# Word runs this long, shared with the transcript, are copied rather than condensed.
COPY_RUN_WORDS = 8
# The share of the answer's runs found in the transcript that makes it a copy.
COPY_SHARE = 0.5
# A transcript this short is not condensed much by any summary.
MIN_CONDENSABLE_CHARS = 400
# The summary grew by this share of the transcript or more: it kept the messages whole.
GROWTH_SHARE = 0.9
# The newest messages of a batch whose content must show in the summary; a message
# counts when it has this many content words (not "ok see you tomorrow").
NEWEST = 3
SUBSTANTIVE_WORDS = 3
SNOWFLAKE_DIGITS = 15
_MENTION = re.compile(r"<[@#][!&]?\d+>|@\S+")
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?", re.UNICODE)
_COMMON_WORDS = (
    "about after again also been before being could does doing from have having here "
    "into just like made make more much must only over said same should some such "
    "than that their them then there these they this those very want were what when "
    "where which while will with would your yours okay yeah sure thanks thank please "
    "really going know think good great"
)
_COMMON = frozenset(_COMMON_WORDS.split())


@dataclass(frozen=True)
class SummaryRejected(Exception):
    """The answer failed a gate: ``reason`` for the log and outcome, ``ask`` for the retry."""

    reason: str
    ask: str


def checked_summary(
    answer: str, batch: Sequence[RawMessage], *, previous: str, sent: str, whole: bool = True
) -> str:
    """``answer`` with the entities of the server's template undone, if it passes the gates.

    ``previous`` is the memory integrated into, ``sent`` the text of the request; ``whole``
    is False for an answer of several values (categories' JSON), each cut to the cap."""
    text = unescape_new_entities(answer, sent)
    known = set(ENTITY.findall(sent))
    if any(entity not in known for entity in ENTITY.findall(text)):
        raise SummaryRejected(
            "carries markup entities that were not in the messages",
            "Write plain characters, not HTML entities such as &amp;.",
        )
    if whole and len(text.strip()) > VALUE_LIMIT:
        raise SummaryRejected(
            f"is longer than {VALUE_LIMIT} characters",
            f"Condense it to at most {VALUE_LIMIT} characters: keep what matters, drop detail.",
        )
    # As the model read it (a copy of its lines copies their times and names), and the
    # messages' words alone (a copy without them).
    transcript = "\n".join(dated_lines(batch))
    said = "\n".join(message.content for message in batch)
    if _copies(text, previous, transcript, said):
        raise SummaryRejected(
            "copies the messages instead of condensing them",
            "Do not copy the messages: write a short summary in your own words.",
        )
    if _misses_newest(text, batch):
        raise SummaryRejected(
            "leaves out the newest messages",
            "Include what the newest messages say.",
        )
    return text


def _words(text: str) -> list[str]:
    return [word.casefold() for word in _WORD.findall(text)]


def _runs(text: str, *, by_line: bool) -> set[tuple[str, ...]]:
    """The word runs of ``text``, or of each of its lines: a copy of the lines without
    their times ("Ann: …" per line) shares every run but those across two lines."""
    runs: set[tuple[str, ...]] = set()
    for part in text.splitlines() if by_line else [text]:
        words = _words(part)
        runs.update(
            tuple(words[i : i + COPY_RUN_WORDS]) for i in range(len(words) - COPY_RUN_WORDS + 1)
        )
    return runs


def _copies(text: str, previous: str, transcript: str, said: str) -> bool:
    """Whether ``text`` carries the transcript rather than a summary of it."""
    if len(transcript) >= MIN_CONDENSABLE_CHARS and (
        len(text) - len(previous) >= GROWTH_SHARE * len(transcript)
    ):
        return True
    return _shares_runs(text, previous, transcript, said, by_line=False) or _shares_runs(
        text, previous, transcript, said, by_line=True
    )


def _shares_runs(text: str, previous: str, transcript: str, said: str, *, by_line: bool) -> bool:
    # What the memory already held may stay word for word; only the rest is judged.
    own = _runs(text, by_line=by_line) - _runs(previous, by_line=by_line)
    if len(own) < COPY_RUN_WORDS:
        return False
    copied = _runs(transcript, by_line=by_line) | _runs(said, by_line=by_line)
    return len(own & copied) >= COPY_SHARE * len(own)


def _stems(text: str) -> set[str]:
    # A word's first four letters stand for its forms ("edit", "edited"); numbers whole,
    # but not a mention (``@Kioku``, ``<@id>``) nor a contraction's tail.
    words = [w.split("'")[0] for w in _words(_MENTION.sub(" ", text))]
    stems = {w[:4] for w in words if len(w) >= 4 and w not in _COMMON and not w.isdigit()}
    return stems | {w for w in words if w.isdigit() and 2 <= len(w) < SNOWFLAKE_DIGITS}


def _misses_newest(text: str, batch: Sequence[RawMessage]) -> bool:
    """Whether none of the newest members' messages with content shows in ``text``."""
    newest = [_stems(m.content) for m in batch if not m.is_bot][-NEWEST:]
    wanted = set().union(*(stems for stems in newest if len(stems) >= SUBSTANTIVE_WORDS))
    return bool(wanted) and not wanted & _stems(text)
