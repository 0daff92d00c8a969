"""Image parts for vision models (bot/conversation/images.py), the provider table's flag,
and the mapping of a provider's image refusal (bot/llm/failures.py)."""

from __future__ import annotations

import asyncio
import base64
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from bot.config.settings import ContextSettings, LlmSettings
from bot.conversation.images import (
    BadImages,
    declared_type,
    sniffed_type,
    vision_enabled,
    with_images,
)
from bot.fetch import FetchFailed, FetchTooLarge
from bot.llm import ImagesRefused, LlmUnavailable, complete_without_tools
from bot.vocabulary.model import ImageRef, RawMessage
from bot.vocabulary.providers import capabilities
from tests.helpers.fake_llm import ScriptedLLM, openai_client

NOW = datetime(2024, 5, 1, tzinfo=UTC)
PERSONA = {"role": "system", "content": "You are Kioku."}
CDN = "https://cdn.discordapp.com/attachments/1/2"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8


def raw(message_id: int, *names: str, size: int = 10) -> RawMessage:
    images = tuple(ImageRef(f"{CDN}/{n}", n, "image/png", size) for n in names)
    return RawMessage(message_id, 100, "Ann", f"message {message_id}", NOW, images=images)


def history(*window: RawMessage) -> tuple[list[dict[str, Any]], list[int]]:
    messages = [PERSONA] + [{"role": "user", "content": m.line()} for m in window]
    return messages, [m.message_id for m in window]


def urls(message: dict[str, Any]) -> list[str]:
    content = message["content"]
    if isinstance(content, str):
        return []
    return [p["image_url"]["url"] for p in content if p["type"] == "image_url"]


def text(message: dict[str, Any]) -> str:
    content = message["content"]
    return content if isinstance(content, str) else content[0]["text"]


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

    out = await with_images(messages, ids, window, settings, carriers=ids)

    assert [urls(m) for m in out.messages[1:]] == [
        [],
        [f"{CDN}/b.png", f"{CDN}/c.png"],
        [f"{CDN}/e.png"],
    ]
    assert out.messages[2]["content"][0] == {"type": "text", "text": "Ann: message 2"}
    assert messages[2]["content"] == "Ann: message 2"  # the input is not modified
    assert [i.name for i in out.sent] == ["e.png", "b.png", "c.png"]


async def test_only_the_carriers_messages_get_image_parts() -> None:
    window = (raw(1, "a.png"), raw(2, "b.png"), raw(3, "c.png"))
    messages, ids = history(*window)

    out = await with_images(messages, ids, window, ContextSettings(), carriers={1, 3})

    assert [urls(m) for m in out.messages[1:]] == [[f"{CDN}/a.png"], [], [f"{CDN}/c.png"]]


async def test_history_cut_to_fit_lines_up_with_the_newest_ids() -> None:
    window = (raw(1, "a.png"), raw(2, "b.png"))
    messages, ids = history(*window)
    cut = [PERSONA, messages[2]]  # the oldest message did not fit the context

    out = await with_images(cut, ids, window, ContextSettings(), carriers=ids)

    assert urls(out.messages[1]) == [f"{CDN}/b.png"]


async def test_data_urls_hold_the_bytes_and_a_failed_or_too_large_download_is_a_note() -> None:
    window = (raw(1, "ok.png", "gone.png", "huge.png", size=0),)
    messages, ids = history(*window)

    async def read(url: str, max_bytes: int) -> bytes:
        if url.endswith("ok.png"):
            return PNG
        if url.endswith("huge.png"):
            raise FetchTooLarge("over")
        raise FetchFailed("HTTP 404")

    settings = ContextSettings(image_transport="data_url", image_max_mb=0.001)
    out = await with_images(messages, ids, window, settings, read, carriers=ids)

    assert urls(out.messages[1]) == ["data:image/png;base64," + base64.b64encode(PNG).decode()]
    assert "[image gone.png not shown to you: it could not be read]" in text(out.messages[1])
    assert "[image huge.png not shown to you: larger than 0.001 MB]" in text(out.messages[1])


async def test_an_image_discord_says_is_too_large_is_not_downloaded() -> None:
    window = (raw(1, "big.png", size=9 * 1024 * 1024),)
    messages, ids = history(*window)
    read_urls: list[str] = []

    async def read(url: str, max_bytes: int) -> bytes:
        read_urls.append(url)
        return b""

    settings = ContextSettings(image_transport="data_url")
    out = await with_images(messages, ids, window, settings, read, carriers=ids)

    assert read_urls == [] and urls(out.messages[1]) == []
    assert "larger than 8 MB" in text(out.messages[1])


async def test_downloads_run_together_and_stop_at_their_share_of_the_deadline() -> None:
    window = (raw(1, "a.png", "b.png", "c.png", size=0),)
    messages, ids = history(*window)
    started: list[str] = []
    all_started = asyncio.Event()

    async def read(url: str, max_bytes: int) -> bytes:
        started.append(url)
        if len(started) == 3:
            all_started.set()
        await all_started.wait()  # only ends once all three are under way: concurrency
        if url.endswith("a.png"):
            return PNG
        await asyncio.Event().wait()  # a host that never answers
        raise AssertionError("unreachable")

    settings = ContextSettings(image_transport="data_url")
    deadline = asyncio.get_running_loop().time() + 0.4
    began = time.monotonic()
    out = await with_images(messages, ids, window, settings, read, carriers=ids, deadline=deadline)

    assert time.monotonic() - began < 0.4  # half the time left: the model call keeps the rest
    assert len(out.sent) == 1 and len(urls(out.messages[1])) == 1
    assert text(out.messages[1]).count("it could not be read") == 2


async def test_a_bad_image_is_a_note_and_the_refused_messages_note_what_was_sent() -> None:
    window = (raw(1, "bad.png", "good.png"),)
    messages, ids = history(*window)
    bad = BadImages()
    bad.add([ImageRef(f"{CDN}/bad.png?ex=1&hm=2", "bad.png")])  # another signature, one file

    out = await with_images(messages, ids, window, ContextSettings(), carriers=ids, bad=bad)

    assert urls(out.messages[1]) == [f"{CDN}/good.png"]
    assert "[image bad.png not shown to you: the model could not read it]" in text(out.messages[1])
    assert out.refused is not None
    assert "[image good.png not shown to you: the model could not read it]" in text(out.refused[1])
    assert urls(out.refused[1]) == []


async def test_a_url_outside_discord_is_never_sent() -> None:
    images = (ImageRef("http://169.254.169.254/x.png", "x.png", "image/png"),)
    window = (RawMessage(1, 100, "Ann", "look", NOW, images=images),)
    messages, ids = history(*window)

    out = await with_images(messages, ids, window, ContextSettings(), carriers=ids)

    assert urls(out.messages[1]) == [] and out.sent == ()


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (PNG, "image/png"),
        (b"\xff\xd8\xff\xe0rest", "image/jpeg"),
        (b"GIF87a...", "image/gif"),
        (b"GIF89a...", "image/gif"),
        (b"RIFF\x00\x00\x00\x00WEBPVP8 ", "image/webp"),
        (b"<svg xmlns='http://www.w3.org/2000/svg'/>", None),
        (b"BM\x00\x00", None),
        (b"II*\x00", None),
        (b"\x00\x00\x00\x18ftypheic", None),
        (b"", None),
    ],
)
def test_data_urls_go_by_their_magic_bytes(data: bytes, kind: str | None) -> None:
    assert sniffed_type(data) == kind


@pytest.mark.parametrize(
    ("name", "content_type", "kind"),
    [
        ("a.png", "image/png", "image/png"),
        ("a.JPG", None, "image/jpeg"),
        ("a.webp", "image/webp", "image/webp"),
        ("a.gif", "image/gif", "image/gif"),
        ("a.svg", "image/svg+xml", None),
        ("a.png", "image/svg+xml", None),
        ("a.svg", "image/png", None),
        ("a.heic", "image/heic", None),
        ("a.tiff", None, None),
        ("a.bmp", "image/bmp", None),
        ("noextension", "image/jpeg", "image/jpeg"),
    ],
)
def test_urls_go_by_content_type_and_extension(
    name: str, content_type: str | None, kind: str | None
) -> None:
    assert declared_type(ImageRef(f"{CDN}/{name}?ex=1", name, content_type)) == kind


async def _asked(llm: ScriptedLLM) -> Exception | None:
    try:
        await complete_without_tools(
            openai_client(llm),
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            settings=LlmSettings(max_retries=0),
        )
    except LlmUnavailable as exc:
        return exc
    return None


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("You uploaded an unsupported image.", "invalid_image_format"),
        ("Invalid image.", None),
        ("Failed to load image_url: cannot identify image file", None),
        ("bad request", "image_parse_error"),
    ],
)
async def test_a_400_about_an_image_is_an_image_refusal(
    llm: ScriptedLLM, message: str, code: str | None
) -> None:
    llm.reply_error(400, message, code=code)
    assert isinstance(await _asked(llm), ImagesRefused)


async def test_a_400_about_something_else_is_no_image_refusal(llm: ScriptedLLM) -> None:
    llm.reply_error(400, "max_tokens is too large")
    found = await _asked(llm)
    assert isinstance(found, LlmUnavailable) and not isinstance(found, ImagesRefused)


def test_the_table_marks_the_hosted_vision_providers() -> None:
    vision = {name for name in ("openai", "azure", "anthropic", "gemini", "xai")}
    for name in ("openai", "azure", "anthropic", "gemini", "xai", "ollama", "generic", "vllm"):
        assert capabilities(name).vision is (name in vision), name
