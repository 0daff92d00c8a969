"""Prompt tokens counted: tiktoken's encodings for OpenAI models, else a calibrated estimate.

counter      TokenCounter.for_model: count, count_messages, observe (calibration)
encodings    the shipped cl100k_base and o200k_base files, hash-checked, loaded on first use
estimate     a per-script estimate shaped after cl100k_base (CJK at a token or more a character)
calibration  the bounded running ratio of reported to estimated tokens
"""

from bot.llm.tokens.calibration import Calibration
from bot.llm.tokens.counter import (
    IMAGE_TOKENS,
    MESSAGE_TOKENS,
    REPLY_TOKENS,
    TokenCounter,
    encoding_for_model,
)
from bot.llm.tokens.encodings import ENCODINGS, VendoredEncodingError
from bot.llm.tokens.estimate import estimate_tokens

__all__ = [
    "ENCODINGS",
    "IMAGE_TOKENS",
    "MESSAGE_TOKENS",
    "REPLY_TOKENS",
    "Calibration",
    "TokenCounter",
    "VendoredEncodingError",
    "encoding_for_model",
    "estimate_tokens",
]
