"""Images for vision models: the chat history's user messages gain image parts.

Only the prompt of one model call holds them: the raw window and memory keep the text,
where each image is noted as ``[image: name]``.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from bot.config import ContextSettings
from bot.vocabulary import ImageRef, ProviderCaps, RawMessage

# Downloads an image for the data_url transport (the edge knows how to reach Discord);
# None when it could not.
ImageReader = Callable[[str], Awaitable[bytes | None]]
BYTES_PER_MB = 1024 * 1024


class ImageTooLarge(Exception):
    """The image is over ``context.image_max_mb``."""


class ImageUnreadable(Exception):
    """The image could not be downloaded."""


def vision_enabled(settings: ContextSettings, caps: ProviderCaps) -> bool:
    """Whether images go to the model: the setting, or with ``auto`` the provider table."""
    if settings.vision == "auto":
        return caps.vision
    return settings.vision == "on"


def _too_large(image: ImageRef, settings: ContextSettings) -> bool:
    return image.size > settings.image_max_mb * BYTES_PER_MB


async def _image_url(image: ImageRef, settings: ContextSettings, reader: ImageReader | None) -> str:
    """The URL to send: Discord's own, or the downloaded bytes as a data URL."""
    if _too_large(image, settings):
        raise ImageTooLarge(image.name)
    if settings.image_transport == "url" or reader is None:
        return image.url
    data = await reader(image.url)
    if data is None:
        raise ImageUnreadable(image.name)
    if len(data) > settings.image_max_mb * BYTES_PER_MB:  # an embed's size is known only now
        raise ImageTooLarge(image.name)
    content_type = image.content_type or "image/png"
    return f"data:{content_type};base64,{base64.b64encode(data).decode('ascii')}"


async def _parts(
    text: str, images: Sequence[ImageRef], settings: ContextSettings, reader: ImageReader | None
) -> tuple[list[dict[str, Any]], int]:
    """A user message's content parts (its text first) and how many images it carries."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    sent = 0
    limit = f"{settings.image_max_mb:g} MB"
    for image in images:
        try:
            url = await _image_url(image, settings, reader)
        except ImageTooLarge:
            parts[0]["text"] += f"\n[image {image.name} not shown to you: larger than {limit}]"
            continue
        except ImageUnreadable:
            parts[0]["text"] += f"\n[image {image.name} not shown to you: it could not be read]"
            continue
        parts.append({"type": "image_url", "image_url": {"url": url}})
        sent += 1
    return parts, sent


async def with_images(
    messages: list[dict[str, Any]],
    history_ids: Sequence[int],
    window: Sequence[RawMessage],
    settings: ContextSettings,
    reader: ImageReader | None = None,
) -> list[dict[str, Any]]:
    """``messages`` with image parts on the user messages whose raw message has images,
    the newest first, at most ``images_per_message`` each and ``images_per_turn`` in all.

    The chat history is the trailing run of non-system messages; it lines up with the
    end of ``history_ids`` (older messages may have been cut to fit the context)."""
    images = {m.message_id: m.images for m in window if m.images}
    if not images or settings.images_per_turn == 0 or settings.images_per_message == 0:
        return messages
    count = 0
    while count < len(messages) and messages[-1 - count].get("role") != "system":
        count += 1
    count = min(count, len(history_ids))
    out = list(messages)
    budget = settings.images_per_turn
    for offset in range(1, count + 1):
        if budget <= 0:
            break
        message = out[-offset]
        refs = images.get(history_ids[-offset], ())[: min(settings.images_per_message, budget)]
        if not refs or message.get("role") != "user" or not isinstance(message["content"], str):
            continue
        parts, sent = await _parts(message["content"], refs, settings, reader)
        budget -= sent
        out[-offset] = {**message, "content": parts}
    return out
