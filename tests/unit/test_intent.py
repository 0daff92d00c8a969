"""Explicit long-term memory intent: imperative requests, on word boundaries only."""

from __future__ import annotations

import pytest

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


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("<@&77> please remember that my cat is Miso", True, id="own-role"),
        pytest.param("<@&77> remember the cake", True, id="own-role-bare-verb"),
        pytest.param("<@&77> forget it", False, id="own-role-never-mind"),
        pytest.param("<@&88> remember that you owe me", False, id="other-role"),
        pytest.param("<@&123> remember that you owe me", False, id="role-with-bot-user-id"),
    ],
)
def test_the_bots_own_role_mention_addresses_it(text: str, expected: bool) -> None:
    assert explicit_long_term_intent(text, bot_user_id=123, bot_role_ids=(77,)) is expected


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


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("<@999> forget it, never mind", id="mention-forget-it"),
        pytest.param("<@999> forget about it", id="mention-forget-about-it"),
        pytest.param("<@999> forget all about it", id="mention-forget-all-about-it"),
        pytest.param("<@999> forget that, what's for dinner?", id="mention-forget-that-final"),
        pytest.param("<@!999> Forget it!", id="nickname-mention-forget-it"),
        pytest.param("kioku, forget it", id="name-forget-it"),
        pytest.param("hey kioku, forget about it", id="carried-name-forget-about-it"),
        # A marker before the idiom, or one that starts another request, is no request
        # to delete; nor are these reasons to drop the subject.
        pytest.param("<@999> oh please, forget it", id="please-before"),
        pytest.param("<@999> forget it, please tell me a joke", id="please-another-request"),
        pytest.param("<@999> forget it, can you check the weather", id="can-you-another-request"),
        pytest.param("<@999> forget it, wrong channel", id="wrong-channel"),
        pytest.param("<@999> forget it, false alarm", id="false-alarm"),
        pytest.param("<@999> forget that, I changed my mind", id="changed-my-mind"),
    ],
)
def test_never_mind_addressed_to_the_bot_is_not_a_long_term_request(text: str) -> None:
    # In a server the bot only answers when mentioned, so the mention is the normal form
    # of "never mind" too.
    assert explicit_long_term_intent(text, bot_user_id=999) is False


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("<@999> forget my address", id="mention-forget-my"),
        pytest.param("<@999> forget everything about me", id="mention-forget-everything"),
        pytest.param("<@999> forget that I said that", id="mention-forget-that-clause"),
        pytest.param("<@999> forget about my ex", id="mention-forget-about-my"),
        pytest.param("<@999> forget the old address", id="mention-forget-the"),
        pytest.param("kioku, forget it's my birthday", id="name-forget-its"),
        pytest.param("<@999> please forget it", id="mention-please-forget-it"),
        pytest.param("<@999> can you forget that?", id="mention-can-you-forget-that"),
        # A request marker or a reason after the "never mind" idiom makes it a request.
        pytest.param("<@999> forget that, it was wrong", id="forget-that-wrong"),
        pytest.param("<@999> forget that, please", id="forget-that-comma-please"),
        pytest.param("<@999> forget it please", id="forget-it-please"),
        pytest.param("<@999> forget that. I lied", id="forget-that-i-lied"),
        pytest.param("<@999> forget that, could you?", id="forget-that-could-you"),
        pytest.param("<@999> forget about it, it's outdated", id="forget-about-it-outdated"),
        pytest.param("kioku, forget it, my number changed", id="name-forget-it-changed"),
    ],
)
def test_explicit_forget_requests_addressed_to_the_bot_still_count(text: str) -> None:
    assert explicit_long_term_intent(text, bot_user_id=999) is True


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("**Remember:** I'm allergic to peanuts", id="bold-colon"),
        pytest.param("**remember** that I'm vegan", id="bold-verb"),
        pytest.param("*remember* that I'm vegan", id="italic-verb"),
        pytest.param("_remember_ that I'm vegan", id="underscore-italic-verb"),
        pytest.param("__Remember that my birthday is May 3__", id="underline-clause"),
        pytest.param("||remember that I'm vegan||", id="spoiler"),
        pytest.param("- remember that I'm vegan", id="dash-list-item"),
        pytest.param("* remember that I'm vegan", id="star-list-item"),
        pytest.param("2) remember that I'm vegan", id="numbered-list-item"),
        pytest.param("# Remember that I'm vegan", id="header"),
        pytest.param("### Remember that I'm vegan", id="small-header"),
        pytest.param("-# remember that I'm vegan", id="subtext"),
        pytest.param("notes:\n- remember that I'm vegan", id="list-item-second-line"),
        pytest.param("<@1> **please remember** that I'm vegan", id="mention-bold-request"),
        pytest.param("**kioku**, remember the cake", id="bold-name"),
    ],
)
def test_discord_formatting_does_not_hide_a_request(text: str) -> None:
    assert explicit_long_term_intent(text, bot_user_id=1) is True


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("~~remember that I'm vegan~~ jk", id="struck-jk"),
        pytest.param("~~remember that my cat is called Miso~~ never mind", id="struck-never-mind"),
        pytest.param("<@1> ~~please remember that I'm vegan~~", id="struck-after-mention"),
        pytest.param("lol ~~forget my address~~", id="struck-forget"),
        pytest.param("~~remember that\nI'm vegan~~ nvm", id="struck-over-a-line-break"),
    ],
)
def test_struck_through_text_is_not_a_request(text: str) -> None:
    assert explicit_long_term_intent(text, bot_user_id=1) is False


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("~~remember that I'm vegan~~ remember that I'm vegetarian", id="after-struck"),
        pytest.param("remember that I'm ~~vegan~~ vegetarian", id="struck-word-inside"),
        pytest.param("remember that I'm vegan ~~", id="unpaired-marker"),
    ],
)
def test_a_request_beside_struck_through_text_still_counts(text: str) -> None:
    assert explicit_long_term_intent(text, bot_user_id=1) is True


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("Remember, I'm allergic to peanuts", True, id="comma-im"),
        pytest.param("remember, my birthday is May 3", True, id="comma-my"),
        pytest.param("Remember, we meet on Fridays", True, id="comma-we"),
        pytest.param("Remember, you're not alone", False, id="comma-encouragement"),
        pytest.param("Remember, I'm allergic?", False, id="comma-question"),
        pytest.param("I remember, I was there", False, id="comma-subject"),
    ],
)
def test_remember_comma_before_a_first_person_statement(text: str, expected: bool) -> None:
    assert explicit_long_term_intent(text) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("remember that movie we watched lol", False, id="that-movie-we-watched"),
        pytest.param("remember that game you showed me", False, id="that-game-you-showed"),
        pytest.param("remember that trip we took to rome", False, id="that-trip-we-took"),
        pytest.param("remember we used to play minecraft", False, id="we-used-to"),
        pytest.param("remember, we used to play minecraft", False, id="comma-we-used-to"),
        pytest.param("<@1> remember we used to play minecraft", False, id="mention-we-used-to"),
        pytest.param("remember our first raid 😭", False, id="our-first"),
        pytest.param("remember our last day at school lol", False, id="our-last"),
        pytest.param("can you remember that song we loved", False, id="can-you-that-song-we"),
        # Facts that look alike: a determiner after "that", a present tense, a copula.
        pytest.param("remember that I'm vegan", True, id="that-im"),
        pytest.param("remember that my birthday is May 3", True, id="that-my"),
        pytest.param("remember my birthday is May 3", True, id="my"),
        pytest.param("remember that tuesday we have standup", True, id="that-day-we-have"),
        pytest.param("remember that the code we picked is 42", True, id="that-the-we-picked"),
        pytest.param("remember that I used to live in Paris", True, id="that-i-used-to"),
        pytest.param("remember our first date was June 5", True, id="our-first-was"),
        pytest.param("remember our anniversary is June 5", True, id="our-is"),
    ],
)
def test_reminiscing_without_a_question_mark_is_not_a_request(text: str, expected: bool) -> None:
    assert explicit_long_term_intent(text, bot_user_id=1) is expected


@pytest.mark.parametrize(
    "text",
    [
        # "please", "I want you to", "make sure to" ask to keep it, whatever it sounds like.
        pytest.param("please remember that Tom and I got married last year", id="please-and-i"),
        pytest.param("<@1> please remember that Anna and I met in 2019", id="mention-please"),
        pytest.param("please remember that Sarah and I went vegan", id="please-went"),
        pytest.param("please remember that restaurant I booked for Friday", id="please-booked"),
        pytest.param("please remember we used to live in Paris", id="please-used-to"),
        pytest.param("please remember our old address: 12 Main Street", id="please-our-colon"),
        pytest.param("please remember our last name: Smith", id="please-our-last-colon"),
        pytest.param("please remember our old cat Miso", id="please-our-old"),
        pytest.param("I want you to remember that movie we watched", id="want-you-to"),
        pytest.param("make sure to remember our first date", id="make-sure"),
        pytest.param("can you please remember that cafe we liked", id="can-you-please"),
        # Addressed or bare: who did it, a copula, a colon or a present-tense verb.
        pytest.param("<@1> remember that Tom and I got married last year", id="mention-and-i"),
        pytest.param("remember that Tom and I got married last year", id="bare-and-i"),
        pytest.param("remember that mom and I moved to Berlin in May", id="bare-mom-and-i"),
        pytest.param("remember that Tom & I got married", id="bare-ampersand"),
        pytest.param("kioku remember that laptop I bought is a ThinkPad", id="name-is"),
        pytest.param("remember that laptop I bought is a ThinkPad", id="bare-is"),
        pytest.param("remember that movie we watched was great", id="bare-was"),
        pytest.param("remember that thing I said: no spoilers", id="bare-colon"),
        pytest.param("<@1> remember our old address: 12 Main Street", id="mention-our-colon"),
        pytest.param("<@1> remember our best friend Sam likes tea", id="mention-our-likes"),
        pytest.param("remember our first child Mia turns 3 in May", id="our-turns"),
        pytest.param("remember our old landlord doesn't allow pets", id="our-doesnt"),
    ],
)
def test_an_explicit_request_about_a_past_event_counts(text: str) -> None:
    assert explicit_long_term_intent(text, bot_user_id=1) is True


@pytest.mark.parametrize(
    "text",
    [
        # "can you", "try to", a mention or a name alone still ask to recall.
        pytest.param("try to remember our first raid", id="try-to"),
        pytest.param("could you remember that movie we watched lol", id="could-you"),
        pytest.param("kioku remember that game we played yesterday", id="name"),
        pytest.param("<@1> remember our last game lol", id="mention-our-last"),
        # "you and I" is the reminiscence's "we"; emoji are no colon of a value.
        pytest.param("remember that concert you and I went to", id="you-and-i"),
        pytest.param("remember that trip me and you took lol", id="me-and-you"),
        pytest.param("remember that game we were playing", id="were-is-the-past-verb"),
        pytest.param("remember our first raid :(", id="emoticon"),
        pytest.param("remember our first raid <:sob:123>", id="custom-emoji"),
        # "please" never makes "remember when…" a request.
        pytest.param("please remember when we met", id="please-when"),
        pytest.param("please remember that time we went camping", id="please-that-time"),
    ],
)
def test_reminiscing_stays_out_unless_the_user_insists(text: str) -> None:
    assert explicit_long_term_intent(text, bot_user_id=1) is False


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("souviens-toi que je suis allergique aux arachides", id="fr-souviens-toi"),
        pytest.param("rappelle-toi que j'ai un chat", id="fr-rappelle-toi"),
        pytest.param("souviens-toi qu'il est allergique", id="fr-elided-qu"),
        pytest.param("retiens bien que je suis végane", id="fr-retiens"),
        pytest.param("N’oublie pas que je suis allergique", id="fr-noublie-pas"),
        pytest.param("oublie que j'ai dit ça", id="fr-oublie-que"),
        pytest.param("salut kioku, souviens-toi que j'aime le thé", id="fr-addressed"),
        pytest.param("merk dir, dass ich allergisch gegen Erdnüsse bin", id="de-merk-dir"),
        pytest.param("Merke dir bitte, dass ich vegan bin", id="de-merke-dir-bitte"),
        pytest.param("vergiss nicht, dass ich vegan bin", id="de-vergiss-nicht"),
        pytest.param("merk dir: ich bin vegan", id="de-colon"),
        pytest.param("vergiss, dass ich das gesagt habe", id="de-vergiss-dass"),
        pytest.param("recuerda que soy alérgico al maní", id="es-recuerda"),
        pytest.param("¡Recuerda que soy vegano!", id="es-exclamation"),
        pytest.param("acuérdate de que soy vegano", id="es-acuerdate"),
        pytest.param("por favor, no olvides que soy vegano", id="es-no-olvides"),
        pytest.param("olvida que dije eso", id="es-olvida-que"),
        pytest.param("lembre-se de que sou vegano", id="pt-lembre-se"),
        pytest.param("lembra que sou vegano", id="pt-lembra"),
        pytest.param("não esqueças que sou vegano", id="pt-nao-esquecas"),
        pytest.param("nao esqueca que sou vegano", id="pt-unaccented"),
        pytest.param("ricorda che sono vegano", id="it-ricorda"),
        pytest.param("ricordati che sono vegano", id="it-ricordati"),
        pytest.param("non dimenticare che sono vegano", id="it-non-dimenticare"),
    ],
)
def test_imperatives_in_other_languages_count(text: str) -> None:
    assert explicit_long_term_intent(text, bot_user_id=1) is True


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("je ne me souviens pas", id="fr-i-dont-remember"),
        pytest.param("je me souviens que tu étais là", id="fr-i-remember-that"),
        pytest.param("tu te souviens de ce film ?", id="fr-do-you-remember"),
        pytest.param("souviens-toi quand on était petits", id="fr-remember-when"),
        pytest.param("n'oublie pas de voter", id="fr-dont-forget-to"),
        pytest.param("oublie ça", id="fr-forget-it"),
        pytest.param("ich merke mir das", id="de-i-note"),
        pytest.param("vergiss es", id="de-forget-it"),
        pytest.param("merk dir das", id="de-no-object"),
        pytest.param("no recuerdo", id="es-i-dont-remember"),
        pytest.param("recuerdo que fuimos a la playa", id="es-i-remember-that"),
        pytest.param("¿recuerdas que fuimos a la playa?", id="es-do-you-remember"),
        pytest.param("¿recuerda que fuimos?", id="es-question"),
        pytest.param("recuerda cuando fuimos a la playa", id="es-remember-when"),
        pytest.param("olvídalo", id="es-forget-it"),
        pytest.param("lembra que a gente jogava?", id="pt-question"),
        pytest.param("eu lembro que", id="pt-i-remember"),
        pytest.param("ricordi che bello?", id="it-do-you-remember"),
        pytest.param("non mi ricordo", id="it-i-dont-remember"),
    ],
)
def test_other_languages_statements_and_questions_do_not_count(text: str) -> None:
    assert explicit_long_term_intent(text, bot_user_id=1) is False


# Disguises read as the plain word: the check folds text as redaction does (issue 26).
@pytest.mark.parametrize(
    "text",
    [
        pytest.param("re\u200bmember that I'm vegan", id="zero-width-space"),
        pytest.param("remem\u200dber that I'm vegan", id="zero-width-joiner"),
        pytest.param("rem\u00adember that I'm vegan", id="soft-hyphen"),
        pytest.param("\uff52emember that I'm vegan", id="fullwidth-r"),
        pytest.param(
            "\uff52\uff45\uff4d\uff45\uff4d\uff42\uff45\uff52 that I'm vegan", id="fullwidth"
        ),
        pytest.param("r\u0435member that I'm vegan", id="cyrillic-e"),
        pytest.param("f\u043erget that I'm vegan", id="cyrillic-o-forget"),
        pytest.param(
            "\U0001d42b\U0001d41e\U0001d426\U0001d41e"
            "\U0001d426\U0001d41b\U0001d41e\U0001d42b that I'm vegan",
            id="math-bold",
        ),
    ],
)
def test_a_disguised_memory_verb_still_counts(text: str) -> None:
    assert explicit_long_term_intent(text) is True


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("I re\u200bmember when we met", id="zero-width-reminiscence"),
        pytest.param("\uff52emember when we went to Rome", id="fullwidth-reminiscence"),
        pytest.param("т\u043e\u043aен сохранён", id="cyrillic-prose"),
    ],
)
def test_folding_adds_no_request(text: str) -> None:
    assert explicit_long_term_intent(text) is False
