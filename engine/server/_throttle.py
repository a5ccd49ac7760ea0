"""Failed sign-ins, rate-limited per client address with a token bucket.

Each address holds up to ``burst`` attempts and regains one every ``refill`` seconds; each
refused credential spends one. With none left, every credential from that address is
answered 429 (with ``Retry-After``) before it is checked, so guessing gets no faster by
trying harder. Time comes from the clock given, so tests drive it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final

__all__ = ["FailureThrottle"]

_MAX_ADDRESSES: Final = 10_000


class FailureThrottle:
    """Token buckets of failed authentication attempts, one per client address."""

    def __init__(self, burst: int, refill: float, clock: Callable[[], float]) -> None:
        self._burst = float(burst)
        self._refill = refill
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # address -> (tokens, as of)

    def _tokens(self, address: str, now: float) -> float:
        tokens, since = self._buckets.get(address, (self._burst, now))
        return min(self._burst, tokens + max(0.0, now - since) / self._refill)

    def retry_after(self, address: str) -> int | None:
        """Whole seconds until ``address`` may try again (``None``: it may now)."""
        now = self._clock()
        tokens = self._tokens(address, now)
        if tokens >= 1.0:
            return None
        return max(1, math.ceil((1.0 - tokens) * self._refill))

    def failed(self, address: str) -> None:
        """Spend one attempt of ``address``."""
        now = self._clock()
        tokens = self._tokens(address, now) - 1.0
        self._buckets.pop(address, None)  # re-inserted last: the dict stays oldest first
        self._buckets[address] = (tokens, now)
        while len(self._buckets) > _MAX_ADDRESSES:
            del self._buckets[next(iter(self._buckets))]  # the address idle longest
