"""The invariants a chaos scenario checks once it is quiet."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select

from bot.db.models import ShortTermMemory
from bot.db.repositories import stm as stm_repo
from bot.vocabulary.model import ScopeKey, StmEntry
from tests.helpers.builders import ALICE, GUILD, prepare
from tests.integration.chaos.model import (
    CHANNELS,
    EARLIEST,
    EMPTY,
    KEYS,
    USERS,
    Content,
    Write,
    content,
    values_of,
)
from tests.integration.chaos.running import Running


class Checks(Running):
    """The invariants listed in test_scenarios's docstring, checked once the scenario is quiet."""

    async def rows(self) -> dict[ScopeKey, ShortTermMemory]:
        async with self.db.sessions() as session:
            rows = list(await session.scalars(select(ShortTermMemory)))
        return {stm_repo.entry_from_row(r).key: r for r in rows}

    def fail(self, what: str) -> None:
        raise AssertionError(f"seed {self.seed}: {what}\nschedule:\n  " + "\n  ".join(self.log))

    async def check(self) -> None:
        if self.errors:
            self.fail(f"invariant 5 (exceptions): {self.errors}")
        if self.violations:
            self.fail("\n".join(self.violations))
        for op in self.ops:
            if op.task is None or not op.task.done():
                self.fail(f"{op.kind}@{op.proc} (started at step {op.start_seq}) never ended")
        rows = await self.rows()
        by_text = {w.text: w for w in self.writes}
        acknowledged = ("saved", "saved, pending sync")
        for key, row in rows.items():
            stored = content(row.summary, dict(row.categories or {}))
            if not values_of(stored):
                continue
            row_derived = {row.user_id, row.actor_user_id, *(row.contributor_ids or ())} - {None}
            for slug, value in values_of(stored):
                write = by_text.get(value)
                if write is None:
                    self.fail(f"{key} holds {value!r} under {slug}: no write made it")
                    return
                if write.status not in acknowledged:
                    self.fail(f"invariant 6: {key} holds {write.text}, reported {write.status}")
                # Whose words the value carries: the users its write was derived from.
                derived = write.derived.get(key, row_derived)
                for user, at, _, _ in self.forgets:
                    if user in derived and at >= write.started_at:
                        self.fail(
                            f"invariant 2: {key} holds {write.text} under {slug} (turn started "
                            f"{write.started_at}) derived from user {user % 10}, forgotten "
                            f"at {at}"
                        )
                for channel, at, _, _ in self.clears:
                    if channel == key.channel_id and at > write.started_at:
                        self.fail(
                            f"invariant 3: {key} holds {write.text} under {slug} (turn started "
                            f"{write.started_at}) but the channel was cleared at {at}"
                        )
            self._check_row_categories(key, stored)
        # 1: the last acknowledged write of each key survives unless something removed it.
        for key in KEYS:
            acked = [w for w in self.writes if key in w.keys and w.status in acknowledged]
            if not acked:
                continue
            last = max(acked, key=lambda w: w.ack or 0)
            if self._may_be_removed(last, key):
                continue
            if self._spool_conflict(acked, key):
                self.conflicts += 1
                continue
            row = rows.get(key)
            held = content(row.summary, dict(row.categories or {})) if row is not None else None
            if held != last.after.get(key):
                self.fail(
                    f"invariant 1: {key}: {last.text} acknowledged {last.status!r} "
                    f"({last.after.get(key)}) but the row holds {held!r}"
                )
        # 4: the caches (and what they hydrate) equal the rows.
        for proc in self.procs.values():
            for key in KEYS:
                row = rows.get(key)
                for how, entry in (
                    ("cached", proc.service.cache.get(key)),
                    ("hydrated", await proc.service.entry(key)),
                ):
                    if entry is None:
                        continue
                    if row is None or proc.service.cache.is_expired(stm_repo.entry_from_row(row)):
                        if entry.has_content:
                            self.fail(
                                f"invariant 4: {proc.name} {how} {key} = {entry.summary!r} "
                                f"{entry.categories} v{entry.version}, the row is "
                                f"{'gone' if row is None else 'expired'}"
                            )
                        continue
                    if (entry.summary, entry.categories, entry.version) != (
                        row.summary,
                        dict(row.categories or {}),
                        row.version,
                    ):
                        self.fail(
                            f"invariant 4: {proc.name} {how} {key} = {entry.summary!r} "
                            f"{entry.categories} v{entry.version}, row = {row.summary!r} "
                            f"{row.categories} v{row.version}"
                        )
        self._check_built_on()
        self._check_configs()
        # 8, after quiet: every acknowledged wipe has reached both processes.
        wipes = (
            [w for w in self.clears if self._committed(w[2], w[3])],
            [w for w in self.forgets if self._committed(w[2], w[3])],
        )
        now = self.clock.now()
        everything = ({c: now for c in CHANNELS}, {u: now for u in USERS})
        for proc in self.procs.values():
            for channel in CHANNELS:
                prepared = await prepare(
                    proc.service, ALICE, channel=channel, label_for=lambda e: f"#{e.key.channel_id}"
                )
                self._check_prompt(proc.name, channel, prepared, everything, wipes, "after quiet")
        if self.violations:
            self.fail("\n".join(self.violations))

    def _check_row_categories(self, key: ScopeKey, stored: Content) -> None:
        """Invariant 9 for a row: it is some write's content, and a value of a category
        the guild no longer defines was written before that change reached its writer."""
        writers = [w for w in self.writes if w.after.get(key) == stored]
        if not writers:
            self.fail(f"invariant 9: {key} holds {stored}, which no write built")
        writer = writers[0]
        _, mode, slugs = self.configs[-1]
        for slug, value in stored[1]:
            if mode and slug in slugs:
                continue
            assert writer.validated is not None
            if (
                slug not in writer.validated[2]
                or writer.validated not in self.configs[writer.reach : writer.known + 1]
            ):
                self.fail(
                    f"invariant 9: {key} holds {value} under {slug!r}, no longer defined; its "
                    f"write {writer.text} was validated against {writer.validated} while "
                    f"changes up to #{writer.reach} had reached {writer.proc}: "
                    f"{self.configs}"
                )

    def _check_configs(self) -> None:
        """Invariants 9 and 10 for every acknowledged write."""
        for w in self.writes:
            if w.status not in ("saved", "saved, pending sync"):
                continue
            if w.validated is None:
                self.fail(f"harness: {w.text} acknowledged without a configuration read")
                return
            current = self.configs[w.reach : w.known + 1]
            if w.validated not in current:
                number = 10 if w.validated[0] != any(c[0] for c in current) else 9
                self.fail(
                    f"invariant {number}: {w.kind} {w.text} in {w.proc} acknowledged "
                    f"{w.status!r}, validated against {w.validated}, but settings changes up "
                    f"to #{w.reach} had reached {w.proc}: {self.configs}"
                )
            if w.kind != "admin" and not w.validated[0]:
                self.fail(f"invariant 10: {w.kind} {w.text} acknowledged with STM disabled")
            _, mode, slugs = w.validated
            for key, (_, categories) in w.after.items():
                undefined = [slug for slug, _ in categories if not mode or slug not in slugs]
                if undefined:
                    self.fail(
                        f"invariant 9: {w.text} stored {key} with categories {undefined} "
                        f"that {w.validated} does not define"
                    )
            if w.validated != self.configs[w.known]:
                self.late_config += 1

    def _disturbed(self, key: ScopeKey, low: int, high: int) -> bool:
        """A deletion or a spool replay ran (at least partly) between ``low`` and ``high``."""
        for op in self.ops:
            if op.kind not in ("clear", "forget", "janitor", "replay"):
                continue
            if op.kind == "clear" and op.meta.get("channel") != key.channel_id:
                continue
            end = op.end_seq or 10**9
            if op.start_seq <= high and end >= low:
                return True
        return any(low <= r <= high for r in self.replays)

    def _expired(self, write: Write, key: ScopeKey, at: datetime | None) -> bool:
        """Whether what ``write`` stored under ``key`` is past its TTL at ``at``."""
        if write.written_at is None or at is None:
            return False
        stored = StmEntry(key=key, updated_at=write.written_at, summary=write.after[key][0])
        ttl = self.procs["A"].service.cache.ttl_for(stored)
        return (at - write.written_at).total_seconds() >= ttl

    def _check_built_on(self) -> None:
        """Invariant 7: a saved write replaced the last saved one, or one built on it."""
        for w in self.writes:
            if w.status == "saved" and w.kind == "admin" and w.expected_version is not None:
                key = ScopeKey.server(GUILD, w.channel)
                if w.base_versions.get(key) != w.expected_version:
                    self.fail(
                        f"invariant 7: admin {w.text} saved with expected_version "
                        f"{w.expected_version} over version {w.base_versions.get(key)}"
                    )
        for key in KEYS:
            saved = sorted(
                (w for w in self.writes if w.status == "saved" and key in w.after),
                key=lambda w: w.ack_seq,
            )
            built = sorted(
                (w for w in self.writes if key in w.after and key in w.base),
                key=lambda w: w.build_seq,
            )
            for second in saved:
                prior = [w for w in saved if w.ack_seq < second.build_seq]
                if not prior:
                    continue
                first = prior[-1]
                if self._disturbed(key, first.start_seq, second.ack_seq):
                    continue
                if second.base[key] == EMPTY and self._expired(first, key, second.built_at):
                    continue  # an expired memory counts as gone (SPEC §2)
                self.built_on_checked += 1
                # Built on the first, or on nothing once every value of that lineage had
                # expired (SPEC §2): a write then starts afresh (e.g. a turn's write after
                # a day's pause), and later writes build on it.
                lineage, writers = {first.after[key]}, [first]
                for w in built:
                    if w.base[key] in lineage or (
                        w.base[key] == EMPTY
                        and all(
                            self._expired(x, key, w.built_at)
                            for x in writers
                            if x.status != "rejected"  # its values were never kept
                        )
                    ):
                        lineage.add(w.after[key])
                        writers.append(w)
                if second.base[key] not in lineage:
                    self.fail(
                        f"invariant 7: {key}: {second.kind} {second.text} in {second.proc} "
                        f"(saved, v{second.base_versions.get(key, 0) + 1}) replaced "
                        f"{second.base[key]} v{second.base_versions.get(key)}, not "
                        f"{first.text}'s {first.after[key]} (saved before it was built)"
                    )

    def _spool_conflict(self, acked: list[Write], key: ScopeKey) -> bool:
        """A write spooled in A while B wrote the same key directly before the replay: the
        replay keeps the later of the two by time, and the test's clock often gives both
        the same instant (then the higher version wins, counted apart in each process), so
        which one is "last" is not decided by acknowledgement order here. A write is all or
        nothing: one skipped for a newer row of one of its keys leaves its other keys as
        they were too."""
        stored = [w for w in self.writes if w.status in ("saved", "saved, pending sync")]
        for spooled in (w for w in acked if w.status == "saved, pending sync"):
            replayed = min((r for r in self.replays if r > spooled.ack_seq), default=10**9)
            for direct in stored:
                if (
                    direct.proc != spooled.proc
                    and set(direct.keys) & set(spooled.keys)
                    and spooled.turn_seq < replayed
                    and (direct.ack_seq < replayed and direct.ack_seq > spooled.turn_seq)
                ):
                    return True
        return False

    def _may_be_removed(
        self, write: Write, key: ScopeKey, seen: frozenset[str] = frozenset()
    ) -> bool:
        # A clear or forget not finished when the turn started may remove what it wrote
        # (it takes effect when it commits, or when its spooled record is replayed).
        for channel, _at, op, pending in self.clears:
            if channel == key.channel_id and (pending or op.end_seq > write.turn_seq):
                return True
        derived = write.derived.get(key, {write.user})
        for user, _at, op, pending in self.forgets:
            if user in derived and (pending or op.end_seq > write.turn_seq):
                return True
        if write.wipe_reach is not None:
            # Built on what a wipe its process had not heard of yet deleted (cut off from
            # the database and the notices, it used its cached copy): spooled, its replay
            # finds the row it was built on gone and is skipped, as the live write would
            # have been refused.
            clears_reach, forgets_reach = write.wipe_reach
            for channel, at, _op, _pending in self.clears:
                if channel == key.channel_id and at > clears_reach.get(channel, EARLIEST):
                    return True
            for user, at, _op, _pending in self.forgets:
                if user in derived and at > forgets_reach.get(user, EARLIEST):
                    return True
        if any(
            write.written_at is None or write.written_at < cutoff for cutoff in self.janitor_cutoffs
        ):
            return True
        # Built on a write its process spooled (its state, not replayed yet): it carries
        # that write's text, so what may remove that one may remove it too (the replay
        # refuses both; see spool_replay._chain_wiped), on any of its keys (all or nothing).
        for built_on in write.keys:
            base = write.base.get(built_on)
            if base is None or not values_of(base):
                continue
            if any(
                self._may_be_removed(spooled, built_on, seen | {write.text})
                for spooled in self.writes
                if spooled.proc == write.proc
                and spooled.status == "saved, pending sync"
                and spooled.text not in seen | {write.text}
                and spooled.build_seq < write.build_seq
                and spooled.after.get(built_on) == base
            ):
                return True
        return False
