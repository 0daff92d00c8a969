"""Conversations and questions in LoCoMo's published JSON layout, read and checked.

The layout (``data/locomo10.json`` of https://github.com/snap-research/locomo): a list of
samples, each with ``sample_id``, a ``conversation`` holding ``speaker_a``, ``speaker_b``,
``session_N`` (a list of turns ``{speaker, dia_id, text, blip_caption?}``) and
``session_N_date_time`` ("1:56 pm on 8 May, 2023"), and ``qa``: ``question``, ``answer``
(category 5 carries ``adversarial_answer`` instead), ``evidence`` (dia_ids), ``category``.
A file that breaks the layout raises :class:`DatasetError` naming the sample and field.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

DATE_FORMAT = "%I:%M %p on %d %B, %Y"
DATE_EXAMPLE = "1:56 pm on 8 May, 2023"
_SESSION_KEY = re.compile(r"session_(\d+)")
_EVIDENCE = re.compile(r"D(\d+):\d+")

CATEGORIES: Mapping[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}


class DatasetError(ValueError):
    """The file breaks the layout; the message names the file's part at fault."""


@dataclass(frozen=True, slots=True)
class Turn:
    speaker: str
    dia_id: str
    text: str
    blip_caption: str | None = None

    @property
    def posted(self) -> str:
        """The message a member posts: the text, and a shared photo's caption as words
        (the dataset ships no images)."""
        if self.blip_caption:
            return f"{self.text} [shares a photo: {self.blip_caption}]"
        return self.text


@dataclass(frozen=True, slots=True)
class Session:
    number: int
    date_time: str  # as the dataset writes it
    start: datetime
    turns: tuple[Turn, ...]


@dataclass(frozen=True, slots=True)
class Question:
    index: int  # its place in the sample's ``qa``
    question: str
    answer: str  # the gold answer; for category 5 the dataset's adversarial answer is apart
    category: int
    evidence: tuple[str, ...]
    adversarial_answer: str | None = None

    @property
    def category_name(self) -> str:
        return CATEGORIES[self.category]

    def sessions_needed(self) -> set[int] | None:
        """The sessions its evidence is in; None when the evidence names none."""
        found = {int(match.group(1)) for e in self.evidence if (match := _EVIDENCE.match(e))}
        return found or None


@dataclass(frozen=True, slots=True)
class Sample:
    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]

    def evidence_text(self, dia_id: str) -> str | None:
        for session in self.sessions:
            for turn in session.turns:
                if turn.dia_id == dia_id:
                    return turn.text
        return None


def parse_date_time(value: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` as an aware datetime (the dataset gives no zone: UTC)."""
    return datetime.strptime(" ".join(value.split()), DATE_FORMAT).replace(tzinfo=UTC)


def load_dataset(path: Path) -> list[Sample]:
    """Read and check ``path``; raise :class:`DatasetError` on the first fault."""
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"cannot read: {getattr(exc, 'strerror', None) or exc}") from exc
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise DatasetError(f"not JSON: {exc}") from exc
    if not isinstance(data, list) or not data:
        raise DatasetError("expected a non-empty list of samples")
    return [_sample(item, index) for index, item in enumerate(data)]


def _sample(item: object, index: int) -> Sample:
    where = f"sample {index}"
    sample = _object(item, where)
    sample_id = _text(sample, "sample_id", where)
    conversation = _object(_field(sample, "conversation", where), f"{where}: conversation")
    speakers = (
        _text(conversation, "speaker_a", where),
        _text(conversation, "speaker_b", where),
    )
    numbers = sorted(
        int(match.group(1))
        for key in conversation
        if (match := _SESSION_KEY.fullmatch(key)) is not None
    )
    if not numbers:
        raise DatasetError(f"{where}: no session_N in conversation")
    sessions = tuple(_session(conversation, number, speakers, where) for number in numbers)
    for earlier, later in itertools.pairwise(sessions):
        if later.start < earlier.start:
            raise DatasetError(
                f"{where}: session_{later.number}_date_time is before "
                f"session_{earlier.number}_date_time"
            )
    qa = _field(sample, "qa", where)
    if not isinstance(qa, list):
        raise DatasetError(f"{where}: qa is not a list")
    questions = tuple(_question(entry, n, f"{where}: qa {n}") for n, entry in enumerate(qa))
    return Sample(sample_id, *speakers, sessions, questions)


def _session(
    conversation: Mapping[str, Any], number: int, speakers: Sequence[str], where: str
) -> Session:
    key = f"session_{number}"
    date_key = f"{key}_date_time"
    date_time = _text(conversation, date_key, where)
    try:
        start = parse_date_time(date_time)
    except ValueError as exc:
        raise DatasetError(
            f"{where}: {date_key} {date_time!r} is not like {DATE_EXAMPLE!r}"
        ) from exc
    turns = conversation[key]
    if not isinstance(turns, list) or not turns:
        raise DatasetError(f"{where}: {key} is not a non-empty list of turns")
    parsed: list[Turn] = []
    for position, raw in enumerate(turns):
        at = f"{where}: {key} turn {position}"
        turn = _object(raw, at)
        speaker = _text(turn, "speaker", at)
        if speaker not in speakers:
            raise DatasetError(f"{at}: speaker {speaker!r} is neither speaker_a nor speaker_b")
        caption = turn.get("blip_caption")
        if caption is not None and not isinstance(caption, str):
            raise DatasetError(f"{at}: blip_caption is not text")
        parsed.append(Turn(speaker, _text(turn, "dia_id", at), _text(turn, "text", at), caption))
    return Session(number, date_time, start, tuple(parsed))


def _question(raw: object, index: int, where: str) -> Question:
    entry = _object(raw, where)
    question = _text(entry, "question", where)
    category = _field(entry, "category", where)
    if not isinstance(category, int) or isinstance(category, bool) or category not in CATEGORIES:
        raise DatasetError(f"{where}: category {category!r} is not one of 1-5")
    evidence = entry.get("evidence", [])
    if not isinstance(evidence, list) or not all(isinstance(e, str) for e in evidence):
        raise DatasetError(f"{where}: evidence is not a list of dia_ids")
    adversarial = entry.get("adversarial_answer")
    if category == 5:
        # The right answer to an adversarial question is that the conversation does not say.
        answer = _answer(entry["answer"], where) if "answer" in entry else "not mentioned"
        if adversarial is not None:
            adversarial = _answer(adversarial, f"{where}: adversarial_answer")
    else:
        answer = _answer(_field(entry, "answer", where), where)
    return Question(index, question, answer, category, tuple(evidence), adversarial)


def _answer(value: object, where: str) -> str:
    # Some gold answers are numbers (a year); the scoring reads them as text.
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise DatasetError(f"{where}: answer is not text")
    return str(value)


def _object(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise DatasetError(f"{where}: not an object")
    return value


def _field(item: Mapping[str, Any], name: str, where: str) -> Any:
    if name not in item:
        raise DatasetError(f"{where}: {name} missing")
    return item[name]


def _text(item: Mapping[str, Any], name: str, where: str) -> str:
    value = _field(item, name, where)
    if not isinstance(value, str) or not value.strip():
        raise DatasetError(f"{where}: {name} is not text")
    return value
