"""The scripted run's "model": it answers right exactly when the answer reached the prompt.

Against the scripted server there is no model to measure, so the harness measures what a
perfect reader could do with each system's prompt: for a question whose evidence turns
are all in the prompt (the question's own message left out) it answers the gold answer,
otherwise "I don't know". An adversarial question is always answered "Not mentioned in
the conversation": the conversation indeed does not say. A call that asks no dataset
question (a summary, a capture) gets "ok". Its scores are evidence recall, not quality.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from benchmarks.recall.dataset import Question, Sample

NOT_MENTIONED_ANSWER = "Not mentioned in the conversation."
UNKNOWN_ANSWER = "I don't know."
OTHER_ANSWER = "ok"


def _flat(text: str) -> str:
    return " ".join(text.lower().split())


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return content if isinstance(content, str) else ""


class EvidenceOracle:
    """Called with each request body before it reaches the scripted server; queues the
    answer for it with ``queue`` (the server's ``reply_text``)."""

    def __init__(self, queue: Callable[[str], object], samples: Sequence[Sample]) -> None:
        self._queue = queue
        self._questions: list[tuple[str, Sample, Question]] = sorted(
            (
                (_flat(question.question), sample, question)
                for sample in samples
                for question in sample.questions
            ),
            key=lambda item: -len(item[0]),  # the longest question text that matches wins
        )
        self.answered = 0

    def __call__(self, body: Mapping[str, Any]) -> None:
        self._queue(self.answer(body))

    def answer(self, body: Mapping[str, Any]) -> str:
        raw = body.get("messages")
        messages = [m for m in raw if isinstance(m, Mapping)] if isinstance(raw, list) else []
        asking = next(
            (i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "user"),
            None,
        )
        if asking is None:
            return OTHER_ANSWER
        asked = _flat(_text(messages[asking]))
        found = next(((s, q) for text, s, q in self._questions if text in asked), None)
        if found is None:
            return OTHER_ANSWER
        sample, question = found
        self.answered += 1
        if question.category == 5:
            return NOT_MENTIONED_ANSWER
        # Everything but the question itself: what the system gave the model to answer from.
        shown = _flat(
            " ".join(_text(m) for i, m in enumerate(messages) if i != asking)
            + " "
            + asked.replace(_flat(question.question), " ")
        )
        for dia_id in question.evidence:
            evidence = sample.evidence_text(dia_id)
            if evidence is not None and _flat(evidence) not in shown:
                return UNKNOWN_ANSWER
        return question.answer.split(";")[0].strip() if question.category == 3 else question.answer
