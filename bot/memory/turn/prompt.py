"""Prompt assembly (SPEC §5): memory, other channels, long-term facts and the nudge.

Pure and fast: it runs on every turn, so it sticks to plain string operations, builds
each note once and never copies entries. The caller has already decided what may be
shown (privacy of other channels, DM opt-in, the long-term budget); this module only
decides how.

Memory text is data the model wrote earlier, never instructions. Every piece of stored
or user-written text that goes into a system note is fenced in
``<memory …>…</memory>`` and defused first, so nothing inside can close the fence.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import regex

from bot.llm import estimate_tokens
from bot.memory.turn.fences import DEFUSED_LT, defuse
from bot.memory.turn.gather import messages_after_marker
from bot.memory.turn.window import WindowLimits, window_start
from bot.vocabulary import (
    MAX_VALUE_CHARS,
    GuildConfig,
    RawMessage,
    SearchWords,
    StmEntry,
    strip_control_chars,
)

# Each stored value (the summary or one category) is truncated to this many characters.
VALUE_LIMIT = MAX_VALUE_CHARS
TOOL_NAME = "update_short_term_memory"
NEW_MESSAGES_PLACEHOLDER = "{new_messages}"
THIS_CHANNEL = "this channel"
LONG_TERM_HEADING = "Facts the user asked you to remember:"
SUMMARY_LABEL = "Summary"
# A replied-to or thread-starter message is quoted up to this many characters.
QUOTE_LIMIT = MAX_VALUE_CHARS

_FENCE_CLOSE = "</memory>"
# What one chat message costs beside its text (role and separators), in tokens.
MESSAGE_OVERHEAD_TOKENS = 4
DEFAULT_RAW_WINDOW_TOKENS = 1500
DEFAULT_OTHERS_TOKENS = 150
# Without a model's counter: the estimate, remembered per text (a window's lines are
# the same objects turn after turn, so their hashes are cached too).
_estimated = functools.lru_cache(maxsize=65_536)(estimate_tokens)
_HAN = regex.compile(r"\p{Han}")
_UNSPACED = regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}]")


# Not frozen (here and in PromptInput): a frozen dataclass's __init__ sets each field
# through object.__setattr__, several times slower, and every turn builds these. Nothing
# mutates them once built.
@dataclass(slots=True)
class OtherChannel:
    """Another channel's memory, already privacy-filtered by the caller."""

    label: str  # e.g. "#general", or in DMs "#general in My Server"
    entry: StmEntry | None
    window: Sequence[RawMessage]  # its recent raw messages, oldest first
    # Its own guild's settings (labels, categories, render mode); None: the prompt's.
    # A DM shows servers' memories, each as its server renders it.
    config: GuildConfig | None = None

    def shown_raw(self, config: GuildConfig, *, distilled: bool) -> Sequence[RawMessage]:
        """The raw messages a prompt rendering with ``config`` shows of this channel."""
        count = max(config.crude_message_count, 0)
        if not count or (config.render_mode == "supersede" and distilled):
            return ()
        return self.window[max(len(self.window) - count, 0) :]


@dataclass(slots=True)
class PromptInput:
    """Everything one turn's prompt is built from."""

    now: datetime
    config: GuildConfig
    bot_user_id: int
    entry: StmEntry | None  # this channel's memory
    # This channel's recent raw messages, oldest first, the triggering message last.
    window: Sequence[RawMessage]
    # Other channels of the guild or, in DMs, the server memories the user opted into.
    others: Sequence[OtherChannel] = ()
    raw_window: int = 50
    min_raw_tail: int = 4
    max_others: int = 3
    nudge_new_messages: int | None = None  # set when the cadence is due
    long_term_notes: Sequence[str] = ()  # facts to recall, already budgeted
    is_dm: bool = False
    # Whether the model may update the memory this turn (the tool is offered).
    stm_tool_offered: bool = True
    # What the message being answered replies to: the direct reference first.
    replied_to: Sequence[RawMessage] = ()
    # In a thread: the message it was started from, and its parent channel's memory.
    thread_starter: RawMessage | None = None
    parent: OtherChannel | None = None
    # What the message answered says: other channels' memories it relates to come in.
    content: str = ""
    # The message id the raw window started at last turn (see window.window_start).
    window_start: int | None = None
    raw_window_tokens: int = DEFAULT_RAW_WINDOW_TOKENS
    # Other channels' memories unrelated to the message share this many tokens.
    others_tokens: int = DEFAULT_OTHERS_TOKENS
    # Tokens of a text for the turn's model (bot.llm.TokenCounter.count).
    tokens: Callable[[str], int] = _estimated


@dataclass(slots=True)
class AssembledPrompt:
    """System notes (each one system message after the persona) and the chat history."""

    system_notes: list[str]
    history: list[dict[str, str]]
    # The raw message id of each history entry (images are added by id, for vision models).
    history_ids: list[int] = field(default_factory=list)
    # Indexes of notes a small context may leave out, the least useful first: other
    # channels' memories (the least recently active first), then long-term facts. This
    # channel's memory always stays.
    optional: list[int] = field(default_factory=list)
    # The memory upkeep request when the cadence is due: never a note of the answering
    # prompt (a model answers it in the reply), but a call of its own after the answer.
    nudge: str | None = None
    # Notes from this index on change from turn to turn (what the message relates to,
    # replies to): they go after the history, so that what comes before stays cacheable.
    late_from: int | None = None
    # The message id the shown raw window starts at: the next turn's window_start.
    window_start: int | None = None
    # The window leaves out messages the memory does not cover (past its limits): a
    # memory written from this prompt may not claim to cover them.
    cut_uncovered: bool = False

    @property
    def stable_notes(self) -> list[str]:
        """The notes that stay the same from turn to turn, until a memory changes."""
        return self.system_notes[: self.late_from]

    @property
    def late_notes(self) -> list[str]:
        """The notes of this turn only."""
        return [] if self.late_from is None else self.system_notes[self.late_from :]


def relative_time(then: datetime, now: datetime) -> str:
    """``just now``, ``5 min ago``, ``3 h ago``, ``1 day ago``, ``2 days ago``.

    Rounds down; a time in the future (clock skew) is ``just now``. A naive datetime
    is taken as UTC when the other one is aware.
    """
    if (then.tzinfo is None) != (now.tzinfo is None):
        if then.tzinfo is None:
            then = then.replace(tzinfo=UTC)
        else:
            now = now.replace(tzinfo=UTC)
    seconds = int((now - then).total_seconds())
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    if seconds < 86400:
        return f"{seconds // 3600} h ago"
    days = seconds // 86400
    return "1 day ago" if days == 1 else f"{days} days ago"


@functools.lru_cache(maxsize=4096)
def stamp(moment: datetime) -> str:
    """An absolute time to the minute, ``2026-12-08 14:05 UTC``: unlike "5 min ago", the
    same on every turn until the memory changes (a prompt cache keeps it)."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def _visible(text: str) -> str:
    """``text`` without invisible characters and stray controls (the usual plain text
    passes untouched, without a copy)."""
    return text if text.isascii() and text.isprintable() else strip_control_chars(text)


def _attr(value: str) -> str:
    """A caller-given label (channel and server names are user-chosen) made safe to sit
    inside a double-quoted fence attribute."""
    if not any(char in value for char in '"<>\n\r'):
        return value
    return (
        value.replace('"', "'")
        .replace("<", DEFUSED_LT)
        .replace(">", "›")
        .replace("\r", " ")
        .replace("\n", " ")
    )


def _slug_label(slug: str) -> str:
    return slug.replace("_", " ").replace("-", " ").strip().capitalize() or slug


def _category_items(entry: StmEntry, config: GuildConfig) -> list[tuple[str, str]]:
    """The entry's non-empty categories as (label, value): the guild's categories in
    their order, then any the guild no longer defines (labelled from the slug), so a
    configuration change never hides what was written."""
    values = entry.categories
    if not values:
        return []
    items: list[tuple[str, str]] = []
    seen: set[str] = set()
    for category in config.categories:
        value = values.get(category.slug)
        seen.add(category.slug)
        if value and value.strip():
            items.append((category.label, value))
    if not seen.issuperset(values):
        for slug, value in values.items():
            if slug not in seen and value.strip():
                items.append((_slug_label(slug), value))
    return items


def render_memory_text(entry: StmEntry, config: GuildConfig, *, with_sizes: bool = False) -> str:
    """The distilled text of one entry: its non-empty categories (labelled, in the
    guild's order) in preference to its summary; ``""`` when it holds nothing.

    ``with_sizes`` adds each value's size against the limit (``Decisions (120/1500
    chars)``), which the model needs for its own memory only. The text is not defused:
    fence it with the module's notes, or defuse it before showing it to a model.
    """
    # A guild back in summary mode shows the summary; categories left from before are a
    # fallback only, so clearing categories never lets stale values outrank new summaries.
    items = _category_items(entry, config) if config.category_mode or not entry.has_summary else []
    if items:
        if with_sizes:
            blocks = [
                f"{label} ({len(value)}/{VALUE_LIMIT} chars):\n{value.strip()}"
                for label, value in items
            ]
        else:
            blocks = [f"{label}:\n{value.strip()}" for label, value in items]
        return "\n\n".join(blocks)
    if not entry.has_summary:
        return ""
    summary = entry.summary
    if with_sizes:
        return f"{SUMMARY_LABEL} ({len(summary)}/{VALUE_LIMIT} chars):\n{summary.strip()}"
    return summary.strip()


# Who wrote a memory, as its fence says: a model's note is not an admin's.
_WRITTEN_BY = {
    "model_tool": "the model",
    "summarizer": "summarizer",
    "admin": "an admin",
    "user_command": "a member",
    "import": "import",
}
# At most this many members are named in a fence's "from".
_NAMED_SOURCES = 3


def _provenance(entry: StmEntry, window: Sequence[RawMessage]) -> str:
    """A memory fence's ``by`` and ``from`` attributes: who wrote it, whose words it holds
    (names the window shows; the others counted)."""
    attrs = ""
    if entry.provenance is not None:
        attrs += f' by="{_WRITTEN_BY.get(entry.provenance.origin, "unknown")}"'
    if entry.contributor_ids:
        names = {m.author_id: m.author_name for m in window if not m.is_bot}
        known = [_attr(names[i]) for i in entry.contributor_ids if i in names][:_NAMED_SOURCES]
        others = len(entry.contributor_ids) - len(known)
        if others:
            known.append(f"{others} other member{'s' if others != 1 else ''}")
        attrs += f' from="{", ".join(known)}"'
    return attrs


def _this_channel_note(
    entry: StmEntry,
    config: GuildConfig,
    *,
    tool_offered: bool,
    window: Sequence[RawMessage] = (),
) -> str:
    updated = stamp(entry.updated_at)
    text = defuse(render_memory_text(entry, config, with_sizes=True))
    upkeep = (
        f"which you maintain with {TOOL_NAME} (limit {VALUE_LIMIT} chars per field; "
        f"updated {updated})"
        if tool_offered
        # Not offered this turn: saying otherwise invites a call that will be refused.
        else f"read-only this turn (updated {updated})"
    )
    return (
        f"Your short-term memory of this conversation, {upkeep}. "
        f"Messages it already covers may be left out of the chat history.\n"
        f'<memory source="{THIS_CHANNEL}" updated="{updated}"{_provenance(entry, window)}>\n'
        f"{text}\n{_FENCE_CLOSE}"
    )


def _history(inp: PromptInput) -> tuple[list[dict[str, str]], list[int], int | None, bool]:
    """The chat history, its messages' ids, the id the shown window starts at, and
    whether it leaves out messages the memory does not cover."""
    bot_id = inp.bot_user_id
    # Some providers reject an empty assistant message (e.g. an embed-only post).
    kept = [m for m in inp.window if m.content or m.author_id != bot_id]
    entry = inp.entry
    first_uncovered = 0
    if entry is not None and entry.has_content:
        # The window is oldest first and ids are time-ordered, so what the marker does
        # not cover is a suffix of it.
        first_uncovered = len(kept) - len(messages_after_marker(kept, entry.marker))
    tokens = inp.tokens

    def cost(message: RawMessage) -> int:
        text = message.content if message.author_id == bot_id else message.line()
        return tokens(text) + MESSAGE_OVERHEAD_TOKENS

    limits = WindowLimits(max(inp.raw_window, 1), inp.raw_window_tokens, inp.min_raw_tail)
    start = window_start(
        kept, first_uncovered=first_uncovered, previous=inp.window_start, limits=limits, cost=cost
    )
    shown = kept[start:]
    # One comprehension, not a loop of appends: up to raw_window messages every turn.
    history = [
        {"role": "assistant", "content": message.content}
        if message.author_id == bot_id
        # line(): a message's own line breaks cannot start another speaker's line.
        else {"role": "user", "content": message.line()}
        for message in shown
    ]
    ids = [m.message_id for m in shown]
    return history, ids, shown[0].message_id if shown else None, start > first_uncovered


def _raw_block(label: str, messages: Sequence[RawMessage]) -> str:
    # line() indents continuation lines: no line of one message passes for another speaker.
    # What was said elsewhere is shown as stored memory is: secrets and <private> regions
    # redacted (the live conversation of this channel is not). Then drop what could hide
    # a fence closer from _defuse (and stray controls).
    lines = "\n".join(defuse(_visible(message.shared_line())) for message in messages)
    noun = "message" if len(messages) == 1 else "messages"
    return (
        f"The last {len(messages)} {noun} in {label}:\n"
        f'<memory source="{label}" kind="recent messages">\n{lines}\n{_FENCE_CLOSE}'
    )


def _other_note(
    other: OtherChannel, inp: PromptInput, activity: datetime, *, where: str | None = None
) -> str | None:
    config = other.config or inp.config
    label = _attr(other.label)
    entry = other.entry
    distilled = (
        defuse(render_memory_text(entry, config)) if entry is not None and entry.has_content else ""
    )
    raw = other.shown_raw(config, distilled=bool(distilled))
    if not distilled and not raw:
        return None
    if where is None:
        where = (
            "a server the user shares with you" if inp.is_dm else "another channel of this server"
        )
    when = stamp(activity)
    parts: list[str] = []
    if distilled:
        parts.append(
            f"Memory from {label} ({where}), for context only:\n"
            f'<memory source="{label}" updated="{when}"'
            f"{_provenance(entry, other.window) if entry is not None else ''}>\n"
            f"{distilled}\n{_FENCE_CLOSE}"
        )
    else:
        parts.append(f"No memory yet from {label} ({where}); last message {when}.")
    if raw:
        parts.append(_raw_block(label, raw))
    return "\n".join(parts)


def _last_activity(other: OtherChannel) -> datetime | None:
    """When the channel's memory was updated, else its newest message; None if empty."""
    if other.entry is not None and other.entry.has_content:
        return other.entry.updated_at
    return max((message.created_at for message in other.window), default=None)


def _other_notes(inp: PromptInput) -> tuple[list[str], list[str]]:
    """Other channels' notes: those that fit :attr:`PromptInput.others_tokens`, the most
    recently active first (the same from turn to turn), and those the message relates to
    (of this turn only); at most ``max_others`` of each."""
    if inp.max_others <= 0 or not inp.others:
        return [], []
    ranked: list[tuple[datetime, int, OtherChannel]] = []
    for position, other in enumerate(inp.others):
        activity = _last_activity(other)
        if activity is None:
            continue
        # -position: among equal times the caller's order wins (reverse sort below).
        ranked.append((activity, -position, other))
    ranked.sort(key=lambda item: (item[0], item[1]), reverse=True)
    words = SearchWords.of(inp.content) if inp.content else None
    steady: list[str] = []
    related: list[str] = []
    budget = inp.others_tokens
    for rank, (activity, _, other) in enumerate(ranked):
        # Only the most recently active may stay; the rest come in when related.
        may_stay = rank < inp.max_others and len(steady) < inp.max_others
        if not may_stay and (words is None or len(related) == inp.max_others):
            break
        config = other.config or inp.config
        entry = other.entry
        text = render_memory_text(entry, config) if entry is not None and entry.has_content else ""
        # Its memory alone is a lower bound of its note: most notes need not be built.
        may_stay = may_stay and inp.tokens(text) < budget
        may_relate = (
            words is not None
            and len(related) < inp.max_others
            and _relates(other, config, text, words)
        )
        if not may_stay and not may_relate:
            continue
        note = _other_note(other, inp, activity)
        if note is None:
            continue
        if may_stay:
            cost = inp.tokens(note)
            if cost <= budget:
                steady.append(note)
                budget -= cost
                continue
        if may_relate:
            related.append(note)
    return steady, related


def _relates(other: OtherChannel, config: GuildConfig, memory: str, words: SearchWords) -> bool:
    """Whether the message names a word of the channel's ``memory``, recent messages or
    name (the words recall searches for: no stop words; Latin ones of three letters or
    more)."""
    parts = [other.label, memory]
    parts.extend(m.content for m in other.shown_raw(config, distilled=False))
    text = "\n".join(parts).lower()
    for group in words.groups:
        if any(len(form) >= 3 and _has_word(form, text) for form in group.latin):
            return True
        if any(_shares_unspaced(form, text) for form in group.substrings):
            return True
    return False


def _has_word(word: str, text: str) -> bool:
    """Whether ``text`` holds ``word`` as a whole word (the substring test first: fast)."""
    return word in text and re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text) is not None


def _shares_unspaced(word: str, text: str) -> bool:
    """Whether ``text`` holds ``word``, two letters in a row of it, or one of its Han
    characters: scripts written without spaces run a whole phrase into one "word"."""
    if word in text:
        return True
    if not _UNSPACED.search(word):  # Cyrillic, Greek…: spaced words, matched whole
        return False
    if any(word[i : i + 2] in text for i in range(len(word) - 1)):
        return True
    return any(_HAN.match(char) and char in text for char in word)


def _quoted(message: RawMessage, *, elsewhere: bool = False) -> str:
    """One message's line as a note quotes it: capped, no fence closer, no stray controls;
    said ``elsewhere`` (another channel), with secrets redacted as other channels' are."""
    line = _visible(message.shared_line() if elsewhere else message.line())
    if len(line) > QUOTE_LIMIT:
        line = line[: QUOTE_LIMIT - 1] + "…"
    return defuse(line)


def _reply_note(replied_to: Sequence[RawMessage]) -> str | None:
    if not replied_to:
        return None
    # Oldest first, so the chain reads as it was said; the last is replied to directly.
    lines = "\n".join(_quoted(message) for message in reversed(replied_to))
    return (
        "The message you are answering is a reply. What it replies to, oldest first (the "
        "last one directly):\n"
        f'<memory source="replied-to messages">\n{lines}\n{_FENCE_CLOSE}'
    )


def _starter_note(inp: PromptInput) -> str | None:
    if inp.thread_starter is None:
        return None
    where = _attr(inp.parent.label) if inp.parent is not None else "its channel"
    quoted = _quoted(inp.thread_starter, elsewhere=True)
    return (
        f"This conversation is a thread in {where}, started from this message:\n"
        f'<memory source="thread starter">\n{quoted}\n{_FENCE_CLOSE}'
    )


def _parent_note(inp: PromptInput) -> str | None:
    parent = inp.parent
    if parent is None:
        return None
    activity = _last_activity(parent)
    if activity is None:
        return None
    return _other_note(parent, inp, activity, where="the channel this thread is in")


def _long_term_note(facts: Sequence[str]) -> str | None:
    lines = ["- " + defuse(" ".join(fact.split())) for fact in facts if fact and not fact.isspace()]
    if not lines:
        return None
    body = "\n".join(lines)
    return f'{LONG_TERM_HEADING}\n<memory source="long-term memory">\n{body}\n{_FENCE_CLOSE}'


def nudge_text(new_messages: int, override: str | None = None) -> str:
    """The cadence nudge: update the memory after answering, naming how much is new.

    ``override`` (the guild's ``nudge_override``) replaces the default wording; its
    ``{new_messages}`` becomes the count and any other braces are left alone.
    """
    if override:
        return override.replace(NEW_MESSAGES_PLACEHOLDER, str(new_messages))
    noun = "new message" if new_messages == 1 else "new messages"
    return (
        f"Memory upkeep: {new_messages} {noun} since the memory was last updated. "
        f"Call {TOOL_NAME} now to fold what matters into your short-term memory (keep "
        f"what is still relevant, drop what is stale, stay within the limit). Do not "
        f"write anything else: this is not shown to anyone."
    )


def assemble(inp: PromptInput) -> AssembledPrompt:
    """The system notes and chat history for one turn (SPEC §5).

    Notes that stay from turn to turn first: this channel's memory, a thread's starter
    message and parent channel, other channels' memories within their budget (most
    recently active first). Then this turn's (:attr:`AssembledPrompt.late_from`): other
    channels the message relates to, what it replies to, long-term facts. The nudge apart.
    """
    notes: list[str] = []
    entry = inp.entry
    if entry is not None and entry.has_content:
        notes.append(
            _this_channel_note(
                entry, inp.config, tool_offered=inp.stm_tool_offered, window=inp.window
            )
        )
    starter = _starter_note(inp)
    if starter is not None:
        notes.append(starter)
    # A small context leaves out other channels first (the least recently active, then
    # those related to the message), then the parent channel, then facts.
    parent = _parent_note(inp)
    parent_optional = [len(notes)] if parent is not None else []
    if parent is not None:
        notes.append(parent)
    steady, related = _other_notes(inp)
    optional = [len(notes) + i for i in reversed(range(len(steady)))]
    notes.extend(steady)
    late_from = len(notes)
    optional += [len(notes) + i for i in reversed(range(len(related)))] + parent_optional
    notes.extend(related)
    reply = _reply_note(inp.replied_to)
    if reply is not None:
        notes.append(reply)
    if inp.long_term_notes:
        long_term = _long_term_note(inp.long_term_notes)
        if long_term is not None:
            optional.append(len(notes))
            notes.append(long_term)
    nudge = None
    if inp.nudge_new_messages is not None:
        nudge = nudge_text(inp.nudge_new_messages, inp.config.nudge_override)
    history, history_ids, start, cut = _history(inp)
    return AssembledPrompt(
        system_notes=notes,
        history=history,
        optional=optional,
        history_ids=history_ids,
        nudge=nudge,
        late_from=late_from,
        window_start=start,
        cut_uncovered=cut,
    )
