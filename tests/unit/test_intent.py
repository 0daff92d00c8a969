"""Explicit long-term memory intent: imperative requests, on word boundaries only."""

from __future__ import annotations

import pytest

from bot.memory.intent import explicit_long_term_intent

POSITIVE = {
    "remember-that": "remember that I'm vegan",
    "remember-colon": "Remember: my birthday is May 3",
    "remember-dash": "remember - the build server is bob",
    "remember-this": "Remember this for later: the code is 42",
    "remember-my": "remember my cat is called Miso",
    "upper-case": "REMEMBER THAT I'M LEFT-HANDED",
    "please-remember-my": "please remember my cat is called Miso",
    "please-remember-anything": "Please remember the wifi password is on the fridge",
    "dont-forget-that": "don't forget that I moved to Lyon",
    "dont-curly-apostrophe": "Don’t forget that I’m allergic to nuts",
    "do-not-forget": "Do not forget that we meet on Fridays",
    "dont-forget-my": "dont forget my sister's name is Ana",
    "keep-in-mind": "keep in mind that I hate spoilers",
    "keep-this-in-mind": "Keep this in mind: I'm on UTC+2",
    "forget-that": "forget that I said that",
    "forget-what-i-said": "forget what I said about my ex",
    "forget-about-my": "forget about my old job",
    "memorize": "Memorize this: 42",
    "memorise": "memorise my number",
    "can-you-remember": "can you remember my name is Ana?",
    "could-you-remember": "Could you please remember that I use vim",
    "could-you-forget": "could you forget my address",
    "can-you-note-that": "Can you note that I prefer metric?",
    "make-a-note": "make a note that the deadline moved",
    "take-note": "take note: standup is at 10",
    "write-this-down": "write this down: order #5521",
    "commit-to-memory": "commit this to memory: blue",
    "save-to-long-term": "save this to your long-term memory",
    "i-want-you-to": "I want you to remember that I'm allergic to nuts",
    "id-like-you-to": "I'd like you to remember the server IP",
    "please-dont-forget": "please don't forget my meds",
    "please-forget-it": "please forget it",
    "second-sentence": "lol ok. Remember that I'm vegan",
    "after-newline": "hi there\nremember that I'm vegan",
    "after-interjection": "ok, remember that I use Arch",
    "after-and": "Thanks, and remember that I'm off tomorrow",
    "mention": "<@123> remember I like tea",
    "nickname-mention": "<@!123> note that the cat is Miso",
    "name": "Kioku remember that my PC runs Linux",
    "hey-name-comma": "hey kioku, remember the wifi password is on the fridge",
    "name-colon": "kioku: forget everything about my ex",
}

NEGATIVE = {
    "cant-remember": "I can't remember the title",
    "i-remember-that": "I remember that",
    "do-you-remember": "Do you remember that?",
    "remember-when": "Remember when we went to Paris?",
    "remember-the": "Remember the Alamo",
    "remember-comma": "Remember, you're not alone",
    "remember-that-question": "Remember that party?",
    "can-you-remember-when": "can you remember when we met?",
    "please-remember-how": "please remember how it felt",
    "misremembered": "I misremembered the date",
    "misremembered-alone": "misremembered",
    "rememberance": "rememberance day",
    "remembering": "remembering things is hard",
    "remembered": "remembered",
    "unforgettable": "that was unforgettable",
    "forgetting": "I keep forgetting my keys",
    "forgetting-start": "forgetting that was easy",
    "forgot": "I forgot",
    "never-forget": "I'll never forget that day",
    "dont-forget-to": "Don't forget to vote!",
    "dont-forget-bare": "Don't forget!",
    "forget-it": "forget it, never mind",
    "forget-about-it": "Forget about it",
    "note-that-bare": "Note that this only works on Linux",
    "please-note-that": "Please note that the server will be down",
    "notes": "notes that are long",
    "unforget": "unforget that",
    "inline-code": "he said `remember that` lol",
    "code-block": "```\nremember that x\n```",
    "quote-line": "> remember that I'm vegan\nlol quoting",
    "mid-sentence": "you should remember that I guess",
    "empty": "",
    "blank": "   ",
}


@pytest.mark.parametrize("text", list(POSITIVE.values()), ids=list(POSITIVE))
def test_positive(text: str) -> None:
    assert explicit_long_term_intent(text) is True


@pytest.mark.parametrize("text", list(NEGATIVE.values()), ids=list(NEGATIVE))
def test_negative(text: str) -> None:
    assert explicit_long_term_intent(text) is False


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("<@123> remember the cake", True, id="bot-mention"),
        pytest.param("<@!123> remember the cake", True, id="bot-nickname-mention"),
        pytest.param("<@456> remember that you owe me", False, id="other-user-mention"),
        pytest.param("<@456> ok. remember that I'm vegan", True, id="other-then-new-sentence"),
    ],
)
def test_bot_user_id_limits_mentions(text: str, expected: bool) -> None:
    assert explicit_long_term_intent(text, bot_user_id=123) is expected


def test_any_mention_is_an_address_when_bot_id_unknown() -> None:
    assert explicit_long_term_intent("<@456> remember the cake") is True


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        pytest.param(("Mimi",), True, id="custom-name"),
        pytest.param((), False, id="no-names"),
    ],
)
def test_bot_names(names: tuple[str, ...], expected: bool) -> None:
    assert explicit_long_term_intent("mimi, remember the cake", bot_names=names) is expected
