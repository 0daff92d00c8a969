"""The access decision, the server persona's checks and the server model's choice."""

from __future__ import annotations

import pytest

from bot.config import load_settings
from bot.config.files import SettingsError
from bot.conversation.access import refusal
from bot.conversation.server_profile import (
    SERVER_PERSONA_HEADING,
    PersonaRefused,
    clean_persona,
    server_model,
    with_server_persona,
)
from bot.vocabulary.model import GuildAccess, GuildConfig

USER, OTHER, ROLE, OTHER_ROLE = 10, 11, 20, 21


def decide(
    access: GuildAccess | None,
    *,
    user: int = USER,
    roles: tuple[int, ...] = (),
    owner: bool = False,
    dms: bool = True,
) -> str | None:
    return refusal(access, user_id=user, role_ids=roles, owner=owner, direct_messages=dms)


def test_a_server_without_lists_answers_everyone() -> None:
    assert decide(GuildAccess()) is None
    assert decide(GuildAccess(), roles=(ROLE,)) is None


def test_a_blocked_user_or_role_is_refused() -> None:
    assert decide(GuildAccess(blocked_users=frozenset({USER}))) == "blocked_user"
    assert decide(GuildAccess(blocked_roles=frozenset({ROLE})), roles=(ROLE,)) == "blocked_role"
    assert decide(GuildAccess(blocked_roles=frozenset({ROLE})), roles=(OTHER_ROLE,)) is None
    assert decide(GuildAccess(blocked_users=frozenset({OTHER}))) is None


def test_with_an_allow_list_only_those_on_it_pass() -> None:
    by_role = GuildAccess(allowed_roles=frozenset({ROLE}))
    assert decide(by_role, roles=(ROLE,)) is None
    assert decide(by_role, roles=(OTHER_ROLE,)) == "not_allowed"
    assert decide(by_role) == "not_allowed"
    by_user = GuildAccess(allowed_users=frozenset({USER}))
    assert decide(by_user) is None
    assert decide(by_user, user=OTHER) == "not_allowed"


def test_a_block_beats_an_allow() -> None:
    user_both = GuildAccess(allowed_users=frozenset({USER}), blocked_users=frozenset({USER}))
    assert decide(user_both) == "blocked_user"
    allowed_user_blocked_role = GuildAccess(
        allowed_users=frozenset({USER}), blocked_roles=frozenset({ROLE})
    )
    assert decide(allowed_user_blocked_role, roles=(ROLE,)) == "blocked_role"
    allowed_role_blocked_user = GuildAccess(
        allowed_roles=frozenset({ROLE}), blocked_users=frozenset({USER})
    )
    assert decide(allowed_role_blocked_user, roles=(ROLE,)) == "blocked_user"


def test_owners_always_pass() -> None:
    everything = GuildAccess(
        allowed_roles=frozenset({OTHER_ROLE}),
        blocked_users=frozenset({USER}),
        blocked_roles=frozenset({ROLE}),
    )
    assert decide(everything, roles=(ROLE,), owner=True) is None
    assert decide(None, dms=False, owner=True) is None


def test_dms_follow_the_operators_switch_not_any_servers_lists() -> None:
    assert decide(None) is None
    assert decide(None, dms=False) == "direct_messages_off"


# ----------------------------------------------------------------- persona


def test_a_persona_is_sanitized_like_a_memory() -> None:
    token = "ghp_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5"
    text = f"Speak like a pirate\x00 to {{user_name}}. {{secret_var}} Use {token} for GitHub."
    cleaned = clean_persona(text, 1500)
    assert "\x00" not in cleaned
    assert "{user_name}" in cleaned  # the prompt's own placeholders stay
    assert "{secret_var}" not in cleaned and "secret_var" in cleaned
    assert token not in cleaned and "[REDACTED:" in cleaned


def test_a_persona_over_the_cap_is_refused_not_cut() -> None:
    assert clean_persona("x" * 100, 100) == "x" * 100
    with pytest.raises(PersonaRefused, match="101 characters; at most 100 are allowed"):
        clean_persona("x" * 101, 100)


def test_an_empty_persona_is_refused() -> None:
    with pytest.raises(PersonaRefused, match="empty"):
        clean_persona(" \x00\u200b ", 100)


def test_the_server_persona_follows_the_operators() -> None:
    assert with_server_persona("Operator rules.", None) == "Operator rules."
    combined = with_server_persona("Operator rules.", "Be a pirate.")
    assert combined.index("Operator rules.") < combined.index(SERVER_PERSONA_HEADING)
    assert combined.endswith("Be a pirate.")


# ------------------------------------------------------------------- model


def test_the_server_model_is_used_only_while_the_operator_allows_it() -> None:
    settings = load_settings(model="base", servers={"allowed_models": ["big", "small"]})
    assert settings.server_models == ("base", "big", "small")
    assert server_model(settings, GuildConfig(guild_id=1)) == "base"
    assert server_model(settings, GuildConfig(guild_id=1, model="big")) == "big"
    # Taken off the list since it was chosen: the default again.
    assert server_model(settings, GuildConfig(guild_id=1, model="gone")) == "base"


@pytest.mark.parametrize(
    ("models", "message"),
    [([" "], "must not be blank"), (["a", "a"], "lists a more than once")],
)
def test_bad_allowed_models_stop_start_up(models: list[str], message: str) -> None:
    with pytest.raises((SettingsError, ValueError), match=message):
        load_settings(servers={"allowed_models": models})


def test_the_persona_cap_is_bounded() -> None:
    with pytest.raises((SettingsError, ValueError), match="persona_max_chars"):
        load_settings(servers={"persona_max_chars": 10})
