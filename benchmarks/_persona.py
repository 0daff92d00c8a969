"""The persona template the bot reads, for benchmarks that build a bot's prompt themselves."""

from __future__ import annotations

from pathlib import Path

from bot.config import Settings
from bot.conversation.turn import load_persona

ROOT = Path(__file__).resolve().parents[1]


def bot_persona(settings: Settings) -> str:
    """The template of ``settings.persona_file``, found in the checkout when the working
    folder is elsewhere."""
    path = settings.persona_file
    if not path.is_absolute() and not path.exists():
        path = ROOT / path
    return load_persona(path)
