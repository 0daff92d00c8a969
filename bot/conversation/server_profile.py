"""A server's own persona and model (``/kioku persona``, ``/kioku model``): checking
what an admin gives, and what a turn of that server uses."""

from __future__ import annotations

from bot.config import Settings
from bot.vocabulary import GuildConfig, sanitize_value

SERVER_PERSONA_HEADING = "How this server's admins want you to act here:"


class PersonaRefused(ValueError):
    """The persona an admin gave cannot be stored; the message says why, for them."""


def clean_persona(text: str, max_chars: int) -> str:
    """``text`` sanitized as a memory value is (control characters, secrets, unknown
    placeholders), refused when empty or longer than ``max_chars`` once sanitized."""
    # A limit past the text's own length: a persona over the cap is refused, never cut.
    cleaned = sanitize_value(text, limit=2 * len(text) + 64).strip()
    if not cleaned:
        raise PersonaRefused("The persona is empty. Give some text, or use `/kioku persona clear`.")
    if len(cleaned) > max_chars:
        raise PersonaRefused(
            f"The persona is {len(cleaned)} characters; at most {max_chars} are allowed."
        )
    return cleaned


def server_model(settings: Settings, config: GuildConfig) -> str:
    """The model for the server's turns and summaries: its choice while the operator
    still allows it (the list may have changed since), else the default ``model``."""
    if config.model is not None and config.model in settings.server_models:
        return config.model
    return settings.model


def with_server_persona(persona: str, server_persona: str | None) -> str:
    """The operator's (rendered) persona, followed by the server's when it has one: the
    operator's rules stay first, the server's text adds to them."""
    if not server_persona:
        return persona
    return f"{persona}\n\n{SERVER_PERSONA_HEADING}\n{server_persona}"
