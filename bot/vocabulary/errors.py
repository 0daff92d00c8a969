"""Failures every layer above the database names: safe to show, in one line."""

from __future__ import annotations


class MemoryUnavailable(RuntimeError):
    """The database refused or timed out; the message is safe to show a user."""


class DatabaseUnavailable(RuntimeError):
    """The database could not be started or reached; the message says why, in one line."""
