"""Does a message explicitly ask the bot to remember (or forget) something long-term?

When it does, the turn is reserved for long-term memory tools and the STM tool is not
offered (SPEC §3 guards, §6 long-term memory).

The rule. A message is split into clauses at ``. ! ? ; ,`` and line breaks (code blocks,
inline code, quotes and struck-through text are ignored first: quoted or struck words
are not requests; as in Discord, ``> `` quotes its line and ``>>> `` everything to the
end of the message). Formatting is not quoting: emphasis markers (``**``, ``*``,
``__``, ``_``, an unpaired ``~~``, ``||``) and a list, header or subtext marker at a
line start (``-``, ``*``, ``1.``, ``#``, ``-#``) are dropped. A clause counts when, at
its START, after optional address words, it holds a memory verb in the IMPERATIVE:

* address words (any number): the bot's mention ``<@id>`` or its own role's ``<@&id>``
  (any mention when the bot id is unknown), the bot's name (``kioku``), interjections
  (``hey``, ``ok``, ``also``, ``btw``, ``and``…);
* then optionally a request marker: ``please``/``pls``/``plz``/``kindly``, ``can/could/
  would/will you`` (or ``u``), ``I want/need you to``, ``I'd/I would like you to``,
  ``make sure to``/``make sure you``, ``try to`` (a ``please`` may follow the marker:
  ``can you please``);
* then a memory verb, matched as whole words (``misremembered``, ``unforgettable``,
  ``forgetting``, ``remembering``, ``forget-me-nots`` never count).

Bare imperatives (no request marker and no bot mention/name) are held to a stricter
form, because "remember…" in chat is usually reminiscence, not an instruction:

* ``remember`` / ``don't forget`` must be followed by ``that``, ``:``, `` - ``, ``this``,
  ``my``, ``I``/``I'm``, ``we``/``our``, ``it``, ``for later``, ``the following``…
  (``remember,`` before a first-person statement: ``Remember, I'm allergic…``)
  — ``Remember when…``, ``Remember the Alamo``, ``Don't forget to vote``, ``Remember,
  you're not alone`` do not count;
* ``forget`` must be followed by ``that`` (and more: a clause-final ``forget that`` is
  "never mind"), ``what``, ``about`` (not ``about it``), ``my``, ``everything``,
  ``this``… — ``Forget it`` and ``forget all about it`` do not count;
* ``never forget`` counts as ``don't forget``;
* the clause must not be a question (``Remember that party?``); a tag question
  (``…, ok?``, ``… right?``) asks for agreement, so the clause before it still counts.

Addressed to the bot (mention or name, no request marker), any memory verb counts, but
the "never mind" idioms still do not: ``<@bot> forget it``, ``kioku, forget (all) about
it`` and a clause-final ``<@bot> forget that``. With a request marker they do count
(``please forget it``, ``can you forget that?``), and so they do (addressed or bare)
when the marker or a reason follows them in the message: ``forget it please``,
``forget that, could you?``, ``forget that, it was wrong``, ``forget that. I lied``
(wrong, lie, mistake, incorrect, not true, typo, false, kidding, outdated, changed…).
A marker that starts another request (``forget it, please tell me a joke``) and the
reasons to drop a subject (``wrong channel``, ``false alarm``, ``changed my mind``) do
not count.

Always (with or without a marker): ``remember`` followed by ``when``, ``how``, ``if``,
``back``, ``the time``, ``that time/night/guy/party``… never counts (it asks to
reminisce or recall). Nor does reminiscence typed without a ``?``, bare, addressed or
after ``can you``/``try to`` (not after ``please``, ``I want you to``, ``make sure to``:
``please remember that restaurant I booked for Friday`` asks to keep it):
``remember we/you used to…``, ``remember our first/last/old/best…`` unless a colon, a
copula or a verb in the present follows (``our first date was June 5``, ``our best
friend Sam likes tea``, ``our old address: 12 Main Street``), and ``remember that <noun>
we/you/you and I… <past tense>`` unless a colon or a copula follows (``remember that
movie we watched`` does not count; ``remember that laptop I bought is a ThinkPad``,
``remember that Tom and I got married``, ``remember that my…``, ``remember that I'm…``
and ``remember that tuesday we have…`` do).

``memorize`` / ``memorise``, ``keep in mind``, ``make/take a note``, ``note (this)
down``, ``write this down``, ``commit/add/save/store this to memory`` count at clause
start. ``note that`` counts only when addressed to the bot (mention/name or ``can
you``…): a bare or ``please note that…`` is the announcement idiom. Subjects other than
an address (``I remember that``, ``I can't remember the title``, ``do you remember``)
never count.

Other languages the bot may be addressed in count as clause-initial imperatives with
what they ask to keep (``que``/``dass``/``che`` or ``:``), bare or addressed: French
``souviens-toi que``, ``rappelle-toi que``, ``retiens que``, ``n'oublie pas que``;
German ``merk(e) dir, dass``, ``vergiss nicht, dass``; Spanish ``recuerda que``,
``acuérdate de que``, ``no olvides que``; Portuguese ``lembre-se de que``, ``lembra
que``, ``não esqueças que``; Italian ``ricorda che``, ``ricordati che``, ``non
dimenticare che``; and "forget that…": ``oublie que``, ``vergiss, dass``, ``olvida
que``, ``esquece que``, ``dimentica che``. Statements and questions (``je ne me souviens
pas``, ``no recuerdo``, ``¿recuerdas que…?``) and "never mind" (``oublie ça``, ``vergiss
es``) do not.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

_DEFAULT_BOT_NAMES = ("kioku",)

_CODE_BLOCK = re.compile(r"```.*?(?:```|$)", re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
# Discord quotes: ``>>> `` quotes everything to the END of the message, ``> `` one line.
_BLOCK_QUOTE = re.compile(r"^[ \t]*>>>[ \t].*", re.MULTILINE | re.DOTALL)
_QUOTE_LINE = re.compile(r"^\s*>.*$", re.MULTILINE)
# Formatting is not quoting: a header, list item or subtext marker at a line start and
# emphasis markers (bold, italics, underline, strikethrough, spoiler) are dropped, so
# "**Remember:** I'm vegan", "- remember that…" and "# Remember that…" read as plain text.
_LINE_MARKER = re.compile(r"^[ \t]*(?:-#|#{1,6}|[-*+\u2022]|\d{1,3}[.)])[ \t]+", re.MULTILINE)
_EMPHASIS = re.compile(r"\*+|~~|\|\||(?<!\w)_+|_+(?!\w)")
# Struck-through text is taken back ("~~remember that I'm vegan~~ jk"): dropped like a
# quote, not read as plain text (an unpaired "~~" is only a marker).
_STRUCK = re.compile(r"~~.+?~~", re.DOTALL)
# "Remember, I'm allergic to nuts": a comma before a first-person statement is the
# colon of "Remember: I'm allergic…" ("Remember, you're not alone" is encouragement).
_REMEMBER_COMMA = re.compile(
    r"\b(remember)\s*,(?=\s*(?:i|i'm|im|i've|i'll|i'd|my|me|mine|we|we're|our|us)\b)"
)
# German puts a comma before "dass" ("merk dir, dass…"): keep the clause whole.
_COMMA_DASS = re.compile(r"\s*,\s*(?=(?:dass|daß)\b)")
# Clause text and the character that ended it ("" at the end of the message).
_CLAUSE = re.compile(r"([^.!?;,\n]*)([.!?;,\n]|$)")
# A user mention ``<@id>`` (``<@!id>`` is rewritten to it) or a role mention ``<@&id>``.
_MENTION = re.compile(r"<@(&?)(\d+)>")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": "'"})

_INTERJECTIONS = (
    r"hey|hi|hello|yo|ok|okay|oh|ah|and|also|btw|so|now|lol|alright|well|but|oi|bot"
    # French, German, Spanish, Portuguese, Italian: "and", "also", greetings, "please"
    # (their memory verbs below always need an object, so "please" adds nothing).
    r"|et|aussi|salut|coucou|stp|svp|s'il\s+(?:te|vous)\s+pla[iî]t|und|auch|hallo|bitte"
    r"|y|también|tambien|hola|oye|por\s+favor|e|também|olá|ola|anche|ciao|per\s+favore"
)
_REQUEST = (
    r"(?:please|pls|plz|kindly"
    r"|(?:can|could|would|will)\s+(?:you|u)"
    r"|i\s+(?:want|need)\s+you\s+to|i(?:'d|\s+would)\s+like\s+you\s+to"
    r"|make\s+sure\s+(?:to|you)|try\s+to)"
)
# "please note that…" is an announcement idiom: "please" does not make "note" a request.
_POLITE_ONLY = re.compile(r"(?:please|pls|plz|kindly)(?:\s+|$)")

# A memory verb is a whole word: not "forget-me-nots", "remember-ish", "note-taking".
_END = r"(?![\w-])"
_REMEMBER_NEVER = (
    r"(?!\s+(?:when|how|if|whether|back|the\s+(?:time|day|days|night|way)|those|who|why"
    r"|where|what\s+(?:happened|it\s+was|it's)|anything|nothing"
    r"|that\s+(?:time|night|day|guy|girl|party|song|place|one(?!\s+of\b)))\b)"
)
# Reminiscence typed without a "?" ("remember we used to play minecraft", "remember our
# first raid 😭", "remember that movie we watched lol") asks to recall, not to store.
# "that" before a bare noun and a past-tense relative clause is "that movie we watched";
# "remember that my…", "remember that I'm…", "remember that tuesday we have…" still count.
_PAST = (
    r"(?:used\s+to|would\s+always|\w+(?<!e)ed|went|saw|had|did|made|got|met|ate|took|found"
    r"|heard|sang|wrote|bought|built|drank|drove|left|lost|ran|said|sent|sat|slept|spent"
    r"|told|thought|won|wore|broke|came|fell|felt|flew|gave|knew|paid|rode|shot|swam|threw"
    r"|were|was|caught|brought|taught|showed|kept)\b"
)
_DETERMINER = (
    r"(?:i|i'm|im|i've|i'll|i'd|we|we're|you|you're|u|he|she|they|it|it's|my|our|your|his"
    r"|her|their|its|the|a|an|this|these|those|some|all|every|each|no|there|here)\b"
)
# After the reminiscence's noun, a copula or a colon states a fact about it ("remember
# our first date was June 5", "that laptop I bought is a ThinkPad", "our old address: 12
# Main Street"; a colon before a space: ":(" and "<:sob:123>" are emoji); after "our
# first/last/old/best" so does a verb in the present ("our best friend Sam likes tea",
# "our landlord doesn't allow pets").
_COPULA = r"is|are|was|were|will|isn't|aren't|wasn't|weren't|won't"
_IS_A_FACT = rf"(?!.*(?::\s|\b(?:{_COPULA})\b))"
_HAS_A_FACT = (
    rf"(?!.*(?::\s|\b(?:{_COPULA}|has|have|had|doesn't|don't|can't|cannot|should|must"
    r"|falls|starts|ends|begins|likes|loves|hates|lives|works|turns|needs|wants|prefers"
    r"|goes|moves|costs|means|uses|eats|drinks|plays|stays|gets|knows|owns|comes|calls"
    r"|studies|speaks|belongs)\b))"
)
_REMINISCING = (
    r"(?!(?:\s*[:\u2014\u2013]|\s+-)?\s*(?:that\s+)?"
    r"(?:(?:we|you|u|they|y'all)\s+(?:used\s+to|would\s+always)\b"
    rf"|our\s+(?:very\s+)?(?:first|last|old|best)\b{_HAS_A_FACT}"
    # "that Tom and I got married" says who did it: a fact, not "that movie we watched"
    # (nor "that concert you and I went to").
    rf"|that\s+(?!{_DETERMINER})\w+(?:\s+(?!and\b)\w+)?"
    r"\s+(?:(?:you|u|me|him|her|them|he|she|they)\s+(?:and|&)\s+)?"
    rf"(?:we|you|u|i|me|they|he|she)\s+{_PAST}{_IS_A_FACT}))"
)
_BARE_REMEMBER_OBJECT = (
    r"(?:\s*[:\u2014\u2013]|\s+-(?=\s)"
    r"|\s+(?:that|this|these|my|mine|i|i'm|im|i've|i'll|i'd|we|we're|our|us|it|it's"
    r"|for\s+(?:later|next\s+time|the\s+future|future)"
    r"|(?:the\s+)?following|forever|always)\b)"
)
_BARE_FORGET_OBJECT = (
    r"(?:\s*[:\u2014\u2013]|\s+-(?=\s)"
    # "forget that" ending its clause ("forget that, what's for dinner?") and "forget
    # all about it" are "never mind", not deletion requests.
    r"|\s+(?:that(?=\s*\S)|this|these|what|about\s+(?!it\b)|my|everything"
    r"|all(?!\s+about\s+it\b)|anything|i|i'm|i've"
    r"|we|our|the\s+(?:thing|fact|part|stuff))\b)"
)
_DONT = r"(?:don't|dont|do\s+not|never)"
# Imperatives in languages the bot may be addressed in, each only with what it asks to
# keep ("que", "dass", "che", ":"), so "je ne me souviens pas", "no recuerdo", "tu te
# souviens…", "ich merke mir…" never count, and "forget" only as "forget that…" ("oublie
# ça", "vergiss es" are "never mind").
_CONJUNCTION = r"(?:qu'|(?:que|dass|daß|che)(?![\w-]))"  # "qu'" is elided: "qu'il"
_THAT = rf"(?:\s*:|(?:\s+(?:bien|bitte|mal|doch|de|di))*\s+{_CONJUNCTION})"
_FOREIGN = (
    r"(?:(?:souviens|rappelle)-toi|(?:souvenez|rappelez)-vous|retiens|retenez"
    r"|n'oublie(?:z)?\s+pas"
    r"|merke?\s+dir|merken\s+sie\s+sich|vergiss\s+nicht|vergessen\s+sie\s+nicht"
    r"|recuerda|recuerde|recuerden|acu[ée]rdate|acu[ée]rdese|no\s+(?:te\s+)?olvides"
    r"|no\s+(?:se\s+)?olvide"
    r"|lembre-se|lembra-te|lembrem-se|lembra|lembre|n[ãa]o\s+(?:se\s+|te\s+)?esque(?:[çc]as?|ce)"
    r"|ricorda|ricordati|ricordatevi|non\s+(?:dimenticare|dimenticarti|scordare|scordarti)"
    rf"){_THAT}"
    # "forget that…": oublie que, vergiss dass, olvida que, esquece que, dimentica che.
    r"|(?:oublie(?:z)?|vergiss|olvida|olvide|olv[íi]date|esque[çc]a|esquece|dimentica|scordati)"
    rf"(?:\s+(?:de|di))?\s+{_CONJUNCTION}"
)
_ALWAYS = (
    rf"(?:memori[sz]e{_END}|keep\s+(?:(?:this|that|it)\s+)?in\s+mind{_END}"
    rf"|(?:make|take)\s+(?:a\s+)?note{_END}|note\s+(?:(?:this|that|it)\s+)?down{_END}"
    rf"|(?:write|jot)\s+(?:this|that|it)\s+down{_END}"
    r"|(?:commit|add|save|store|put)\s+(?:this|that|it)\s+(?:to|in|into)\s+"
    rf"(?:your\s+)?(?:long[\s-]?term\s+)?memory{_END})"
)

_BARE = re.compile(
    rf"(?:remember{_END}{_REMEMBER_NEVER}{_REMINISCING}{_BARE_REMEMBER_OBJECT}"
    rf"|{_DONT}\s+forget{_END}{_BARE_REMEMBER_OBJECT}"
    rf"|forget{_END}{_BARE_FORGET_OBJECT}"
    rf"|{_ALWAYS}|{_FOREIGN})"
)
_ADDRESSED = re.compile(
    rf"(?:remember{_END}{_REMEMBER_NEVER}{_REMINISCING}|{_DONT}\s+forget{_END}|forget{_END}"
    rf"|{_ALWAYS}|{_FOREIGN}|note\s+that\b)"
)
# After "please", "I want you to" or "make sure to" the user asks to keep something, even
# when it sounds like a memory ("please remember that restaurant I booked for Friday");
# "can you remember that song we loved" and "try to remember our first raid" still ask to
# recall.
_INSISTED = re.compile(
    rf"(?:remember{_END}{_REMEMBER_NEVER}|{_DONT}\s+forget{_END}|forget{_END}"
    rf"|{_ALWAYS}|{_FOREIGN}|note\s+that\b)"
)
_INSISTING = re.compile(r"\b(?:please|pls|plz|kindly|(?:want|need|like)\s+you\s+to|make\s+sure)\b")
# "never mind" idioms: "forget it", "forget (all) about it" and a clause-final "forget
# that". Said to the bot by mention or name they still mean "never mind" (in a server the
# bot only answers when mentioned, so the mention is the normal form); only a request
# marker ("please forget it", "can you forget that?") makes them a deletion request.
_NEVER_MIND = r"(?!\s+(?:it(?![\w'])|(?:all\s+)?about\s+it\b|that\s*$))"
_ADDRESSED_ONLY = re.compile(
    rf"(?:remember{_END}{_REMEMBER_NEVER}{_REMINISCING}|{_DONT}\s+forget{_END}|forget{_END}{_NEVER_MIND}"
    rf"|{_ALWAYS}|{_FOREIGN}|note\s+that\b)"
)
# ... but a "never mind" idiom ("forget it", "forget that", "forget about it") followed,
# in its clause or later in the message, by a request marker or by why the fact must go
# is a deletion request after all: "<@bot> forget that, it was wrong", "forget it please",
# "forget that. I lied". A marker before it ("oh please, forget it") is exasperation. A
# marker counts on its own ("forget that, could you?", "forget it please :)", "please,
# it's outdated"), not when it starts another request ("forget it, please tell me a
# joke", "forget it, can you check the weather"); and "wrong channel", "false alarm" or
# "changed my mind" are reasons to drop the subject, not the fact.
_MARKER_ALONE = (
    r"(?=\s*(?:$|[^\w\s]|(?:please|pls|plz|forget|delete|remove|erase|thanks?|thank|ty|thx)\b))"
)
_NEVER_MIND_IDIOM = re.compile(r"forget\s+(?:it(?![\w'])|(?:all\s+)?about\s+it\b|that\b)")
_MEANT_IT = re.compile(
    rf"\b(?:(?:please|pls|plz){_MARKER_ALONE}"
    rf"|(?:can|could|would|will)\s+(?:you|u){_MARKER_ALONE}"
    r"|wrong(?!\s+(?:channel|chat|thread|server|person|window|tab|place|bot|dm|room)\b)"
    r"|lied|lying|a\s+lie|mistake|mistaken|incorrect|inaccurate|untrue|not\s+true"
    r"|isn't\s+true|wasn't\s+true|no\s+longer\s+true|typo|false(?!\s+alarm\b)"
    r"|kidding|joking|jk|outdated|out\s+of\s+date|changed(?!\s+my\s+mind\b))\b"
)
_TAG_QUESTION = re.compile(r"\s(?:ok|okay|alright|right|yeah|please|pls)\s*$")
_BOT_REQUEST = re.compile(rf"{_REQUEST}\s+(?:please\s+)?")
_INTERJECTION = re.compile(rf"(?:{_INTERJECTIONS})\b[\s:!-]*")
_NAME_TAIL = r"\b[\s:!-]*"


def _prepare(text: str) -> str:
    text = _CODE_BLOCK.sub(" ", text)
    text = _INLINE_CODE.sub(" ", text)
    text = _BLOCK_QUOTE.sub(" ", text)
    text = _QUOTE_LINE.sub(" ", text)
    text = _STRUCK.sub(" ", text)
    text = text.replace("<@!", "<@")  # the legacy nickname mention holds a "!"
    text = _EMPHASIS.sub("", _LINE_MARKER.sub("", text))
    # "¡Recuerda que…!": the opening mark is not part of the verb ("¿" stays: a question).
    text = text.replace("¡", " ").translate(_APOSTROPHES).lower()
    return _COMMA_DASS.sub(" ", _REMEMBER_COMMA.sub(r"\1:", text))


def _is_bot_mention(
    mention: re.Match[str], bot_user_id: int | None, bot_role_ids: Collection[int]
) -> bool:
    """Whether a mention names the bot: its user, or its own role (Discord's mention
    picker offers the bot's managed role beside the bot, and the bot answers both).
    Any mention does while the bot's id is unknown."""
    if bot_user_id is None:
        return True
    mentioned = int(mention.group(2))
    return mentioned in bot_role_ids if mention.group(1) else mentioned == bot_user_id


def _strip_address(
    clause: str,
    bot_user_id: int | None,
    bot_role_ids: Collection[int],
    names: re.Pattern[str] | None,
) -> tuple[str, bool, bool]:
    """Drop leading mentions, bot names and interjections.

    Returns the rest, whether the bot was addressed, and whether someone else was
    (a leading mention of another user or role when the bot's id is known).
    """
    rest = clause.lstrip()
    addressed = False
    while rest:
        mention = _MENTION.match(rest)
        if mention is not None:
            if not _is_bot_mention(mention, bot_user_id, bot_role_ids):
                return rest, addressed, True
            addressed = True
            rest = rest[mention.end() :].lstrip(" :!-")
            continue
        name = names.match(rest) if names is not None else None
        if name is not None:
            addressed = True
            rest = rest[name.end() :]
            continue
        interjection = _INTERJECTION.match(rest)
        if interjection is not None:
            rest = rest[interjection.end() :]
            continue
        break
    return rest, addressed, False


def _verb_matches(rest: str, addressed: bool, question: bool, following: str) -> bool:
    """Whether clause ``rest`` (address words stripped) is a request; ``following`` is
    the rest of the message after the clause."""
    request = _BOT_REQUEST.match(rest)
    if request is not None:
        polite_only = _POLITE_ONLY.fullmatch(request.group(0)) is not None
        rest = rest[request.end() :]
        if polite_only and not addressed and rest.startswith("note"):
            return False  # "please note that…": an announcement, not a request
        insisted = _INSISTING.search(request.group(0)) is not None
        return (_INSISTED if insisted else _ADDRESSED).match(rest) is not None
    if addressed:
        if _ADDRESSED_ONLY.match(rest) is not None:
            return True
    elif question:
        return False
    elif _BARE.match(rest) is not None:
        return True
    idiom = _NEVER_MIND_IDIOM.match(rest)
    if idiom is None:
        return False
    return _MEANT_IT.search(f"{rest[idiom.end() :]}\n{following}") is not None


def explicit_long_term_intent(
    text: str,
    *,
    bot_user_id: int | None = None,
    bot_role_ids: Collection[int] = (),
    bot_names: Sequence[str] = _DEFAULT_BOT_NAMES,
) -> bool:
    """True when ``text`` explicitly asks the bot to remember or forget something.

    ``bot_user_id``, when known, makes only the bot's own mention an address (a clause
    that starts by mentioning someone else is addressed to them); ``bot_role_ids`` are
    the bot's own roles (its managed role in a server), whose mention addresses it too;
    ``bot_names`` are the names a user may call the bot by (``kioku, remember that…``).
    See the module doc for the full rule.
    """
    # A name is matched in text whose emphasis markers are gone ("_kioku_" is "kioku").
    cleaned = (_EMPHASIS.sub("", n).strip().lower() for n in bot_names)
    alternatives = "|".join(re.escape(n) for n in cleaned if n)
    names = re.compile(rf"(?:{alternatives}){_NAME_TAIL}") if alternatives else None
    carried = False  # "hey kioku, remember …": the address is its own clause
    prepared = _prepare(text)
    for match in _CLAUSE.finditer(prepared):
        clause, end = match.group(1), match.group(2)
        rest, addressed, elsewhere = _strip_address(clause, bot_user_id, bot_role_ids, names)
        if elsewhere:
            carried = False
            continue
        addressed = addressed or carried
        if not rest.strip():
            carried = addressed and end == ","
            continue
        carried = False
        # "remember that my cat is Miso, ok?": a tag question asks for agreement; the
        # clause before it is still an instruction.
        question = end == "?" and _TAG_QUESTION.search(rest) is None
        if _verb_matches(rest, addressed, question, prepared[match.end() :]):
            return True
    return False
