"""The turn pipeline with the STM tool: Discord message → prompt → scripted LLM → tool
→ row, and every way a call to the tool is hidden, refused or answered."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.db.engine import Database
from bot.memory.turn.types import REASON_ALREADY_UPDATED, REASON_CLEARED, REASON_DISABLED
from bot.vocabulary.model import Category, ScopeKey
from tests.helpers.bot import KiokuHarness, start_kioku, stop_kioku
from tests.helpers.chat_world import (
    KiokuStarter,
    prompt_text,
    refresh_succeeds,
    rows,
    stm_call,
    tool_results,
)
from tests.helpers.fake_llm import ScriptedLLM
from tests.helpers.stm_commands import TWO_CATEGORIES_TYPED


async def test_tool_call_stores_memory_and_next_prompt_uses_it_instead_of_raw(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with kioku_with(settings={"stm": {"min_raw_tail": 1}}) as kioku:
        for text in ("the launch is friday", "alice writes the docs", "bob does release"):
            await kioku.env.send(text)
        llm.reply_tool_calls([stm_call("Launch Friday; Alice docs; Bob release.")])
        llm.reply_text("Got it.")
        trigger = await kioku.env.send("summarise please", mention_bot=True)
        # The tool is silent: the chat only sees the answer.
        assert [s.content for s in kioku.env.sent] == ["Got it."]
        assert tool_results(llm, 1) == ["saved"]
        server, user = await rows(db)
        assert server.summary == "Launch Friday; Alice docs; Bob release."
        assert (server.origin, server.origin_detail) == ("model_tool", "test-model")
        assert server.actor_user_id == kioku.env.member.id
        assert server.source_message_id == trigger.id
        assert server.covered_through_message_id == trigger.id
        assert user.user_id == kioku.env.member.id

        llm.reply_text("Friday.")
        await kioku.env.send("when is the launch?", mention_bot=True)
        prompt = prompt_text(llm)
        assert "Launch Friday; Alice docs; Bob release." in prompt
        for covered in ("the launch is friday", "alice writes the docs", "bob does release"):
            assert covered not in prompt
        assert "when is the launch?" in prompt


async def test_stm_disabled_hides_the_tool_and_rejects_a_forced_call(
    kioku: KiokuHarness, db: Database
) -> None:
    admin = await kioku.env.create_member("admin", kind="admin")
    await kioku.bot.memory.update_guild_settings(
        kioku.env.guild.id, admin.id, short_term_memory_enabled=False
    )
    kioku.llm.reply_tool_calls([stm_call("sneaky")]).reply_text("ok")
    await kioku.env.send("hello", mention_bot=True)
    assert kioku.llm.tool_names(0) == []
    assert tool_results(kioku.llm, 1) == [f"rejected: {REASON_DISABLED}"]
    assert await rows(db) == []


async def test_stm_disabled_in_the_settings_command_hides_the_tool_and_rejects_a_forced_call(
    kioku: KiokuHarness, db: Database
) -> None:
    admin = await kioku.env.create_member("admin", kind="admin")
    assert admin.guild_permissions.manage_guild
    changed = await kioku.interactions.slash("stm settings", {"enabled": False}, user=admin)
    assert changed.content is not None and changed.content.startswith("**Settings updated.**")

    kioku.llm.reply_tool_calls([stm_call("sneaky")]).reply_text("ok")
    await kioku.env.send("hello", mention_bot=True)
    assert kioku.llm.tool_names(0) == []
    assert tool_results(kioku.llm, 1) == [f"rejected: {REASON_DISABLED}"]
    assert kioku.env.last_sent().content == "ok"
    assert await rows(db) == []


async def test_remember_that_hides_the_stm_tool_for_the_turn(kioku: KiokuHarness) -> None:
    # The prose answer saved nothing: the facts are extracted from the message (request 1).
    kioku.llm.reply_text("I'll remember.").reply_text('{"facts": []}').reply_text("hi")
    await kioku.env.send("remember that my cat is called Miso", mention_bot=True)
    assert STM_TOOL_NAME not in kioku.llm.tool_names(0)
    await kioku.env.send("I can't remember the title of that film", mention_bot=True)
    assert STM_TOOL_NAME in kioku.llm.tool_names(2)


async def test_a_second_update_in_one_turn_is_rejected(kioku: KiokuHarness, db: Database) -> None:
    kioku.llm.reply_tool_calls([stm_call("first")])
    kioku.llm.reply_tool_calls([stm_call("second")])
    kioku.llm.reply_text("done")
    await kioku.env.send("hello", mention_bot=True)
    # No longer offered after the update: defined (the history holds a call), not callable.
    assert kioku.llm.request(1)["tool_choice"] == "none"
    assert tool_results(kioku.llm, 2) == ["saved", f"rejected: {REASON_ALREADY_UPDATED}"]
    assert [r.summary for r in await rows(db)] == ["first", "first"]


async def test_a_request_replaying_tool_calls_still_defines_the_tools(
    kioku: KiokuHarness,
) -> None:
    # Bedrock (directly or behind LiteLLM / bedrock-access-gateway) and older Anthropic
    # endpoints answer 400 "The toolConfig field must be defined when using toolUse and
    # toolResult content blocks" to a request whose history holds tool calls but which
    # defines no tools: after a successful update the STM tool is no longer offered.
    kioku.llm.reply_tool_calls([stm_call("Alice asked about Paris.")])
    kioku.llm.reply_text("Paris is the capital of France.")
    await kioku.env.send("what's the capital of France?", mention_bot=True)

    # No text beside the call: the model is asked again for its answer.
    assert len(kioku.llm.requests) == 2
    follow_up = kioku.llm.request(1)
    assert any(m.get("role") == "tool" for m in follow_up["messages"])
    assert kioku.llm.tool_names(1) == [STM_TOOL_NAME]
    assert follow_up["tool_choice"] == "none"  # defined, not offered
    assert kioku.env.last_sent().content == "Paris is the capital of France."


async def test_answer_written_beside_a_memory_write_is_the_reply_in_one_request(
    kioku: KiokuHarness, db: Database
) -> None:
    # The nudge asks the model to answer, then update the memory: the answer comes with
    # the tool call, and "saved" tells the model nothing it needs to answer.
    kioku.llm.reply_tool_calls(
        [stm_call("Asked about the capital of France.")],
        content="The capital of France is Paris.",
    )
    await kioku.env.send("what's the capital of France?", mention_bot=True)

    assert [r.summary for r in await rows(db)] == ["Asked about the capital of France."] * 2
    assert kioku.env.last_sent().content == "The capital of France is Paris."
    assert len(kioku.llm.requests) == 1 and kioku.llm.unscripted == 0


async def test_answer_written_beside_a_tool_call_survives_a_failed_follow_up_call(
    kioku: KiokuHarness, db: Database
) -> None:
    # The answer comes with a memory update whose arguments were cut: the model must
    # read the error, so it is asked again, and that request fails (rate limit, outage).
    kioku.llm.reply_tool_calls(
        [(STM_TOOL_NAME, '{"summary": "Asked about the capital')],
        content="The capital of France is Paris.",
    )
    kioku.llm.reply_error(500)
    await kioku.env.send("what's the capital of France?", mention_bot=True, raise_errors=False)

    assert len(kioku.llm.requests) == 2 and kioku.llm.pending == 0
    assert await rows(db) == []
    assert kioku.env.last_sent().content == "The capital of France is Paris."


async def test_a_short_final_answer_is_not_dropped_as_a_repeat_of_the_interim_text(
    kioku: KiokuHarness,
) -> None:
    # The update failed (its arguments were cut), so the model answers once more.
    kioku.llm.reply_tool_calls(
        [(STM_TOOL_NAME, '{"summary": "Launch date question')],
        content="Let me check my notes on Friday vs Monday.",
    )
    kioku.llm.reply_text("Monday.")
    await kioku.env.send("is the launch friday or monday?", mention_bot=True)

    # "Monday." is found inside the interim text, but it is the answer.
    assert kioku.env.last_sent().content == (
        "Let me check my notes on Friday vs Monday.\n\nMonday."
    )


async def test_refresh_during_a_turn_cannot_bring_the_memory_back(
    kioku: KiokuHarness, db: Database
) -> None:
    await kioku.bot.memory.admin_edit(
        guild_id=kioku.env.guild.id,
        channel_id=kioku.env.channel.id,
        actor_user_id=kioku.env.member.id,
        summary="old memory",
    )
    moderator = await kioku.env.create_member("mod", kind="moderator")
    gate = kioku.llm.hold()
    kioku.llm.reply_tool_calls([stm_call("resurrected memory")]).reply_text("done")
    turn = asyncio.create_task(kioku.env.send("hello", mention_bot=True))
    await kioku.llm.wait_for_requests(1)
    await refresh_succeeds(kioku, moderator)
    gate.set()
    await turn
    assert tool_results(kioku.llm, 1) == [f"rejected: {REASON_CLEARED}"]
    assert await rows(db) == []
    key = ScopeKey.server(kioku.env.guild.id, kioku.env.channel.id)
    assert not (await kioku.bot.memory.entry(key)).has_content


async def test_categories_set_by_an_admin_shape_the_next_tool_schema(
    kioku: KiokuHarness,
) -> None:
    await kioku.bot.memory.set_categories(
        kioku.env.guild.id,
        kioku.env.member.id,
        [
            Category(0, "decisions", "Decisions", "What the group decided"),
            Category(1, "open_questions", "Open questions", "What is still unresolved"),
        ],
    )
    kioku.llm.reply_text("ok")
    await kioku.env.send("hello", mention_bot=True)
    schema = kioku.llm.tool_schema(STM_TOOL_NAME, 0)
    assert set(schema["properties"]) == {"decisions", "open_questions"}
    assert "What the group decided" in schema["properties"]["decisions"]["description"]


async def test_categories_submitted_in_the_form_by_an_admin_shape_the_next_tool_schema(
    kioku: KiokuHarness,
) -> None:
    admin = await kioku.env.create_member("admin", kind="admin")
    opened = await kioku.interactions.slash("stm categories set", user=admin)
    saved = await kioku.interactions.submit_modal(opened, TWO_CATEGORIES_TYPED, user=admin)
    assert saved.content is not None and saved.content.startswith("Saved 2 categories.")

    kioku.llm.reply_text("ok")
    await kioku.env.send("hello", mention_bot=True)
    schema = kioku.llm.tool_schema(STM_TOOL_NAME, 0)
    properties = schema["properties"]
    assert {slug: sorted(p) for slug, p in properties.items()} == {
        "decisions": ["description", "type"],
        "open_questions": ["description", "type"],
    }
    assert all(p["type"] == "string" for p in properties.values())
    assert properties["decisions"]["description"].startswith("Decisions: what we decided")
    assert properties["open_questions"]["description"].startswith(
        "Open Questions: what is unsettled"
    )
    assert schema["additionalProperties"] is False


async def test_a_new_bot_instance_answers_with_the_stored_memory(
    db: Database, llm: ScriptedLLM, pg_url: URL, tmp_path: Path, kioku_with: KiokuStarter
) -> None:
    first = await start_kioku(db, llm, pg_url, tmp_path)
    llm.reply_tool_calls([stm_call("The user's project is called Tanuki.")]).reply_text("ok")
    await first.env.send("my project is Tanuki", mention_bot=True)
    await stop_kioku(first)

    async with kioku_with() as second:
        assert second.env.channel.id == first.env.channel.id
        llm.reply_text("Tanuki!")
        await second.env.send("what is my project called?", mention_bot=True)
        assert "The user's project is called Tanuki." in prompt_text(llm)
        assert second.env.last_sent().content == "Tanuki!"


@pytest.mark.parametrize(
    ("arguments", "why", "reply"),
    [
        pytest.param('{"summary": "cut', "JSON", "sorry", id="malformed"),
        pytest.param(
            '{"summary": "' + "x" * 1_000_000 + '"}', "too large", "Sorry, too much.", id="huge"
        ),
    ],
)
async def test_tool_arguments_refused_are_answered_as_a_tool_error_and_the_user_gets_a_reply(
    kioku: KiokuHarness, db: Database, arguments: str, why: str, reply: str
) -> None:
    kioku.llm.reply_tool_calls([(STM_TOOL_NAME, arguments)]).reply_text(reply)
    await kioku.env.send("hello", mention_bot=True)
    (result,) = tool_results(kioku.llm, 1)
    assert result.startswith("rejected: ") and why in result
    assert kioku.env.last_sent().content == reply
    assert await rows(db) == []


async def test_private_channel_memory_never_reaches_a_public_channel(
    kioku: KiokuHarness,
) -> None:
    member = kioku.env.member
    private = await kioku.env.create_text_channel("staff", private=True, allow=(member,))
    kioku.llm.reply_tool_calls([stm_call("STAFF SECRET: salaries")]).reply_text("ok")
    await kioku.env.send("note the salaries", channel=private, mention_bot=True)
    public_other = await kioku.env.create_text_channel("random")
    kioku.llm.reply_tool_calls([stm_call("random chatter about cats")]).reply_text("ok")
    await kioku.env.send("cats!", channel=public_other, mention_bot=True)
    kioku.llm.reply_text("hi")
    await kioku.env.send("hello", mention_bot=True)
    prompt = prompt_text(kioku.llm)
    assert "random chatter about cats" in prompt
    assert "STAFF SECRET" not in prompt


async def test_a_memory_written_from_a_trimmed_history_does_not_claim_what_was_cut(
    db: Database, llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    # An 8,192-token provider cannot see 40 long messages: the oldest are left out of the
    # prompt, so a summary written now must not move the marker past them.
    async with kioku_with(settings={"provider": "ollama"}) as kioku:
        for i in range(40):
            await kioku.env.send(f"long message {i} " + "x" * 900)
        llm.reply_tool_calls([stm_call("A summary of what the model saw.")]).reply_text("ok")
        await kioku.env.send("what did we say?", mention_bot=True)

        assert "long message 0 " not in prompt_text(llm, 0)  # really trimmed
        assert tool_results(llm, 1) == ["saved"]
        server, _ = await rows(db)
        assert server.summary == "A summary of what the model saw."
        assert server.covered_through_message_id is None
