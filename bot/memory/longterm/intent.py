"""Whether a message explicitly asks the bot to remember or forget something long-term
(SPEC §3, §6): such a turn is offered the long-term tools instead of the STM tool.

Each clause is read as address words (the bot's mention or name, interjections), an optional
request marker ("please", "can you"…), then a memory verb in the imperative. A bare clause (no
address, no marker) needs the strictest form: "remember…" in chat is usually reminiscence.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from bot.vocabulary import fold

_DEFAULT_BOT_NAMES = ("kioku",)

_CODE_BLOCK = re.compile(r"```.*?(?:```|$)", re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
# Discord quotes: ``>>> `` quotes everything to the END of the message, ``> `` one line.
_BLOCK_QUOTE = re.compile(r"^[ \t]*>>>[ \t].*", re.MULTILINE | re.DOTALL)
_QUOTE_LINE = re.compile(r"^\s*>.*$", re.MULTILINE)
# Formatting is not quoting: line markers and emphasis are dropped ("**Remember:** I'm vegan").
_LINE_MARKER = re.compile(r"^[ \t]*(?:-#|#{1,6}|[-*+\u2022]|\d{1,3}[.)])[ \t]+", re.MULTILINE)
_EMPHASIS = re.compile(r"\*+|~~|\|\||(?<!\w)_+|_+(?!\w)")
# Struck-through text is taken back ("~~remember that I'm vegan~~ jk"): dropped like a quote.
_STRUCK = re.compile(r"~~.+?~~", re.DOTALL)
# "Remember, I'm allergic to nuts" means "Remember: I'm…" ("Remember, you're not alone" does not).
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
    # French, German, Spanish, Portuguese, Italian; "please" is only an interjection there,
    # since their memory verbs below always need an object anyway.
    r"|et|aussi|salut|coucou|stp|svp|s'il\s+(?:te|vous)\s+pla[iî]t|und|auch|hallo|bitte"
    r"|y|también|tambien|hola|oye|por\s+favor|e|também|olá|ola|anche|ciao|per\s+favore"
)
_REQUEST_MARKERS = (
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
# Reminiscence without a "?" asks to recall, not to store: "remember we used to…", "remember
# our first raid", "remember that movie we watched" (a bare noun, then a past-tense clause).
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
# After the reminiscence's noun, a copula or a colon (before a space: ":(" is an emoji) states
# a fact ("that laptop I bought is a ThinkPad"); after "our first/last/old/best" so does a
# verb in the present ("our best friend Sam likes tea").
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
    # "that Tom and I got married" says who did it: a fact, not "that movie we watched".
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
    # A clause-final "forget that" and "forget all about it" mean "never mind".
    r"|\s+(?:that(?=\s*\S)|this|these|what|about\s+(?!it\b)|my|everything"
    r"|all(?!\s+about\s+it\b)|anything|i|i'm|i've"
    r"|we|our|the\s+(?:thing|fact|part|stuff))\b)"
)
_DONT = r"(?:don't|dont|do\s+not|never)"
# Other languages' imperatives count only with what they ask to keep ("que", "dass", "che",
# ":"): statements ("no recuerdo") and "never mind" ("oublie ça", "vergiss es") do not.
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

# What may follow the address words, by the marker before the verb (see the module docstring).
_BARE_REQUEST = re.compile(
    rf"(?:remember{_END}{_REMEMBER_NEVER}{_REMINISCING}{_BARE_REMEMBER_OBJECT}"
    rf"|{_DONT}\s+forget{_END}{_BARE_REMEMBER_OBJECT}"
    rf"|forget{_END}{_BARE_FORGET_OBJECT}"
    rf"|{_ALWAYS}|{_FOREIGN})"
)
_MARKED_REQUEST = re.compile(
    rf"(?:remember{_END}{_REMEMBER_NEVER}{_REMINISCING}|{_DONT}\s+forget{_END}|forget{_END}"
    rf"|{_ALWAYS}|{_FOREIGN}|note\s+that\b)"
)
# An insisting marker ("please", "I want you to", "make sure to") asks to keep even what
# sounds like reminiscence ("please remember that restaurant I booked"); "can you" and
# "try to" do not ("can you remember that song we loved" asks to recall).
_INSISTED_REQUEST = re.compile(
    rf"(?:remember{_END}{_REMEMBER_NEVER}|{_DONT}\s+forget{_END}|forget{_END}"
    rf"|{_ALWAYS}|{_FOREIGN}|note\s+that\b)"
)
_INSISTING_MARKER = re.compile(
    r"\b(?:please|pls|plz|kindly|(?:want|need|like)\s+you\s+to|make\s+sure)\b"
)
# "Never mind" idioms ("forget it", "forget (all) about it", a clause-final "forget that")
# still mean "never mind" when addressed (in a server every message to the bot mentions it);
# only a request marker ("please forget it") makes them a deletion request.
_NEVER_MIND = r"(?!\s+(?:it(?![\w'])|(?:all\s+)?about\s+it\b|that\s*$))"
_ADDRESSED_REQUEST = re.compile(
    rf"(?:remember{_END}{_REMEMBER_NEVER}{_REMINISCING}|{_DONT}\s+forget{_END}|forget{_END}{_NEVER_MIND}"
    rf"|{_ALWAYS}|{_FOREIGN}|note\s+that\b)"
)
# A "never mind" idiom followed (anywhere later in the message) by a request marker standing
# alone or by why the fact is wrong is a deletion request after all: "forget it please",
# "forget that, it was wrong". Not "forget it, please tell me a joke", nor "wrong channel".
_MARKER_ALONE = (
    r"(?=\s*(?:$|[^\w\s]|(?:please|pls|plz|forget|delete|remove|erase|thanks?|thank|ty|thx)\b))"
)
_NEVER_MIND_IDIOM = re.compile(r"forget\s+(?:it(?![\w'])|(?:all\s+)?about\s+it\b|that\b)")
_FORGET_IT_AFTER_ALL = re.compile(
    rf"\b(?:(?:please|pls|plz){_MARKER_ALONE}"
    rf"|(?:can|could|would|will)\s+(?:you|u){_MARKER_ALONE}"
    r"|wrong(?!\s+(?:channel|chat|thread|server|person|window|tab|place|bot|dm|room)\b)"
    r"|lied|lying|a\s+lie|mistake|mistaken|incorrect|inaccurate|untrue|not\s+true"
    r"|isn't\s+true|wasn't\s+true|no\s+longer\s+true|typo|false(?!\s+alarm\b)"
    r"|kidding|joking|jk|outdated|out\s+of\s+date|changed(?!\s+my\s+mind\b))\b"
)
_TAG_QUESTION = re.compile(r"\s(?:ok|okay|alright|right|yeah|please|pls)\s*$")
_REQUEST_MARKER = re.compile(rf"{_REQUEST_MARKERS}\s+(?:please\s+)?")
_INTERJECTION = re.compile(rf"(?:{_INTERJECTIONS})\b[\s:!-]*")
_NAME_TAIL = r"\b[\s:!-]*"


def _prepare(text: str) -> str:
    # Read as redaction reads it: a zero-width space or a fullwidth or Cyrillic letter inside
    # "remember" does not hide the verb.
    text = fold(text)
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
    """Whether ``mention`` names the bot or its managed role (any does while its id is unknown)."""
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
    """The clause without its address words; whether they address the bot, and someone else."""
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


def _is_memory_request(rest: str, addressed: bool, question: bool, following: str) -> bool:
    """Whether clause ``rest`` (address words stripped) is a memory request."""
    request = _REQUEST_MARKER.match(rest)
    if request is not None:
        polite_only = _POLITE_ONLY.fullmatch(request.group(0)) is not None
        rest = rest[request.end() :]
        if polite_only and not addressed and rest.startswith("note"):
            return False  # "please note that…": an announcement, not a request
        insisted = _INSISTING_MARKER.search(request.group(0)) is not None
        return (_INSISTED_REQUEST if insisted else _MARKED_REQUEST).match(rest) is not None
    if addressed:
        if _ADDRESSED_REQUEST.match(rest) is not None:
            return True
    elif question:
        return False
    elif _BARE_REQUEST.match(rest) is not None:
        return True
    idiom = _NEVER_MIND_IDIOM.match(rest)
    if idiom is None:
        return False
    return _FORGET_IT_AFTER_ALL.search(f"{rest[idiom.end() :]}\n{following}") is not None


def explicit_long_term_intent(
    text: str,
    *,
    bot_user_id: int | None = None,
    bot_role_ids: Collection[int] = (),
    bot_names: Sequence[str] = _DEFAULT_BOT_NAMES,
) -> bool:
    """Whether ``text`` explicitly asks the bot to remember or forget something.

    The bot is addressed by ``bot_names`` and by mentioning ``bot_user_id`` or ``bot_role_ids``.
    """
    # A name is matched in text whose emphasis markers are gone ("_kioku_" is "kioku").
    cleaned = (_EMPHASIS.sub("", fold(n)).strip().lower() for n in bot_names)
    alternatives = "|".join(re.escape(n) for n in cleaned if n)
    names = re.compile(rf"(?:{alternatives}){_NAME_TAIL}") if alternatives else None
    previous_clause_addressed = False  # "hey kioku, remember …": the address is a clause
    prepared = _prepare(text)
    for match in _CLAUSE.finditer(prepared):
        clause, end = match.group(1), match.group(2)
        rest, addressed, addressed_to_other = _strip_address(
            clause, bot_user_id, bot_role_ids, names
        )
        if addressed_to_other:
            previous_clause_addressed = False
            continue
        addressed = addressed or previous_clause_addressed
        if not rest.strip():
            previous_clause_addressed = addressed and end == ","
            continue
        previous_clause_addressed = False
        # A tag question ("…, ok?") asks for agreement: the clause is still an instruction.
        question = end == "?" and _TAG_QUESTION.search(rest) is None
        if _is_memory_request(rest, addressed, question, prepared[match.end() :]):
            return True
    return False
