"""A message's images as the turn sees them: references to Discord's own copies, and
their guarded download for the ``data_url`` transport.

Only Discord's CDN and media proxy are referenced (an attachment's URL; an embed's
``proxy_url``, never the link it was made from, which anyone posting, a webhook or
another bot, may point anywhere): nothing else is fetched or handed to the provider.
"""

from __future__ import annotations

import logging
import mimetypes
from urllib.parse import urlsplit

import discord

from bot.fetch import DISCORD_MEDIA, Fetcher, GuardedFetcher
from bot.vocabulary import ImageRef, strip_control_chars

log = logging.getLogger(__name__)

# Discord allows 10 attachments a message; the turn applies the configured limits.
MAX_IMAGES = 10
NAME_MAX_CHARS = 100


def _content_type(attachment: discord.Attachment) -> str | None:
    return attachment.content_type or mimetypes.guess_type(attachment.filename)[0]


def _name(value: str) -> str:
    return strip_control_chars(value)[:NAME_MAX_CHARS] or "image"


def _discords(url: str | None) -> str | None:
    """``url`` when it is Discord's CDN or media proxy, else None."""
    if not url:
        return None
    why = DISCORD_MEDIA.refusal(url)
    if why is not None:
        log.debug("image not referenced: %s", why)
        return None
    return url


def _embed_url(embed: discord.Embed) -> tuple[str, str] | None:
    """An image embed's proxied copy and the file name of its original, or None."""
    # A link to an image shows as an embed of type "image" holding it as thumbnail.
    media = embed.image if embed.image.url else embed.thumbnail if embed.type == "image" else None
    if media is None or not media.url:
        return None
    proxied = _discords(media.proxy_url)
    if proxied is None:
        return None
    return proxied, urlsplit(media.url).path.rsplit("/", 1)[-1]


def image_refs(message: discord.Message) -> tuple[ImageRef, ...]:
    """The images of ``message``: image attachments, then image embeds (a posted image link)."""
    refs: list[ImageRef] = []
    for attachment in message.attachments:
        content_type = _content_type(attachment)
        url = _discords(attachment.url) or _discords(attachment.proxy_url)
        if content_type is not None and content_type.startswith("image/") and url:
            refs.append(ImageRef(url, _name(attachment.filename), content_type, attachment.size))
    for embed in message.embeds:
        found = _embed_url(embed)
        if found is not None:
            url, name = found
            refs.append(ImageRef(url, _name(name), mimetypes.guess_type(name)[0]))
    return tuple(refs[:MAX_IMAGES])


class ImageDownloader:
    """Reads Discord's copies of images through the guarded fetcher (no other host)."""

    def __init__(self, fetcher: Fetcher | None = None) -> None:
        # A fetcher handed in (tests: a fake CDN) belongs to the caller.
        self._owned = GuardedFetcher(DISCORD_MEDIA) if fetcher is None else None
        self._fetcher: Fetcher = self._owned or fetcher  # type: ignore[assignment]

    async def __call__(self, url: str, max_bytes: int) -> bytes:
        """The image's bytes; a :class:`bot.fetch.FetchError` when there are none."""
        return (await self._fetcher.fetch(url, max_bytes=max_bytes)).data

    async def close(self) -> None:
        """Close the connections of the fetcher it made."""
        if self._owned is not None:
            await self._owned.close()
