"""The summarizer tests' fixtures: settings whose model calls fail fast, a memory service, the
summarizer on the scripted LLM."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from bot.config import Settings
from bot.conversation.summarizer import Summarizer
from bot.db.engine import Database
from bot.memory.service import MemoryService
from tests.helpers.builders import make_service
from tests.helpers.database import make_test_settings
from tests.helpers.fake_llm import ScriptedLLM, openai_client


@pytest.fixture
def quick_settings(pg_url: URL, tmp_path: Path) -> Settings:
    """Test settings whose model calls fail fast (no client retries)."""
    return make_test_settings(
        pg_url, tmp_path, model="test-model", llm={"max_retries": 0, "timeout_seconds": 5}
    )


@pytest.fixture
def service(db: Database, quick_settings: Settings) -> MemoryService:
    return make_service(db.sessions, quick_settings)


@pytest.fixture
def summarizer(service: MemoryService, llm: ScriptedLLM, quick_settings: Settings) -> Summarizer:
    return Summarizer(service, openai_client(llm), quick_settings)
