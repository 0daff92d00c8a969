"""One face for counting prompt tokens: the model's tokenizer where known, else a calibrated
estimate."""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import tiktoken

from bot.llm.tokens.calibration import Calibration
from bot.llm.tokens.encodings import ENCODINGS, load_encoding
from bot.llm.tokens.estimate import estimate_tokens
from bot.vocabulary import capabilities

__all__ = [
    "IMAGE_TOKENS",
    "MESSAGE_TOKENS",
    "REPLY_TOKENS",
    "TokenCounter",
    "encoding_for_model",
]

MESSAGE_TOKENS: Final = 4
"""A message's framing in the chat template (role and delimiters: OpenAI's 3, ChatML's 4–5)."""
REPLY_TOKENS: Final = 3
"""The assistant turn the template opens for the answer."""
IMAGE_TOKENS: Final = 765
"""An image part, at a fixed cost: OpenAI's for a 1024×1024 image at high detail (local vision
models spend hundreds too); what the server reports calibrates estimated counters."""

# These serve open weights the operator loaded, whatever the model is called (LocalAI and
# LiteLLM setups often alias a local model as "gpt-4"): only gpt-oss's name is believed.
_LOCAL_SERVERS: Final = frozenset({"ollama", "vllm", "lmstudio", "llamacpp", "localai"})
_OPEN_WEIGHTS_ENCODING: Final = "o200k_harmony"
# o200k_harmony is o200k_base's ranks and pattern with more special tokens, never counted here.
_SAME_RANKS: Final = {_OPEN_WEIGHTS_ENCODING: "o200k_base"}
_CACHE_CHARS: Final = 4_000_000
_MAX_COUNTERS: Final = 256


def encoding_for_model(model: str, provider: str | None = None) -> str | None:
    """The shipped encoding that tokenizes ``model`` as served by ``provider``, or None."""
    name = model.strip().lower().rsplit("/", 1)[-1]  # "openai/gpt-4o" on a router
    found: str | None = None
    for candidate in (name, name.replace(":", "-")):  # Ollama's tags: "gpt-oss:20b"
        try:
            found = tiktoken.encoding_name_for_model(candidate)
            break
        except KeyError:
            continue
    if found is None:
        return None
    local = provider is not None and capabilities(provider).name in _LOCAL_SERVERS
    if local and found != _OPEN_WEIGHTS_ENCODING:
        return None
    found = _SAME_RANKS.get(found, found)
    return found if found in ENCODINGS else None


class _CountCache:
    """Counts of texts seen, newest kept within a bound of characters.

    A turn's prompt repeats most of the last one's texts (persona, memory, the window), so
    counting it again costs a lookup per message.
    """

    def __init__(self, count: Callable[[str], int], max_chars: int = _CACHE_CHARS) -> None:
        self._count = count
        self._max_chars = max_chars
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def __call__(self, text: str) -> int:
        with self._lock:
            known = self._counts.get(text)
            if known is not None:
                self._counts.move_to_end(text)
                return known
        counted = self._count(text)
        if len(text) <= self._max_chars // 16:  # one huge text would evict all the others
            with self._lock:
                if text not in self._counts:
                    self._counts[text] = counted
                    self._chars += len(text)
                while self._chars > self._max_chars:
                    dropped, _ = self._counts.popitem(last=False)
                    self._chars -= len(dropped)
        return counted


def _encoded_length(name: str) -> Callable[[str], int]:
    def count(text: str) -> int:
        # Ordinary text: "<|endoftext|>" written by a member is text, not a special token.
        return len(load_encoding(name).encode_ordinary(text))

    return count


_registry_lock = threading.Lock()
_counters: OrderedDict[tuple[str, str | None], TokenCounter] = OrderedDict()
_exact_counts: dict[str, _CountCache] = {}
_estimated_counts = _CountCache(estimate_tokens)


def _exact_count(name: str) -> _CountCache:
    with _registry_lock:
        cache = _exact_counts.get(name)
        if cache is None:
            cache = _exact_counts[name] = _CountCache(_encoded_length(name))
        return cache


class TokenCounter:
    """Prompt tokens for one model: exact with its tokenizer, else estimated and calibrated."""

    def __init__(self, model: str, encoding: str | None) -> None:
        self.model = model
        self.encoding = encoding
        """The shipped tiktoken encoding counting exactly, or None: estimated."""
        self.calibration = Calibration()
        self._raw = _exact_count(encoding) if encoding is not None else _estimated_counts

    @classmethod
    def for_model(cls, model: str, provider: str | None = None) -> TokenCounter:
        """The counter of ``model`` served by ``provider``, one per pair so calibration lasts."""
        key = (model.strip(), capabilities(provider).name if provider is not None else None)
        with _registry_lock:
            counter = _counters.get(key)
            if counter is not None:
                _counters.move_to_end(key)
                return counter
        counter = cls(key[0], encoding_for_model(model, provider))
        with _registry_lock:
            counter = _counters.setdefault(key, counter)
            while len(_counters) > _MAX_COUNTERS:
                _counters.popitem(last=False)
        return counter

    @classmethod
    def for_encoding(cls, name: str) -> TokenCounter:
        """A counter with shipped encoding ``name`` (``"cl100k_base"``), whatever the model."""
        if name not in ENCODINGS:
            raise KeyError(f"{name!r} is not shipped; shipped: {', '.join(sorted(ENCODINGS))}")
        return cls(name, name)

    @property
    def exact(self) -> bool:
        """Whether counts come from the model's own tokenizer."""
        return self.encoding is not None

    @property
    def scale(self) -> float:
        """What estimates are multiplied by: 1 for exact counts, else the calibrated ratio."""
        return 1.0 if self.encoding is not None else self.calibration.ratio

    def warm(self) -> None:
        """Load the tokenizer now (it loads on first use otherwise)."""
        if self.encoding is not None:
            load_encoding(self.encoding)

    def count(self, text: str) -> int:
        """Tokens of ``text``."""
        return self._scaled(self._raw(text)) if text else 0

    def count_messages(
        self,
        messages: Iterable[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> int:
        """Prompt tokens of a chat request: its messages, their framing, and ``tools``' schemas."""
        total = REPLY_TOKENS
        for message in messages:
            total += MESSAGE_TOKENS + self._content(message.get("content"))
            for field in ("name", "tool_call_id"):
                if isinstance(message.get(field), str):
                    total += self._raw(message[field])
            if message.get("tool_calls"):
                total += self._raw(json.dumps(message["tool_calls"], ensure_ascii=False))
        if tools:
            total += self._raw(json.dumps(list(tools), ensure_ascii=False))
        return self._scaled(total)

    def observe(self, estimated: int, reported: int) -> None:
        """Calibrate from one request: what ``count_messages`` gave, and the server's
        ``prompt_tokens``; exact counters take their tokenizer's word and ignore it."""
        if self.encoding is None:
            self.calibration.observe(estimated / self.scale, reported)

    def _content(self, content: object) -> int:
        if isinstance(content, str):
            return self._raw(content) if content else 0
        if not isinstance(content, list):
            return 0
        total = 0
        for part in content:
            if not isinstance(part, Mapping):
                continue
            if part.get("type") == "image_url":
                total += IMAGE_TOKENS
            elif isinstance(part.get("text"), str):
                total += self._raw(part["text"])
        return total

    def _scaled(self, tokens: int) -> int:
        return tokens if self.encoding is not None else math.ceil(tokens * self.scale)

    def __repr__(self) -> str:
        how = self.encoding or f"estimated ×{self.scale:.2f}"
        return f"TokenCounter({self.model!r}, {how})"
