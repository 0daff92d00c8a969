"""Category slugs (stable, ASCII, readable in any script) and admin input validation."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.memory.stm.categories import (
    CategoryDefinitionError,
    assign_slugs,
    parse_category_lines,
    slugify,
)
from bot.vocabulary.model import Category

SLUG_RE = re.compile(r"^[a-z][a-z0-9_]*$")


def parse_rows(rows: list[tuple[str, str]]) -> tuple[Category, ...]:
    """The categories typed as one ``label: description`` line per row."""
    return parse_category_lines(
        "\n".join(f"{label}:{text}" for label, text in rows), place="category"
    )


@pytest.mark.parametrize(
    ("label", "slug"),
    [
        pytest.param("Facts", "facts", id="simple"),
        pytest.param("Open threads", "open_threads", id="space"),
        pytest.param("  Open   threads  ", "open_threads", id="outer-and-inner-space"),
        pytest.param("Open threads / TODO!", "open_threads_todo", id="punctuation-runs"),
        pytest.param("Café Crème", "cafe_creme", id="accents-folded"),
        pytest.param("Ünïcödé—Tëst", "unicode_test", id="accents-and-dash"),
        pytest.param("Straße", "strasse", id="latin-sharp-s"),
        pytest.param("__init__", "init", id="underscores-trimmed"),
        pytest.param("42 things", "c_42_things", id="digit-prefix"),
        pytest.param("2024", "c_2024", id="only-digits"),
        pytest.param("日本語", "ri_ben_yu", id="japanese"),
        pytest.param("中文 notes", "zhong_wen_notes", id="mixed-han-latin"),
        pytest.param("Ελληνικά", "ellinika", id="greek"),
        pytest.param("Русский", "russkiy", id="cyrillic"),
        pytest.param("한국어", "han_gug_eo", id="korean"),
        pytest.param("🎉🎉", "tada_tada", id="emoji-only-named"),
        pytest.param("📌 Pinned facts", "pinned_facts", id="emoji-dropped-beside-text"),
        pytest.param("MyNotes", "mynotes", id="latin-camel-not-split"),
    ],
)
def test_slugify(label: str, slug: str) -> None:
    assert slugify(label) == slug


@pytest.mark.parametrize("label", ["★★", "!!!", "→", "※ ※"], ids=["stars", "bangs", "arrow", "ref"])
def test_slugify_falls_back_to_a_stable_hash(label: str) -> None:
    slug = slugify(label)
    assert re.fullmatch(r"category_[0-9a-f]{6}", slug)
    assert slugify(label) == slug
    assert slugify(f"  {label} ") == slug


def test_slugify_fallbacks_differ_between_labels() -> None:
    assert slugify("★★") != slugify("!!!")


@pytest.mark.parametrize("label", ["", " ", "\t\n "], ids=["empty", "space", "whitespace"])
def test_slugify_rejects_empty(label: str) -> None:
    with pytest.raises(ValueError, match="empty"):
        slugify(label)


def test_slugify_cuts_at_48_without_trailing_underscore() -> None:
    assert slugify("x" * 60) == "x" * 48
    cut = slugify("a" * 47 + " b")  # the cut falls right after the separator
    assert cut == "a" * 47
    assert len(slugify("word " * 20)) <= 48
    assert not slugify("word " * 20).endswith("_")


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1).filter(lambda s: s.strip() != ""))
def test_slug_properties(label: str) -> None:
    slug = slugify(label)
    assert len(slug) <= 48
    assert SLUG_RE.fullmatch(slug), slug
    assert slugify(label) == slug


@pytest.mark.parametrize(
    ("labels", "slugs"),
    [
        pytest.param(["A", "B"], ["a", "b"], id="distinct"),
        pytest.param(["Facts", "facts", "FACTS"], ["facts", "facts_2", "facts_3"], id="case"),
        pytest.param(["Café", "Cafe"], ["cafe", "cafe_2"], id="accent-collision"),
        pytest.param(["a", "a", "a_2"], ["a", "a_3", "a_2"], id="natural-slug-kept"),
        pytest.param([], [], id="none"),
    ],
)
def test_assign_slugs(labels: list[str], slugs: list[str]) -> None:
    assert assign_slugs(labels) == slugs


def test_assign_slugs_five_identical_labels() -> None:
    slugs = assign_slugs(["Notes"] * 5)
    assert slugs == ["notes", "notes_2", "notes_3", "notes_4", "notes_5"]
    assert assign_slugs(["Notes"] * 5) == slugs


def test_assign_slugs_five_identical_long_labels_stay_within_48() -> None:
    slugs = assign_slugs(["y" * 60] * 5)
    assert len(set(slugs)) == 5
    assert all(len(slug) <= 48 and SLUG_RE.fullmatch(slug) for slug in slugs)
    assert slugs[1] == "y" * 46 + "_2"


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["a", "A", "a_2", "ä", "★", "x" * 50, "日本"]), max_size=8))
def test_assign_slugs_always_unique(labels: list[str]) -> None:
    slugs = assign_slugs(labels)
    assert len(set(slugs)) == len(labels)
    assert all(len(slug) <= 48 and SLUG_RE.fullmatch(slug) for slug in slugs)


def test_parse_category_rows() -> None:
    categories = parse_rows(
        [("  Facts ", " Durable facts. "), ("Open threads", "Questions still pending")]
    )
    assert categories == (
        Category(position=0, slug="facts", label="Facts", description="Durable facts."),
        Category(
            position=1,
            slug="open_threads",
            label="Open threads",
            description="Questions still pending",
        ),
    )


def test_parse_category_definitions_same_slug_different_labels() -> None:
    categories = parse_rows([("Café", "one"), ("Cafe!", "two")])
    assert [c.slug for c in categories] == ["cafe", "cafe_2"]


def test_parse_category_definitions_limits_are_inclusive() -> None:
    categories = parse_rows([("L" * 40, "D" * 200)] + [(str(i), "d") for i in range(4)])
    assert len(categories) == 5
    assert [c.position for c in categories] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    ("rows", "fragment"),
    [
        pytest.param([], "at least one category", id="no-rows"),
        pytest.param(
            [(f"L{i}", "d") for i in range(6)], "too many categories (6, at most 5)", id="six"
        ),
        pytest.param([("  ", "d")], "category 1: the label is empty", id="blank-label"),
        pytest.param(
            [("a", "d"), ("b", " ")], "category 2: the description is empty", id="blank-desc"
        ),
        pytest.param(
            [("L" * 41, "d")], "label is too long (41 characters, at most 40)", id="long-label"
        ),
        pytest.param(
            [("a", "D" * 201)],
            "description is too long (201 characters, at most 200)",
            id="long-desc",
        ),
        pytest.param(
            [("Facts", "a"), ("FACTS", "b")],
            "category 2: the label 'FACTS' is already used by category 1",
            id="dup-case",
        ),
        pytest.param(
            [("Fa\x07cts", "a")], "label contains a control character (U+0007)", id="bell-label"
        ),
        pytest.param(
            [("Facts", "bell\x07here")],
            "description contains a control character (U+0007)",
            id="bell-desc",
        ),
        pytest.param([("Facts", "x\x00")], "control character (U+0000)", id="nul"),
        pytest.param([("Facts", "x\ud800")], "control character (U+D800)", id="surrogate"),
    ],
)
def test_parse_category_definitions_rejects(rows: list[tuple[str, str]], fragment: str) -> None:
    with pytest.raises(CategoryDefinitionError) as caught:
        parse_rows(rows)
    assert fragment in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_parse_category_definitions_reports_every_problem() -> None:
    with pytest.raises(CategoryDefinitionError) as caught:
        parse_rows([("", "d"), ("b", "")])
    assert caught.value.problems == (
        "category 1: the label is empty",
        "category 2: the description is empty",
    )


def test_parse_category_lines() -> None:
    text = "Facts: durable facts: names, dates\n\n  \r\nOpen threads :  pending questions  \n"
    categories = parse_category_lines(text)
    assert [(c.position, c.slug, c.label, c.description) for c in categories] == [
        (0, "facts", "Facts", "durable facts: names, dates"),
        (1, "open_threads", "Open threads", "pending questions"),
    ]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        pytest.param(
            "Facts: ok\n\nno colon here", "line 3: expected 'label: description'", id="no-colon"
        ),
        pytest.param("", "at least one category", id="empty"),
        pytest.param("\n \n", "at least one category", id="blank-lines"),
        pytest.param(
            "Facts: a\nfacts: b", "line 2: the label 'facts' is already used by line 1", id="dup"
        ),
        pytest.param(": orphan", "line 1: the label is empty", id="empty-label"),
        pytest.param("\nFacts:", "line 2: the description is empty", id="empty-desc"),
        pytest.param("\n".join(f"L{i}: d" for i in range(6)), "too many categories", id="six"),
        pytest.param("Facts: a\x0bb", "control character (U+000B)", id="vertical-tab"),
    ],
)
def test_parse_category_lines_rejects(text: str, fragment: str) -> None:
    with pytest.raises(CategoryDefinitionError) as caught:
        parse_category_lines(text)
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    ("label", "description", "stored_label", "stored_description"),
    [
        ("{evil}", "what {user_name} decided", "evil", "what {user_name} decided"),
        ("Dec\u202eisions", "what\u200b was decided", "Decisions", "what was decided"),
        (
            "Keys",
            "the deploy token is ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "Keys",
            "the deploy token is [REDACTED:github_token]",
        ),
    ],
    ids=["placeholders", "invisible-characters", "secret"],
)
def test_labels_and_descriptions_are_sanitized_like_memory_text(
    label: str, description: str, stored_label: str, stored_description: str
) -> None:
    (category,) = parse_rows([(label, description)])
    assert (category.label, category.description) == (stored_label, stored_description)


def test_a_label_of_nothing_but_unsafe_content_is_refused() -> None:
    with pytest.raises(CategoryDefinitionError, match="label is empty after removing unsafe"):
        parse_rows([("\u200b\u202e", "a description")])


@pytest.mark.parametrize(
    "line",
    [
        "password: Hunter2-Zq9vXw",
        '"password": "Tr0ub4dor-77x"',
        "postgres://admin:S3cr3tPw-991@db.example.com/app",
        "lbl password: Hunter2-Zq9vXw: d",
    ],
)
def test_a_secret_with_a_colon_in_a_modal_line_is_not_split_past_redaction(line: str) -> None:
    (category,) = parse_category_lines(line)
    stored = f"{category.label}:{category.description}"
    for secret in ("Hunter2-Zq9vXw", "Tr0ub4dor-77x", "S3cr3tPw-991"):
        assert secret not in stored


@pytest.mark.parametrize(
    "line",
    [
        "postgres://admin:letmein@db.example.com/app is the staging db",
        "redis://:letmein@cache.example.com:6379 for sessions",
    ],
)
def test_a_row_starting_with_a_url_keeps_none_of_its_password(line: str) -> None:
    # The row's first colon is the URL's: its password is not a plain word of the
    # description to keep.
    (category,) = parse_category_lines(line)
    assert "letmein" not in f"{category.label}:{category.description}"


@pytest.mark.parametrize(
    ("line", "label", "description"),
    [
        (
            "Password: reset requests and who handled them",
            "Password",
            "reset requests and who handled them",
        ),
        ("Token: who holds the deploy token", "Token", "who holds the deploy token"),
        ("Authorization: who may approve what", "Authorization", "who may approve what"),
        (
            "Deploy: token=ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "Deploy",
            "token=[REDACTED:github_token]",
        ),
        (
            "Docs: https://admin:S3cr3tPw-991@db.example.com/app",
            "Docs",
            "https://[REDACTED:url_credentials]@db.example.com/app",
        ),
    ],
    ids=["password-label", "token-label", "authorization-label", "token", "url-credentials"],
)
def test_a_modal_line_is_split_before_its_halves_are_sanitized(
    line: str, label: str, description: str
) -> None:
    (category,) = parse_category_lines(line)
    assert (category.label, category.description) == (label, description)
