"""The random actions of a chaos scenario."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from bot.db.storage import database_answered, faults
from bot.vocabulary.model import Category, GuildConfig, ScopeKey
from tests.helpers.builders import BOB, GUILD, message, prepare
from tests.integration.chaos.gates import Op, gate
from tests.integration.chaos.model import (
    CHANNELS,
    EARLIEST,
    RETENTION_DAYS,
    SLUGS,
    USERS,
    Proc,
    Turn,
    Write,
    config_key,
)
from tests.integration.chaos.running import Running


class Actions(Running):
    """The random actions of a scenario, each an operation run as a task, and making it
    quiet."""

    async def setup(self) -> None:
        """About a third of the scenarios begin in category mode (set before either
        process has read the settings)."""
        if self.rng.random() >= 0.35:
            return
        slugs = self.rng.sample(SLUGS, self.rng.randint(1, 3))
        defined = [Category(i, s, s.title(), f"keep {s}") for i, s in enumerate(slugs)]
        await self.procs["A"].service.set_categories(GUILD, BOB, defined)
        self.configs.append((True, True, frozenset(slugs)))
        for proc in self.procs.values():
            proc.config_reach = 1
        self.log.append(f"categories {slugs} (set up)")

    async def act(self) -> None:
        rng = self.rng
        actions: list[tuple[float, Callable[[], Awaitable[None]]]] = [
            (4, self.prepare),
            (5, self.write),
            (1.2, self.admin_edit),
            (1.2, self.clear),
            (0.8, self.forget),
            (3, self.observe),
            (2, self.advance),
            (0.4, self.janitor),
            (0.8, self.outage),
            (1, self.replay),
            (3, self.deliver),
            (0.6, self.listener),
            (0.6, self.categories),
            (0.4, self.toggle_stm),
            (0.25, self.expire),
            (3 if self.parked() else 0, self.release_one),
        ]
        total = sum(w for w, _ in actions)
        pick = rng.uniform(0, total)
        for weight, action in actions:
            pick -= weight
            if pick <= 0:
                await action()
                break
        await self.settle()

    async def prepare(self) -> None:
        proc, user, channel = self._proc(), self.rng.choice(USERS), self.rng.choice(CHANNELS)
        # What had reached the process when the turn began (invariant 8).
        reach = self._wipe_reach(proc)
        wipes = (list(self.clears), list(self.forgets))

        async def body(op: Op) -> None:
            prepared = await prepare(
                proc.service, user, channel=channel, label_for=lambda e: f"#{e.key.channel_id}"
            )
            self.turns.append(Turn(proc.name, prepared.turn, user, channel, op.start_seq))
            self._check_prompt(proc.name, channel, prepared, reach, wipes, f"turn {op.start_seq}")

        self.start("prepare", proc, body, ("read",))
        self.log[-1] += f" user={user % 10} ch={channel % 1000}"

    @staticmethod
    def _payload(config: GuildConfig, text_: str, rng: random.Random) -> dict[str, Any]:
        """The write a model (or an admin's form) makes under ``config``; now and then
        one of the wrong shape (refused)."""
        if config.category_mode:
            slugs = sorted(c.slug for c in config.categories)
            if rng.random() < 0.05:
                return {"summary": text_}
            chosen = rng.sample(slugs, rng.randint(1, len(slugs)))
            values = {slug: text_ for slug in chosen}
            rest = [slug for slug in slugs if slug not in chosen]
            if rest and rng.random() < 0.25:
                values[rng.choice(rest)] = ""  # clears that category
            return {"categories": values}
        if rng.random() < 0.05:
            return {"categories": {rng.choice(SLUGS): text_}}
        return {"summary": text_}

    async def _write(
        self,
        proc: Proc,
        turn_state: Any,
        user: int,
        channel: int,
        kind: str,
        call: Callable[[Write], Awaitable[Any]],
        turn_seq: int | None = None,
        gates: tuple[str, ...] = ("persist", "read"),
    ) -> None:
        write = Write(
            id=len(self.writes) + 1,
            text=f"w{len(self.writes) + 1}",
            proc=proc.name,
            channel=channel,
            user=user,
            started_at=turn_state.started_at,
            keys=turn_state.write_keys,
            turn_seq=self.seq + 1 if turn_seq is None else turn_seq,
            kind=kind,
        )
        self.writes.append(write)

        async def body(op: Op) -> None:
            write.start_seq = op.start_seq
            result = await call(write)
            write.status = result.status
            self.acks += 1
            write.ack = self.acks
            write.ack_seq = self.seq + 1
            meta = op.meta
            write.derived = meta.get("derived", {})
            write.written_at = meta.get("written_at")
            write.base = meta.get("base", {})
            write.base_versions = meta.get("base_versions", {})
            write.after = meta.get("after", {})
            validated = meta.get("validated")
            write.validated = config_key(validated) if validated is not None else None
            write.reach = meta.get("reach", 0)
            write.known = meta.get("known", 0)
            write.build_seq = meta.get("build_seq", 0)
            write.built_at = meta.get("built_at")
            write.wipe_reach = meta.get("wipe_reach")
            op.meta["outcome"] = f"{write.text}: {result}"

        self.start(kind, proc, body, gates)
        self.log[-1] += (
            f" {write.text} user={user % 10} ch={channel % 1000}"
            f" start={turn_state.started_at.time()}"
        )

    async def write(self) -> None:
        ready = [t for t in self.turns if not t.written]
        if not ready:
            return await self.prepare()
        turn = self.rng.choice(ready)
        turn.written = True
        proc = self.procs[turn.proc]
        # Drawn now: the write's task runs later, interleaved with others.
        shape = random.Random(self.rng.random())

        async def call(write: Write) -> Any:
            payload = self._payload(turn.state.config, write.text, shape)
            return await proc.service.update_stm(turn.state, **payload)

        await self._write(proc, turn.state, turn.user, turn.channel, "write", call, turn.seq)

    async def admin_edit(self) -> None:
        """``/stm edit``: the form reads the settings and the memory, may stay open (a
        gate), then saves; a summary only over the version the form showed."""
        proc, user, channel = self._proc(), self.rng.choice(USERS), self.rng.choice(CHANNELS)
        shape = random.Random(self.rng.random())
        use_expected = self.rng.random() < 0.7
        self.clock.advance(milliseconds=1)
        key = ScopeKey.server(GUILD, channel)

        class _State:
            started_at = self.clock.now()  # replaced by the time the form opened
            write_keys = (key, ScopeKey.user(user, channel, GUILD))

        async def call(write: Write) -> Any:
            config = await proc.service.guild_config(GUILD)
            shown = await proc.service.entry(key)
            epoch, opened = proc.service.channel_epoch(channel), self.clock.now()
            write.started_at = opened
            await gate("form")
            payload = self._payload(config, write.text, shape)
            expected = shown.version if use_expected and "summary" in payload else None
            write.expected_version = expected
            return await proc.service.admin_edit(
                guild_id=GUILD,
                channel_id=channel,
                actor_user_id=user,
                epoch=epoch,
                started_at=opened,
                expected_version=expected,
                **payload,
            )

        await self._write(
            proc, _State, user, channel, "admin", call, gates=("persist", "read", "form")
        )

    async def clear(self) -> None:
        proc, channel = self._proc(), self.rng.choice(CHANNELS)

        async def body(op: Op) -> None:
            receipt = await proc.service.clear_channel(channel, guild_id=GUILD, actor_user_id=BOB)
            assert op.at is not None
            self.clears.append((channel, op.at, op, receipt.pending_sync))
            proc.reach_clear[channel] = max(proc.reach_clear.get(channel, EARLIEST), op.at)
            op.meta["outcome"] = str(receipt)

        op = self.start("clear", proc, body, ("clear",))
        op.meta["channel"] = channel
        self.log[-1] += f" ch={channel % 1000} at={self.clock.now().time()}"

    async def forget(self) -> None:
        proc, user = self._proc(), self.rng.choice(USERS)

        async def body(op: Op) -> None:
            receipt = await proc.service.forget_user(user)
            assert op.at is not None
            self.forgets.append((user, op.at, op, receipt.pending_sync))
            proc.reach_forget[user] = max(proc.reach_forget.get(user, EARLIEST), op.at)
            op.meta["outcome"] = str(receipt)

        self.start("forget", proc, body, ("forget",))
        self.log[-1] += f" user={user % 10} at={self.clock.now().time()}"

    async def observe(self) -> None:
        proc, user, channel = self._proc(), self.rng.choice(USERS), self.rng.choice(CHANNELS)
        self.clock.advance(milliseconds=1)
        self.messages += 1
        msg = message(user, f"m{self.messages} from {user % 10}", at=self.clock.now())
        targets = list(self.procs.values()) if self.rng.random() < 0.3 else [proc]
        for target in targets:
            target.service.observe_message(channel, msg)
        self.log.append(
            f"observe m{self.messages} user={user % 10} ch={channel % 1000} "
            f"in {[t.name for t in targets]} at={msg.created_at.time()}"
        )

    async def advance(self) -> None:
        r = self.rng.random()
        if r < 0.75:
            delta = timedelta(seconds=self.rng.randint(1, 120))
        elif r < 0.95:
            delta = timedelta(hours=self.rng.choice([6, 11, 13, 23, 25]))
        else:
            delta = timedelta(days=self.rng.choice([1, 3]))
        self.clock.advance(seconds=delta.total_seconds())
        self.log.append(f"advance {delta}")

    async def expire(self) -> None:
        """Past the TTLs, or past the retention period: then a janitor pass."""
        hours = self.rng.choice([13, 25, RETENTION_DAYS * 24 + 1, RETENTION_DAYS * 24 + 30])
        self.clock.advance(hours=hours)
        self.log.append(f"advance {hours} h (expire)")
        await self.janitor()

    async def janitor(self) -> None:
        proc = self._proc()

        async def body(op: Op) -> None:
            cutoff = self.clock.now() - timedelta(days=RETENTION_DAYS)
            op.meta["outcome"] = f"{await proc.service.purge_expired_rows()} rows"
            self.janitor_cutoffs.append(cutoff)

        self.start("janitor", proc, body)

    async def categories(self) -> None:
        """``/stm categories set`` (or clear): summary mode, or 1–3 categories."""
        proc, r = self._proc(), self.rng.random()
        _, mode_now, slugs_now = self.configs[-1]
        slugs: list[str]
        if mode_now and self.rng.random() < 0.5:
            # One category replaced by another (renamed): what the old one holds stays
            # in the rows, and the next category write merges onto it.
            gone = self.rng.choice(sorted(slugs_now))
            new = self.rng.choice([s for s in SLUGS if s not in slugs_now])
            slugs = [*sorted(slugs_now - {gone}), new]
        elif r < 0.3:
            slugs = []
        elif r < 0.4:
            slugs = ["summary"]  # one category called "summary": summary mode
        else:
            slugs = self.rng.sample(SLUGS, self.rng.randint(1, 3))
        defined = [Category(i, s, s.title(), f"keep {s}") for i, s in enumerate(slugs)]
        mode = bool(slugs) and slugs != ["summary"]

        async def body(op: Op) -> None:
            await proc.service.set_categories(GUILD, BOB, defined)
            enabled = self.configs[-1][0]
            self._changed_config(proc, (enabled, mode, frozenset(slugs) if mode else frozenset()))

        self.start("categories", proc, body)
        self.log[-1] += f" {slugs or 'none'}"

    async def toggle_stm(self) -> None:
        """``/stm settings``: short-term memory disabled (or enabled) for the guild."""
        proc = self._proc()
        current = self.configs[-1][0]
        enabled = not current if self.rng.random() < 0.8 else current

        async def body(op: Op) -> None:
            await proc.service.update_guild_settings(GUILD, BOB, short_term_memory_enabled=enabled)
            _, mode, slugs = self.configs[-1]
            self._changed_config(proc, (enabled, mode, slugs))

        self.start("settings", proc, body)
        self.log[-1] += f" stm {'on' if enabled else 'off'}"

    async def outage(self) -> None:
        proc = self._proc()
        self._set_down(proc, not proc.down)
        self.log.append(f"{proc.name} {'down' if proc.down else 'up'}")

    def _set_down(self, proc: Proc, down: bool) -> None:
        proc.down = down
        plan = faults(proc.real)
        if down:
            plan.fail()
        else:
            plan.clear()
            database_answered(proc.real)  # as its probe would find: the model counts it up

    async def replay(self) -> None:
        proc = self.procs["A"]
        assert proc.spool is not None
        if proc.down or not proc.spool.pending:
            return
        spool = proc.spool

        async def body(op: Op) -> None:
            op.meta["outcome"] = await spool.replay(proc.real)
            self.replays.append(self.seq + 1)
            if not spool.pending:
                self.drained.append(self.seq + 1)
                proc.service.spool_replayed()

        self.start("replay", proc, body)

    async def deliver(self, proc: Proc | None = None, everything: bool = False) -> None:
        proc = proc or self._proc()
        await self.notices.sync(self.db.engine)
        # Settings changes run one at a time: the n-th guild notice is the n-th change.
        assert self.notices.guild_notices == len(self.configs) - 1, "a change went unrecorded"
        inbox = self.notices.inboxes[proc.name]
        count = len(inbox) if everything else self.rng.randint(0, len(inbox))
        delivered, inbox[:] = inbox[:count], inbox[count:]
        if proc.listening != "ok":
            self.log.append(f"lost {len(delivered)} notices for {proc.name}")
            return
        now = self.clock.now()
        for notice in delivered:
            proc.service.apply_notice(notice)
            if notice.get("o") == proc.service.instance_id:
                continue  # its own echo: ignored
            kind = notice.get("t")
            if kind == "clear":
                proc.reach_clear[int(notice["c"])] = now
            elif kind == "forget":
                proc.reach_forget[int(notice["u"])] = now
            elif kind == "guild":
                proc.config_reach = max(proc.config_reach, int(notice["chaos_n"]))
        self.log.append(
            f"deliver {[(n['t'], n.get('k', n.get('c', n.get('u')))) for n in delivered]}"
            f" to {proc.name}"
        )

    async def listener(self) -> None:
        proc = self._proc()
        if proc.listening == "ok":
            proc.listening = self.rng.choice(["losing", "deaf"])
            if proc.listening == "deaf":
                proc.service.listener_lost()
        elif proc.listening == "losing":
            proc.listening = "deaf"
            proc.service.listener_lost()
        else:
            await self._reconnect(proc)
        self.log.append(f"listener {proc.name} {proc.listening}")

    async def _reconnect(self, proc: Proc) -> None:
        await self.notices.sync(self.db.engine)
        self.notices.inboxes[proc.name].clear()  # sent while away: lost
        proc.listening = "ok"
        proc.service.listening_again()
        # Every window and the settings were dropped: read again from now on.
        proc.reset_at = self.clock.now()
        proc.config_reach = len(self.configs) - 1

    async def release_one(self) -> None:
        parked = self.parked()
        if parked:
            await self.release(self.rng.choice(parked))

    # -- quiet, then check

    async def quiesce(self) -> None:
        while parked := self.parked():
            await self.release(parked[0])
        await self.settle()
        for proc in self.procs.values():
            if proc.down:
                self._set_down(proc, False)
            if proc.listening != "ok":
                await self._reconnect(proc)
        a = self.procs["A"]
        assert a.spool is not None
        # Rounds, not one pass: an operation that was waiting on real I/O (a lock held by
        # another connection) rather than parked ends in finish_stragglers, and what it
        # announced or spooled must still reach both processes before the check.
        for _ in range(3):
            for _ in range(3):
                if a.spool.pending:
                    self.log.append(f"quiesce: replayed {await a.spool.replay(a.real)}")
                    self.seq += 1
                    self.replays.append(self.seq)
                    if not a.spool.pending:
                        self.drained.append(self.seq)
                    a.service.spool_replayed()
                for proc in self.procs.values():
                    await self.deliver(proc, everything=True)
            await self.settle()
            if not self.parked() and all(op.task is None or op.task.done() for op in self.ops):
                break
            await self.finish_stragglers()

    async def finish_stragglers(self) -> None:
        """Give an operation still waiting time to end: ``settle`` does not count one
        waiting for a lock or a read led by a task outside the harness's view (a
        replay, a delivery), which ends once its real I/O does. One that waits for 15 s
        more is reported by ``check`` as never ended."""
        for _ in range(3):
            while parked := self.parked():
                await self.release(parked[0])
            waiting = [op.task for op in self.ops if op.task is not None and not op.task.done()]
            if not waiting:
                return
            await asyncio.wait(waiting, timeout=15)
