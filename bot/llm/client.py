"""The OpenAI-compatible client: one ``AsyncOpenAI`` per process, built from settings,
and the one place chat requests are sent (:func:`chat_completion`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import openai
from openai.types.chat import ChatCompletion

from bot.config import Settings
from bot.llm.roles import alternate_roles


def make_client(settings: Settings, *, max_retries: int | None = None) -> openai.AsyncOpenAI:
    """A client for the configured endpoint. Local servers need no key, so a placeholder
    stands in when ``OPENAI_API_KEY`` is unset (the ``openai`` client insists on one).

    A query in the base URL (Azure-style gateways' ``?api-version=…``) goes along with
    every request as ``default_query``: left in the base URL, the client would append
    ``/chat/completions`` after it and every request would miss the endpoint."""
    api_key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else "unset"
    base_url, query = _split_query(settings.llm_base_url)
    return openai.AsyncOpenAI(
        api_key=api_key,
        base_url=base_url,
        default_query=query or None,
        timeout=settings.llm.timeout_seconds,
        max_retries=settings.llm.max_retries if max_retries is None else max_retries,
    )


def _split_query(url: str) -> tuple[str, dict[str, str]]:
    """``url`` without its query, and the query's parameters (settings refuse a name
    given twice)."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit(parts._replace(query="")), query


async def chat_completion(
    api: openai.AsyncOpenAI, request: dict[str, Any], *, strict_roles: bool
) -> ChatCompletion:
    """Send one Chat Completions ``request`` (the keyword arguments of
    ``chat.completions.create``). With ``strict_roles`` (``Settings.strict_roles``) its
    messages go in the order strict chat templates accept (:func:`alternate_roles`);
    otherwise the request is sent exactly as given. Every chat request of the bot comes
    here: the tool loop's (turns, the summarizer) and ``kioku doctor``'s probe."""
    if strict_roles:
        request = {**request, "messages": alternate_roles(request["messages"])}
    completion: ChatCompletion = await api.chat.completions.create(**request)
    return completion
