"""What a turn brings in beside the raw window (issue 25): images for vision models, the
messages a reply points at, and a thread's starter message and parent channel.

The real bot on dpytest, the real database and the real ``openai`` client talking to
the scripted server, whose recorded requests show what the model was sent.
"""

from __future__ import annotations

import base64
from typing import Any

import discord
from sqlalchemy import select

from bot.conversation.tools.stm import STM_TOOL_NAME
from bot.db.models import ShortTermMemory
from bot.vocabulary.model import ScopeKey
from tests.helpers.bot import KiokuHarness
from tests.helpers.chat_world import KiokuStarter, refresh_succeeds
from tests.helpers.database import count_statements
from tests.helpers.fake_llm import ScriptedLLM, role_order_problem
from tests.helpers.faults import outage

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def image_urls(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [p["image_url"]["url"] for p in content if p.get("type") == "image_url"]


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if p.get("type") == "text")
    return str(content or "")


def prompt_text(llm: ScriptedLLM, i: int = -1) -> str:
    return "\n".join(text_of(m) for m in llm.messages(i))


def system_text(llm: ScriptedLLM, i: int = -1) -> str:
    return "\n".join(text_of(m) for m in llm.messages(i) if m["role"] == "system")


# ---------------------------------------------------------------------------------- images


async def test_a_vision_model_gets_the_image_as_a_part_and_memory_keeps_only_a_note(
    kioku: KiokuHarness,
) -> None:
    # The test settings' provider is "openai": the table marks it vision-capable.
    kioku.llm.reply_text("A cat.")
    sent = await kioku.env.send(
        "what is this?", mention_bot=True, attachments=[("cat.png", PNG), ("notes.txt", b"x")]
    )

    last = kioku.llm.messages()[-1]
    assert image_urls(last) == [sent.attachments[0].url]
    assert "[image: cat.png]" in text_of(last)
    assert "[attachments: notes.txt]" in text_of(last)
    raw = kioku.bot.memory.windows.get(kioku.env.channel.id)[0]
    assert raw.content.endswith("[attachments: notes.txt]\n[image: cat.png]")
    assert "cdn.discordapp.com" not in raw.content


async def test_an_image_link_embed_goes_to_a_vision_model_as_an_image(
    kioku: KiokuHarness,
) -> None:
    url = "https://images.example/photos/sunset.jpg"
    # The model gets Discord's proxied copy, never the link itself (see test_image_guard).
    proxied = (
        "https://images-ext-1.discordapp.net/external/x/https/images.example/photos/sunset.jpg"
    )
    embed = {"type": "image", "url": url, "thumbnail": {"url": url, "proxy_url": proxied}}
    kioku.llm.reply_text("A sunset.")
    await kioku.env.send(url, mention_bot=True, embeds=[embed])

    last = kioku.llm.messages()[-1]
    assert image_urls(last) == [proxied]
    assert "[image: sunset.jpg]" in text_of(last)


async def test_a_model_without_vision_is_told_an_image_was_attached(
    llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with kioku_with(settings={"context": {"vision": "off"}}) as kioku:
        llm.reply_text("I cannot see it.")
        await kioku.env.send("look", mention_bot=True, attachments=[("cat.png", PNG)])
        last = llm.messages()[-1]
        assert isinstance(last["content"], str)
        assert "[image: cat.png]" in last["content"]


async def test_the_data_url_transport_sends_the_bytes_and_refuses_an_image_over_the_cap(
    llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    # An image cap of 0.001 MB: 1048 bytes.
    async with kioku_with(
        settings={"context": {"image_transport": "data_url", "image_max_mb": 0.001}}
    ) as kioku:
        llm.reply_text("Seen.")
        big = PNG + b"\x00" * 2000
        await kioku.env.send(
            "two pictures", mention_bot=True, attachments=[("small.png", PNG), ("big.png", big)]
        )
        last = llm.messages()[-1]
        expected = "data:image/png;base64," + base64.b64encode(PNG).decode()
        assert image_urls(last) == [expected]
        assert "[image big.png not shown to you: larger than 0.001 MB]" in text_of(last)


async def test_images_are_limited_per_message_and_per_turn_newest_first(
    llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with kioku_with(
        settings={"context": {"images_per_message": 2, "images_per_turn": 3}}
    ) as kioku:
        files = [(f"{n}.png", PNG) for n in "abc"]
        # Only the message answered and its reply chain carry images.
        older = await kioku.env.send("older", attachments=files)
        llm.reply_text("Nice.")
        await kioku.env.send("newer", mention_bot=True, attachments=files, reply_to=older)
        users = [m for m in llm.messages() if m["role"] == "user"]
        counts = [len(image_urls(m)) for m in users]
        assert counts[-2:] == [1, 2]
        assert [u.rsplit("/", 1)[-1] for u in image_urls(users[-1])] == ["a.png", "b.png"]


async def test_a_strict_provider_gets_alternating_roles_with_the_image_parts_kept(
    llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with kioku_with(settings={"provider": "mistral", "context": {"vision": "on"}}) as kioku:
        first = await kioku.env.send("first, a picture", attachments=[("a.png", PNG)])
        llm.reply_text("Both seen.")
        await kioku.env.send(
            "and another", mention_bot=True, attachments=[("b.png", PNG)], reply_to=first
        )
        messages = llm.messages()
        assert role_order_problem(messages) is None
        urls = [u.rsplit("/", 1)[-1] for m in messages for u in image_urls(m)]
        assert urls == ["a.png", "b.png"]
        assert "first, a picture" in prompt_text(llm) and "and another" in prompt_text(llm)


# ----------------------------------------------------------------------------- reply chains


async def test_a_reply_brings_the_replied_to_message_and_its_author_into_the_prompt(
    kioku: KiokuHarness,
) -> None:
    other = await kioku.env.create_member("ana", nick="Ana")
    original = await kioku.env.send("the venue is the old library", author=other)
    kioku.llm.reply_text("Noted.")
    await kioku.env.send("is that still right?", reply_to=original, mention_bot=True)

    notes = system_text(kioku.llm)
    assert "The message you are answering is a reply" in notes
    assert "Ana: the venue is the old library" in notes


async def test_a_reply_chain_is_followed_up_to_the_configured_depth_even_out_of_the_window(
    llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with kioku_with(
        settings={
            "stm": {"raw_window": 4, "min_raw_tail": 1, "crude_message_count": 1},
            "context": {"reply_chain_depth": 2},
        }
    ) as kioku:
        first = await kioku.env.send("ROOT: we meet at noon")
        second = await kioku.env.send("MIDDLE: or at one?", reply_to=first)
        third = await kioku.env.send("LEAF: one works", reply_to=second)
        for n in range(4):  # push the chain out of the raw window
            await kioku.env.send(f"filler {n}")
        window = {m.message_id for m in kioku.bot.memory.windows.get(kioku.env.channel.id)}
        assert third.id not in window and second.id not in window
        llm.reply_text("One it is.")
        await kioku.env.send("so when?", reply_to=third, mention_bot=True)

        notes = system_text(llm)
        assert notes.index("MIDDLE: or at one?") < notes.index("LEAF: one works")
        assert "ROOT" not in prompt_text(llm)


async def test_a_reply_to_a_message_a_refresh_wiped_does_not_bring_it_back(
    kioku: KiokuHarness, moderator: discord.Member
) -> None:
    original = await kioku.env.send("the secret plan is PELICAN")
    kioku.clock.catch_up()  # the wipe's recorded time comes after the message's
    await refresh_succeeds(kioku, moderator)
    kioku.llm.reply_text("What plan?")
    await kioku.env.send("what was the plan?", reply_to=original, mention_bot=True)

    assert "PELICAN" not in prompt_text(kioku.llm)
    assert "is a reply" not in system_text(kioku.llm)


async def test_a_reply_to_a_message_whose_author_used_forget_me_does_not_bring_it_back(
    kioku: KiokuHarness,
) -> None:
    author = await kioku.env.create_member("leaver")
    original = await kioku.env.send("my phone number is 555-0199", author=author)
    kioku.clock.catch_up()
    asked = await kioku.interactions.slash("forget-me", user=author)
    await kioku.interactions.click(asked, label="Delete my memories", user=author)
    assert kioku.bot.memory.windows.get(kioku.env.channel.id) == ()
    kioku.llm.reply_text("I do not know.")
    await kioku.env.send("what was the number?", reply_to=original, mention_bot=True)

    assert "555-0199" not in prompt_text(kioku.llm)


async def test_with_the_database_down_a_message_outside_the_window_is_left_out(
    llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with kioku_with(
        settings={"stm": {"raw_window": 2, "min_raw_tail": 1, "crude_message_count": 1}}
    ) as kioku:
        old = await kioku.env.send("OLD: the code word is HERON")
        recent = await kioku.env.send("RECENT: noted")
        await kioku.env.send("filler")
        await kioku.env.send("more filler")
        window = {m.message_id for m in kioku.bot.memory.windows.get(kioku.env.channel.id)}
        assert old.id not in window and recent.id not in window
        llm.reply_text("I cannot check now.")
        async with outage(kioku.bot.memory.sessions):
            await kioku.env.send("and before that?", reply_to=old, mention_bot=True)
        assert "HERON" not in prompt_text(llm)
        # Unknown whether a wipe took it: with the database back, it is checked and shown.
        llm.reply_text("HERON.")
        await kioku.env.send("and before that?", reply_to=old, mention_bot=True)
        assert "OLD: the code word is HERON" in system_text(llm)


# ---------------------------------------------------------------------------------- threads


async def test_a_thread_starts_from_its_message_and_its_parents_memory_and_keeps_its_own(
    kioku: KiokuHarness,
) -> None:
    env = kioku.env
    guild_id, parent = env.guild.id, env.channel
    await kioku.bot.memory.admin_edit(
        guild_id=guild_id,
        channel_id=parent.id,
        actor_user_id=env.member.id,
        summary="The launch is on Friday.",
    )
    starter = await env.send("let us plan the launch party in a thread")
    thread = await env.create_thread(parent, "party", from_message=starter)
    kioku.llm.reply_tool_calls([(STM_TOOL_NAME, {"summary": "Party: cake ordered."})])
    kioku.llm.reply_text("Cake it is.")
    await env.send("I ordered the cake", channel=thread, mention_bot=True)

    notes = system_text(kioku.llm, 0)
    assert "a thread in #" in notes and "let us plan the launch party in a thread" in notes
    assert "the channel this thread is in" in notes and "The launch is on Friday." in notes
    memory = kioku.bot.memory
    own = await memory.entry(ScopeKey.server(guild_id, thread.id))
    assert own.summary == "Party: cake ordered." and own.parent_channel_id == parent.id
    assert (await memory.entry(ScopeKey.server(guild_id, parent.id))).summary == (
        "The launch is on Friday."
    )
    async with kioku.database.sessions() as session:
        rows = list(
            await session.scalars(
                select(ShortTermMemory).where(ShortTermMemory.channel_id == thread.id)
            )
        )
    assert rows and all(r.parent_channel_id == parent.id for r in rows)


async def test_a_thread_whose_starter_author_used_forget_me_starts_without_it(
    kioku: KiokuHarness,
) -> None:
    env = kioku.env
    author = await env.create_member("leaver")
    starter = await env.send("my address is 12 Elm Street", author=author)
    thread = await env.create_thread(env.channel, "visit", from_message=starter)
    kioku.clock.catch_up()
    asked = await kioku.interactions.slash("forget-me", user=author)
    await kioku.interactions.click(asked, label="Delete my memories", user=author)
    kioku.llm.reply_text("Hello.")
    await env.send("where do we meet?", channel=thread, mention_bot=True)

    assert "Elm Street" not in prompt_text(kioku.llm)


async def thread_after_restart(kioku: KiokuHarness, starter_text: str, **who: Any) -> Any:
    """A thread started from a message no window holds any more (the bot restarted)."""
    starter = await kioku.env.send(starter_text, **who)
    thread = await kioku.env.create_thread(kioku.env.channel, "later", from_message=starter)
    kioku.bot.memory.drop_all()
    kioku.llm.reply_text("First.").reply_text("Second.")
    await kioku.env.send("first question", channel=thread, mention_bot=True)
    assert starter_text in prompt_text(kioku.llm)
    return thread


async def test_a_threads_next_turn_shows_its_starter_without_a_query(
    kioku: KiokuHarness,
) -> None:
    thread = await thread_after_restart(kioku, "the offsite is in Lisbon")
    with count_statements(kioku.database.engine) as counter:
        await kioku.env.send("where is it again?", channel=thread, mention_bot=True)
    assert "the offsite is in Lisbon" in prompt_text(kioku.llm)
    assert counter.statements == []


async def test_a_kept_thread_starter_goes_when_its_author_uses_forget_me(
    kioku: KiokuHarness,
) -> None:
    author = await kioku.env.create_member("leaver")
    thread = await thread_after_restart(kioku, "my address is 12 Elm Street", author=author)
    kioku.clock.catch_up()
    asked = await kioku.interactions.slash("forget-me", user=author)
    await kioku.interactions.click(asked, label="Delete my memories", user=author)
    await kioku.env.send("where do we meet?", channel=thread, mention_bot=True)
    assert "Elm Street" not in prompt_text(kioku.llm)


async def test_a_kept_thread_starter_goes_with_a_refresh_of_its_channel(
    kioku: KiokuHarness, moderator: discord.Member
) -> None:
    thread = await thread_after_restart(kioku, "the venue code is tulip")
    kioku.clock.catch_up()
    await refresh_succeeds(kioku, moderator)
    await kioku.env.send("what was the venue code?", channel=thread, mention_bot=True)
    assert "tulip" not in prompt_text(kioku.llm)
