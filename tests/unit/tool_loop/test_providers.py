"""The provider table: which providers call tools and may keep short-term memory, and
a turn on a tool-calling provider that may not."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import URL

from bot.conversation.tools.longterm import LONG_TERM_TOOL_NAMES
from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.conversation.turn import TurnRequest, TurnRunner
from bot.db.engine import Database
from bot.db.models import LongTermMemory, ShortTermMemory
from bot.memory.turn.types import REASON_PROVIDER
from bot.vocabulary.providers import (
    GENERIC,
    MIN_STM_CONTEXT_TOKENS,
    PROVIDERS,
    ProviderCaps,
    capabilities,
)
from tests.helpers.builders import ALICE, BOT, CHANNEL, GUILD, make_longterm, make_service, message
from tests.helpers.database import make_test_settings
from tests.helpers.fake_llm import ScriptedLLM, openai_client


@pytest.mark.parametrize(
    "name",
    [
        "openai",
        "azure",
        "ollama",
        "vllm",
        "lmstudio",
        "openrouter",
        "groq",
        "together",
        "mistral",
        "deepseek",
        "anthropic",
    ],
)
def test_known_tool_calling_providers_allow_stm(name: str) -> None:
    caps = capabilities(name)
    assert caps.name == name
    assert caps.tool_calling and caps.stm_allowed
    assert caps.context_tokens >= MIN_STM_CONTEXT_TOKENS
    assert caps.notes


def test_novelai_is_excluded_from_stm() -> None:
    caps = capabilities("NovelAI")
    assert caps.name == "novelai"
    assert not caps.tool_calling
    assert caps.context_tokens < MIN_STM_CONTEXT_TOKENS
    assert not caps.stm_allowed


def test_lookup_is_case_insensitive_and_knows_aliases() -> None:
    assert capabilities("  OpenAI ") is PROVIDERS["openai"]
    assert capabilities("LM_Studio").name == "lmstudio"
    assert capabilities("Azure-OpenAI").name == "azure"
    assert capabilities("llama.cpp").name == "llamacpp"


def test_unknown_provider_gets_the_generic_entry() -> None:
    caps = capabilities("My-Gateway")
    assert caps.name == "my-gateway"
    assert caps.tool_calling and caps.stm_allowed
    assert caps.context_tokens == GENERIC.context_tokens
    assert "unknown provider" in caps.notes.lower()


def test_stm_allowed_is_derived_for_every_entry() -> None:
    for caps in PROVIDERS.values():
        expected = caps.tool_calling and caps.context_tokens >= MIN_STM_CONTEXT_TOKENS
        assert caps.stm_allowed == expected, caps.name


async def test_a_tool_calling_provider_excluded_from_stm_hides_only_the_stm_tool(
    llm: ScriptedLLM,
    db: Database,
    pg_url: URL,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A provider that calls tools but whose table entry disallows STM (here: too little
    context) still gets the long-term tools on a "remember that…" turn; only the STM tool
    is hidden, and a forced STM call is refused with the provider reason."""
    small = ProviderCaps(
        name="small-context",
        tool_calling=True,
        context_tokens=MIN_STM_CONTEXT_TOKENS // 2,
        stm_allowed=False,
        notes="Tool calling, but too little context for STM.",
    )
    # The shipped table has no such entry (every tool-calling provider there allows STM).
    assert not any(c.tool_calling and not c.stm_allowed for c in PROVIDERS.values())
    monkeypatch.setattr("bot.conversation.turn.capabilities", lambda name: small)
    settings = make_test_settings(
        pg_url, tmp_path, model="test-model", llm={"max_retries": 0, "timeout_seconds": 5}
    )
    service = make_service(db.sessions, settings)

    def request(text: str) -> TurnRequest:
        said = message(ALICE, text)
        service.observe_message(CHANNEL, said)
        return TurnRequest(
            channel_id=CHANNEL,
            user_id=ALICE,
            source_message_id=said.message_id,
            content=text,
            bot_user_id=BOT,
            guild_id=GUILD,
        )

    async with openai_client(llm) as client:
        runner = TurnRunner(
            service, client, settings, longterm=make_longterm(service), persona="You are Kioku."
        )
        assert runner.caps is small

        llm.reply_tool_calls([("remember", {"fact": "Alice's cat is called Miso"})])
        llm.reply_text("I'll remember Miso.")
        remembered = await runner.run(request("remember that my cat is called Miso"))

        llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": "forced by the model"})])
        llm.reply_text("Nothing much.")
        plain = await runner.run(request("what's new today?"))

    assert remembered.text == "I'll remember Miso."
    assert llm.tool_names(0) == list(LONG_TERM_TOOL_NAMES)
    assert STM_TOOL_NAME not in llm.tool_names(1)
    assert "tools" not in llm.request(2)  # an ordinary turn offers nothing
    assert plain.text == "Nothing much."
    assert plain.stm_results == (f"rejected: {REASON_PROVIDER}",)
    async with db.sessions() as session:
        facts = list(await session.scalars(select(LongTermMemory.content)))
        stm_rows = await session.scalar(select(func.count()).select_from(ShortTermMemory))
    assert facts == ["Alice's cat is called Miso"]
    assert stm_rows == 0
    assert llm.unscripted == 0
