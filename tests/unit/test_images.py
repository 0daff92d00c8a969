"""Image parts for vision models (bot/conversation/images.py) and the provider table's flag."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import pytest

from bot.config.settings import ContextSettings
from bot.conversation.images import vision_enabled, with_images
from bot.vocabulary.model import ImageRef, RawMessage
from bot.vocabulary.providers import capabilities

NOW = datetime(2024, 5, 1, tzinfo=UTC)
PERSONA = {"role": "system", "content": "You are Kioku."}


def raw(message_id: int, *names: str, size: int = 10) -> RawMessage:
    images = tuple(ImageRef(f"https://cdn.test/{n}", n, "image/png", size) for n in names)
    return RawMessage(message_id, 100, "Ann", f"message {message_id}", NOW, images=images)


def history(*window: RawMessage) -> tuple[list[dict[str, Any]], list[int]]:
    messages = [PERSONA] + [{"role": "user", "content": m.line()} for m in window]
    return messages, [m.message_id for m in window]


def urls(message: dict[str, Any]) -> list[str]:
    content = message["content"]
    if isinstance(content, str):
        return []
    return [p["image_url"]["url"] for p in content if p["type"] == "image_url"]


@pytest.mark.parametrize(
    ("setting", "provider", "expected"),
    [
        ("auto", "openai", True),
        ("auto", "ollama", False),
        ("on", "ollama", True),
        ("off", "openai", False),
    ],
)
def test_vision_follows_the_setting_or_with_auto_the_provider_table(
    setting: str, provider: str, expected: bool
) -> None:
    settings = ContextSettings(vision=setting)  # type: ignore[arg-type]
    assert vision_enabled(settings, capabilities(provider)) is expected


async def test_images_go_to_the_newest_messages_first_within_both_limits() -> None:
    window = (raw(1, "a.png"), raw(2, "b.png", "c.png", "d.png"), raw(3, "e.png"))
    messages, ids = history(*window)
    settings = ContextSettings(images_per_message=2, images_per_turn=3)

    out = await with_images(messages, ids, window, settings)

    assert [urls(m) for m in out[1:]] == [
        [],
        ["https://cdn.test/b.png", "https://cdn.test/c.png"],
        ["https://cdn.test/e.png"],
    ]
    assert out[2]["content"][0] == {"type": "text", "text": "Ann: message 2"}
    assert messages[2]["content"] == "Ann: message 2"  # the input is not modified


async def test_history_cut_to_fit_lines_up_with_the_newest_ids() -> None:
    window = (raw(1, "a.png"), raw(2, "b.png"))
    messages, ids = history(*window)
    cut = [PERSONA, messages[2]]  # the oldest message did not fit the context

    out = await with_images(cut, ids, window, ContextSettings())

    assert urls(out[1]) == ["https://cdn.test/b.png"]


async def test_data_urls_hold_the_bytes_and_a_failed_or_too_large_download_is_a_note() -> None:
    window = (raw(1, "ok.png", "gone.png", "huge.png", size=0),)
    messages, ids = history(*window)
    blobs = {"https://cdn.test/ok.png": b"\x89PNG", "https://cdn.test/huge.png": b"x" * 2000}

    async def read(url: str) -> bytes | None:
        return blobs.get(url)

    settings = ContextSettings(image_transport="data_url", image_max_mb=0.001)
    out = await with_images(messages, ids, window, settings, read)

    assert urls(out[1]) == ["data:image/png;base64," + base64.b64encode(b"\x89PNG").decode()]
    text = out[1]["content"][0]["text"]
    assert "[image gone.png not shown to you: it could not be read]" in text
    assert "[image huge.png not shown to you: larger than 0.001 MB]" in text


async def test_an_image_discord_says_is_too_large_is_not_downloaded() -> None:
    window = (raw(1, "big.png", size=9 * 1024 * 1024),)
    messages, ids = history(*window)
    read_urls: list[str] = []

    async def read(url: str) -> bytes | None:
        read_urls.append(url)
        return b""

    settings = ContextSettings(image_transport="data_url")
    out = await with_images(messages, ids, window, settings, read)

    assert read_urls == [] and urls(out[1]) == []
    assert "larger than 8 MB" in out[1]["content"][0]["text"]


def test_the_table_marks_the_hosted_vision_providers() -> None:
    vision = {name for name in ("openai", "azure", "anthropic", "gemini", "xai")}
    for name in ("openai", "azure", "anthropic", "gemini", "xai", "ollama", "generic", "vllm"):
        assert capabilities(name).vision is (name in vision), name
