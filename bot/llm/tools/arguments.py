"""Helpers shared by the tools' argument parsers: messages the model can act on."""

from __future__ import annotations

import json
from typing import Any

from bot.llm.tools.base import ToolArgumentError


def json_type(value: object) -> str:
    """The JSON name of a parsed value's type (for "expected a string, got …")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "string"


def quoted(names: list[str]) -> str:
    """``"a", "b"``: JSON-quoted (ASCII-safe), long names and long lists shortened."""
    shown = [name if len(name) <= 40 else name[:40] + "..." for name in names[:10]]
    text = ", ".join(json.dumps(name, ensure_ascii=True) for name in shown)
    return text if len(names) <= 10 else f"{text} and {len(names) - 10} more"


def reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for ``json.loads``: a key given twice is an error, not a
    silent "last one wins"."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ToolArgumentError(
                f"field {quoted([key])} appears more than once; give each field once", key
            )
        result[key] = value
    return result
