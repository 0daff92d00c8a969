"""A message's images as the turn sees them: references to Discord's copies, and their
download for the ``data_url`` transport."""

from __future__ import annotations

import logging
import mimetypes
from urllib.parse import urlsplit

import aiohttp
import discord

from bot.vocabulary import ImageRef, strip_control_chars

log = logging.getLogger(__name__)

# Discord allows 10 attachments a message; the turn applies the configured limits.
MAX_IMAGES = 10
NAME_MAX_CHARS = 100


def _content_type(attachment: discord.Attachment) -> str | None:
    return attachment.content_type or mimetypes.guess_type(attachment.filename)[0]


def _name(value: str) -> str:
    return strip_control_chars(value)[:NAME_MAX_CHARS] or "image"


def image_refs(message: discord.Message) -> tuple[ImageRef, ...]:
    """The images of ``message``: image attachments, then image embeds (a posted image link)."""
    refs: list[ImageRef] = []
    for attachment in message.attachments:
        content_type = _content_type(attachment)
        if content_type is not None and content_type.startswith("image/"):
            refs.append(
                ImageRef(attachment.url, _name(attachment.filename), content_type, attachment.size)
            )
    for embed in message.embeds:
        # A link to an image shows as an embed of type "image" holding it as thumbnail.
        url = embed.image.url or (embed.thumbnail.url if embed.type == "image" else None)
        if url:
            path = urlsplit(url).path.rsplit("/", 1)[-1]
            refs.append(ImageRef(url, _name(path), mimetypes.guess_type(path)[0]))
    return tuple(refs[:MAX_IMAGES])


class ImageDownloader:
    """Reads images through discord.py's HTTP session (its proxy settings included)."""

    def __init__(self, http: discord.http.HTTPClient) -> None:
        self._http = http

    async def __call__(self, url: str) -> bytes | None:
        """The image's bytes, or None when Discord (or the host) would not give them."""
        try:
            return await self._http.get_from_cdn(url)
        except (discord.HTTPException, aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.info("could not download an image: %s", getattr(exc, "status", type(exc).__name__))
            return None
