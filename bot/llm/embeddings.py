"""Embeddings from an OpenAI-compatible ``/v1/embeddings`` endpoint, for recall's vector side.

Best effort: an endpoint that is down, slow or answers nonsense costs recall its vector
ranking for a while (``embeddings.retry_after_seconds``), never a turn. One log line
says so per outage.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence

import openai
from cachetools import LRUCache

from bot.config import Settings

__all__ = ["Embedder", "Vector"]

log = logging.getLogger(__name__)

Vector = list[float]
# Recent texts' vectors: a turn's query is often asked again (edits, retries, the same
# question in a thread).
CACHED_VECTORS = 2_048


class Embedder:
    """Turns texts into vectors through the configured endpoint (or says it cannot)."""

    def __init__(self, settings: Settings, client: openai.AsyncOpenAI | None = None) -> None:
        self.settings = settings.embeddings
        base_url = settings.embeddings_base_url
        self._client = client
        if client is None and base_url is not None:
            key = self.settings.api_key or settings.openai_api_key
            self._client = openai.AsyncOpenAI(
                api_key=key.get_secret_value() if key else "unset",
                base_url=base_url,
                timeout=self.settings.timeout_seconds,
                max_retries=0,  # a turn waits for a query's vector: no retry loop
            )
        self.model = self.settings.model
        self._down_until = 0.0
        self._cache: LRUCache[str, Vector] = LRUCache(maxsize=CACHED_VECTORS)

    @property
    def enabled(self) -> bool:
        """Configured, and not resting after a failure."""
        return self._client is not None and time.monotonic() >= self._down_until

    @property
    def configured(self) -> bool:
        return self._client is not None

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()

    async def embed(self, texts: Sequence[str]) -> list[Vector] | None:
        """One vector per text, in order; None when embeddings are off or failed."""
        if not texts or not self.enabled or self._client is None:
            return None
        missing = sorted({text for text in texts if text not in self._cache})
        if missing:
            try:
                answer = await self._client.embeddings.create(model=self.model, input=missing)
                vectors = [list(item.embedding) for item in answer.data]
                if len(vectors) != len(missing) or not _usable(vectors):
                    raise ValueError("the answer did not hold one usable vector per text")
            except (openai.OpenAIError, ValueError, TypeError) as exc:
                self._rest(exc)
                return None
            for text, vector in zip(missing, vectors, strict=True):
                self._cache[text] = vector
        return [self._cache[text] for text in texts]

    def _rest(self, exc: BaseException) -> None:
        if time.monotonic() >= self._down_until:
            log.warning(
                "embeddings endpoint failed (%s): recall uses full-text search only for %.0f s",
                type(exc).__name__,
                self.settings.retry_after_seconds,
            )
        self._down_until = time.monotonic() + self.settings.retry_after_seconds


def _usable(vectors: Sequence[Vector]) -> bool:
    """Every vector the same non-zero size, with finite numbers."""
    sizes = {len(vector) for vector in vectors}
    return (
        len(sizes) == 1
        and 0 not in sizes
        and all(math.isfinite(x) for vector in vectors for x in vector)
    )
