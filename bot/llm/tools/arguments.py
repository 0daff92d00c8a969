"""Helpers shared by the tools' argument parsers: messages the model can act on."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
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
    """``json.loads``'s ``object_pairs_hook``: a key given twice is an error, not "last wins"."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ToolArgumentError(
                f"field {quoted([key])} appears more than once; give each field once", key
            )
        result[key] = value
    return result


def utf8_size(text: str) -> int:
    """Bytes of ``text`` in UTF-8 (lone surrogates, which JSON escapes allow, counted too)."""
    return len(text.encode("utf-8", "surrogatepass"))


def load_object(raw: str | None, example: str, *, max_bytes: int, shorter: str) -> dict[str, Any]:
    """The model's raw arguments as a JSON object, or a ``ToolArgumentError`` showing ``example``.

    ``shorter`` tells the model how to fit under ``max_bytes``."""
    if raw is None or not raw.strip():
        raise ToolArgumentError(f"no arguments were given; send a JSON object like {example}")
    size = utf8_size(raw)
    if size > max_bytes:
        raise ToolArgumentError(
            f"arguments are too large ({size} bytes, at most {max_bytes}); {shorter}"
        )
    try:
        value = json.loads(raw, object_pairs_hook=reject_duplicate_keys)
    except json.JSONDecodeError as exc:
        # Ending inside the JSON is what a reply cut at the token limit looks like.
        if exc.pos >= len(raw.rstrip()) or exc.msg.startswith("Unterminated string"):
            raise ToolArgumentError(
                "arguments are truncated JSON (the text ends before the JSON is complete); "
                f"send one complete JSON object like {example}"
            ) from None
        raise ToolArgumentError(
            f"arguments are not valid JSON ({exc.msg} at line {exc.lineno} column "
            f"{exc.colno}); send one JSON object like {example}"
        ) from None
    except ToolArgumentError:
        raise
    except RecursionError:
        raise ToolArgumentError(
            f"arguments are nested too deeply; send one flat JSON object like {example}"
        ) from None
    except ValueError as exc:  # e.g. an integer literal with thousands of digits
        raise ToolArgumentError(
            f"arguments are not usable JSON ({exc}); send one JSON object like {example}"
        ) from None
    if not isinstance(value, dict):
        raise ToolArgumentError(
            f"arguments must be a JSON object, got a JSON {json_type(value)}; "
            f"send one JSON object like {example}"
        )
    return value


def unexpected_fields(extra: Sequence[str], allowed: Sequence[str]) -> str:
    """The message for fields ``extra`` a tool that takes only ``allowed`` was given."""
    plural = "s" if len(extra) > 1 else ""
    return (
        f"unexpected field{plural} {quoted(list(extra))}; this tool takes only "
        f"{quoted(list(allowed))}"
    )


def reject_unexpected(payload: Collection[str], allowed: Sequence[str]) -> None:
    """Raise ``ToolArgumentError`` if ``payload`` has fields other than ``allowed``."""
    extra = [key for key in payload if key not in allowed]
    if extra:
        raise ToolArgumentError(unexpected_fields(extra, allowed), extra[0])


def require_string(
    field: str, value: object, *, null_hint: str = "", surrogate_detail: str = ""
) -> str:
    """``value`` if it is text, else a ``ToolArgumentError`` naming ``field``.

    ``null_hint`` is added for a JSON null, ``surrogate_detail`` for a lone surrogate."""
    name = quoted([field])
    if not isinstance(value, str):
        hint = null_hint if value is None else ""
        raise ToolArgumentError(
            f"field {name} must be a string, got {json_type(value)}{hint}", field
        )
    if any("\ud800" <= char <= "\udfff" for char in value):  # JSON escapes allow them
        raise ToolArgumentError(
            f"field {name} contains a lone surrogate (an unpaired \\ud800-\\udfff escape)"
            f"{surrogate_detail}; send plain text",
            field,
        )
    return value
