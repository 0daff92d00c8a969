"""What every tool returns to the tool loop."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """The tool's result as the model reads it; consecutive errors end the turn."""

    content: str
    ok: bool

    @classmethod
    def error(cls, message: str) -> ToolOutcome:
        return cls(message, ok=False)


class ToolArgumentError(ValueError):
    """The model's arguments were refused; ``str()`` tells the model how to fix them."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field
