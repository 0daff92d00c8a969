"""Environments for tests that run ``kioku`` (``python -m bot``) in a subprocess."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Settings a developer's shell may hold, which would leak into the bot under test.
OWN_VARIABLES = frozenset({"DISCORD_TOKEN", "DATABASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL"})


def kioku_env(data_dir: Path, **env: str) -> dict[str, str]:
    """This process's environment without any Kioku setting (``KIOKU_*`` and the
    variables SPEC names), with ``data_dir`` as the data folder, no ``.env`` file, the
    checkout importable, and ``env`` on top."""
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith("KIOKU_") and k not in OWN_VARIABLES
    }
    clean.update(
        PYTHONPATH=str(ROOT),
        KIOKU_DATA_DIR=str(data_dir),
        KIOKU_ENV_FILE=str(data_dir / "absent.env"),
    )
    clean.update(env)
    return clean
