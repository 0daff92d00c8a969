"""The session's temp folders are its own: another pytest run on the machine, which
prunes pytest's rotating folders, cannot delete them mid-run."""

from __future__ import annotations

from pathlib import Path


def test_the_sessions_temp_folder_is_not_one_pytest_rotates(tmp_path: Path) -> None:
    assert "pytest-of-" not in str(tmp_path)
    assert any(part.startswith("kioku-tests-") for part in tmp_path.parts)
