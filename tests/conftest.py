"""Shared fixtures: each harness lives in its own module under tests/helpers/."""

pytest_plugins = [
    "tests.helpers.database",
    "tests.helpers.fake_llm",
    "tests.helpers.discord_harness",
    "tests.helpers.bot",
    "tests.helpers.fuzz",
]
