"""Images a turn sends, hardened (issue "Hardening", items 1 and 2): only Discord's own
CDN and media proxy are fetched or handed to the provider; downloads run together inside
the turn's deadline; only PNG, JPEG, WEBP and GIF go as images; an image the provider
refuses is dropped for the retry and never sent again; and only the message answered and
its reply chain carry image parts.

The real bot on dpytest and the scripted model; the fake CDN records what it was asked.
"""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import pytest

from tests.helpers.bot import KiokuHarness
from tests.helpers.chat_world import KiokuStarter
from tests.helpers.fake_llm import ScriptedLLM

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 64
GIF = b"GIF89a" + b"\x00" * 64
WEBP = b"RIFF\x40\x00\x00\x00WEBPVP8 " + b"\x00" * 64
DATA_URL = {"context": {"image_transport": "data_url"}}


def image_urls(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [p["image_url"]["url"] for p in content if p.get("type") == "image_url"]


def all_image_urls(llm: ScriptedLLM, i: int = -1) -> list[str]:
    return [url for m in llm.messages(i) for url in image_urls(m)]


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if p.get("type") == "text")
    return str(content or "")


def image_embed(url: str, proxy_url: str | None = None) -> dict[str, Any]:
    """A posted image link as Discord (or a webhook, or another bot) shows it."""
    return {"type": "image", "url": url, "thumbnail": {"url": url, "proxy_url": proxy_url or url}}


# ------------------------------------------------------------------------------- 1. SSRF

INSIDE_LINKS = [
    "http://127.0.0.1:9/latest/meta-data/x.png",
    "http://169.254.169.254/latest/meta-data/iam.png",
    "http://[::ffff:127.0.0.1]/x.png",
    "https://images.example/redirects-inside.png",
]


@pytest.mark.parametrize("url", INSIDE_LINKS)
async def test_an_embed_link_outside_discord_is_never_downloaded(
    llm: ScriptedLLM, kioku_with: KiokuStarter, url: str
) -> None:
    async with kioku_with(settings=DATA_URL) as kioku:
        llm.reply_text("A link.")
        await kioku.env.send("look", mention_bot=True, embeds=[image_embed(url)])
        assert kioku.env.cdn_asked == []
        assert all_image_urls(llm) == []
        assert kioku.env.last_sent().message.content == "A link."


@pytest.mark.parametrize("url", INSIDE_LINKS)
async def test_an_embed_link_outside_discord_is_never_handed_to_the_provider(
    kioku: KiokuHarness, url: str
) -> None:
    kioku.llm.reply_text("A link.")
    await kioku.env.send("look", mention_bot=True, embeds=[image_embed(url)])
    assert all_image_urls(kioku.llm) == []


async def test_an_embed_goes_as_discords_proxied_copy_not_its_original_link(
    kioku: KiokuHarness,
) -> None:
    original = "http://169.254.169.254/sunset.jpg"
    proxied = "https://images-ext-1.discordapp.net/external/abc/http/169.254.169.254/sunset.jpg"
    kioku.llm.reply_text("A sunset.")
    await kioku.env.send(original, mention_bot=True, embeds=[image_embed(original, proxied)])
    assert all_image_urls(kioku.llm) == [proxied]


# --------------------------------------------------------------- deadline and concurrency


async def test_image_downloads_run_together_inside_the_turns_deadline(
    llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    settings = {**DATA_URL, "llm": {"turn_timeout_seconds": 2}}
    async with kioku_with(settings=settings) as kioku:
        files = [("a.png", PNG), ("b.png", PNG), ("c.png", PNG)]
        kioku.env.cdn_stalled.update({"b.png", "c.png"})
        llm.reply_text("Seen one.")
        began = time.monotonic()
        async with asyncio.timeout(6):
            await kioku.env.send("three", mention_bot=True, attachments=files)
        elapsed = time.monotonic() - began

        assert kioku.env.last_sent().message.content == "Seen one."
        assert elapsed < 2.5, elapsed
        assert len(kioku.env.cdn_asked) == 3
        expected = "data:image/png;base64," + base64.b64encode(PNG).decode()
        assert all_image_urls(llm) == [expected]
        text = text_of(llm.messages()[-1])
        assert "[image b.png not shown to you: it could not be read]" in text
        assert "[image c.png not shown to you: it could not be read]" in text


# --------------------------------------------------------------------------- 2. formats


async def test_only_png_jpeg_webp_and_gif_attachments_go_as_images(
    llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with kioku_with(
        settings={"context": {"images_per_message": 10, "images_per_turn": 10}}
    ) as kioku:
        sendable = [("a.png", PNG), ("b.jpg", JPEG), ("c.webp", WEBP), ("d.gif", GIF)]
        others = [("e.svg", b"<svg/>"), ("f.heic", b"x"), ("g.tiff", b"x"), ("h.bmp", b"BM")]
        llm.reply_text("Four.")
        await kioku.env.send("pictures", mention_bot=True, attachments=sendable + others)
        names = [url.rsplit("/", 1)[-1] for url in all_image_urls(llm)]
        assert names == ["a.png", "b.jpg", "c.webp", "d.gif"]
        text = text_of(llm.messages()[-1])
        for name, _ in others:
            assert f"[image {name} not shown to you: not a PNG, JPEG, WEBP or GIF image]" in text


async def test_a_data_url_is_sent_by_its_bytes_kind_and_non_image_bytes_are_a_note(
    llm: ScriptedLLM, kioku_with: KiokuStarter
) -> None:
    async with kioku_with(settings=DATA_URL) as kioku:
        llm.reply_text("One.")
        await kioku.env.send(
            "pictures",
            mention_bot=True,
            attachments=[("evil.png", b"<html>not an image</html>"), ("photo.png", JPEG)],
        )
        assert all_image_urls(llm) == ["data:image/jpeg;base64," + base64.b64encode(JPEG).decode()]
        text = text_of(llm.messages()[-1])
        assert "[image evil.png not shown to you: not a PNG, JPEG, WEBP or GIF image]" in text


# ------------------------------------------------------------------- a refused image


async def test_an_image_the_provider_refuses_is_dropped_and_never_sent_again(
    kioku: KiokuHarness,
) -> None:
    llm, env = kioku.llm, kioku.env
    llm.reply_error(
        400,
        "You uploaded an unsupported image. Please make sure your image is valid.",
        code="invalid_image_format",
    )
    llm.reply_text("I could not see the picture.")
    posted = await env.send("what is this?", mention_bot=True, attachments=[("evil.png", PNG)])

    assert env.last_sent().message.content == "I could not see the picture."
    assert len(llm.requests) == 2
    assert all_image_urls(llm, 0) == [posted.attachments[0].url]
    assert all_image_urls(llm, 1) == []
    assert "[image evil.png not shown to you: the model could not read it]" in text_of(
        llm.messages(1)[-1]
    )

    other = await env.create_member("bob")
    llm.reply_text("Still cannot.")
    await env.send("and now?", author=other, reply_to=posted, mention_bot=True)
    assert len(llm.requests) == 3
    assert all_image_urls(llm) == []
    assert env.last_sent().message.content == "Still cannot."


# ------------------------------------------------------------------- later turns


async def test_a_later_turn_sends_no_earlier_image_unless_it_replies_to_it(
    kioku: KiokuHarness,
) -> None:
    llm, env = kioku.llm, kioku.env
    llm.reply_text("A cat.")
    posted = await env.send("my cat", mention_bot=True, attachments=[("cat.png", PNG)])
    assert all_image_urls(llm) == [posted.attachments[0].url]

    other = await env.create_member("bob")
    llm.reply_text("Hello.")
    await env.send("hello", author=other, mention_bot=True)
    assert all_image_urls(llm) == []
    assert "[image: cat.png]" in "\n".join(text_of(m) for m in llm.messages())

    llm.reply_text("Still a cat.")
    await env.send("what was it?", author=other, reply_to=posted, mention_bot=True)
    assert all_image_urls(llm) == [posted.attachments[0].url]
