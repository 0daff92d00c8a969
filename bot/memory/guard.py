"""Whether what was read about a message still holds: the message not deleted, its
channel not wiped, nobody forgotten since (the checks the chat edge makes around a turn)."""

from __future__ import annotations

from dataclasses import dataclass, field

from bot.memory.stm import MemoryState


@dataclass(frozen=True, slots=True)
class MessageGuard:
    """One message of one channel, with the channel's epoch (wipes) and the count of
    changes heard (forgets) at one moment, to ask later what happened since."""

    state: MemoryState = field(repr=False)
    channel_id: int
    message_id: int
    # The channel's count of wipes the answer is checked against (see :meth:`wiped`).
    epoch: int
    mark: int

    def deleted(self) -> bool:
        """Whether the message was deleted (or wiped out of its window) lately."""
        return self.state.windows.was_deleted(self.message_id)

    def wiped(self) -> bool:
        """Whether a /refresh (or a /forget-me of someone there) wiped the channel since
        :attr:`epoch`."""
        return self.state.epoch(self.channel_id) != self.epoch

    def forgotten(self) -> bool:
        """Whether a /forget-me (here, or heard from elsewhere) may have come since the
        guard was taken."""
        ledger = self.state.ledger
        return ledger.deaf or ledger.since(self.mark)
