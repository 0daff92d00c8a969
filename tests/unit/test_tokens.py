"""Token counting: the shipped tiktoken encodings, the per-script estimate, calibration."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
from importlib import resources
from pathlib import Path

import pytest
import tiktoken.load
from tiktoken_ext import openai_public

from bot.llm.tokens import (
    ENCODINGS,
    IMAGE_TOKENS,
    MESSAGE_TOKENS,
    REPLY_TOKENS,
    Calibration,
    TokenCounter,
    VendoredEncodingError,
    encoding_for_model,
    estimate_tokens,
)
from bot.llm.tokens import encodings as shipped

SAMPLES = json.loads(
    (Path(__file__).parents[1] / "data" / "token_samples.json").read_text(encoding="utf-8")
)
CJK = ("japanese", "chinese", "korean")
# How far the estimate may be from cl100k_base: per CJK sample, per other sample, and over
# each whole set (docs/scaling.md reports the measured errors).
CJK_TOLERANCE = 0.12
SAMPLE_TOLERANCE = 0.15
SET_TOLERANCE = 0.05


def shipped_text(name: str) -> bytes:
    data = resources.files("bot.llm.tokens").joinpath("data", ENCODINGS[name].file)
    return gzip.decompress(data.read_bytes())


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_shipped_file_has_the_hash_tiktoken_expects(name: str) -> None:
    assert hashlib.sha256(shipped_text(name)).hexdigest() == ENCODINGS[name].sha256


def test_a_file_that_is_not_the_expected_one_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = dataclasses.replace(ENCODINGS["cl100k_base"], sha256="0" * 64)
    monkeypatch.setitem(shipped.ENCODINGS, "cl100k_base", wrong)
    with pytest.raises(VendoredEncodingError, match="not the cl100k_base file"):
        shipped.read_ranks("cl100k_base")


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_tiktoken_builds_the_same_encoding_from_the_shipped_file(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # tiktoken's own constructor, with its download answered by the shipped file: it must
    # ask for the hash we check, and build the pattern, special tokens and ranks we build.
    asked: list[str | None] = []

    def read_shipped(blobpath: str, expected_hash: str | None = None) -> bytes:
        asked.append(expected_hash)
        return shipped_text(name)

    monkeypatch.setattr(tiktoken.load, "read_file_cached", read_shipped)
    theirs = openai_public.ENCODING_CONSTRUCTORS[name]()
    ours = ENCODINGS[name]
    assert asked == [ours.sha256]
    assert theirs["pat_str"] == ours.pat_str
    assert theirs["special_tokens"] == ours.special_tokens
    assert theirs["mergeable_ranks"] == shipped.read_ranks(name)


# Published examples (OpenAI's cookbook "How to count tokens with tiktoken").
@pytest.mark.parametrize(
    ("text", "cl100k", "o200k"),
    [
        ("hello world", 2, 2),
        ("tiktoken is great!", 6, 6),
        ("antidisestablishmentarianism", 6, 6),
        ("2 + 2 = 4", 7, 7),
        ("お誕生日おめでとう", 9, 8),
    ],
)
def test_known_counts_of_the_shipped_encodings(text: str, cl100k: int, o200k: int) -> None:
    assert TokenCounter.for_encoding("cl100k_base").count(text) == cl100k
    assert TokenCounter.for_encoding("o200k_base").count(text) == o200k


def test_cl100k_gives_the_published_token_ids() -> None:
    encoding = shipped.load_encoding("cl100k_base")
    assert encoding.encode_ordinary("hello world") == [15339, 1917]
    assert encoding.encode_ordinary("tiktoken is great!") == [83, 1609, 5963, 374, 2294, 0]


def test_special_token_text_written_by_a_member_is_counted_as_text() -> None:
    assert TokenCounter.for_encoding("cl100k_base").count("<|endoftext|>") > 1


@pytest.mark.parametrize(
    ("model", "provider", "encoding"),
    [
        ("gpt-4", None, "cl100k_base"),
        ("gpt-3.5-turbo-0125", "openai", "cl100k_base"),
        ("gpt-4o-mini", "openai", "o200k_base"),
        ("gpt-4.1", "azure", "o200k_base"),
        ("gpt-5", "openai", "o200k_base"),
        ("o3-mini", "openai", "o200k_base"),
        ("openai/gpt-4o", "openrouter", "o200k_base"),
        ("gpt-oss:20b", "ollama", "o200k_base"),
        ("gpt-oss-120b", "vllm", "o200k_base"),
        # A local server's "gpt-4" is whatever model the operator aliased so.
        ("gpt-4", "localai", None),
        ("gpt-4o", "llama.cpp", None),
        ("qwen2.5:7b", "ollama", None),
        ("meta-llama/Llama-3.1-8B-Instruct", "vllm", None),
        ("mistral-large-latest", "mistral", None),
        ("text-davinci-003", "openai", None),  # p50k_base: not shipped
        ("", None, None),
    ],
)
def test_which_models_are_counted_exactly(
    model: str, provider: str | None, encoding: str | None
) -> None:
    assert encoding_for_model(model, provider) == encoding


def test_an_unknown_model_gets_the_estimate() -> None:
    counter = TokenCounter.for_model("qwen2.5-coder-1.5b-instruct", "llamacpp")
    text = SAMPLES["check"]["japanese"]
    assert not counter.exact
    assert counter.count(text) == estimate_tokens(text)


def test_for_model_keeps_one_counter_per_model_and_provider() -> None:
    first = TokenCounter.for_model("some-local-model", "llama.cpp")
    assert TokenCounter.for_model("some-local-model", "llamacpp") is first
    assert TokenCounter.for_model("some-local-model", "ollama") is not first


@pytest.mark.parametrize("name", CJK)
@pytest.mark.parametrize("group", ["fit", "check"])
def test_cjk_estimate_is_close_to_cl100k(group: str, name: str) -> None:
    text = SAMPLES[group][name]
    exact = TokenCounter.for_encoding("cl100k_base").count(text)
    assert estimate_tokens(text) == pytest.approx(exact, rel=CJK_TOLERANCE)
    # What the estimate replaces: characters / 4 counts CJK at a quarter or less.
    assert len(text) / 4 < exact / 3


@pytest.mark.parametrize("group", ["fit", "check"])
def test_estimate_is_close_to_cl100k_for_every_sample_and_overall(group: str) -> None:
    exact = TokenCounter.for_encoding("cl100k_base")
    texts = SAMPLES[group]
    far = {
        name: (estimate_tokens(text), exact.count(text))
        for name, text in texts.items()
        if abs(estimate_tokens(text) - exact.count(text)) > SAMPLE_TOLERANCE * exact.count(text)
    }
    assert far == {}
    estimated = sum(map(estimate_tokens, texts.values()))
    assert estimated == pytest.approx(sum(map(exact.count, texts.values())), rel=SET_TOLERANCE)


def test_estimate_of_nothing_is_zero_and_of_something_at_least_one() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens(" ") == 1
    assert estimate_tokens("\ud800 lone surrogate") > 0  # Discord text is not always valid


def test_count_messages_adds_framing_images_and_tools() -> None:
    counter = TokenCounter.for_encoding("cl100k_base")
    tools = [{"type": "function", "function": {"name": "remember", "parameters": {}}}]
    image = {"type": "image_url", "image_url": {"url": "https://example.org/cat.png"}}
    messages = [
        {"role": "system", "content": "hello world"},
        {"role": "user", "content": [{"type": "text", "text": "hello world"}, image]},
    ]
    assert counter.count_messages(messages) == REPLY_TOKENS + 2 * (MESSAGE_TOKENS + 2) + (
        IMAGE_TOKENS
    )
    schemas = counter.count(json.dumps(tools, ensure_ascii=False))
    assert counter.count_messages(messages, tools) == counter.count_messages(messages) + schemas


def test_count_messages_counts_tool_calls_and_their_results() -> None:
    counter = TokenCounter.for_encoding("cl100k_base")
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    bare = counter.count_messages([{"role": "assistant", "content": None}])
    with_calls = counter.count_messages(
        [{"role": "assistant", "content": None, "tool_calls": calls}]
    )
    assert with_calls == bare + counter.count(json.dumps(calls, ensure_ascii=False))
    result = counter.count_messages([{"role": "tool", "tool_call_id": "c1", "content": "done"}])
    assert result == REPLY_TOKENS + MESSAGE_TOKENS + counter.count("c1") + counter.count("done")


def test_calibration_converges_to_the_reported_ratio() -> None:
    calibration = Calibration()
    for _ in range(30):
        calibration.observe(1000, 1400)
    assert calibration.ratio == pytest.approx(1.4, abs=0.01)
    for _ in range(30):
        calibration.observe(1000, 800)
    assert calibration.ratio == pytest.approx(0.8, abs=0.01)


def test_calibration_is_clamped_and_one_outlier_moves_it_a_step() -> None:
    calibration = Calibration()
    for _ in range(50):
        calibration.observe(1000, 10_000)
    assert calibration.ratio == 2.5
    seen = []
    for _ in range(50):
        calibration.observe(1000, 1)
        seen.append(calibration.ratio)
    assert min(seen) >= 0.5
    assert seen[-1] == pytest.approx(0.5, abs=1e-3)
    steady = Calibration()
    for _ in range(20):
        steady.observe(1000, 1000)
    steady.observe(1000, 1_000_000)
    assert steady.ratio == pytest.approx(1.0 + 0.2 * (2.5 - 1.0))


def test_calibration_ignores_tiny_requests_and_missing_usage() -> None:
    calibration = Calibration()
    calibration.observe(10, 100)
    calibration.observe(1000, 0)
    assert (calibration.ratio, calibration.observations) == (1.0, 0)


def test_an_estimated_counter_scales_by_what_the_server_reported() -> None:
    counter = TokenCounter("calibration-test-model", None)
    messages = [{"role": "user", "content": SAMPLES["check"]["english"]}]
    unscaled = counter.count_messages(messages)
    for _ in range(30):
        # What the counter said each time, against a server counting 1.5 times as many.
        counter.observe(counter.count_messages(messages), round(unscaled * 1.5))
    assert counter.scale == pytest.approx(1.5, abs=0.02)
    assert counter.count_messages(messages) == pytest.approx(unscaled * 1.5, rel=0.02)


def test_an_exact_counter_is_not_rescaled_by_usage() -> None:
    counter = TokenCounter.for_encoding("cl100k_base")
    before = counter.count("hello world " * 50)
    counter.observe(before, before * 2)
    assert (counter.scale, counter.count("hello world " * 50)) == (1.0, before)
