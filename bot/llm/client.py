"""The OpenAI-compatible client: one ``AsyncOpenAI`` per process, built from settings."""

from __future__ import annotations

import openai

from bot.config import Settings


def make_client(settings: Settings, *, max_retries: int | None = None) -> openai.AsyncOpenAI:
    """A client for the configured endpoint. Local servers need no key, so a placeholder
    stands in when ``OPENAI_API_KEY`` is unset (the ``openai`` client insists on one)."""
    api_key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else "unset"
    return openai.AsyncOpenAI(
        api_key=api_key,
        base_url=settings.llm_base_url,
        timeout=settings.llm.timeout_seconds,
        max_retries=settings.llm.max_retries if max_retries is None else max_retries,
    )
