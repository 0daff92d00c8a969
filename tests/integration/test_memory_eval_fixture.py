"""The memory-evaluation fixture (``tests/data/memory_eval.json``) through the whole pipeline.

The conversation is replayed by the same code as ``benchmarks/memory_eval.py``: the real
``TurnRunner`` and ``MemoryService`` on PostgreSQL, the real ``openai`` client talking to
the scripted server, a hand-moved clock for the hours and days between sessions, a fresh
memory service after the overnight restart. The model's answers are scripted, so every
assertion here is about what the model was SENT (the requests the server recorded).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy.engine import URL

from benchmarks.memory_eval import (
    BASELINE_CANNED_ANSWER,
    FIXTURE_PATH,
    Fixture,
    Post,
    RecordingClient,
    Replay,
    Scripted,
    TurnRecord,
    baseline_messages,
    check_answer,
    load_fixture,
)
from bot.config import Settings
from bot.conversation.tools.longterm import LONG_TERM_TOOL_NAMES, REMEMBER_TOOL_NAME
from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.conversation.turn import load_persona
from bot.db.engine import Database
from bot.memory.longterm.intent import explicit_long_term_intent
from bot.memory.turn.prompt import LONG_TERM_HEADING, VALUE_LIMIT, stamp
from bot.vocabulary.model import RawMessage
from tests.helpers.builders import ManualClock
from tests.helpers.database import empty_tables, make_test_settings
from tests.helpers.fake_llm import ScriptedLLM, openai_client

OLD_RELEASE = "Release: Friday, March 6"
NEW_RELEASE = "Release: Monday, March 9"
LTM_FACT = "I want bug reports as numbered lists, with the repro steps first."
THIS_CHANNEL_FENCE = '<memory source="this channel"'
# Every prompt sent once the memory holds the conversation stays under this many
# characters: persona + a summary (at most 1,500) + the long-term note + a short raw tail.
PROMPT_BOUND_CHARS = 3_500
SPEAKERS = ("Mara", "Theo", "Priya", "Jonas")


@dataclass
class Replayed:
    fixture: Fixture
    replay: Replay
    llm: ScriptedLLM
    settings: Settings
    facts: list[str]  # Priya's long-term facts as stored

    def sent(self, turn: TurnRecord) -> list[dict[str, Any]]:
        """The messages of the turn's first model request."""
        return self.llm.messages(turn.first_call)


def _queue(llm: ScriptedLLM, scripted: Scripted) -> None:
    if scripted.tools:
        llm.reply_tool_calls([(tool.name, dict(tool.arguments)) for tool in scripted.tools])
    llm.reply_text(scripted.reply)


@pytest.fixture(scope="module")
async def replayed(
    migrated_database: Database, pg_url: URL, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Replayed]:
    """One replay of the whole fixture (conversation, then the questions) for the module."""
    await empty_tables(migrated_database.engine)
    fixture = load_fixture()
    async with ScriptedLLM() as llm:
        settings = make_test_settings(
            pg_url,
            tmp_path_factory.mktemp("memory-eval"),
            openai_base_url=llm.base_url,
            model="scripted",
            llm={"max_retries": 0},
        )
        client = openai_client(llm)
        replay = Replay(
            fixture,
            sessions=migrated_database.sessions,
            settings=settings,
            client=RecordingClient(client),
            clock=ManualClock(fixture.start),
            script=lambda scripted: _queue(llm, scripted),
        )
        try:
            await replay.run_conversation()
            await replay.ask_questions()
            priya = fixture.speakers["priya"].id
            page = await replay.runner.longterm.list_facts(priya, page_size=50)
            yield Replayed(fixture, replay, llm, settings, [f.content for f in page.facts])
        finally:
            await client.close()
            await empty_tables(migrated_database.engine)


# ----------------------------------------------------------------------------- helpers


def _system_notes(messages: Sequence[dict[str, Any]]) -> list[str]:
    return [str(m["content"]) for m in messages[1:] if m["role"] == "system"]


def _memory_note(messages: Sequence[dict[str, Any]]) -> str:
    notes = [note for note in _system_notes(messages) if THIS_CHANNEL_FENCE in note]
    assert len(notes) == 1, f"expected one memory note, got {len(notes)}"
    return notes[0]


def _history(messages: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    return [{"role": m["role"], "content": m["content"]} for m in messages if m["role"] != "system"]


def _as_chat(message: RawMessage) -> dict[str, str]:
    if message.is_bot:
        return {"role": "assistant", "content": message.content}
    return {"role": "user", "content": message.line()}


def _chars(messages: Sequence[dict[str, Any]]) -> int:
    return sum(len(m["content"]) for m in messages if isinstance(m.get("content"), str))


def _text(messages: Sequence[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content")) for m in messages)


def _stm_summaries(fixture: Fixture) -> list[tuple[Post, str]]:
    return [
        (post, str(tool.arguments["summary"]))
        for post in fixture.posts
        if post.scripted is not None
        for tool in post.scripted.tools
        if tool.name == STM_TOOL_NAME
    ]


# ----------------------------------------------------------------- the fixture itself


def test_fixture_has_a_changed_fact_an_order_a_remember_and_an_unanswerable_question() -> None:
    fixture = load_fixture(FIXTURE_PATH)
    transcript = fixture.reference_transcript()
    assert 60 <= len(transcript) + 2 * len(fixture.question_posts) <= 120
    assert len({post.speaker.key for post in fixture.posts}) >= 3

    friday, monday = fixture.tagged("release_friday"), fixture.tagged("release_monday")
    assert "Friday, March 6" in friday.message.content
    assert "Monday, March 9" in monday.message.content
    assert friday.session < monday.session

    milestones = [fixture.tagged(tag) for tag in ("art_freeze", "save_fix", "soundtrack")]
    assert [p.session for p in milestones] == sorted({p.session for p in milestones})
    assert len({p.session for p in milestones}) == 3  # one per day, in this order

    # Only the "remember that…" message reserves its turn for the long-term tools, and it
    # is scripted to use them; every other bot turn may update the short-term memory.
    for post in [p for p in fixture.posts if p.to_bot]:
        assert post.scripted is not None
        intent = explicit_long_term_intent(
            post.message.content, bot_user_id=fixture.bot_id, bot_names=(fixture.bot_name,)
        )
        names = {tool.name for tool in post.scripted.tools}
        assert intent == (post.tag == "ltm_request"), post.message.content
        assert names <= ({REMEMBER_TOOL_NAME} if intent else {STM_TOOL_NAME})
    assert all(len(summary) <= VALUE_LIMIT for _, summary in _stm_summaries(fixture))

    kinds = {question.kind for question in fixture.questions}
    assert {"changed fact", "order of events", "long-term memory", "no answer"} <= kinds
    assert any(question.ordered for question in fixture.questions)
    unanswerable = next(q for q in fixture.questions if q.kind == "no answer")
    assert "budget" in unanswerable.text and not unanswerable.evidence
    said = [message.content for message in transcript]
    said += [summary for _, summary in _stm_summaries(fixture)] + [LTM_FACT]
    assert not any("budget" in line.lower() for line in said)

    # The early facts are older than the last 25 messages: a raw window cannot see them.
    recent = transcript[-fixture.baseline_messages :]
    for tag in ("release_friday", "release_monday", "art_freeze", "save_fix", "soundtrack"):
        assert fixture.tagged(tag).message not in recent, tag


def test_keyword_checks_accept_the_expected_answers_and_reject_a_shrug() -> None:
    fixture = load_fixture()
    for post in fixture.question_posts:
        question, scripted = post.question, post.scripted
        assert question is not None and scripted is not None
        assert check_answer(question, scripted.reply), question.id
        # "I'm not sure" is right only where nothing answers the question.
        shrug_is_right = question.kind == "no answer"
        assert check_answer(question, BASELINE_CANNED_ANSWER) == shrug_is_right, question.id
    by_id = {question.id: question for question in fixture.questions}
    assert not check_answer(by_id["release_date"], "It goes live on Friday, March 6.")
    assert not check_answer(
        by_id["event_order"],
        "1. Soundtrack delivery 2. Save-fix merge 3. Art freeze",
    )
    assert not check_answer(by_id["save_fix_people"], "Theo fixed it.")


# ------------------------------------------------------------------------ the replay


async def test_replay_runs_every_scripted_turn_and_saves_every_memory_write(
    replayed: Replayed,
) -> None:
    replay, llm, fixture = replayed.replay, replayed.llm, replayed.fixture
    addressed = [post for post in fixture.posts if post.to_bot] + list(fixture.question_posts)
    assert [turn.post for turn in replay.turns] == addressed
    for turn in replay.turns:
        assert turn.post.scripted is not None
        assert not turn.reply.failed
        assert turn.reply.text == turn.post.scripted.reply
    # Exactly the scripted calls were made, and the recorder saw each of them.
    assert llm.unscripted == 0 and llm.pending == 0
    assert len(llm.requests) == len(replay.client.calls)

    scripted_stm = [post for post, _ in _stm_summaries(fixture)]
    saved = [turn.post for turn in replay.turns if turn.stm_saved]
    assert saved == scripted_stm and len(saved) == 5
    for turn in replay.turns:
        offered = llm.tool_names(turn.first_call)
        if turn.post.tag == "ltm_request":
            assert offered == list(LONG_TERM_TOOL_NAMES)
        else:
            assert offered == [STM_TOOL_NAME]
    assert replayed.facts == [LTM_FACT]


async def test_final_questions_carry_the_current_release_date_not_the_superseded_one(
    replayed: Replayed,
) -> None:
    replay = replayed.replay
    # Before the date moved, the memory the model was shown held Friday as current...
    before = [turn for turn in replay.conversation_turns if turn.post.session == 1]
    assert before
    for turn in before:
        assert OLD_RELEASE in _memory_note(replayed.sent(turn))
    # ...and at every final question it holds Monday, with Friday only as history.
    for turn in replay.question_turns:
        sent = replayed.sent(turn)
        note = _memory_note(sent)
        assert NEW_RELEASE in note
        assert OLD_RELEASE not in note
        assert "moved on Tue from Friday, March 6" in note
        # Neither the original announcement nor the message that moved it is resent raw.
        assert not any("Friday" in m["content"] for m in _history(sent))


async def test_long_term_fact_is_recalled_for_its_owner_only(replayed: Replayed) -> None:
    fixture = replayed.fixture
    for turn in replayed.replay.question_turns:
        sent = replayed.sent(turn)
        notes = [note for note in _system_notes(sent) if note.startswith(LONG_TERM_HEADING)]
        if turn.post.speaker.key == "priya":
            assert len(notes) == 1 and LTM_FACT in notes[0]
            # Recalled from long-term memory, not read from the chat history.
            ltm_request = fixture.tagged("ltm_request").message.line()
            assert ltm_request not in _text(_history(sent))
        else:
            assert notes == []
            assert LTM_FACT not in _text(sent)
    assert any(turn.post.speaker.key == "priya" for turn in replayed.replay.question_turns)


async def test_messages_covered_by_the_stm_marker_are_not_repeated_raw(
    replayed: Replayed,
) -> None:
    stm = replayed.settings.stm
    marker: int | None = None
    dropped = 0
    for turn in replayed.replay.turns:
        if marker is not None:
            window = turn.window
            uncovered = sum(message.message_id > marker for message in window)
            history = _history(replayed.sent(turn))
            shown = len(history)
            # The newest messages, in order: every one the memory does not cover, and at
            # most the kept tail of those it covers (the window's start moves in steps).
            assert history == [_as_chat(m) for m in window[-shown:]], turn.post.message.content
            assert shown >= min(max(uncovered, stm.min_raw_tail), len(window))
            assert shown - uncovered <= stm.min_raw_tail
            dropped += len(window) - shown
        marker = turn.marker_id or marker
    assert dropped > 0

    # At the last question nothing the memory covers comes back as a raw message.
    last = replayed.replay.question_turns[-1]
    assert marker is not None
    covered = {
        _as_chat(message)["content"]
        for message in replayed.replay.transcript
        if message.message_id <= marker
    }
    history = _history(replayed.sent(last))
    assert len(history) > stm.min_raw_tail
    assert not [m["content"] for m in history if m["content"] in covered]


async def test_several_speakers_are_named_in_the_final_prompt(replayed: Replayed) -> None:
    sent = replayed.sent(replayed.replay.question_turns[-1])
    note = _memory_note(sent)
    assert all(name in note for name in SPEAKERS)
    authors = {m["content"].split(":", 1)[0] for m in _history(sent) if m["role"] == "user"}
    assert authors <= set(SPEAKERS)
    assert len(authors) >= 3


async def test_prompt_size_stays_bounded_while_raw_history_grows(replayed: Replayed) -> None:
    replay = replayed.replay
    remembered = False
    sizes: list[tuple[int, int]] = []  # (prompt chars, raw transcript chars so far)
    for turn in replay.turns:
        if remembered:
            transcript = replay.transcript[: turn.transcript_size]
            sizes.append((_chars(replayed.sent(turn)), sum(len(m.line()) for m in transcript)))
        remembered = remembered or turn.stm_saved
    assert len(sizes) >= 10
    assert all(prompt <= PROMPT_BOUND_CHARS for prompt, _ in sizes), sizes
    first_raw, last_raw = sizes[0][1], sizes[-1][1]
    assert last_raw >= 5 * first_raw
    assert last_raw > 1.5 * PROMPT_BOUND_CHARS
    # The memory stands in for most of the raw window the prompt would otherwise carry.
    last = replay.question_turns[-1]
    assert len(last.window) == replayed.settings.stm.raw_window
    assert len(_history(replayed.sent(last))) < len(last.window) / 3


async def test_raw_history_baseline_of_last_25_messages_lacks_the_early_facts(
    replayed: Replayed,
) -> None:
    fixture = replayed.fixture
    persona = load_persona(replayed.settings.persona_file)
    early = [
        fixture.tagged(tag).message.line()
        for tag in ("release_friday", "save_bug", "ltm_request", "art_freeze", "soundtrack")
    ]
    for post, turn in zip(fixture.question_posts, replayed.replay.question_turns, strict=True):
        question = post.question
        assert question is not None
        baseline = baseline_messages(fixture, persona, post)
        assert len(baseline) == 1 + fixture.baseline_messages + 1
        assert baseline[-1] == {"role": "user", "content": post.message.line()}
        # The question itself is left out: only what answers it counts.
        baseline_text = _text(baseline[:-1]).lower()
        kioku_sent = replayed.sent(turn)
        assert kioku_sent[-1] == baseline[-1]
        kioku_text = _text(kioku_sent[:-1]).lower()
        for line in early:
            assert line.lower() not in baseline_text
        # What answers the question reached Kioku's model and not the baseline's.
        for evidence in question.evidence:
            assert evidence.lower() in kioku_text, (question.id, evidence)
            assert evidence.lower() not in baseline_text, (question.id, evidence)


async def test_memory_survives_the_overnight_restart(replayed: Replayed) -> None:
    replay, fixture = replayed.replay, replayed.fixture
    assert replay.restarts == 1
    after = [turn for turn in replay.turns if turn.after_restart]
    assert len(after) == 1
    turn = after[0]
    assert fixture.sessions[turn.post.session].restart_before
    # The fresh memory service hydrated the last summary written before the restart.
    written_before = [
        (post, summary)
        for post, summary in _stm_summaries(fixture)
        if post.session < turn.post.session
    ]
    last_post, last_summary = written_before[-1]
    note = _memory_note(replayed.sent(turn))
    assert last_summary in note
    # The time of the last update, absolute: the same on every turn until the next one.
    assert f'updated="{stamp(last_post.message.created_at)}"' in note
