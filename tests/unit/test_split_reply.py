"""Replies longer than Discord's limit are split into parts that each render correctly."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bot.cogs.replies import DISCORD_LIMIT, split_reply


def test_a_short_reply_is_one_part() -> None:
    assert split_reply("  hello  ") == ["hello"]


def test_prose_splits_at_paragraphs_within_the_limit() -> None:
    paragraphs = [f"Paragraph {i}. " + "word " * 150 for i in range(6)]
    parts = split_reply("\n\n".join(paragraphs))
    assert len(parts) > 1
    assert all(len(p) <= DISCORD_LIMIT for p in parts)
    assert all(p.startswith("Paragraph") for p in parts)
    assert " ".join(" ".join(parts).split()) == " ".join(" ".join(paragraphs).split())


def test_one_unbroken_word_is_cut_at_the_limit() -> None:
    parts = split_reply("x" * 4500)
    assert all(len(p) <= DISCORD_LIMIT for p in parts)
    assert "".join(parts) == "x" * 4500


def test_a_code_block_cut_in_two_is_closed_and_reopened_with_its_language() -> None:
    code = "\n".join(f"    value_{i} = compute({i})  # step {i}" for i in range(120))
    text = f"Here is the script:\n```python\n{code}\n```\nRun it twice."
    parts = split_reply(text)

    assert len(parts) >= 2
    assert all(len(p) <= DISCORD_LIMIT for p in parts)
    for part in parts:
        assert part.count("```") % 2 == 0, part[-80:]
    assert parts[0].endswith("\n```")
    assert all(p.startswith("```python\n") for p in parts[1:])
    # Indentation inside the block survives the cut.
    assert parts[1].splitlines()[1].startswith("    value_")
    rebuilt = [line for p in parts for line in p.splitlines() if not line.startswith("```")]
    assert [line for line in rebuilt if line.startswith("    value_")] == code.splitlines()
    assert parts[-1].endswith("Run it twice.")


@pytest.mark.parametrize("fence", ["```", "```js"])
def test_a_closed_block_before_the_cut_is_left_alone(fence: str) -> None:
    text = f"{fence}\nshort()\n```\n\n" + "prose " * 600
    parts = split_reply(text)
    assert parts[0].startswith(f"{fence}\nshort()\n```")
    assert all(not p.startswith("```") for p in parts[1:])
    assert all(p.count("```") % 2 == 0 for p in parts)


def test_a_hard_cut_does_not_split_a_grapheme_cluster() -> None:
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"  # 7 code points
    text = family * 600  # no whitespace: a hard cut
    parts = split_reply(text)
    assert "".join(parts) == text
    assert all(len(p) <= DISCORD_LIMIT for p in parts)
    assert all(part.startswith("\U0001f468") for part in parts), [p[:3] for p in parts]


def test_a_cut_inside_a_fence_opener_keeps_its_language() -> None:
    text = "a" * 1990 + "```python\nprint(1)\n```" + " b" * 100
    parts = split_reply(text)
    assert all("```pyt\n" not in part for part in parts), [p[-12:] for p in parts]
    assert parts[1].startswith("```python\nprint(1)"), parts[1][:20]


# A regression here loops forever inside the bot's event loop: each case runs in a
# child process with a deadline, so it fails instead of hanging the suite.
_PROBE = textwrap.dedent(
    """
    import random, sys
    sys.path.insert(0, {root!r})
    from bot.cogs.replies import split_reply
    texts = {texts!r}
    pieces = ["```", "```py", "\\n", " ", "a" * 40, "\\U0001F468\\u200D\\U0001F469", "x"]
    rng = random.Random(7)
    for _ in range(2000):
        texts.append("".join(rng.choice(pieces) for _ in range(rng.randint(1, 60))))
    for text in texts:
        for limit in ({limits}):
            parts = split_reply(text, limit)
            assert all(0 < len(p) <= limit for p in parts), (text, limit)
    print("ok")
    """
)


@pytest.mark.parametrize(
    ("texts", "limits"),
    [
        (["```" + "a" * 1200 + " " + "tail " * 600, "```" + "f" * 3000], "2000,"),
        ([], "20, 33, 60, 97"),
    ],
    ids=["fence-glued-to-a-long-word", "fences-and-emoji-at-small-limits"],
)
def test_splitting_always_ends_with_every_part_within_the_limit(
    texts: list[str], limits: str
) -> None:
    root = str(Path(__file__).resolve().parents[2])
    code = _PROBE.format(root=root, texts=texts, limits=limits)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr[-800:]
