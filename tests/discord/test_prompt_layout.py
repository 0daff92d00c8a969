"""The request of a real turn, laid out for a prompt cache: what stays the same first, this
turn's notes last, and each turn's prompt a prefix of the next one's."""

from __future__ import annotations

import itertools
from typing import Any

from tests.helpers.chat_world import KiokuStarter
from tests.helpers.fake_llm import ScriptedLLM


def roles(messages: list[dict[str, Any]]) -> list[str]:
    return [m["role"] for m in messages]


async def test_recalled_facts_come_after_the_history_just_before_the_message(
    llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with kioku_with() as kioku:
        env = kioku.env
        llm.reply_tool_calls([("remember", {"fact": "The user's cat is called Miso."})])
        llm.reply_text("I'll remember Miso.")
        await env.send("remember that my cat is called Miso", mention_bot=True)
        await env.send("unrelated chatter")
        llm.reply_text("Miso.")
        await env.send("what is my cat called?", mention_bot=True)

        sent = llm.messages(-1)
        assert sent[0]["role"] == "system" and sent[0]["content"].startswith("You are Kioku")
        assert sent[-1]["role"] == "user" and "what is my cat called?" in sent[-1]["content"]
        late = sent[-2]
        assert late["role"] == "system"
        assert '<memory source="long-term memory">' in late["content"]
        # The history comes before it: nothing between the persona and it is a fact.
        assert all("Miso." not in str(m["content"]) for m in sent[:-2] if m["role"] == "system")
        assert "unrelated chatter" in "\n".join(str(m["content"]) for m in sent[1:-2])


async def test_each_turns_prompt_starts_with_the_last_turns(
    llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with kioku_with() as kioku:
        env = kioku.env
        for i in range(4):
            await env.send(f"chatter {i}")
            llm.reply_text(f"answer {i}")
            await env.send(f"question {i}?", mention_bot=True)

        requests = [llm.messages(i) for i in range(len(llm.requests))]
        assert len(requests) == 4
        for before, after in itertools.pairwise(requests):
            # Everything the last turn sent is again the start of this turn's prompt.
            assert after[: len(before)] == before
            assert roles(after[len(before) :]) == ["assistant", "user", "user"]
