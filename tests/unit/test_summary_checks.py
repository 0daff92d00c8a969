"""The summarizer's quality gates: what a small model's answer must not be to be stored."""

from __future__ import annotations

import pytest

from bot.conversation.summarizer import SummaryRejected, checked_summary
from bot.memory import VALUE_LIMIT, dated_lines
from tests.helpers.builders import ALICE, BOB, message

BATCH = [
    message(ALICE, "We should book the venue for the launch party on Friday."),
    message(BOB, "I'll bring snacks and the projector for the demo."),
    message(ALICE, "Great. Also my flight to Osaka is on March 14, please keep that in mind."),
]
GOOD = (
    "Launch party Friday: Alice books the venue, Bob brings snacks and a projector. "
    "Alice flies to Osaka on March 14."
)


def sent(batch: list) -> str:  # type: ignore[type-arg]
    return "\n".join(dated_lines(batch))


def check(answer: str, previous: str = "", batch: list | None = None) -> str:  # type: ignore[type-arg]
    batch = BATCH if batch is None else batch
    return checked_summary(answer, batch, previous=previous, sent=sent(batch))


def test_a_condensed_summary_passes_unchanged() -> None:
    assert check(GOOD) == GOOD


def test_a_verbatim_copy_of_the_transcript_is_rejected() -> None:
    with pytest.raises(SummaryRejected, match="copies the messages"):
        check(sent(BATCH))


def test_a_copy_without_names_and_times_is_rejected_too() -> None:
    with pytest.raises(SummaryRejected, match="copies"):
        check("\n".join(m.content for m in BATCH))


def test_a_copy_of_name_and_text_lines_without_times_is_rejected_too() -> None:
    # "Name: text" per line shares no run across two lines with the dated transcript.
    batch = [
        message(ALICE, f"I booked the pottery class for Friday at the old mill, seat {i}")
        for i in range(6)
    ]
    with pytest.raises(SummaryRejected, match="copies"):
        check("\n".join(f"Alice: {m.content}" for m in batch), batch=batch)


def test_the_previous_summary_may_stay_word_for_word() -> None:
    previous = "The team planned a launch party and a demo; the venue is still to be booked."
    assert check(f"{previous} Alice flies to Osaka on March 14.", previous=previous)


def test_an_answer_over_the_cap_is_rejected_rather_than_cut() -> None:
    long = (GOOD + " ") * (VALUE_LIMIT // len(GOOD) + 1)
    with pytest.raises(SummaryRejected, match=f"longer than {VALUE_LIMIT}"):
        check(long)


def test_a_summary_leaving_out_the_newest_messages_is_rejected() -> None:
    with pytest.raises(SummaryRejected, match="newest"):
        check("The team talked about the weather and lunch plans.")


def test_small_talk_at_the_end_need_not_be_in_the_summary() -> None:
    batch = [*BATCH[:2], message(BOB, "ok see you"), message(ALICE, "lol")]
    assert check("Launch party Friday, Bob brings snacks and the projector.", batch=batch)


def test_entities_a_servers_template_escaped_are_undone() -> None:
    escaped = GOOD.replace("'", "&#39;") + " It&amp;amp;#39;s all set."
    assert check(escaped) == GOOD + " It's all set."


def test_entities_nested_past_undoing_are_rejected() -> None:
    nested = GOOD + " It&amp;amp;amp;amp;amp;#39;s set."
    with pytest.raises(SummaryRejected, match="markup entities"):
        check(nested)


def test_entities_the_members_wrote_are_kept() -> None:
    batch = [*BATCH, message(BOB, "In HTML, write &amp; for an ampersand and flights at Osaka.")]
    assert "&amp;" in check(
        GOOD + " Bob noted that HTML writes &amp; for an ampersand.", batch=batch
    )
