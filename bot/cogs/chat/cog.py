"""Messages → turns. Thin: translate Discord objects, decide whether to answer, send.

- Every readable message goes into its channel's raw window (edits and deletes follow).
- The bot answers in DMs (unless ``access.direct_messages`` is off); in servers when
  mentioned, replied to, or in a channel an admin marked always-on. Bots (itself
  included) never trigger a turn. A member the server's access lists refuse (or a DM
  while DMs are off) gets no reply and costs no model call; the bot's owners always pass.
  Their messages still join the raw window: they are part of the channel's talk.
- Turns in one channel run one after another; different channels run concurrently. At
  most ``llm.max_waiting_turns`` wait in one channel (a DM too), and one member starts at
  most ``llm.turns_per_user_per_minute``: a message past them makes no model call, and
  gets a reaction saying it was not taken.
- A cold channel is back-filled from history (once; again after a network failure or a
  Discord 5xx, a window the cache dropped, or missed notices), stopping at the newest
  ``/refresh`` marker and leaving out what ``stm_clears``/``stm_forgets`` say was wiped,
  so nothing a refresh or a /forget-me removed comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Literal

import aiohttp
import discord
from discord.ext import commands

from bot.cogs.chat.gate import AccessGate, is_addressed
from bot.cogs.chat.members import Members
from bot.cogs.chat.request import turn_request
from bot.cogs.chat.streaming import StreamedReply, reply_parts, with_cut_note
from bot.cogs.chat.threads import ThreadStarters
from bot.cogs.history import WIPED_WHILE_ANSWERING, backfill, belongs_in_window, to_raw
from bot.cogs.images import ImageDownloader
from bot.cogs.needs import POST, POST_IN_THREADS, REACT, READ_HISTORY
from bot.conversation import TurnReply, TurnRequest
from bot.memory import MessageGuard
from bot.runtime import KeyedQueues, finish_or_cancel
from bot.vocabulary import MemoryUnavailable

if TYPE_CHECKING:
    from bot.app import KiokuBot

log = logging.getLogger(__name__)

NO_MENTIONS = discord.AllowedMentions.none()
# At shutdown, answers in flight get this long to go out (within `docker stop`'s 10 s);
# those still running then are cancelled.
SHUTDOWN_GRACE_SECONDS = 8.0
# Put on a message whose turn the channel's full queue turned away (see _answer).
TURNED_AWAY_REACTION = "⏳"


def _may_reply(channel: discord.abc.Messageable) -> bool:
    """Whether the bot may post in ``channel`` (always in DMs)."""
    guild = getattr(channel, "guild", None)
    if guild is None or not isinstance(channel, discord.abc.GuildChannel | discord.Thread):
        return True
    permissions = channel.permissions_for(guild.me)
    if isinstance(channel, discord.Thread):
        # In a locked thread only Manage Threads may post (discord.py does not apply it).
        unlocked = not channel.locked or permissions.manage_threads
        return permissions >= POST_IN_THREADS and unlocked
    return permissions >= POST


def _may_react(channel: discord.abc.Messageable) -> bool:
    """Whether the bot may add a new reaction in ``channel``: Discord asks for Add
    Reactions and Read Message History (always in DMs)."""
    guild = getattr(channel, "guild", None)
    if guild is None or not isinstance(channel, discord.abc.GuildChannel | discord.Thread):
        return True
    return channel.permissions_for(guild.me) >= REACT


def _may_reference(channel: discord.abc.Messageable) -> bool:
    """Whether a reply may point at the message it answers: Discord refuses a reference
    (403, code 160002) from a member without Read Message History (always in DMs)."""
    guild = getattr(channel, "guild", None)
    if guild is None or not isinstance(channel, discord.abc.GuildChannel | discord.Thread):
        return True
    return channel.permissions_for(guild.me) >= READ_HISTORY


@contextlib.asynccontextmanager
async def _typing(channel: discord.abc.Messageable) -> AsyncIterator[None]:
    """The typing indicator, best effort: failing to show it never costs the answer."""
    indicator = channel.typing()
    try:
        await indicator.__aenter__()
        shown = True
    except (discord.HTTPException, aiohttp.ClientError, OSError, TimeoutError) as exc:
        status = getattr(exc, "status", None) or type(exc).__name__
        log.info("no typing indicator in channel %s: %s", getattr(channel, "id", None), status)
        shown = False
    try:
        yield
    finally:
        if shown:
            await indicator.__aexit__(None, None, None)


class Chat(commands.Cog):
    def __init__(self, bot: KiokuBot) -> None:
        self.bot = bot
        # Turns of one channel wait for each other, so many at most (see _answer).
        self._turns: KeyedQueues[int] = KeyedQueues(bot.settings.llm.max_waiting_turns)
        # Turns one member may start a minute (see _over_rate): discord.py's cooldown
        # buckets, read on the memory clock.
        rate = bot.settings.llm.turns_per_user_per_minute
        self._rate: commands.CooldownMapping[discord.Message] | None = (
            commands.CooldownMapping.from_cooldown(rate, 60.0, commands.BucketType.user)
            if rate
            else None
        )
        self.members = Members(bot)
        self.access = AccessGate(bot, self.members)
        self._read_image = ImageDownloader(bot.image_fetcher)
        self.starters = ThreadStarters(bot)
        # The tasks answering a message (running or waiting for their channel's turn).
        self._answering: set[asyncio.Task[object]] = set()
        self._closing = False

    async def cog_load(self) -> None:
        self._closing = False  # the same cog added again (after a remove_cog) serves again

    async def cog_unload(self) -> None:
        """Let running turns answer within :data:`SHUTDOWN_GRACE_SECONDS`, then cancel them."""
        # Unloaded first by the bot's close: no new message arrives after this, and a
        # cancelled turn's memory write still settles before the database goes.
        self._closing = True
        answering = [task for task in self._answering if task is not asyncio.current_task()]
        if answering:
            log.info(
                "waiting up to %.0f s for %d answers in flight",
                SHUTDOWN_GRACE_SECONDS,
                len(answering),
            )
            cancelled = await finish_or_cancel(answering, SHUTDOWN_GRACE_SECONDS)
            if cancelled:
                log.warning("shutdown: %d answers in flight were cancelled", cancelled)
        await self._read_image.close()  # after the answers: they may still read images

    # ------------------------------------------------------------ raw window

    @commands.Cog.listener()
    async def on_message(self, message: discord.Message) -> None:
        if not belongs_in_window(message, self.bot.user):
            return
        self.bot.memory.observe_message(message.channel.id, to_raw(message))
        if message.author.bot:
            return
        self.bot.turns.capture.observed(
            guild_id=message.guild.id if message.guild else None,
            channel_id=message.channel.id,
            author_id=message.author.id,
            parent_id=getattr(message.channel, "parent_id", None),
        )
        addressed = is_addressed(message, self.bot.user)
        if not addressed and not self._may_be_always_on(message):
            return
        await self._answer(message, addressed=addressed)

    @commands.Cog.listener()
    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        if "content" not in payload.data:
            return  # an embed resolving, not an edit of the text
        self.starters.edited(payload.message_id)
        self.bot.memory.message_edited(
            payload.channel_id, payload.message_id, to_raw(payload.message).content
        )

    @commands.Cog.listener()
    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        self.bot.memory.message_deleted(payload.channel_id, payload.message_id)

    @commands.Cog.listener()
    async def on_raw_bulk_message_delete(self, payload: discord.RawBulkMessageDeleteEvent) -> None:
        for message_id in payload.message_ids:
            self.bot.memory.message_deleted(payload.channel_id, message_id)

    # ----------------------------------------------------------------- turns

    def _may_be_always_on(self, message: discord.Message) -> bool:
        """False only when the cached guild settings say the channel is not always-on; an
        uncached guild is decided in the channel's queue (see :meth:`_answer`)."""
        if message.guild is None or self.bot.user is None:
            return False
        config = self.bot.memory.cached_guild_config(message.guild.id)
        return config is None or message.channel.id in config.always_on_channels

    async def _always_on(self, message: discord.Message) -> bool:
        assert message.guild is not None
        try:
            config = await self.bot.memory.guild_config(message.guild.id)
        except MemoryUnavailable:
            # Mentions are still answered during an outage; unaddressed chatter is not.
            return False
        return message.channel.id in config.always_on_channels

    async def _answer(self, message: discord.Message, *, addressed: bool) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._answering.add(task)
        try:
            await self._answer_in_turn(message, addressed=addressed)
        finally:
            self._answering.discard(task)

    async def _answer_in_turn(self, message: discord.Message, *, addressed: bool) -> None:
        channel = message.channel
        memory = self.bot.memory
        # Whether a /refresh or a /forget-me wiped the message while its turn waited.
        arrived = memory.guard(channel.id, message.id)
        # The queue slot is taken before anything is awaited, so turns of one channel run
        # in the order their messages arrived. Chatter in a channel not known to be
        # always-on (uncached settings) fills no place a mention could have.
        guild = message.guild
        known = guild is not None and memory.cached_guild_config(guild.id) is not None
        counted = addressed or known
        # Refused while known to be (cached settings, DMs off): no queue place, no reaction.
        if self.access.cached_refusal(message) is not None and await self._refused(message):
            return
        if counted and self._over_rate(message):
            await self._turn_away(message, "rate_limited")
            return
        async with self._turns.place(channel.id, counted=counted) as admitted:
            if self._closing:
                return  # shutting down: only the turns already running finish
            if not admitted:
                await self._turn_away(message, "turned_away")
                return
            if not addressed and not await self._always_on(message):
                return
            if await self._refused(message):
                return
            if not _may_reply(channel):
                # A read-only channel: no answer could be posted, so no model call is made.
                log.debug("no permission to reply in channel %s", channel.id)
                return
            await backfill(self.bot, channel, before=message)
            if message.guild is None:
                await self.members.fetch_for_dm(memory, self.bot.longterm, message.author.id)
            if arrived.deleted():
                # Deleted while the turn waited: nothing is left to answer (the window
                # would end with the previous question, answered a second time).
                log.debug("message %s was deleted before its turn", message.id)
                return
            request = await turn_request(
                self.bot,
                message,
                members=self.members,
                starters=self.starters,
                read_image=self._read_image,
                trigger_epoch=arrived.epoch,
            )
            await self._run_turn(message, request)

    async def _run_turn(self, message: discord.Message, request: TurnRequest) -> None:
        """Run the turn answering ``message`` and post its reply (streamed, when slow)."""
        channel = message.channel
        memory = self.bot.memory
        guard = memory.guard(channel.id, message.id)
        stream = StreamedReply(
            functools.partial(self._post, message),
            self._take_back,
            interval=self.bot.settings.llm.stream_edit_seconds,
            max_parts=self.bot.settings.llm.max_reply_messages,
            clock=memory.clock.monotonic,
            wiped=guard.wiped,
        )
        async with _typing(channel):
            reply = await self.bot.turns.run(request, preview=stream)
        await self._post_reply(message, reply, stream, guard)
        if reply.upkeep is not None:
            # Before the channel's next turn, which then reads the memory it wrote.
            await reply.upkeep()

    async def _post_reply(
        self, message: discord.Message, reply: TurnReply, stream: StreamedReply, guard: MessageGuard
    ) -> None:
        memory = self.bot.memory
        if reply.turn is not None:
            # The reply is checked against what the turn read: the channel's memory then.
            guard = memory.guard(message.channel.id, message.id, epoch=reply.turn.epoch)
        if stream.parts:
            await self._finish_stream(message, stream, reply.text, guard, reply.failed)
            return
        if reply.unanswered:
            # Deleted: nothing to say. Wiped by a /refresh or a /forget-me: the member
            # is told, as when a refresh overtakes an answer.
            if not guard.deleted():
                await self._post(message, WIPED_WHILE_ANSWERING, reply=True)
            return
        text = reply.text
        if reply.outcome == "llm_unavailable" and stream.received().strip():
            # The answer broke off before its first message was due: what came stays.
            text = with_cut_note(stream.received())
        await self._send(message, text, guard=guard, failed=reply.failed)

    async def _finish_stream(
        self,
        message: discord.Message,
        stream: StreamedReply,
        text: str,
        guard: MessageGuard,
        failed: bool,
    ) -> None:
        """Show the whole reply in the messages a slow answer streamed into (see
        :meth:`_send` for ``guard`` and ``failed``); a failed turn keeps what was shown,
        with a note that the answer was cut."""
        memory = self.bot.memory
        channel_id = message.channel.id
        if failed:
            text = with_cut_note(stream.received())
        parts = [] if guard.wiped() else await stream.finish(text)
        if guard.wiped():
            for part in stream.parts:
                await self._take_back(part)
            await self._post(message, WIPED_WHILE_ANSWERING, reply=True)
            return
        for part in parts:
            if failed:
                memory.message_deleted(channel_id, part.id)
                continue
            # The echo of the first post may have put a partial text in the window.
            raw = to_raw(part)
            memory.observe_message(channel_id, raw)
            memory.message_edited(channel_id, part.id, raw.content)

    async def _refused(self, message: discord.Message) -> bool:
        """Whether ``message``'s author may not start a turn here (counted when not)."""
        if await self.access.refused(message) is None:
            return False
        self.bot.metrics.turn_ended("not_allowed")
        return True

    def _over_rate(self, message: discord.Message) -> bool:
        """Whether the member already started ``llm.turns_per_user_per_minute`` turns in
        the last minute (counting this one, when it is let through)."""
        if self._rate is None:
            return False
        now = self.bot.memory.clock.monotonic()
        bucket = self._rate.get_bucket(message, now)
        return bucket is not None and bucket.update_rate_limit(now) is not None

    async def _turn_away(
        self, message: discord.Message, why: Literal["turned_away", "rate_limited"]
    ) -> None:
        """No turn for ``message`` (addressed, or in a channel known to be always-on): the
        channel's queue is full, or its author is over their turns per minute. A
        reaction (best effort) tells the member it was not taken, rather than an answer
        long after."""
        channel = message.channel
        reason = (
            "too many turns waiting" if why == "turned_away" else "its author's turns per minute"
        )
        log.debug("turned away a message in channel %s: %s", channel.id, reason)
        self.bot.metrics.turn_ended(why)
        if not _may_react(channel):
            return
        try:
            await message.add_reaction(TURNED_AWAY_REACTION)
        except (discord.HTTPException, aiohttp.ClientError, OSError, TimeoutError) as exc:
            status = getattr(exc, "status", None) or type(exc).__name__
            log.debug("no reaction in channel %s: %s", channel.id, status)

    async def _send(
        self, message: discord.Message, text: str, *, guard: MessageGuard, failed: bool = False
    ) -> list[discord.Message]:
        """Post ``text`` in parts, the first replying to ``message``; parts that went out
        join the raw window unless the turn ``failed``.

        A ``/refresh`` (or a /forget-me of someone here) since the turn read its memory
        (``guard``'s epoch) stops the answer, also between two parts: what is still to
        come was made from what it wiped, and a part posted after the refresh marker would
        be read back by a back-fill. A part whose sending overlapped the refresh is taken
        back (it may sit after the marker); the member is told to ask again."""
        memory = self.bot.memory
        channel_id = message.channel.id
        wiped = guard.wiped
        sent: list[discord.Message] = []
        # One character kept free for the marker guard below.
        for chunk in reply_parts(text, self.bot.settings.llm.max_reply_messages) or ["…"]:
            if wiped():
                break
            part = await self._post(message, chunk, reply=not sent)
            if part is None:
                break
            if wiped():
                await self._take_back(part)
                break
            sent.append(part)
            if failed:
                memory.message_deleted(channel_id, part.id)  # in case the echo came first
            else:
                memory.observe_message(channel_id, to_raw(part))
        if wiped():
            await self._post(message, WIPED_WHILE_ANSWERING, reply=not sent)
        return sent

    async def _post(
        self, message: discord.Message, text: str, reply: bool
    ) -> discord.Message | None:
        """Send one message in ``message``'s channel, as a reply to it when ``reply``;
        None when Discord refused it or could not be reached."""
        channel = message.channel
        # If the message was deleted meanwhile, the reply is sent anyway, without it.
        reference = message.to_reference(fail_if_not_exists=False)
        if reply and not _may_reference(channel):
            reply = False  # Discord refuses the reference, not the message (see below)
        try:
            try:
                return await channel.send(
                    text,
                    allowed_mentions=NO_MENTIONS,
                    reference=reference if reply else None,  # type: ignore[arg-type]
                    mention_author=False,
                )
            except discord.HTTPException as exc:
                if not reply or exc.status >= 500:
                    raise
                # A reply Discord refuses (403 code 160002 without Read Message History,
                # a permission overwrite the cache has not caught up with): the answer
                # still goes out, without the reference.
                log.info("reply refused in %s (%s); sending without it", channel.id, exc.code)
                return await channel.send(text, allowed_mentions=NO_MENTIONS)
        except discord.HTTPException as exc:
            log.warning("could not send a reply in %s: %s", channel.id, exc.status)
            return None
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            # The connection to Discord failed (discord.py retries only some of these):
            # this answer is lost, the channel's next turns go on.
            log.warning("could not send a reply in %s: %s", channel.id, exc.__class__.__name__)
            return None

    async def _take_back(self, part: discord.Message) -> None:
        """Delete a part of an answer that a /refresh overtook, from Discord and from the
        raw window (the delete also keeps a late echo of it out)."""
        self.bot.memory.message_deleted(part.channel.id, part.id)
        try:
            await part.delete()
        except discord.HTTPException as exc:
            log.warning("could not take back a reply in %s: %s", part.channel.id, exc.status)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning(
                "could not take back a reply in %s: %s", part.channel.id, exc.__class__.__name__
            )


async def setup(bot: KiokuBot) -> None:
    await bot.add_cog(Chat(bot))
