"""The command line's exit codes and its one-line error."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG = 2


class CliError(Exception):
    """A failure to report as one line, with an exit code."""

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.code = code
