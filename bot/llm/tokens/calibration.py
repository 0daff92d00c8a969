"""How far a model's own token counts are from the estimate, learnt from reported usage."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

__all__ = ["Calibration"]


@dataclass
class Calibration:
    """A running ratio of server-reported to estimated prompt tokens, bounded and damped.

    The first observations are averaged, later ones move it by ``weight`` (an EMA). Each
    observation and the ratio are clamped to [``low``, ``high``], so one odd answer (a
    server that counts images, a wrong usage field) moves the scale by at most a step.
    """

    low: float = 0.5
    high: float = 2.5
    weight: float = 0.2
    # Tiny requests say little: their fixed framing dominates what was estimated.
    min_tokens: int = 32
    ratio: float = 1.0
    observations: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def observe(self, estimated: float, reported: int) -> None:
        """Learn from one request: ``estimated`` tokens (unscaled), ``reported`` by the server."""
        if estimated < self.min_tokens or reported <= 0:
            return
        sample = self._clamped(reported / estimated)
        with self._lock:
            self.observations += 1
            step = max(self.weight, 1.0 / self.observations)
            self.ratio = self._clamped(self.ratio + step * (sample - self.ratio))

    def _clamped(self, value: float) -> float:
        return min(self.high, max(self.low, value))
