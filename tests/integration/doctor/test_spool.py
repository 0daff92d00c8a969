"""``kioku doctor``'s spool row: what waits in the data folder's spool, and what was set aside.

Doctor runs in this process (as in the in-process doctor tests beside it), on the migrated
test database and the scripted LLM, so every other row passes and the exit code is the
spool row's doing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from bot.config import Settings
from bot.db.engine import Database
from bot.db.storage import faults
from bot.memory.service import MemoryService
from bot.memory.spool.durable import DurableSpool, inspect_spool, spool_path
from bot.vocabulary.model import ScopeKey, StmEntry
from tests.helpers.builders import CHANNEL, GUILD, make_service, turn_for
from tests.helpers.faults import outage
from tests.helpers.kioku_cli import DoctorHere

SERVER_KEY = ScopeKey.server(GUILD, CHANNEL)
# Doctor's token and intent rows ask a local fake of Discord's API, never Discord.
pytestmark = pytest.mark.usefixtures("discord_api")


def not_ok(rows: dict[str, tuple[str, str]]) -> dict[str, str]:
    return {name: status for name, (status, _) in rows.items() if status != "ok"}


@pytest.fixture
def spooling(db: Database, settings: Settings) -> Iterator[tuple[DurableSpool, MemoryService]]:
    """A memory service and its spool in the data folder, held as a running `kioku run`
    holds them (doctor may run beside it); closed at the end."""
    spool = DurableSpool(spool_path(settings.data_dir))
    yield spool, make_service(db.sessions, settings, spool=spool)
    spool.close()


async def opened_with_an_entry(
    db: Database, settings: Settings
) -> tuple[Path, DurableSpool, StmEntry]:
    """The data folder's spool file, the spool opened on it, and the test channel's memory
    entry of a service writing to it."""
    path = spool_path(settings.data_dir)
    spool = DurableSpool(path)
    service = make_service(db.sessions, settings, spool=spool)
    return path, spool, await service.entry(SERVER_KEY)


async def test_doctor_counts_the_operations_an_unreachable_database_left_in_the_spool(
    settings: Settings,
    spooling: tuple[DurableSpool, MemoryService],
    doctor_here: DoctorHere,
) -> None:
    spool, service = spooling
    turn = await turn_for(service)  # warm: hydrated while the database was up
    faults(service.sessions).fail()  # the database is down
    for summary in ("one", "two"):
        result = await service.update_stm(await turn_for(service), summary=summary)
        assert str(result) == "saved, pending sync"
    # A local record (another process cleared the channel): no operation for the
    # database, so not pending.
    spool.blank_channel(CHANNEL)
    receipt = await service.clear_channel(CHANNEL, guild_id=GUILD, actor_user_id=turn.user_id)
    assert receipt.pending_sync
    assert spool.pending == 3
    assert len(spool.path.read_text().splitlines()) == 4  # the blank is in the file

    code, rows = await doctor_here(settings.data_dir)
    assert rows["spool"] == ("ok", "3 memory operations pending sync")
    assert (code, not_ok(rows)) == (0, {}), rows  # pending operations do not fail the run


async def test_doctor_says_the_spool_is_empty_once_the_replay_stored_everything(
    db: Database,
    settings: Settings,
    spooling: tuple[DurableSpool, MemoryService],
    doctor_here: DoctorHere,
) -> None:
    spool, service = spooling
    turn = await turn_for(service)
    async with outage(service.sessions):
        assert str(await service.update_stm(turn, summary="waiting")) == "saved, pending sync"
    assert await spool.replay(db.sessions) == 1
    assert spool.path.exists()  # the file stays, with nothing in it

    code, rows = await doctor_here(settings.data_dir)
    assert rows["spool"] == ("ok", "empty")
    assert code == 0, rows


async def test_doctor_says_a_fresh_data_folder_has_an_empty_spool_and_creates_none(
    migrated_database: Database,
    tmp_path: Path,
    doctor_here: DoctorHere,
) -> None:
    code, rows = await doctor_here(tmp_path)
    assert rows["spool"] == ("ok", "empty")
    assert code == 0, rows
    assert not spool_path(tmp_path).parent.exists(), "doctor only reads the spool"


async def test_doctor_fails_the_spool_row_for_a_line_set_aside_as_unreadable(
    db: Database,
    settings: Settings,
    doctor_here: DoctorHere,
) -> None:
    path, spool, entry = await opened_with_an_entry(db, settings)
    entry.summary, entry.version = "still pending", 1
    spool.append([entry])
    spool.close()
    with path.open("ab") as handle:
        handle.write(b'{"op": "teleport"}\n')
    DurableSpool(path).close()  # opening it sets the damaged line aside
    (aside,) = inspect_spool(settings.data_dir).set_aside

    code, rows = await doctor_here(settings.data_dir)

    assert rows["spool"] == (
        "FAIL",
        f"1 memory operation pending sync; 1 set-aside file(s): {aside}",
    )
    assert (code, not_ok(rows)) == (1, {"spool": "FAIL"}), rows


async def test_doctor_names_the_newest_of_several_set_aside_files_with_nothing_pending(
    db: Database,
    settings: Settings,
    doctor_here: DoctorHere,
) -> None:
    path, spool, entry = await opened_with_an_entry(db, settings)
    spool.close()
    with path.open("ab") as handle:
        handle.write(b"[1, 2]\n")
    spool = DurableSpool(path)  # the damaged line: the first set-aside file
    try:
        # A record the database refuses (its channel id does not fit a bigint), alone in
        # its batch: set aside by the replay, in a second file.
        poisoned = replace(entry, key=ScopeKey.server(GUILD, 2**63 + 5))
        poisoned.summary, poisoned.version = "cannot be stored", 1
        spool.append([poisoned])
        assert await spool.replay(db.sessions) == 1
        assert spool.pending == 0
    finally:
        spool.close()
    first, newest = inspect_spool(settings.data_dir).set_aside
    assert first.read_bytes() == b"[1, 2]\n" and b"cannot be stored" in newest.read_bytes()

    code, rows = await doctor_here(settings.data_dir)

    assert rows["spool"] == ("FAIL", f"empty; 2 set-aside file(s): {newest}")
    assert (code, not_ok(rows)) == (1, {"spool": "FAIL"}), rows
