"""OpenAI's BPE encodings from the files shipped in ``data/``, loaded once on first use.

tiktoken would download them at run time, which a machine without that host cannot do; the
files are tiktoken's own (data/README.md says where they came from), gzip-compressed and
checked against the hash tiktoken expects before use.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import threading
from dataclasses import dataclass
from importlib import resources
from typing import Final

import tiktoken

__all__ = ["ENCODINGS", "EncodingFile", "VendoredEncodingError", "load_encoding", "read_ranks"]


class VendoredEncodingError(RuntimeError):
    """A shipped encoding file is missing, corrupt or not the one tiktoken expects."""


@dataclass(frozen=True)
class EncodingFile:
    """One shipped encoding: its file, the sha256 of its text, how tiktoken builds it."""

    name: str
    file: str
    sha256: str  # tiktoken_ext/openai_public.py's expected_hash for the uncompressed file
    pat_str: str
    special_tokens: dict[str, int]


# pat_str and the special tokens as tiktoken_ext/openai_public.py (tiktoken 0.14.0) builds them;
# tests/unit/test_tokens.py checks them against the installed tiktoken's constructors.
_ENDOFTEXT = "<|endoftext|>"
_ENDOFPROMPT = "<|endofprompt|>"
ENCODINGS: Final[dict[str, EncodingFile]] = {
    "cl100k_base": EncodingFile(
        name="cl100k_base",
        file="cl100k_base.tiktoken.gz",
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pat_str=(
            r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++"""
            r"""[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
        ),
        special_tokens={
            _ENDOFTEXT: 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            _ENDOFPROMPT: 100276,
        },
    ),
    "o200k_base": EncodingFile(
        name="o200k_base",
        file="o200k_base.tiktoken.gz",
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str="|".join(
            [
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"""
                r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"""
                r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""\p{N}{1,3}""",
                r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
                r"""\s*[\r\n]+""",
                r"""\s+(?!\S)""",
                r"""\s+""",
            ]
        ),
        special_tokens={_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
    ),
}
"""The encodings shipped, by tiktoken's name."""

_lock = threading.Lock()
_loaded: dict[str, tiktoken.Encoding] = {}


def read_ranks(name: str) -> dict[bytes, int]:
    """The mergeable ranks of shipped encoding ``name``, its hash checked."""
    spec = ENCODINGS[name]
    try:
        packed = resources.files(__package__).joinpath("data", spec.file).read_bytes()
        text = gzip.decompress(packed)
    except (OSError, EOFError) as exc:
        raise VendoredEncodingError(f"{spec.file} cannot be read: {exc}") from exc
    if hashlib.sha256(text).hexdigest() != spec.sha256:
        raise VendoredEncodingError(f"{spec.file} is not the {name} file tiktoken expects")
    # The format tiktoken.load.load_tiktoken_bpe reads: "base64-token rank" per line. Read
    # here rather than through it, which would copy the file into a cache folder.
    return {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in text.splitlines() if line)
    }


def load_encoding(name: str) -> tiktoken.Encoding:
    """Shipped encoding ``name``, built on first use (0.3–1 s on 2 cores) and kept."""
    with _lock:
        encoding = _loaded.get(name)
        if encoding is None:
            spec = ENCODINGS[name]
            encoding = tiktoken.Encoding(
                spec.name,
                pat_str=spec.pat_str,
                mergeable_ranks=read_ranks(name),
                special_tokens=spec.special_tokens,
            )
            _loaded[name] = encoding
        return encoding
