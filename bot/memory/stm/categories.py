"""Admin-defined STM categories: slugs derived from labels, and validation of admin input."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence

from anyascii import anyascii

from bot.vocabulary import MAX_CATEGORIES, Category, redact_secrets, sanitize_value

SLUG_MAX_LENGTH = 48
LABEL_MAX_LENGTH = 40
DESCRIPTION_MAX_LENGTH = 200

# A slug is the tool parameter name the model sees: ASCII, stable and readable. Other
# scripts are transliterated (日本語 → ri_ben_yu), emoji named (🎉 → tada), and a label with
# nothing transliterable (★★) gets category_<6 hex digits of its sha1>.
_DIGIT_PREFIX = "c_"
_FALLBACK_PREFIX = "category_"
_NON_ALNUM = re.compile(r"[^a-z0-9]+")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z])(?=[A-Z])")  # anyascii's "RiBenYu" is 3 syllables
# Control characters (C0, DEL, C1) and surrogates: never valid in a label or description.
_FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cs"})


def _fold(char: str) -> str:
    """NFKD-decompose one character and drop its combining marks."""
    decomposed = unicodedata.normalize("NFKD", char)
    return "".join(c for c in decomposed if not unicodedata.category(c).startswith("M"))


def _is_latin(char: str) -> bool:
    return unicodedata.name(char, "").startswith("LATIN ")


def _transliterate(label: str, *, keep_symbols: bool) -> str:
    """``label`` in ASCII words: accents folded, other scripts transliterated run by run,
    symbols (emoji included) skipped unless ``keep_symbols``."""
    parts: list[str] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            text = anyascii("".join(run))
            parts.append(" " + _CAMEL_BOUNDARY.sub(" ", text) + " ")
            run.clear()

    for char in label:
        if not keep_symbols and unicodedata.category(char).startswith("S"):
            flush()
            parts.append(" ")
            continue
        folded = _fold(char)
        if folded.isascii():
            flush()
            parts.append(folded)
        elif _is_latin(char):
            flush()
            parts.append(anyascii(folded))
        else:
            run.append(char)
    flush()
    return "".join(parts)


def _clean(text: str) -> str:
    return _NON_ALNUM.sub("_", text.lower()).strip("_")


def _fit(slug: str, limit: int = SLUG_MAX_LENGTH) -> str:
    return slug[:limit].rstrip("_")


def slugify(label: str) -> str:
    """The slug of ``label``, matching ``^[a-z][a-z0-9_]*$``; ``ValueError`` if it is blank."""
    stripped = label.strip()
    if not stripped:
        raise ValueError("a category label cannot be empty")
    slug = _clean(_transliterate(stripped, keep_symbols=False)) or _clean(
        _transliterate(stripped, keep_symbols=True)
    )
    if not slug:
        digest = hashlib.sha1(stripped.encode("utf-8", "surrogatepass")).hexdigest()
        slug = _FALLBACK_PREFIX + digest[:6]
    if slug[0].isdigit():
        slug = _DIGIT_PREFIX + slug
    return _fit(slug)


def assign_slugs(labels: Sequence[str]) -> list[str]:
    """Unique slugs for ``labels`` in order: repeats get ``_2``, ``_3``…, never another's own."""
    bases = [slugify(label) for label in labels]
    reserved = set(bases)
    used: set[str] = set()
    result: list[str] = []
    for base in bases:
        slug = base
        if slug in used:
            n = 2
            while True:
                suffix = f"_{n}"
                slug = _fit(base, SLUG_MAX_LENGTH - len(suffix)) + suffix
                if slug not in used and slug not in reserved:
                    break
                n += 1
        used.add(slug)
        result.append(slug)
    return result


class CategoryDefinitionError(ValueError):
    """Admin input for categories is invalid; ``problems`` lists each issue."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


def _forbidden_char(text: str) -> str | None:
    for char in text:
        if unicodedata.category(char) in _FORBIDDEN_CATEGORIES:
            return f"U+{ord(char):04X}"
    return None


def _check_field(where: str, name: str, value: str, limit: int) -> list[str]:
    problems: list[str] = []
    if not value:
        problems.append(f"{where}: the {name} is empty")
    elif len(value) > limit:
        problems.append(
            f"{where}: the {name} is too long ({len(value)} characters, at most {limit})"
        )
    bad = _forbidden_char(value)
    if bad is not None:
        problems.append(f"{where}: the {name} contains a control character ({bad})")
    return problems


def _validate(rows: Sequence[tuple[str, str]], places: Sequence[str]) -> tuple[Category, ...]:
    if not rows:
        raise CategoryDefinitionError(["define at least one category"])
    if len(rows) > MAX_CATEGORIES:
        raise CategoryDefinitionError(
            [f"too many categories ({len(rows)}, at most {MAX_CATEGORIES})"]
        )
    problems: list[str] = []
    labels: list[str] = []
    descriptions: list[str] = []
    seen: dict[str, str] = {}
    for where, (raw_label, raw_description) in zip(places, rows, strict=True):
        label = raw_label.strip()
        description = raw_description.strip()
        field_problems = _check_field(where, "label", label, LABEL_MAX_LENGTH)
        field_problems += _check_field(where, "description", description, DESCRIPTION_MAX_LENGTH)
        if not field_problems:
            # Labels and descriptions reach the prompt and the tool schema and are stored:
            # the same filter as memory text (placeholders, invisible characters, secrets).
            label = sanitize_value(label, LABEL_MAX_LENGTH).strip()
            description = sanitize_value(description, DESCRIPTION_MAX_LENGTH).strip()
            for name, value in (("label", label), ("description", description)):
                if not value:
                    field_problems.append(
                        f"{where}: the {name} is empty after removing unsafe content"
                    )
        problems += field_problems
        folded = label.casefold()
        if label and folded in seen:
            problems.append(f"{where}: the label {label!r} is already used by {seen[folded]}")
        else:
            seen[folded] = where
        labels.append(label)
        descriptions.append(description)
    if problems:
        raise CategoryDefinitionError(problems)
    slugs = assign_slugs(labels)
    return tuple(
        Category(position=i, slug=slug, label=label, description=description)
        for i, (slug, label, description) in enumerate(
            zip(slugs, labels, descriptions, strict=True)
        )
    )


def _split_row(line: str) -> tuple[str, str, str]:
    """``label``, ``":"``, ``description`` of one typed row, each to be sanitized on its own."""
    # Split before redacting: the row's own colon reads like a secret's ("Password: reset
    # requests" would be redacted whole). But a secret can straddle it ("password: Hunter2"):
    # when what follows looks like a secret's value alone, the whole row is redacted first.
    label, colon, description = line.partition(":")
    redacted = redact_secrets(line)
    if redacted != f"{redact_secrets(label)}{colon}{redact_secrets(description)}":
        value = description.strip()
        url = description.startswith("//")  # a URL's scheme colon: credentials follow it
        if url or redact_secrets(f"secret: {value}") != f"secret: {value}":
            return redacted.partition(":")
    return label, colon, description


def parse_category_lines(text: str, *, place: str = "line") -> tuple[Category, ...]:
    """Categories from one ``label: description`` per line; problems say ``{place} {number}``."""
    rows: list[tuple[str, str]] = []
    places: list[str] = []
    problems: list[str] = []
    for number, line in enumerate(_LINE_BREAK.split(text), start=1):
        if not line.strip():
            continue
        label, colon, description = _split_row(line)
        if not colon:
            problems.append(f"{place} {number}: expected 'label: description' (no ':' found)")
            continue
        rows.append((label, description))
        places.append(f"{place} {number}")
    if problems:
        raise CategoryDefinitionError(problems)
    return _validate(rows, places)
