"""scripts/update_token_rules.py: the rule file it writes reads back as what it selected."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "update_token_rules", ROOT / "scripts/update_token_rules.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rendering_the_shipped_rules_reads_back_the_same() -> None:
    script = load_script()
    shipped = tomllib.loads(script.OUT.read_text("utf-8"))["rules"]
    rendered = script.render(shipped, "0" * 40)
    assert tomllib.loads(rendered)["rules"] == shipped
    assert f"commit {'0' * 40}" in rendered


def test_selection_keeps_shipped_and_distinctive_rules_only() -> None:
    script = load_script()
    upstream = [
        {"id": "generic-api-key", "regex": r"(?i)[\w.-]{0,50}?(?:key)=(\S+)", "keywords": ["key"]},
        {"id": "acme-token", "regex": r"\b(acme_[a-z0-9]{32})\b", "keywords": ["acme_"]},
        {"id": "acme-context", "regex": r"(?i)[\w.-]{0,50}?(?:acme)=(\S+)", "keywords": ["acme"]},
        {"id": "kept-before", "regex": r"(?i)[\w.-]{0,50}?(?:x)=(\S+)", "keywords": ["x"]},
        {"id": "paths-only", "path": r"\.p12$"},
    ]
    chosen = [rule["id"] for rule in script.select(upstream, {"kept-before"})]
    assert chosen == ["acme-token", "kept-before"]
