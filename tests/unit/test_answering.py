"""What a turn sees of its channel's raw window: its own message last, nothing said
after it by others, and never a marker past it."""

from __future__ import annotations

from bot.memory.stm.window import answering, with_trigger
from bot.vocabulary.model import Marker
from tests.helpers.builders import ALICE, BOB, BOT, message


def test_a_turn_for_the_newest_message_sees_the_window_as_it_is() -> None:
    window = (message(ALICE, "one"), message(BOT, "two", is_bot=True), message(BOB, "three"))
    assert answering(window, window[-1].message_id, BOT) is window


def test_a_queued_turn_ends_with_its_own_message_after_the_bots_replies_meanwhile() -> None:
    question = message(ALICE, "capital of France?")
    later = message(BOB, "tell me a joke")
    reply = message(BOT, "4", is_bot=True)  # the answer to an earlier turn, sent meanwhile
    seen = answering((question, later, reply), question.message_id, BOT)
    assert [m.content for m in seen] == ["4", "capital of France?"]


def test_the_turn_never_claims_to_cover_messages_after_its_own() -> None:
    first = message(ALICE, "first")
    source_id = first.message_id + 1  # deleted meanwhile: not in the window any more
    later = message(BOB, "Bob's later question", message_id=source_id + 1)
    reply = message(BOT, "reply to first", message_id=source_id + 2, is_bot=True)
    seen = answering((first, later, reply), source_id, BOT)
    assert later not in seen
    assert Marker.of(seen[-1]).message_id <= source_id


def test_a_message_that_scrolled_out_is_still_the_last_one_the_turn_sees() -> None:
    question = message(ALICE, "capital of France?")
    later = [message(BOB, f"chatter {i}") for i in range(3)]  # all that is left of the window
    seen = with_trigger(answering(later, question.message_id, BOT), question, lambda _id: False)
    assert [m.content for m in seen] == ["capital of France?"]


def test_a_deleted_message_is_not_shown_again() -> None:
    question = message(ALICE, "my password is hunter2")
    later = message(BOB, "later", message_id=question.message_id + 1)
    seen = with_trigger(
        answering((later,), question.message_id, BOT), question, {question.message_id}.__contains__
    )
    assert question not in seen


def test_a_message_still_in_the_window_is_not_shown_twice() -> None:
    question = message(ALICE, "capital of France?")
    window = (message(BOB, "earlier", message_id=question.message_id - 1), question)
    assert (
        with_trigger(answering(window, question.message_id, BOT), question, lambda _id: False)
        == window
    )
