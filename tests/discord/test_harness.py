"""Proves the Discord harness (tests/helpers/dpytest_env.py...) against discord.py's real state.

Every command, listener, view and modal here is a tiny test-only stand-in; the point is that
the harness feeds them through the real ``ConnectionState`` / ``CommandTree`` / ``ViewStore``
and records what they answered.
"""

from __future__ import annotations

import discord
import discord.ext.test as dpytest
import pytest
from discord import app_commands
from discord.ext import commands

from tests.helpers.discord_world import EventHandlerError
from tests.helpers.dpytest_env import (
    DEFAULT_BASE_ID,
    DpytestEnv,
    attach_dpytest,
    detach,
    make_harness_bot,
)
from tests.helpers.interaction_responses import AUTOCOMPLETE_RESULT, UPDATE_MESSAGE
from tests.helpers.interactions import InteractionHarness

FRUITS = ["apple", "banana", "mango", "orange", "pineapple"]


class ChatCog(commands.Cog):
    def __init__(self, bot: commands.Bot) -> None:
        self.bot = bot
        self.seen: list[discord.Message] = []

    @commands.Cog.listener()
    async def on_message(self, message: discord.Message) -> None:
        if message.author.bot:
            return
        self.seen.append(message)
        me = self.bot.user
        assert me is not None
        if message.content == "boom":
            raise RuntimeError("handler exploded")
        if message.content.startswith("ping"):
            async with message.channel.typing():
                await message.reply("pong", allowed_mentions=discord.AllowedMentions.none())
        elif me.mentioned_in(message):
            await message.channel.send(f"you called, {message.author.mention}?")
        ref = message.reference
        if isinstance(ref and ref.resolved, discord.Message) and ref.resolved.author.id == me.id:
            await message.channel.send("thanks for replying")

    @commands.Cog.listener()
    async def on_reaction_add(self, reaction: discord.Reaction, user: discord.abc.User) -> None:
        if user.bot:
            return
        await reaction.message.add_reaction("✅")
        await reaction.message.channel.send(f"{user.id} reacted {reaction.emoji}")

    @commands.command(name="history")
    async def history(self, ctx: commands.Context) -> None:
        seen = [m.content async for m in ctx.channel.history(limit=3)]
        sent = await ctx.send("draft")
        await sent.edit(content=" | ".join(seen))

    @commands.command(name="menu")
    async def menu(self, ctx: commands.Context) -> None:
        await ctx.send("pick one", view=ConfirmView())


class ConfirmView(discord.ui.View):
    def __init__(self) -> None:
        super().__init__(timeout=60)
        self.clicked_by: int | None = None

    @discord.ui.button(label="Confirm", custom_id="confirm", style=discord.ButtonStyle.green)
    async def confirm(self, interaction: discord.Interaction, button: discord.ui.Button) -> None:
        self.clicked_by = interaction.user.id
        await interaction.response.edit_message(content="confirmed", view=None)


class FeedbackModal(discord.ui.Modal, title="Feedback"):
    topic = discord.ui.TextInput(label="Topic", custom_id="topic")
    body = discord.ui.TextInput(label="Body", style=discord.TextStyle.paragraph, required=False)

    async def on_submit(self, interaction: discord.Interaction) -> None:
        await interaction.response.send_message(
            f"{self.topic.value}: {self.body.value}", ephemeral=True
        )


class SlashCog(commands.Cog):
    config = app_commands.Group(name="config", description="settings")
    memory = app_commands.Group(name="memory", description="memory settings", parent=config)

    def __init__(self) -> None:
        self.views: list[ConfirmView] = []

    @app_commands.command(name="echo", description="repeat text")
    async def echo(
        self,
        interaction: discord.Interaction,
        text: str,
        times: app_commands.Range[int, 1, 5] = 1,
        loud: bool = False,
    ) -> None:
        words = [text.upper() if loud else text] * times
        await interaction.response.send_message(" ".join(words), ephemeral=not loud)

    @memory.command(name="set", description="set a memory value")
    async def memory_set(self, interaction: discord.Interaction, key: str, value: int) -> None:
        await interaction.response.send_message(f"{key}={value * 2}", ephemeral=True)

    @app_commands.command(name="whois", description="describe a member")
    async def whois(self, interaction: discord.Interaction, member: discord.Member) -> None:
        await interaction.response.send_message(f"{member.name}:{member.id}", ephemeral=True)

    @app_commands.command(name="slow", description="defers, then follows up")
    async def slow(self, interaction: discord.Interaction) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)
        await interaction.edit_original_response(content="done thinking")
        details = discord.Embed(title="details", description="all of them")
        await interaction.followup.send("one more thing", embed=details, ephemeral=True)

    @app_commands.command(name="ponder", description="defers, then only follows up")
    async def ponder(self, interaction: discord.Interaction) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)
        await interaction.followup.send("first answer", ephemeral=False)
        await interaction.followup.send("second answer", ephemeral=True)

    @app_commands.command(name="purge", description="moderators only")
    @app_commands.default_permissions(manage_messages=True)
    @app_commands.checks.has_permissions(manage_messages=True)
    async def purge(self, interaction: discord.Interaction) -> None:
        await interaction.response.send_message("purged", ephemeral=True)

    @app_commands.command(name="feedback", description="opens a modal")
    async def feedback(self, interaction: discord.Interaction) -> None:
        await interaction.response.send_modal(FeedbackModal())

    @app_commands.command(name="ask", description="asks for confirmation")
    async def ask(self, interaction: discord.Interaction) -> None:
        view = ConfirmView()
        self.views.append(view)
        await interaction.response.send_message("are you sure?", view=view)

    @app_commands.command(name="fruit", description="pick a fruit")
    async def fruit(self, interaction: discord.Interaction, name: str) -> None:
        await interaction.response.send_message(name, ephemeral=True)

    @fruit.autocomplete("name")
    async def fruit_autocomplete(
        self, interaction: discord.Interaction, current: str
    ) -> list[app_commands.Choice[str]]:
        return [app_commands.Choice(name=f, value=f) for f in FRUITS if current in f]

    @app_commands.command(name="whoami", description="works in DMs")
    @app_commands.allowed_contexts(guilds=True, dms=True, private_channels=True)
    async def whoami(self, interaction: discord.Interaction) -> None:
        where = "dm" if interaction.guild is None else "guild"
        await interaction.response.send_message(f"{where}:{interaction.user.id}")

    @app_commands.command(name="serveronly", description="guild only")
    @app_commands.guild_only()
    async def serveronly(self, interaction: discord.Interaction) -> None:
        await interaction.response.send_message("ok")


@pytest.fixture
async def env(harness_env: DpytestEnv) -> DpytestEnv:
    bot = harness_env.bot
    assert isinstance(bot, commands.Bot)
    await bot.add_cog(ChatCog(bot))
    await bot.add_cog(SlashCog())

    @bot.tree.error
    async def on_tree_error(
        interaction: discord.Interaction, error: app_commands.AppCommandError
    ) -> None:
        if isinstance(error, app_commands.CheckFailure):
            await interaction.response.send_message(
                f"refused: {type(error).__name__}", ephemeral=True
            )
            return
        raise error

    return harness_env


@pytest.fixture
async def ih(env: DpytestEnv, interaction_harness: InteractionHarness) -> InteractionHarness:
    return interaction_harness


def _chat(env: DpytestEnv) -> ChatCog:
    cog = env.bot.get_cog("ChatCog")  # type: ignore[attr-defined]
    assert isinstance(cog, ChatCog)
    return cog


# -- messages -------------------------------------------------------------------------------


async def test_member_message_reaches_on_message_and_reply_is_read_back(env: DpytestEnv) -> None:
    sent = await env.send("ping please")

    assert [m.id for m in _chat(env).seen] == [sent.id]
    assert _chat(env).seen[0].author.id == env.member.id
    reply = env.last_sent()
    assert reply.content == "pong"
    assert reply.reference_id == sent.id
    assert reply.allowed_mentions == {"parse": []}
    assert reply.message.mentions == []  # allowed_mentions suppressed the reply ping
    assert env.channel.id in env.typing  # channel.typing() worked
    assert dpytest.get_message().content == "pong"  # dpytest's queue sees it too


async def test_plain_dpytest_message_payloads_are_completed(env: DpytestEnv) -> None:
    message = await dpytest.message("ping from dpytest")
    assert message.components == []  # discord.py 2.7 reads it; dpytest 0.7 omits it
    assert message.author.joined_at is not None  # its bogus "member" no longer resets it
    assert dpytest.get_message().content == "pong"


async def test_mention_and_reply_to_bot_are_detectable(env: DpytestEnv) -> None:
    me = env.bot.user
    assert me is not None
    plain = await env.send("just chatting")
    assert not me.mentioned_in(plain)
    assert env.sent == []

    mention = await env.send("are you there", mention_bot=True)
    assert me.mentioned_in(mention)
    answer = env.last_sent()
    assert answer.content == f"you called, {env.member.mention}?"
    assert [u.id for u in answer.message.mentions] == [env.member.id]

    reply = await env.send("yes, that was me", reply_to=answer.message)
    assert reply.reference is not None and reply.reference.message_id == answer.message.id
    assert isinstance(reply.reference.resolved, discord.Message)
    assert reply.reference.resolved.author.id == me.id
    assert me.mentioned_in(reply)  # a reply pings the replied author by default
    assert env.last_sent().content == "thanks for replying"


async def test_handler_exception_fails_the_send(env: DpytestEnv) -> None:
    with pytest.raises(EventHandlerError, match="handler exploded"):
        await env.send("boom")
    assert env.errors and env.errors[0][0] == "on_message"


async def test_thread_and_dm_messages_reach_the_bot(env: DpytestEnv) -> None:
    thread = await env.create_thread(env.channel, "side chat")
    assert env.guild.get_thread(thread.id) is thread
    await env.send("ping in thread", channel=thread)
    assert env.sent_to(thread)[-1].content == "pong"

    dm = env.dm_channel(env.member)
    message = await env.send("ping in dm", channel=dm)
    assert message.guild is None
    assert env.sent_to(dm)[-1].content == "pong"
    assert (await env.member.create_dm()).id == dm.id


async def test_history_edits_and_reactions_round_trip(env: DpytestEnv) -> None:
    await env.send("first")
    await env.send("second")
    await env.send("!history")
    summary = env.last_sent()
    assert summary.content == "draft"
    assert summary.edits and summary.message.content == "!history | second | first"

    await env.react(summary.message, "👍")
    assert env.last_sent().content == f"{env.member.id} reacted 👍"
    stored = env.message_payload(summary.message.id)
    assert stored is not None
    assert {r["emoji"]["name"]: r["me"] for r in stored["reactions"]} == {"👍": False, "✅": True}


# -- world ------------------------------------------------------------------------------------


async def _build_world(bot: commands.Bot, base_id: int | None) -> dict[str, int]:
    env = await attach_dpytest(bot, text_channels=["general", "random"], base_id=base_id)
    private = await env.create_text_channel("staff", private=True)
    mod = await env.create_member("mod", kind="moderator")
    me = bot.user
    assert me is not None
    return {
        "bot": me.id,
        "guild": env.guild.id,
        "general": env.channels[0].id,
        "random": env.channels[1].id,
        "member": env.member.id,
        "private": private.id,
        "mod": mod.id,
        "mod_role": mod.roles[-1].id,
    }


async def test_deterministic_ids_are_the_same_across_two_configures() -> None:
    first_bot, second_bot, other_bot = make_harness_bot(), make_harness_bot(), make_harness_bot()
    first = await _build_world(first_bot, DEFAULT_BASE_ID)
    await detach(first_bot)
    second = await _build_world(second_bot, DEFAULT_BASE_ID)
    assert second_bot.get_channel(second["general"]).name == "general"  # type: ignore[union-attr]
    await detach(second_bot)
    time_based = await _build_world(other_bot, None)
    await detach(other_bot)

    assert first == second
    assert len(set(first.values())) == len(first)
    assert time_based["guild"] != first["guild"]


async def test_private_channel_is_really_private(env: DpytestEnv) -> None:
    insider = await env.create_member("insider")
    outsider = env.member
    private = await env.create_text_channel("staff", private=True, allow=[insider])
    hidden = await env.create_text_channel("vault", private=True, include_bot=False)

    assert env.channel.permissions_for(outsider).view_channel
    assert not private.permissions_for(outsider).view_channel
    assert private.permissions_for(insider).view_channel
    assert private.permissions_for(env.guild.me).send_messages
    assert not hidden.permissions_for(env.guild.me).view_channel
    with pytest.raises(discord.Forbidden):
        await hidden.send("should not be possible")

    await env.set_overwrite(private, outsider, discord.PermissionOverwrite(view_channel=True))
    assert private.permissions_for(outsider).view_channel
    await env.set_overwrite(private, outsider, None)
    assert not private.permissions_for(outsider).view_channel


async def test_member_kinds_have_the_expected_permissions(env: DpytestEnv) -> None:
    moderator = await env.create_member("mod", kind="moderator")
    admin = await env.create_member("admin", kind="admin")
    owner = await env.create_member("owner", kind="owner")
    channel = env.channel

    assert not channel.permissions_for(env.member).manage_messages
    assert channel.permissions_for(moderator).manage_messages
    assert not channel.permissions_for(moderator).manage_guild
    assert env.guild.get_role(moderator.roles[-1].id) is not None
    assert channel.permissions_for(admin).manage_guild
    assert env.guild.owner_id == owner.id
    assert channel.permissions_for(owner).administrator


# -- interactions -----------------------------------------------------------------------------


async def test_slash_command_with_options_and_subcommand_group(ih: InteractionHarness) -> None:
    quiet = await ih.slash("echo", {"text": "hi", "times": 2})
    assert quiet.content == "hi hi"
    assert quiet.ephemeral
    assert quiet.response is not None and quiet.response.flags & 64

    loud = await ih.slash("echo", {"text": "hi", "loud": True})
    assert loud.content == "HI"
    assert not loud.ephemeral

    nested = await ih.slash("config memory set", {"key": "depth", "value": 21})
    assert nested.content == "depth=42"
    assert nested.ephemeral
    assert nested.interaction is not None
    assert nested.interaction.command is not None
    assert nested.interaction.command.qualified_name == "config memory set"


async def test_member_option_is_resolved(ih: InteractionHarness, env: DpytestEnv) -> None:
    other = await env.create_member("someone")
    result = await ih.slash("whois", {"member": other})
    assert result.content == f"someone:{other.id}"


async def test_defer_edit_and_followup_are_recorded(ih: InteractionHarness) -> None:
    result = await ih.slash("slow")
    assert result.deferred and result.ephemeral
    assert [c.kind for c in result.calls] == ["response", "edit_original", "followup"]
    assert result.content == "done thinking"
    assert result.followups[0].content == "one more thing"
    assert result.followups[0].ephemeral
    assert [e.title for e in result.followups[0].embeds] == ["details"]


async def test_the_first_followup_after_a_defer_resolves_the_thinking_message(
    ih: InteractionHarness,
) -> None:
    # Discord's rule: it edits the original (keeping the defer's ephemeral flag); later
    # follow-ups are new messages.
    result = await ih.slash("ponder")
    first, second = result.followups
    assert first.message_id == result.original_message_id
    assert result.content == "first answer" and result.ephemeral
    original = result.original_message
    assert original is not None and int(original["flags"]) & 64
    assert not int(original["flags"]) & 128, "no longer loading"
    assert second.message_id != result.original_message_id
    assert second.content == "second answer"


async def test_permission_checked_command_refuses_member_allows_moderator(
    ih: InteractionHarness, env: DpytestEnv
) -> None:
    moderator = await env.create_member("mod", kind="moderator")
    admin = await env.create_member("admin", kind="admin")

    refused = await ih.slash("purge")
    assert refused.content == "refused: MissingPermissions"
    assert refused.ephemeral
    assert refused.command_failed

    assert (await ih.slash("purge", user=admin)).content == "refused: MissingPermissions"

    allowed = await ih.slash("purge", user=moderator)
    assert allowed.content == "purged"
    assert not allowed.command_failed

    # With Discord's own gating, default_permissions hides the command from the member.
    gated = await ih.slash("purge", gate=True)
    assert gated.blocked is not None and not gated.responded
    assert (await ih.slash("purge", user=moderator, gate=True)).content == "purged"


async def test_modal_is_recorded_and_submit_runs_on_submit(ih: InteractionHarness) -> None:
    opened = await ih.slash("feedback")
    modal = opened.modal
    assert modal is not None
    assert modal.title == "Feedback"
    assert modal.custom_id == opened.response.payload["custom_id"]  # type: ignore[union-attr]
    assert modal.text_inputs[0]["custom_id"] == "topic"
    assert [i["label"] for i in modal.text_inputs] == ["Topic", "Body"]

    # by custom_id ("topic") and by attribute name ("body")
    submitted = await ih.submit_modal(opened, {"topic": "bugs", "body": "many"})
    assert submitted.content == "bugs: many"
    assert submitted.ephemeral


async def test_button_click_by_custom_id_runs_the_callback(
    ih: InteractionHarness, env: DpytestEnv
) -> None:
    asked = await ih.slash("ask")
    assert asked.custom_ids == ["confirm"]
    assert not asked.ephemeral

    clicker = await env.create_member("clicker")
    clicked = await ih.click(asked, "confirm", user=clicker)
    assert clicked.response_type == UPDATE_MESSAGE
    assert clicked.content == "confirmed"
    assert clicked.components == []
    cog = env.bot.get_cog("SlashCog")  # type: ignore[attr-defined]
    assert cog.views[-1].clicked_by == clicker.id

    # A view sent with channel.send (prefix command) is clickable by label too.
    await env.send("!menu")
    menu = env.last_sent()
    assert menu.custom_ids == ["confirm"]
    assert (await ih.click(menu, label="Confirm")).content == "confirmed"


async def test_autocomplete_returns_choices(ih: InteractionHarness) -> None:
    result = await ih.autocomplete("fruit", "name", "an")
    assert result.response_type == AUTOCOMPLETE_RESULT
    assert result.choices == [
        {"name": "banana", "value": "banana"},
        {"name": "mango", "value": "mango"},
        {"name": "orange", "value": "orange"},
    ]


async def test_dm_slash_command_works_without_guild(
    ih: InteractionHarness, env: DpytestEnv
) -> None:
    result = await ih.slash("whoami", dm=True)
    assert result.content == f"dm:{env.member.id}"
    assert result.interaction is not None
    assert result.interaction.guild is None
    assert isinstance(result.interaction.channel, discord.DMChannel)

    blocked = await ih.slash("serveronly", dm=True, gate=True)
    assert blocked.blocked is not None and not blocked.responded


async def test_tree_sync_is_recorded(env: DpytestEnv) -> None:
    synced = await env.bot.tree.sync()  # type: ignore[attr-defined]
    assert {"echo", "config", "purge"} <= {c.name for c in synced}
    assert env.synced_commands[None]


# -- attaching arbitrary bots -------------------------------------------------------------------


class MentionCog(commands.Cog):
    def __init__(self) -> None:
        self.contents: list[str] = []

    @commands.Cog.listener()
    async def on_message(self, message: discord.Message) -> None:
        if message.author.bot:
            return
        self.contents.append(message.content)
        await message.channel.send(f"hello {message.author.mention}")

    @app_commands.command(name="greet", description="mentions the caller")
    async def greet(self, interaction: discord.Interaction) -> None:
        await interaction.response.send_message(f"hi {interaction.user.mention}")


class PersistentView(discord.ui.View):
    def __init__(self) -> None:
        super().__init__(timeout=None)

    @discord.ui.button(label="Forever", custom_id="persistent:forever")
    async def forever(self, interaction: discord.Interaction, button: discord.ui.Button) -> None:
        await interaction.response.send_message("still here", ephemeral=True)


class HookBot(commands.Bot):
    async def setup_hook(self) -> None:
        await self.add_cog(MentionCog())


async def test_bot_level_allowed_mentions_are_used_and_recorded() -> None:
    bot = make_harness_bot(allowed_mentions=discord.AllowedMentions.none())
    await bot.add_cog(MentionCog())
    env = await attach_dpytest(bot)
    ih = InteractionHarness(bot)
    try:
        await env.send("hi bot")
        sent = env.last_sent()
        assert sent.content == f"hello {env.member.mention}"
        assert sent.allowed_mentions == {"parse": []}
        assert sent.message.mentions == []  # nobody was pinged

        greeted = await ih.slash("greet")
        assert greeted.response is not None
        assert greeted.response.allowed_mentions == {"parse": []}
        assert greeted.original_message is not None
        assert greeted.original_message["mentions"] == []
    finally:
        ih.close()
        await detach(bot)


async def test_bot_without_privileged_intents_still_caches_members() -> None:
    bot = HookBot(command_prefix="!", intents=discord.Intents.default())
    bot.add_view(PersistentView())  # registered on the pre-attach state
    env = await attach_dpytest(bot, run_setup_hook=True)
    try:
        assert env.guild.get_member(env.member.id) is env.member
        assert any(isinstance(v, PersistentView) for v in bot.persistent_views)
        cog = bot.get_cog("MentionCog")
        assert isinstance(cog, MentionCog)  # added by setup_hook

        await env.send("secret words")
        await env.send("look here", mention_bot=True)
        assert cog.contents[0] == ""  # no message_content intent: Discord blanks it
        assert cog.contents[1].endswith("look here")
    finally:
        await detach(bot)
