"""A bad setting as one clear line per key: the key (and its variable), the value
(secrets hidden, URLs without their credentials), what is allowed.

Pydantic's own ``ValidationError`` names model classes and internal locations; the
operator wrote a TOML key or an environment variable, and is told about that.

The models' fields say what is allowed, and the settings' sources where an unknown key
came from: both are read from :mod:`bot.config` when a line is written, not when this
module is imported, because ``load_settings`` there imports this module.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import typing
from collections.abc import Mapping
from typing import Any, Literal

import annotated_types
from pydantic import AliasChoices, BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from bot.urls import without_credentials

_TOP_LEVEL_ENV = {
    "discord_token": "DISCORD_TOKEN",
    "DISCORD_TOKEN": "DISCORD_TOKEN",
    "database_url": "DATABASE_URL",
    "DATABASE_URL": "DATABASE_URL",
    "openai_api_key": "OPENAI_API_KEY",
    "OPENAI_API_KEY": "OPENAI_API_KEY",
    "openai_base_url": "OPENAI_BASE_URL",
    "OPENAI_BASE_URL": "OPENAI_BASE_URL",
}
_SECRET_KEYS = {"discord_token", "openai_api_key"}


def format_validation_error(exc: ValidationError) -> str:
    """One line per bad key: the key (and its variable), the value, what is allowed."""
    from bot.config import SECTIONS

    lines = []
    for error in exc.errors():
        # A list item's index is no variable (there is no KIOKU_OWNER_IDS__1): it is
        # named as "item N of" the list's variable.
        item = next((part for part in error["loc"] if isinstance(part, int)), None)
        loc = [str(part) for part in error["loc"] if not isinstance(part, int)]
        if error["type"] == COMBINATION_ERROR:
            lines.append(_combination_line(loc, error.get("ctx") or {}))
            continue
        key = ".".join(loc) if loc else "?"
        if error["type"] == "extra_forbidden":
            # Unknown variables were caught before; an unknown key is the TOML file's.
            lines.append(_unknown_key_line(loc))
            continue
        env = _TOP_LEVEL_ENV.get(loc[0]) if len(loc) == 1 else None
        if env is None:
            env = "KIOKU_" + "__".join(part.upper() for part in loc)
        key = key if loc[0] not in _TOP_LEVEL_ENV else env.lower()
        value = error.get("input")
        shown = "<hidden>" if key in _SECRET_KEYS else _short_repr(value)
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "model_type" and len(loc) == 1 and loc[0] in SECTIONS:
            # Pydantic's words name the class ("instance of StmSettings"), not the file.
            message = (
                f"must be a section: [{loc[0]}] in the TOML file, or a JSON object in {env} "
                f"(or single keys as {env}__<NAME>)"
            )
        allowed = _allowed_for(loc) if item is None else None
        hint = f" (allowed: {allowed})" if allowed else ""
        where = env if item is None else f"item {item + 1} of {env}"
        lines.append(f"invalid setting {key} ({where}) = {shown}: {message}{hint}")
    return "\n".join(lines)


def _unknown_key_line(loc: list[str]) -> str:
    from bot.config import SECTIONS, Settings, config_file_path

    known = [
        f"{name}.{inner}" if inner else name
        for name, field in Settings.model_fields.items()
        if not isinstance(field.validation_alias, AliasChoices)
        for inner in (
            field.annotation.model_fields
            if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
            else [""]
        )
    ]
    # A misspelt [section] is one unknown key too: its name is a candidate as well.
    known += SECTIONS
    key = ".".join(loc)
    guess = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    hint = f": did you mean {guess[0]}?" if guess else ""
    return f"unknown key {key} in {_section_variable(loc) or config_file_path()}{hint}"


def _section_variable(loc: list[str]) -> str | None:
    """``KIOKU_STM (the environment)`` when the unknown key came from a whole section set
    as JSON (``KIOKU_STM={…}``), in the environment or the ``.env`` file; ``None`` when
    it came from the TOML file (sections are merged, so the key is looked for)."""
    from bot.config import SECTIONS, env_file_path, env_file_values

    if len(loc) < 2 or loc[0] not in SECTIONS:
        return None
    variable = f"KIOKU_{loc[0].upper()}"
    sources: list[tuple[str, Mapping[str, str | None]]] = [
        ("the environment", os.environ),
        (str(env_file_path()), env_file_values()),
    ]
    for where, values in sources:
        # Names are matched case-insensitively, as pydantic-settings reads them.
        raw = next((v for k, v in values.items() if k.upper() == variable), None)
        try:
            section = json.loads(raw) if raw else None
        except ValueError:
            continue
        if isinstance(section, dict) and loc[1] in section:
            return f"{variable} ({where})"
    return None


COMBINATION_ERROR = "settings_combination"


def combination_error(
    smaller: str, smaller_value: Any, larger: str, larger_value: Any, larger_as: str = ""
) -> PydanticCustomError:
    """Two values fine alone but not together (see :func:`_combination_line`); ``larger_as``
    restates the larger value in the smaller one's unit when they differ."""
    return PydanticCustomError(
        COMBINATION_ERROR,
        "{smaller} must not exceed {larger}",
        {
            "smaller": smaller,
            "larger": larger,
            "smaller_value": smaller_value,
            "larger_value": larger_value,
            "larger_as": larger_as,
        },
    )


def _combination_line(section: list[str], ctx: dict[str, Any]) -> str:
    """Two keys that are fine alone but not together: name both, with their values."""

    def named(field: str) -> str:
        loc = [*section, field]
        return f"{'.'.join(loc)} ({'KIOKU_' + '__'.join(part.upper() for part in loc)})"

    smaller, larger = str(ctx["smaller"]), str(ctx["larger"])
    larger_as = f" ({ctx['larger_as']})" if ctx.get("larger_as") else ""
    return (
        f"invalid setting {named(smaller)} = {ctx['smaller_value']!r}: "
        f"must not exceed {named(larger)} = {ctx['larger_value']!r}{larger_as}"
    )


_NOT_JSON = re.compile(r'error parsing value for field "(?P<field>\w+)"')


def not_json_line(exc: Exception) -> str:
    """The line for a list or section variable that is not JSON (pydantic-settings' own
    error names neither the variable nor what it must be)."""
    found = _NOT_JSON.search(str(exc))
    field = found.group("field") if found else "?"
    variable = f"KIOKU_{field.upper()}"
    value = os.environ.get(variable)
    shown = f" = {_short_repr(value)}" if value is not None else ""
    example = (
        "a JSON list, e.g. [123456789012345678]"
        if field == "owner_ids"
        else f"a JSON object (or set single keys as {variable}__<NAME>)"
    )
    return f"invalid setting {field} ({variable}){shown}: must be {example}"


def _short_repr(value: Any) -> str:
    text = without_credentials(repr(value))
    return text if len(text) <= 80 else text[:77] + "..."


def _allowed_for(loc: list[str]) -> str | None:
    """Describe the allowed values of the field at ``loc`` from its type and constraints."""
    from bot.config import Settings

    model: type[BaseModel] = Settings
    field: FieldInfo | None = None
    for part in loc:
        fields = model.model_fields
        field = fields.get(part) or next(
            (f for f in fields.values() if _alias_matches(f, part)), None
        )
        if field is None:
            return None
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
    if field is None:
        return None
    return _describe(field)


def _alias_matches(field: FieldInfo, name: str) -> bool:
    alias = field.validation_alias
    return isinstance(alias, AliasChoices) and name in alias.choices


def _describe(field: FieldInfo) -> str | None:
    annotation = field.annotation
    if typing.get_origin(annotation) is Literal:
        return " | ".join(repr(choice) for choice in typing.get_args(annotation))
    lower: object = None
    upper: object = None
    strict_lower = False
    for meta in field.metadata:
        if isinstance(meta, annotated_types.Ge):
            lower = meta.ge
        elif isinstance(meta, annotated_types.Gt):
            lower, strict_lower = meta.gt, True
        elif isinstance(meta, annotated_types.Le):
            upper = meta.le
    # Text needs no "allowed": its validators say what is wrong with it.
    kind = {int: "integer", float: "number", bool: "true | false"}.get(
        annotation if isinstance(annotation, type) else type(None)
    )
    if kind is None:
        return None
    if lower is not None and upper is not None:
        return f"{kind} {'>' if strict_lower else ''}{lower}–{upper}"
    return kind
