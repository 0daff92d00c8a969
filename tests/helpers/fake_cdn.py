"""Discord's CDN as the bot's image fetcher sees it, answered from the world's files.

It applies the real URL policy (``DISCORD_MEDIA``) before anything, records each URL it
is asked for in the world's ``cdn_asked``, and never finishes a download whose file name
is in ``cdn_stalled``. What the guarded fetcher does on the network is tested in
tests/unit/fetch/ (through a fake resolver and a recording connector).
"""

from __future__ import annotations

import asyncio
import mimetypes

from bot.fetch import DISCORD_MEDIA, Fetched, FetchFailed, FetchRefused, FetchTooLarge
from tests.helpers.messages import MessageTraffic


class FakeCdn:
    """A :class:`bot.fetch.Fetcher` over ``world.cdn``; ``world`` is set once attached."""

    def __init__(self) -> None:
        self.world: MessageTraffic | None = None

    async def fetch(self, url: str, *, max_bytes: int) -> Fetched:
        world = self.world
        assert world is not None, "the fake CDN serves once the bot is attached"
        why = DISCORD_MEDIA.refusal(url)
        if why is not None:
            raise FetchRefused(why)
        world.cdn_asked.append(url)
        if world.cdn_stalls(url):
            await asyncio.Event().wait()  # never set: a download that never ends
        data = world.cdn.get(url)
        if data is None:
            raise FetchFailed("HTTP 404")
        if len(data) > max_bytes:
            raise FetchTooLarge(f"more than {max_bytes} bytes")
        return Fetched(data, mimetypes.guess_type(url.split("?", 1)[0])[0], url)
