"""The ``update_short_term_memory`` tool: its per-guild schema and argument parsing.

The schema depends on the guild's configuration (SPEC §3): summary mode takes one
``summary`` string; category mode takes one optional string per category slug (at least
one). Parsing validates the model's raw JSON and raises ``ToolArgumentError`` with a
message the model can act on; it never truncates or sanitizes (``memory.service`` does,
to 1500 characters, before storing). So the schema states no ``maxLength``: longer text
is cut, not refused (servers that check arguments against the schema, as Groq does,
would refuse the whole call); the limit is in the description instead. Likewise NUL and
other control characters are the sanitizer's to strip, not a reason to refuse.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bot.llm import (
    ToolArgumentError,
    ToolOutcome,
    load_object,
    quoted,
    require_string,
    unexpected_fields,
    utf8_size,
)
from bot.memory import MemoryService, TurnState
from bot.vocabulary import MAX_VALUE_CHARS as STM_VALUE_MAX_CHARS
from bot.vocabulary import SUMMARY_SLUG, Category, GuildConfig

STM_TOOL_NAME = "update_short_term_memory"
MAX_RAW_ARGUMENT_BYTES = 64 * 1024
MAX_VALUE_BYTES = 64 * 1024

DEFAULT_TOOL_DESCRIPTION = (
    "Silently update your short-term memory of this conversation. The user never sees "
    "this call; do not mention it. What you send REPLACES the running summary, so write "
    "the complete, current memory: durable facts, decisions made, preferences stated, and "
    "open threads or questions still pending. Drop small talk and anything no longer true. "
    f"Keep each value under {STM_VALUE_MAX_CHARS} characters (longer text is cut). "
    "Call it at most once per turn, ideally after answering."
)

_SUMMARY_PROPERTY_DESCRIPTION = (
    "The complete new summary of this conversation (replaces the previous one)."
)
_CATEGORY_SUFFIX = " Omit to keep its current value; an empty string clears it."
# In each property, so that it holds under a guild's own tool description too.
_LIMIT_NOTE = f" At most {STM_VALUE_MAX_CHARS} characters; longer text is cut."


@dataclass(frozen=True)
class StmUpdate:
    """What the model asked to store.

    Summary mode: ``summary`` is set, ``categories`` is ``None``. Category mode:
    ``categories`` holds only the slugs the model gave (``""`` clears that one) and
    ``summary`` is ``None``.
    """

    summary: str | None = None
    categories: dict[str, str] | None = None


def _summary_description(config: GuildConfig) -> str:
    # A guild whose only category is ``summary`` is in summary mode: use its wording.
    if len(config.categories) == 1 and config.categories[0].description.strip():
        described = f"{config.categories[0].description.strip()} (replaces the previous summary)"
        return described + _LIMIT_NOTE
    return _SUMMARY_PROPERTY_DESCRIPTION + _LIMIT_NOTE


def _category_description(category: Category) -> str:
    return f"{category.label}: {category.description}{_CATEGORY_SUFFIX}{_LIMIT_NOTE}"


def stm_tool_definition(config: GuildConfig) -> dict[str, Any]:
    """The Chat Completions tool definition for ``config``'s guild."""
    parameters: dict[str, Any]
    if not config.category_mode:
        parameters = {
            "type": "object",
            "properties": {
                SUMMARY_SLUG: {
                    "type": "string",
                    "description": _summary_description(config),
                }
            },
            "required": [SUMMARY_SLUG],
            "additionalProperties": False,
        }
    else:
        ordered = sorted(config.categories, key=lambda category: category.position)
        parameters = {
            "type": "object",
            "properties": {
                category.slug: {
                    "type": "string",
                    "description": _category_description(category),
                }
                for category in ordered
            },
            "minProperties": 1,
            "additionalProperties": False,
        }
    override = config.tool_description_override
    description = override.strip() if override and override.strip() else DEFAULT_TOOL_DESCRIPTION
    return {
        "type": "function",
        "function": {
            "name": STM_TOOL_NAME,
            "description": description,
            "parameters": parameters,
        },
    }


def _example(config: GuildConfig) -> str:
    if not config.category_mode:
        return '{"summary": "..."}'
    slug = sorted(config.categories, key=lambda category: category.position)[0].slug
    return json.dumps({slug: "..."})


def _load_object(raw: str | None, config: GuildConfig) -> dict[str, Any]:
    return load_object(
        raw,
        _example(config),
        max_bytes=MAX_RAW_ARGUMENT_BYTES,
        shorter=f"send only the memory text, each value under {STM_VALUE_MAX_CHARS} characters",
    )


def _check_text(field: str, value: object) -> str:
    """``value`` as a string, or ToolArgumentError naming ``field``'s problem."""
    value = require_string(
        field,
        value,
        null_hint='; use "" to clear it' if field != SUMMARY_SLUG else "",
        surrogate_detail=", which is not valid Unicode",
    )
    name = quoted([field])
    size = utf8_size(value)
    if size > MAX_VALUE_BYTES:
        raise ToolArgumentError(
            f"field {name} is too large ({size} bytes); keep it under "
            f"{STM_VALUE_MAX_CHARS} characters",
            field,
        )
    return value


def _parse_summary(payload: dict[str, Any]) -> StmUpdate:
    problems: list[str] = []
    extra = sorted(key for key in payload if key != SUMMARY_SLUG)
    if SUMMARY_SLUG not in payload:
        problems.append('missing required field "summary" (the new summary text, a string)')
    if extra:
        problems.append(unexpected_fields(extra, [SUMMARY_SLUG]))
    if problems:
        field = extra[0] if extra and SUMMARY_SLUG in payload else SUMMARY_SLUG
        raise ToolArgumentError("; ".join(problems), field)
    summary = _check_text(SUMMARY_SLUG, payload[SUMMARY_SLUG])
    if not summary.strip():
        raise ToolArgumentError(
            'field "summary" is empty; an empty memory is not accepted: give the new summary '
            "text (the whole running summary, durable facts and open threads included)",
            SUMMARY_SLUG,
        )
    return StmUpdate(summary=summary)


def _parse_categories(payload: dict[str, Any], config: GuildConfig) -> StmUpdate:
    valid = [c.slug for c in sorted(config.categories, key=lambda category: category.position)]
    if not payload:
        raise ToolArgumentError(
            f"no categories given; send at least one of {quoted(valid)} as a string"
        )
    unknown = [key for key in payload if key not in valid]
    if unknown:
        plural = "s" if len(unknown) > 1 else ""
        raise ToolArgumentError(
            f"unknown field{plural} {quoted(unknown)}; the valid categories are {quoted(valid)}",
            unknown[0],
        )
    # All given values may be "" (clearing those categories); the memory service refuses
    # an update that would leave no category with a value.
    categories = {slug: _check_text(slug, value) for slug, value in payload.items()}
    return StmUpdate(categories=categories)


def parse_stm_arguments(raw: str | None, config: GuildConfig) -> StmUpdate:
    """Validate the model's raw JSON arguments for ``config``'s guild.

    Raises ``ToolArgumentError`` (and nothing else) with a message naming the field,
    the problem and what is expected. Values are returned as given (not truncated).
    """
    payload = _load_object(raw, config)
    if not config.category_mode:
        return _parse_summary(payload)
    return _parse_categories(payload, config)


async def run_stm_tool(
    service: MemoryService, turn: TurnState, raw_arguments: str | None
) -> ToolOutcome:
    """Execute one call of the tool for ``turn``: guards, parsing, then the memory
    service's write path. The outcome's text is exactly what the model reads:
    ``saved``, ``saved, pending sync`` or ``rejected: <reason>``."""
    reason = turn.stm_block_reason()
    if reason is not None:
        return ToolOutcome.error(f"rejected: {reason}")
    try:
        update = parse_stm_arguments(raw_arguments, turn.config)
    except ToolArgumentError as exc:
        return ToolOutcome.error(f"rejected: {exc}")
    result = await service.update_stm(turn, summary=update.summary, categories=update.categories)
    return ToolOutcome(str(result), ok=result.ok)
