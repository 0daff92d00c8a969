"""Explicit long-term memory intent: imperative requests, on word boundaries only."""

from __future__ import annotations

import pytest
from _pytest.mark import ParameterSet

from bot.memory.longterm.intent import explicit_long_term_intent

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
    # Real requests that the reminiscence and whole-word rules must leave alone.
    "remember-that-my": "remember that my cat is called Miso",
    "please-remember-colon": "please remember: I'm vegan",
    "remember-em-dash": "remember\u2014I'm vegan",
    "remember-spaced-em-dash": "remember \u2014 the build server is bob",
    "forget-em-dash": "forget\u2014the old address",
    "forget-colon": "forget: my old phone number",
    "forget-that-i-said": "forget that I said I like tea",
    "can-you-remember-that-the": "can you remember that the meeting is on Friday?",
    "remember-that-one-of": "remember that one of my cats is diabetic",
    "remember-that-timezone": "remember that timezones confuse me",
    "remember-that-girls": "remember that girls night is on Thursday",
    "after-quote-line": "> he said hi\nremember that I'm vegan",
    "before-block-quote": "remember that I'm vegan\n>>> quoted text",
    "quote-marker-mid-line": "remember that a >>> b is a shift",
    "tag-question-ok": "remember that my cat is Miso ok?",
    "tag-question-comma": "remember that my cat is Miso, right?",
    "never-forget": "Never forget that I'm allergic to nuts",
    # "never mind" idioms followed by a request marker or a reason to delete the fact.
    "forget-it-please": "forget it please",
    "forget-that-it-was-wrong": "forget that, it was wrong",
    # Every request marker the module docstring lists, where it alone makes the request
    # ("remember the server IP…" is no request bare: "Remember the Alamo").
    "marker-plz": "plz remember the server IP is 10.0.0.2",
    "marker-kindly": "kindly remember the server IP is 10.0.0.2",
    "marker-can-u": "can u remember the server IP is 10.0.0.2",
    "marker-will-you": "will you remember the server IP is 10.0.0.2",
    "marker-then-please": "would you please remember the server IP is 10.0.0.2",
    "marker-i-need-you-to": "I need you to remember the server IP is 10.0.0.2",
    "marker-i-would-like-you-to": "I would like you to remember the server IP is 10.0.0.2",
    "marker-make-sure-to": "make sure to remember the server IP is 10.0.0.2",
    "marker-make-sure-you": "make sure you remember the server IP is 10.0.0.2",
    "marker-try-to": "try to remember the server IP is 10.0.0.2",
    # "Remember," before a first-person statement is a request; before anything else, not.
    "comma-im": "Remember, I'm allergic to peanuts",
    "comma-my": "remember, my birthday is May 3",
    "comma-we": "Remember, we meet on Fridays",
    # Disguises read as the plain word: the check folds text as redaction does (issue 26).
    "disguised-zero-width-space": "re\u200bmember that I'm vegan",
    "disguised-zero-width-joiner": "remem\u200dber that I'm vegan",
    "disguised-soft-hyphen": "rem\u00adember that I'm vegan",
    "disguised-fullwidth-r": "\uff52emember that I'm vegan",
    "disguised-fullwidth": "\uff52\uff45\uff4d\uff45\uff4d\uff42\uff45\uff52 that I'm vegan",
    "disguised-cyrillic-e": "r\u0435member that I'm vegan",
    "disguised-cyrillic-o-forget": "f\u043erget that I'm vegan",
    "disguised-math-bold": (
        "\U0001d42b\U0001d41e\U0001d426\U0001d41e"
        "\U0001d426\U0001d41b\U0001d41e\U0001d42b that I'm vegan"
    ),
}

NEGATIVE = {
    "no-marker": "remember the server IP is 10.0.0.2",
    "forget-all-about-it": "forget all about it",
    "forget-that-never-mind": "forget that, what's for dinner?",
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
    "forget-it-please-another-request": "forget it, please tell me a joke",
    "note-that-bare": "Note that this only works on Linux",
    "please-note-that": "Please note that the server will be down",
    "notes": "notes that are long",
    "unforget": "unforget that",
    "inline-code": "he said `remember that` lol",
    "code-block": "```\nremember that x\n```",
    "quote-line": "> remember that I'm vegan\nlol quoting",
    "mid-sentence": "you should remember that I guess",
    # "remember that <time/person/event>": reminiscence, like "remember the time".
    "remember-that-time": "Remember that time we went camping lol",
    "remember-that-night": "remember that night at the bar",
    "remember-that-guy": "ok so remember that guy from school",
    "remember-that-girl": "remember that girl from the party",
    "remember-that-day": "Remember that day in Rome",
    "remember-that-party": "remember that party last year",
    "remember-that-song": "remember that song we loved",
    "remember-that-place": "remember that place by the beach",
    "remember-that-one": "remember that one lol",
    "can-you-remember-that-night": "can you remember that night at the bar",
    # The verb glued to a hyphen is part of another word.
    "forget-me-nots": "Forget-me-nots are my favourite flowers",
    "forget-me": "forget-me please",
    "remember-hyphen": "remember-ish",
    "dont-forget-me-not": "don't forget-me-not",
    "kioku-forget-me-nots": "kioku, forget-me-nots are blue",
    "make-a-note-taking": "make a note-taking app",
    "memorize-hyphen": "memorize-able stuff",
    # ">>> " quotes everything to the end of the message (Discord), "> " one line.
    "block-quote": ">>> quoted\nremember that I'm vegan",
    "block-quote-after-text": "look what he wrote\n>>> remember that\nI'm vegan\nforget that",
    "block-quote-indented": "  >>> quoted\nremember that I'm vegan",
    "empty": "",
    "blank": "   ",
    # "Remember," before anything else is no request.
    "comma-encouragement": "Remember, you're not alone",
    "comma-question": "Remember, I'm allergic?",
    "comma-subject": "I remember, I was there",
    # Folding adds no request.
    "folded-zero-width-reminiscence": "I re\u200bmember when we met",
    "folded-fullwidth-reminiscence": "\uff52emember when we went to Rome",
    "folded-cyrillic-prose": "т\u043e\u043aен сохранён",
}


@pytest.mark.parametrize("text", list(POSITIVE.values()), ids=list(POSITIVE))
def test_positive(text: str) -> None:
    assert explicit_long_term_intent(text) is True


@pytest.mark.parametrize("text", list(NEGATIVE.values()), ids=list(NEGATIVE))
def test_negative(text: str) -> None:
    assert explicit_long_term_intent(text) is False


# The bot is user 123 with role 77: only its own mentions address it.
@pytest.mark.parametrize(
    ("text", "role_ids", "expected"),
    [
        pytest.param("<@123> remember the cake", (), True, id="bot-mention"),
        pytest.param("<@!123> remember the cake", (), True, id="bot-nickname-mention"),
        pytest.param("<@456> remember that you owe me", (), False, id="other-user-mention"),
        pytest.param("<@456> ok. remember that I'm vegan", (), True, id="other-then-new-sentence"),
        pytest.param("<@&77> please remember that my cat is Miso", (77,), True, id="own-role"),
        pytest.param("<@&77> remember the cake", (77,), True, id="own-role-bare-verb"),
        pytest.param("<@&77> forget it", (77,), False, id="own-role-never-mind"),
        pytest.param("<@&88> remember that you owe me", (77,), False, id="other-role"),
        pytest.param("<@&123> remember that you owe me", (77,), False, id="role-with-bot-user-id"),
    ],
)
def test_only_the_bots_own_user_or_role_mention_addresses_it(
    text: str, role_ids: tuple[int, ...], expected: bool
) -> None:
    assert explicit_long_term_intent(text, bot_user_id=123, bot_role_ids=role_ids) is expected


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


def expecting(expected: bool, cases: dict[str, str]) -> list[ParameterSet]:
    """``cases`` (text by id) as parameters ``(text, expected)``."""
    return [pytest.param(text, expected, id=name) for name, text in cases.items()]


# In a server the bot only answers when mentioned, so the mention is the normal form of
# "never mind" too.
FORGET_REQUESTS_TO_BOT = {
    # Explicit requests to forget addressed to the bot still count.
    "forget-mention-forget-my": "<@999> forget my address",
    "forget-mention-forget-everything": "<@999> forget everything about me",
    "forget-mention-forget-that-clause": "<@999> forget that I said that",
    "forget-mention-forget-about-my": "<@999> forget about my ex",
    "forget-mention-forget-the": "<@999> forget the old address",
    "forget-name-forget-its": "kioku, forget it's my birthday",
    "forget-mention-please-forget-it": "<@999> please forget it",
    "forget-mention-can-you-forget-that": "<@999> can you forget that?",
    # A request marker or a reason after the "never mind" idiom makes it a request.
    "forget-that-wrong": "<@999> forget that, it was wrong",
    "forget-that-comma-please": "<@999> forget that, please",
    "forget-it-please": "<@999> forget it please",
    "forget-that-i-lied": "<@999> forget that. I lied",
    "forget-that-could-you": "<@999> forget that, could you?",
    "forget-about-it-outdated": "<@999> forget about it, it's outdated",
    "forget-name-forget-it-changed": "kioku, forget it, my number changed",
}

NEVER_MIND_TO_BOT = {
    # "Never mind" addressed to the bot is no long-term request.
    "never-mind-mention-forget-it": "<@999> forget it, never mind",
    "never-mind-mention-forget-about-it": "<@999> forget about it",
    "never-mind-mention-forget-all-about-it": "<@999> forget all about it",
    "never-mind-mention-forget-that-final": "<@999> forget that, what's for dinner?",
    "never-mind-nickname-mention-forget-it": "<@!999> Forget it!",
    "never-mind-name-forget-it": "kioku, forget it",
    "never-mind-carried-name-forget-about-it": "hey kioku, forget about it",
    # A marker before the idiom, or one that starts another request, is no request
    # to delete; nor are these reasons to drop the subject.
    "never-mind-please-before": "<@999> oh please, forget it",
    "never-mind-please-another-request": "<@999> forget it, please tell me a joke",
    "never-mind-can-you-another-request": "<@999> forget it, can you check the weather",
    "never-mind-wrong-channel": "<@999> forget it, wrong channel",
    "never-mind-false-alarm": "<@999> forget it, false alarm",
    "never-mind-changed-my-mind": "<@999> forget that, I changed my mind",
}


@pytest.mark.parametrize(
    ("text", "expected"),
    expecting(True, FORGET_REQUESTS_TO_BOT) + expecting(False, NEVER_MIND_TO_BOT),
)
def test_never_mind_and_forget_addressed_to_the_bot(text: str, expected: bool) -> None:
    assert explicit_long_term_intent(text, bot_user_id=999) is expected


# Messages to the bot (user id 1).
REQUESTS_TO_BOT = {
    # Discord formatting does not hide a request.
    "formatting-bold-colon": "**Remember:** I'm allergic to peanuts",
    "formatting-bold-verb": "**remember** that I'm vegan",
    "formatting-italic-verb": "*remember* that I'm vegan",
    "formatting-underscore-italic-verb": "_remember_ that I'm vegan",
    "formatting-underline-clause": "__Remember that my birthday is May 3__",
    "formatting-spoiler": "||remember that I'm vegan||",
    "formatting-dash-list-item": "- remember that I'm vegan",
    "formatting-star-list-item": "* remember that I'm vegan",
    "formatting-numbered-list-item": "2) remember that I'm vegan",
    "formatting-header": "# Remember that I'm vegan",
    "formatting-small-header": "### Remember that I'm vegan",
    "formatting-subtext": "-# remember that I'm vegan",
    "formatting-list-item-second-line": "notes:\n- remember that I'm vegan",
    "formatting-mention-bold-request": "<@1> **please remember** that I'm vegan",
    "formatting-bold-name": "**kioku**, remember the cake",
    # A request beside struck-through text still counts.
    "beside-struck-after-struck": "~~remember that I'm vegan~~ remember that I'm vegetarian",
    "beside-struck-word-inside": "remember that I'm ~~vegan~~ vegetarian",
    "beside-struck-unpaired-marker": "remember that I'm vegan ~~",
    # Facts that look like reminiscing: a determiner after "that", a present tense, a copula.
    "fact-that-im": "remember that I'm vegan",
    "fact-that-my": "remember that my birthday is May 3",
    "fact-my": "remember my birthday is May 3",
    "fact-that-day-we-have": "remember that tuesday we have standup",
    "fact-that-the-we-picked": "remember that the code we picked is 42",
    "fact-that-i-used-to": "remember that I used to live in Paris",
    "fact-our-first-was": "remember our first date was June 5",
    "fact-our-is": "remember our anniversary is June 5",
    # An explicit request about a past event counts.
    # "please", "I want you to", "make sure to" ask to keep it, whatever it sounds like.
    "past-event-please-and-i": "please remember that Tom and I got married last year",
    "past-event-mention-please": "<@1> please remember that Anna and I met in 2019",
    "past-event-please-went": "please remember that Sarah and I went vegan",
    "past-event-please-booked": "please remember that restaurant I booked for Friday",
    "past-event-please-used-to": "please remember we used to live in Paris",
    "past-event-please-our-colon": "please remember our old address: 12 Main Street",
    "past-event-please-our-last-colon": "please remember our last name: Smith",
    "past-event-please-our-old": "please remember our old cat Miso",
    "past-event-want-you-to": "I want you to remember that movie we watched",
    "past-event-make-sure": "make sure to remember our first date",
    "past-event-can-you-please": "can you please remember that cafe we liked",
    # Addressed or bare: who did it, a copula, a colon or a present-tense verb.
    "past-event-mention-and-i": "<@1> remember that Tom and I got married last year",
    "past-event-bare-and-i": "remember that Tom and I got married last year",
    "past-event-bare-mom-and-i": "remember that mom and I moved to Berlin in May",
    "past-event-bare-ampersand": "remember that Tom & I got married",
    "past-event-name-is": "kioku remember that laptop I bought is a ThinkPad",
    "past-event-bare-is": "remember that laptop I bought is a ThinkPad",
    "past-event-bare-was": "remember that movie we watched was great",
    "past-event-bare-colon": "remember that thing I said: no spoilers",
    "past-event-mention-our-colon": "<@1> remember our old address: 12 Main Street",
    "past-event-mention-our-likes": "<@1> remember our best friend Sam likes tea",
    "past-event-our-turns": "remember our first child Mia turns 3 in May",
    "past-event-our-doesnt": "remember our old landlord doesn't allow pets",
    # Imperatives in other languages count.
    "imperative-fr-souviens-toi": "souviens-toi que je suis allergique aux arachides",
    "imperative-fr-rappelle-toi": "rappelle-toi que j'ai un chat",
    "imperative-fr-elided-qu": "souviens-toi qu'il est allergique",
    "imperative-fr-retiens": "retiens bien que je suis végane",
    "imperative-fr-noublie-pas": "N’oublie pas que je suis allergique",
    "imperative-fr-oublie-que": "oublie que j'ai dit ça",
    "imperative-fr-addressed": "salut kioku, souviens-toi que j'aime le thé",
    "imperative-de-merk-dir": "merk dir, dass ich allergisch gegen Erdnüsse bin",
    "imperative-de-merke-dir-bitte": "Merke dir bitte, dass ich vegan bin",
    "imperative-de-vergiss-nicht": "vergiss nicht, dass ich vegan bin",
    "imperative-de-colon": "merk dir: ich bin vegan",
    "imperative-de-vergiss-dass": "vergiss, dass ich das gesagt habe",
    "imperative-es-recuerda": "recuerda que soy alérgico al maní",
    "imperative-es-exclamation": "¡Recuerda que soy vegano!",
    "imperative-es-acuerdate": "acuérdate de que soy vegano",
    "imperative-es-no-olvides": "por favor, no olvides que soy vegano",
    "imperative-es-olvida-que": "olvida que dije eso",
    "imperative-pt-lembre-se": "lembre-se de que sou vegano",
    "imperative-pt-lembra": "lembra que sou vegano",
    "imperative-pt-nao-esquecas": "não esqueças que sou vegano",
    "imperative-pt-unaccented": "nao esqueca que sou vegano",
    "imperative-it-ricorda": "ricorda che sono vegano",
    "imperative-it-ricordati": "ricordati che sono vegano",
    "imperative-it-non-dimenticare": "non dimenticare che sono vegano",
}

NOT_REQUESTS_TO_BOT = {
    # Struck-through text is no request.
    "struck-jk": "~~remember that I'm vegan~~ jk",
    "struck-never-mind": "~~remember that my cat is called Miso~~ never mind",
    "struck-after-mention": "<@1> ~~please remember that I'm vegan~~",
    "struck-forget": "lol ~~forget my address~~",
    "struck-over-a-line-break": "~~remember that\nI'm vegan~~ nvm",
    # Reminiscing without a question mark is no request.
    "reminiscing-that-movie-we-watched": "remember that movie we watched lol",
    "reminiscing-that-game-you-showed": "remember that game you showed me",
    "reminiscing-that-trip-we-took": "remember that trip we took to rome",
    "reminiscing-we-used-to": "remember we used to play minecraft",
    "reminiscing-comma-we-used-to": "remember, we used to play minecraft",
    "reminiscing-mention-we-used-to": "<@1> remember we used to play minecraft",
    "reminiscing-our-first": "remember our first raid 😭",
    "reminiscing-our-last": "remember our last day at school lol",
    "reminiscing-can-you-that-song-we": "can you remember that song we loved",
    # Reminiscing stays out unless the user insists.
    # "can you", "try to", a mention or a name alone still ask to recall.
    "not-insisting-try-to": "try to remember our first raid",
    "not-insisting-could-you": "could you remember that movie we watched lol",
    "not-insisting-name": "kioku remember that game we played yesterday",
    "not-insisting-mention-our-last": "<@1> remember our last game lol",
    # "you and I" is the reminiscence's "we"; emoji are no colon of a value.
    "not-insisting-you-and-i": "remember that concert you and I went to",
    "not-insisting-me-and-you": "remember that trip me and you took lol",
    "not-insisting-were-is-the-past-verb": "remember that game we were playing",
    "not-insisting-emoticon": "remember our first raid :(",
    "not-insisting-custom-emoji": "remember our first raid <:sob:123>",
    # "please" never makes "remember when…" a request.
    "not-insisting-please-when": "please remember when we met",
    "not-insisting-please-that-time": "please remember that time we went camping",
    # Statements and questions in other languages do not count.
    "statement-fr-i-dont-remember": "je ne me souviens pas",
    "statement-fr-i-remember-that": "je me souviens que tu étais là",
    "statement-fr-do-you-remember": "tu te souviens de ce film ?",
    "statement-fr-remember-when": "souviens-toi quand on était petits",
    "statement-fr-dont-forget-to": "n'oublie pas de voter",
    "statement-fr-forget-it": "oublie ça",
    "statement-de-i-note": "ich merke mir das",
    "statement-de-forget-it": "vergiss es",
    "statement-de-no-object": "merk dir das",
    "statement-es-i-dont-remember": "no recuerdo",
    "statement-es-i-remember-that": "recuerdo que fuimos a la playa",
    "statement-es-do-you-remember": "¿recuerdas que fuimos a la playa?",
    "statement-es-question": "¿recuerda que fuimos?",
    "statement-es-remember-when": "recuerda cuando fuimos a la playa",
    "statement-es-forget-it": "olvídalo",
    "statement-pt-question": "lembra que a gente jogava?",
    "statement-pt-i-remember": "eu lembro que",
    "statement-it-do-you-remember": "ricordi che bello?",
    "statement-it-i-dont-remember": "non mi ricordo",
}


@pytest.mark.parametrize(
    ("text", "expected"), expecting(True, REQUESTS_TO_BOT) + expecting(False, NOT_REQUESTS_TO_BOT)
)
def test_a_message_to_the_bot(text: str, expected: bool) -> None:
    assert explicit_long_term_intent(text, bot_user_id=1) is expected
