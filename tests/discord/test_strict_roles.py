"""A provider with strict chat templates, end to end: every request of a real turn has one
leading system message and alternating user/assistant messages, and still carries the
memory, the recalled facts and every raw message.

The scripted server refuses what a strict template refuses (``llm.strict_roles``, vLLM's
400 "conversation roles must alternate"), so a request in the wrong order would show as
the bot's outage notice instead of the scripted answer.
"""

from __future__ import annotations

from typing import Any

from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.llm.roles import LATE_NOTE_LINE, OPENING_USER_LINE
from tests.helpers.chat_world import KiokuStarter
from tests.helpers.fake_llm import ScriptedLLM, role_order_problem


def contents(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages)


async def test_a_strict_providers_requests_alternate_and_keep_memory_and_messages(
    llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    llm.strict_roles = True
    # vllm is strict in the provider table.
    async with kioku_with(settings={"provider": "vllm"}) as kioku:
        env = kioku.env
        alice, bob = env.members[0], env.members[1]
        llm.reply_tool_calls([("remember", {"fact": "The user's cat is called Miso."})])
        llm.reply_text("I'll remember Miso.")
        await env.send("remember that my cat is called Miso", author=alice, mention_bot=True)

        await env.send("the launch is friday", author=bob)
        await env.send("I write the docs", author=alice)
        llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": "Launch on Friday; Alice: docs."})])
        llm.reply_text("Noted: Friday, docs by Alice.")
        await env.send("keep track of that please", author=bob, mention_bot=True)

        later = ["bob does the release", "and I bring cake", "great, thanks all"]
        await env.send(later[0], author=bob)
        await env.send(later[1], author=alice)
        await env.send(later[2], author=bob)
        llm.reply_text("Miso, and the launch is on Friday.")
        await env.send(
            "what is my cat called, and when is the launch?", author=alice, mention_bot=True
        )

        assert [s.content for s in env.sent] == [
            "I'll remember Miso.",
            "Noted: Friday, docs by Alice.",
            "Miso, and the launch is on Friday.",
        ]
        assert llm.refused_roles == [] and llm.unscripted == 0
        for index, _ in enumerate(llm.requests):
            assert role_order_problem(llm.messages(index)) is None, index

        sent = llm.messages(-1)
        leading, *chat = sent
        assert leading["role"] == "system"
        assert all(m["role"] != "system" for m in chat)
        # The persona and the memory are the one system message, fenced and labelled as
        # before; the fact recalled for this turn is not (it changes every turn, and a
        # prompt cache keeps the system message): it opens the message answered.
        system = leading["content"]
        assert '<memory source="this channel"' in system
        assert "Launch on Friday; Alice: docs." in system
        assert system.startswith("You are Kioku")
        assert "cat is called Miso" not in system
        last = chat[-1]["content"]
        assert last.index(later[2]) < last.index(LATE_NOTE_LINE)
        assert '<memory source="long-term memory">' in last
        assert "The user's cat is called Miso." in last
        assert last.index("cat is called Miso") < last.index("what is my cat called")
        # Every raw message after the marker is there, with its speaker, in order.
        said = contents(chat)
        lines = [
            f"{bob.display_name}: {later[0]}",
            f"{alice.display_name}: {later[1]}",
            f"{bob.display_name}: {later[2]}",
            f"{alice.display_name}: @{env.guild.me.display_name} what is my cat called",
        ]
        positions = [said.index(line) for line in lines]
        assert positions == sorted(positions)
        assert "Noted: Friday, docs by Alice." in said
        # Members' messages in a row are one user message; the history opened with the
        # bot's answer, so a neutral user line comes first.
        assert [m["role"] for m in chat] == ["user", "assistant", "user"]
        assert chat[0]["content"] == OPENING_USER_LINE
