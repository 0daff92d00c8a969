"""Unknown prompt placeholders lose their braces; braces that are no placeholder stay."""

from __future__ import annotations

import pytest

from bot.vocabulary.sanitize import PROMPT_PLACEHOLDERS, sanitize_value, strip_unknown_placeholders


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("{user_name} likes tea", "{user_name} likes tea", id="allowed"),
        pytest.param("{date} at {time}", "{date} at {time}", id="allowed_two"),
        pytest.param("{evil}", "evil", id="single"),
        pytest.param("{{evil}}", "evil", id="double"),
        pytest.param("{{{evil}}}", "evil", id="triple"),
        pytest.param("{0}", "{0}", id="positional"),  # a number: a regex quantifier, no placeholder
        pytest.param("{USER_NAME}", "USER_NAME", id="case_sensitive"),
        pytest.param("{user_name2}", "user_name2", id="longer_name"),
        # Decision: an allowed name keeps exactly one pair of braces (the form the prompt fills).
        pytest.param("{{user_name}}", "{user_name}", id="allowed_double"),
        pytest.param("{{{bot_name}}}", "{bot_name}", id="allowed_triple"),
        pytest.param("{user_name}{evil}", "{user_name}evil", id="mixed"),
        # Nesting would create a new placeholder; all non-allowed braces go instead.
        pytest.param("{a{b}c}", "abc", id="nested"),
        pytest.param("{a{b}{user_name}c}", "{ab{user_name}c}", id="nested_allowed"),
        # No unknown placeholder in there.
        pytest.param("{a{user_name}c}", "{a{user_name}c}", id="allowed_inside_braces"),
        # Replacement fields with access, conversion or format spec are placeholders too.
        # Only a bare identifier is a placeholder: access, conversion or spec is not one.
        pytest.param("{x.y}", "{x.y}", id="attribute"),
        pytest.param("{x!r}", "{x!r}", id="conversion"),
        pytest.param("{x:>10}", "{x:>10}", id="format_spec"),
        pytest.param("{0[0]}", "{0[0]}", id="index"),
        pytest.param("{a.b[0]!s:^8}", "{a.b[0]!s:^8}", id="everything"),
        pytest.param("{d:%Y-%m-%d}", "{d:%Y-%m-%d}", id="date_spec"),
        pytest.param("{!r} {:>10}", "{!r} {:>10}", id="auto_numbered"),
        pytest.param("{{x.y}}", "{{x.y}}", id="double_attribute"),
        # Only an allowed name written plainly survives.
        pytest.param("{user_name!r}", "{user_name!r}", id="allowed_conversion"),
        pytest.param("{user_name.__class__}", "{user_name.__class__}", id="allowed_attribute"),
        pytest.param("{user_name:>10}", "{user_name:>10}", id="allowed_format_spec"),
        # Jinja/Mustache style: double braces padded with spaces stay (SPEC §3).
        pytest.param("{{ x }}", "{{ x }}", id="jinja"),
        pytest.param("Hi {{ name }}!", "Hi {{ name }}!", id="jinja_in_prose"),
        pytest.param("{{ user_name }}", "{{ user_name }}", id="jinja_allowed"),
        pytest.param("{{user_name }}", "{{user_name }}", id="jinja_allowed_trailing_space"),
        pytest.param("{{ x.y }}", "{{ x.y }}", id="jinja_attribute"),
        # LaTeX groups, regex quantifiers and code spans keep their braces.
        pytest.param("\\frac{a}{b} {c}", "\\frac{a}{b} c", id="latex"),
        pytest.param("x^{n} a_{ij}", "x^{n} a_{ij}", id="latex_scripts"),
        pytest.param("\\d{4} a{2,3}", "\\d{4} a{2,3}", id="regex_quantifiers"),
        pytest.param("`{x}` {y}", "`{x}` y", id="code_span"),
        # Not placeholders (prose or code in braces): kept.
        pytest.param("{ x }", "{ x }", id="spaces"),
        pytest.param('{"a": 1}', '{"a": 1}', id="json"),
        pytest.param("{a: 1, b: 2}", "{a: 1, b: 2}", id="object_literal"),
        pytest.param("function() { return 1; }", "function() { return 1; }", id="js_function"),
        pytest.param("if (x) { y(); }", "if (x) { y(); }", id="js_block"),
        pytest.param("{{ two words }}", "{{ two words }}", id="jinja_two_words"),
        pytest.param("{}", "{}", id="empty"),
        pytest.param("{evil", "{evil", id="unclosed"),
        pytest.param("evil}", "evil}", id="unopened"),
        pytest.param("no braces", "no braces", id="none"),
    ],
)
def test_unknown_placeholders_lose_their_braces(text: str, expected: str) -> None:
    assert strip_unknown_placeholders(text) == expected
    assert strip_unknown_placeholders(expected) == expected


def test_the_allowed_set_can_be_overridden() -> None:
    assert "bot_name" in PROMPT_PLACEHOLDERS
    allowed = frozenset({"foo"})
    assert strip_unknown_placeholders("{foo} {user_name}", allowed) == "{foo} user_name"
    assert strip_unknown_placeholders("{foo} {x}", frozenset()) == "foo x"
    assert sanitize_value("{foo} {user_name}", allowed=allowed) == "{foo} user_name"


@pytest.mark.parametrize(
    ("text", "hidden"),
    [
        ("sk-{x}abcdefghij1234567890KLMN", "abcdefghij1234567890KLMN"),
        ("<{private}>my diary", "my diary"),
        ("pass{word}: hunter2", "hunter2"),
    ],
    ids=["token_joined", "private_tag_joined", "key_joined"],
)
def test_stripping_braces_cannot_unhide_a_secret(text: str, hidden: str) -> None:
    assert hidden not in sanitize_value(text)
    assert "[REDACTED:" in sanitize_value(text)
