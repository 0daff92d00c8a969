"""A chaos scenario: its actions and its checks in one class."""

from __future__ import annotations

from tests.integration.chaos.actions import Actions
from tests.integration.chaos.checks import Checks


class Scenario(Actions, Checks):
    """One seeded scenario of two processes: its actions, then its checks."""
