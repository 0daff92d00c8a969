"""Undo the HTML escaping some servers' chat templates apply to what the model reads.

llama-cpp-python renders its templates with autoescaping on: the model reads ``&#39;`` for
``'`` and ``&lt;`` for ``<``, and writes them back. Entities that were not in what Kioku sent
are the template's doing, and are turned back into the characters they stand for.
"""

from __future__ import annotations

import html
import re

__all__ = ["ENTITY", "unescape_new_entities"]

ENTITY = re.compile(r"&(?:[a-zA-Z][a-zA-Z0-9]{1,31}|#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6});")
# Each pass undoes one layer: "&amp;#39;" (escaped twice) takes two.
_MAX_PASSES = 4


def unescape_new_entities(text: str, sent: str) -> str:
    """``text`` with the entities that ``sent`` does not hold turned into characters."""
    if "&" not in text:
        return text
    known = set(ENTITY.findall(sent)) if "&" in sent else set()
    for _ in range(_MAX_PASSES):
        changed = ENTITY.sub(
            lambda match: (
                match.group(0) if match.group(0) in known else html.unescape(match.group(0))
            ),
            text,
        )
        if changed == text:
            break
        text = changed
    return text
