"""Images for vision models: the user messages of the message answered and its reply
chain gain image parts.

Only the prompt of one model call holds them: the raw window and memory keep the text,
where each image is noted as ``[image: name]``. Only PNG, JPEG, WEBP and GIF go (what
OpenAI-style servers take); the downloads of one turn run together, inside its deadline;
an image a provider refused is remembered and not sent again.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import mimetypes
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from cachetools import LRUCache

from bot.config import ContextSettings
from bot.fetch import DISCORD_MEDIA, FetchError, FetchTooLarge
from bot.vocabulary import ImageRef, ProviderCaps, RawMessage

log = logging.getLogger(__name__)

# Downloads an image for the data_url transport (at most the given bytes): the edge knows
# how to reach Discord's CDN; a bot.fetch.FetchError when it could not.
ImageReader = Callable[[str, int], Awaitable[bytes]]
BYTES_PER_MB = 1024 * 1024
# One image's download at most, and at most this share of what is left of the turn's
# deadline: the model call after the downloads keeps the rest.
IMAGE_TIMEOUT_SECONDS = 15.0
DEADLINE_SHARE = 0.5
# Images a provider refused, remembered until a restart (the oldest forgotten first).
BAD_IMAGES_KEPT = 10_000

SENDABLE = ("image/png", "image/jpeg", "image/webp", "image/gif")
_EXTENSIONS = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}
_EXTENSIONS |= {".webp": "image/webp", ".gif": "image/gif"}
NOT_SENDABLE = "not a PNG, JPEG, WEBP or GIF image"
UNREADABLE = "it could not be read"
REFUSED = "the model could not read it"


def vision_enabled(settings: ContextSettings, caps: ProviderCaps) -> bool:
    """Whether images go to the model: the setting, or with ``auto`` the provider table."""
    if settings.vision == "auto":
        return caps.vision
    return settings.vision == "on"


def sniffed_type(data: bytes) -> str | None:
    """The sendable image type ``data`` is by its magic bytes, or None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def declared_type(image: ImageRef) -> str | None:
    """The sendable type an image's URL shows (content type and extension agreeing), or None."""
    path = urlsplit(image.url).path.lower()
    extension = path[path.rfind(".") :] if "." in path.rsplit("/", 1)[-1] else ""
    by_extension = _EXTENSIONS.get(extension)
    if extension and by_extension is None:
        return None  # .svg, .heic, .tiff, .bmp… whatever the content type says
    declared = (image.content_type or "").split(";", 1)[0].strip().lower() or None
    if declared is not None and declared not in SENDABLE:
        return None
    return declared or by_extension or mimetypes.guess_type(path)[0]


def _key(url: str) -> str:
    # Discord's signed URLs change their query (expiry, signature); the file stays.
    return url.split("?", 1)[0]


class BadImages:
    """Images a provider refused: not sent again (bounded; kept until a restart)."""

    def __init__(self, maxsize: int = BAD_IMAGES_KEPT) -> None:
        self._urls: LRUCache[str, bool] = LRUCache(maxsize=maxsize)

    def add(self, images: Sequence[ImageRef]) -> None:
        """Never send ``images`` again."""
        for image in images:
            self._urls[_key(image.url)] = True

    def __contains__(self, image: object) -> bool:
        return isinstance(image, ImageRef) and _key(image.url) in self._urls


class _NotShown(Exception):
    """The image goes as a note; the message says why."""


@dataclass(frozen=True, slots=True)
class WithImages:
    """The messages with their image parts, the images they carry, and the same messages
    with those images as notes (to ask again when the provider refused one of them)."""

    messages: list[dict[str, Any]]
    sent: tuple[ImageRef, ...] = ()
    refused: list[dict[str, Any]] | None = None


@dataclass(frozen=True, slots=True)
class _Images:
    settings: ContextSettings
    reader: ImageReader | None
    bad: BadImages | Collection[ImageRef]
    seconds: float

    @property
    def max_bytes(self) -> int:
        return int(self.settings.image_max_mb * BYTES_PER_MB)

    async def url(self, image: ImageRef) -> str:
        """The URL to send: Discord's own, or the downloaded bytes as a data URL."""
        if image in self.bad:
            raise _NotShown(REFUSED)
        if DISCORD_MEDIA.refusal(image.url) is not None:
            raise _NotShown(UNREADABLE)  # the edge sends none; a second check costs nothing
        if image.size > self.max_bytes:
            raise _NotShown(f"larger than {self.settings.image_max_mb:g} MB")
        if self.settings.image_transport == "url" or self.reader is None:
            if declared_type(image) not in SENDABLE:
                raise _NotShown(NOT_SENDABLE)
            return image.url
        if image.content_type is not None and declared_type(image) is None:
            raise _NotShown(NOT_SENDABLE)  # an SVG or a HEIC is not downloaded at all
        try:
            async with asyncio.timeout(self.seconds):
                data = await self.reader(image.url, self.max_bytes)
        except FetchTooLarge:
            raise _NotShown(f"larger than {self.settings.image_max_mb:g} MB") from None
        except (FetchError, TimeoutError) as exc:
            log.info("image not downloaded: %s", exc or type(exc).__name__)
            raise _NotShown(UNREADABLE) from None
        kind = sniffed_type(data)
        if kind is None:
            raise _NotShown(NOT_SENDABLE)
        return f"data:{kind};base64,{base64.b64encode(data).decode('ascii')}"


def _chosen(
    messages: list[dict[str, Any]],
    history_ids: Sequence[int],
    window: Sequence[RawMessage],
    carriers: Collection[int],
    settings: ContextSettings,
) -> dict[int, tuple[ImageRef, ...]]:
    """Index in ``messages`` -> the images its user message carries, the newest messages
    first, at most ``images_per_message`` each and ``images_per_turn`` in all."""
    images = {m.message_id: m.images for m in window if m.images and m.message_id in carriers}
    # The history is every message that is no system note (per-turn notes sit inside it).
    positions = [i for i, m in enumerate(messages) if m.get("role") != "system"]
    count = min(len(positions), len(history_ids))
    chosen: dict[int, tuple[ImageRef, ...]] = {}
    budget = settings.images_per_turn
    for offset in range(1, count + 1):
        index = positions[-offset]
        message = messages[index]
        if message.get("role") != "user" or not isinstance(message.get("content"), str):
            continue
        refs = images.get(history_ids[-offset], ())[: min(settings.images_per_message, budget)]
        if refs:
            chosen[index] = refs
            budget -= len(refs)
        if budget <= 0:
            break
    return chosen


async def with_images(
    messages: list[dict[str, Any]],
    history_ids: Sequence[int],
    window: Sequence[RawMessage],
    settings: ContextSettings,
    reader: ImageReader | None = None,
    *,
    carriers: Collection[int],
    bad: BadImages | Collection[ImageRef] = (),
    deadline: float | None = None,
) -> WithImages:
    """``messages`` with image parts on the user messages of ``carriers`` (the message
    answered and its reply chain) whose raw message has images; see :func:`_chosen`.

    The chat history is the messages that are no system notes; it lines up with the
    end of ``history_ids`` (older messages may have been cut to fit the context). Images
    in ``bad`` are notes; downloads run together, each within its share of ``deadline``
    (event-loop time)."""
    if settings.images_per_turn == 0 or settings.images_per_message == 0:
        return WithImages(messages)
    chosen = _chosen(messages, history_ids, window, carriers, settings)
    if not chosen:
        return WithImages(messages)
    seconds = IMAGE_TIMEOUT_SECONDS
    if deadline is not None:
        left = deadline - asyncio.get_running_loop().time()
        seconds = max(0.0, min(seconds, left * DEADLINE_SHARE))
    images = _Images(settings, reader, bad, seconds)
    flat = [(index, image) for index, refs in chosen.items() for image in refs]
    urls = await asyncio.gather(*(images.url(image) for _, image in flat), return_exceptions=True)
    out, refused = list(messages), list(messages)
    sent: list[ImageRef] = []
    for index in chosen:
        text = notes = out[index]["content"]
        parts: list[dict[str, Any]] = []
        for (at, image), url in zip(flat, urls, strict=True):
            if at != index:
                continue
            if isinstance(url, str):
                parts.append({"type": "image_url", "image_url": {"url": url}})
                sent.append(image)
                notes += f"\n[image {image.name} not shown to you: {REFUSED}]"
            elif isinstance(url, _NotShown):
                text += f"\n[image {image.name} not shown to you: {url}]"
                notes += f"\n[image {image.name} not shown to you: {url}]"
            else:
                raise url
        out[index] = {**out[index], "content": [{"type": "text", "text": text}, *parts]}
        refused[index] = {**out[index], "content": notes}
    return WithImages(out, tuple(sent), refused)
