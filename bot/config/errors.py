"""A bad setting as one clear line per key: the key and where its value was read (the
variable in the environment or the ``.env`` file, or the TOML file), the value (secrets
redacted, URLs without their credentials or query values), what is allowed.

Pydantic's own ``ValidationError`` names model classes and internal locations; the
operator wrote a TOML key or an environment variable, and is told about that.
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

from bot.config.files import config_file_path, env_file_path, env_file_values
from bot.config.settings import (
    COMBINATION_ERROR,
    SECTIONS,
    Settings,
    value_origin,
)
from bot.config.urls import without_credentials
from bot.vocabulary import redact_leaves

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
    """One line per bad key: the key and where it was set, the value, what is allowed."""

    lines = []
    for error in exc.errors():
        # A list item's index is no variable (there is no KIOKU_OWNER_IDS__1): it is
        # named as "item N of" the list's variable.
        item = next((part for part in error["loc"] if isinstance(part, int)), None)
        loc = [str(part) for part in error["loc"] if not isinstance(part, int)]
        if error["type"] == COMBINATION_ERROR:
            lines.append(_combination_line(loc, error.get("ctx") or {}))
            continue
        if not loc:  # a check of the whole settings: no key to name
            lines.append(f"invalid settings: {str(error['msg']).removeprefix('Value error, ')}")
            continue
        if error["type"] == "extra_forbidden":
            # Unknown variables were caught before; an unknown key is the TOML file's.
            lines.append(_unknown_key_line(loc))
            continue
        value = error.get("input")
        shown = "<hidden>" if _key(loc) in _SECRET_KEYS else _short_repr(value)
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "model_type" and len(loc) == 1 and loc[0] in SECTIONS:
            # Pydantic's words name the class ("instance of StmSettings"), not the file.
            env = _variable(loc)
            message = (
                f"must be a section: [{loc[0]}] in the TOML file, or a JSON object in {env} "
                f"(or single keys as {env}__<NAME>)"
            )
        elif error["type"] == "finite_number":
            message = "must be a finite number"  # the range follows, as "allowed"
        allowed = _allowed_for(loc) if item is None else None
        hint = f" (allowed: {allowed})" if allowed else ""
        lines.append(f"invalid setting {_setting(loc, shown, item=item)}: {message}{hint}")
    return "\n".join(lines)


def _key(loc: list[str]) -> str:
    """The key as the TOML file spells it (``stm.raw_window``, ``database_url``)."""
    return _variable(loc).lower() if loc[0] in _TOP_LEVEL_ENV else ".".join(loc)


def _variable(loc: list[str]) -> str:
    """The variable that sets ``loc`` alone: ``DATABASE_URL``, ``KIOKU_STM__RAW_WINDOW``."""
    env = _TOP_LEVEL_ENV.get(loc[0]) if len(loc) == 1 else None
    return env or "KIOKU_" + "__".join(part.upper() for part in loc)


def _setting(
    loc: list[str], shown: str, *, item: int | None = None, note: str = "", unset: str = ""
) -> str:
    """``key (VARIABLE) = value``, naming where the settings read the value: the variable
    in the environment or in the ``.env`` file (``KIOKU_X in <path>``), else the TOML file
    (``key = value (in <path>)``); a variable that is not set is never named, the operator
    would look for it in vain. ``unset`` stands for a value no source gave (a default)."""

    key = _key(loc)
    of = f"item {item + 1} of " if item is not None else ""
    origin = value_origin(loc)
    if origin in ("environment", "dotenv"):
        values = os.environ if origin == "environment" else env_file_values()
        in_file = f" in {env_file_path()}" if origin == "dotenv" else ""
        after = f" ({note})" if note else ""
        return f"{key} ({of}{_set_variable(loc, values)}{in_file}) = {shown}{after}"
    notes = [note] if note else []
    if item is not None:
        notes.append(f"item {item + 1}")
    if origin == "toml":
        notes.append(f"in {config_file_path()}")
    elif unset:
        notes.append(unset)
    return f"{key} = {shown}" + (f" ({', '.join(notes)})" if notes else "")


def _set_variable(loc: list[str], values: Mapping[str, str | None]) -> str:
    """The variable of ``values`` that set ``loc``: its own, else its section's as JSON
    (``KIOKU_STM={…}``). Names are matched case-insensitively, as the settings read them."""
    own = _variable(loc)
    if len(loc) < 2 or any(name.upper() == own for name in values):
        return own
    return _variable(loc[:1])


def _unknown_key_line(loc: list[str]) -> str:

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


def _combination_line(section: list[str], ctx: dict[str, Any]) -> str:
    """Two keys that are fine alone but not together: name both, with their values and
    where each was set (one is often the default)."""
    smaller = _setting(
        [*section, str(ctx["smaller"])], repr(ctx["smaller_value"]), unset="the default"
    )
    larger = _setting(
        [*section, str(ctx["larger"])],
        repr(ctx["larger_value"]),
        note=str(ctx.get("larger_as") or ""),
        unset="the default",
    )
    return f"invalid setting {smaller}: must not exceed {larger}"


_NOT_JSON = re.compile(
    r'error parsing value for field "(?P<field>\w+)"(?: from source "(?P<source>\w+)")?'
)


def not_json_line(exc: Exception) -> str:
    """The line for a list or section variable that is not JSON (pydantic-settings' own
    error names neither the variable nor what it must be), in the environment or, as
    its error says, in the ``.env`` file."""

    found = _NOT_JSON.search(str(exc))
    field = found.group("field") if found else "?"
    variable = f"KIOKU_{field.upper()}"
    in_dotenv = found is not None and found.group("source") == "DotEnvSettingsSource"
    values: Mapping[str, str | None] = env_file_values() if in_dotenv else os.environ
    value = next((v for k, v in values.items() if k.upper() == variable), None)
    where = f"{variable} in {env_file_path()}" if in_dotenv else variable
    shown = f" = {_short_repr(value)}" if value is not None else ""
    example = (
        "a JSON list, e.g. [123456789012345678]"
        if field == "owner_ids"
        else f"a JSON object (or set single keys as {variable}__<NAME>)"
    )
    return f"invalid setting {field} ({where}){shown}: must be {example}"


# A query string, from its "?" to the end of the word (a #fragment is not sent anyway).
_QUERY = re.compile(r"\?[^\s#]*")
_QUERY_VALUE = re.compile(r"=[^&;]*")


def _short_repr(value: Any) -> str:
    """The value as shown in a line: a URL's credentials and query values masked
    (``?password=``, ``?key=``, ``?sig=``: any name may carry one), secrets redacted (the
    memory's own redaction: a token in the wrong variable, ``password=`` in a libpq
    string), and only then cut to 80 characters: a cut secret may match no pattern."""
    # Masked first: a query's names then stay ("key=hello&api-version=1" is all one
    # credential to the redaction, "key=***&api-version=***" is none).
    text = repr(redact_leaves(_masked(value)))
    return text if len(text) <= 80 else text[:77] + "..."


def _masked(value: Any) -> Any:
    if isinstance(value, str):
        hidden = without_credentials(value)
        return _QUERY.sub(lambda query: _QUERY_VALUE.sub("=***", query.group()), hidden)
    if isinstance(value, dict):
        return {key: _masked(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_masked(item) for item in value)
    return value


def _allowed_for(loc: list[str]) -> str | None:
    """Describe the allowed values of the field at ``loc`` from its type and constraints."""

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
