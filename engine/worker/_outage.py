"""A store outage seen by a worker: said once when it starts, once when it ends.

While the store is away (a Redis restart, say) every call a worker makes fails: its
reads of the queue, heartbeats and deadline moves, and the commits and queue calls of
each run it drives. Each of them already goes on by itself — reads are retried, runs are
left for a reclaim and resumed from their last committed step — so a line per failure
would only bury the one thing a person needs to know. :class:`Outage` logs one warning
when the first call fails (what failed, and that the worker retries), one info line when
a call succeeds again, and the failures in between at debug level.
"""

from __future__ import annotations

import logging
import time
from typing import Final, final

from phasegraph.errors import StoreUnavailableError

__all__ = ["Outage"]

# Calls that started before the store came back may still fail just after it did (a
# pooled connection the restart closed): within this many seconds of the end of an
# outage, a failure continues that outage instead of starting a new one.
_TAIL: Final = 5.0


@final
class Outage:
    """Whether the store is unreachable, saying so once per outage.

    Args:
        log: Where the two lines of an outage go.
    """

    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._since: float | None = None  # when the current outage began
        self._last: tuple[float, float] | None = None  # the last one's start and end

    @property
    def away(self) -> bool:
        """Whether the store is unreachable (a call failed, and none succeeded since)."""
        return self._since is not None

    def failed(self, exc: StoreUnavailableError) -> None:
        """A call failed because the store could not be reached."""
        now = time.monotonic()
        if self._since is not None:
            self._log.debug("the store is still unreachable: %s", exc)
        elif self._last is not None and now - self._last[1] < _TAIL:
            self._since = self._last[0]  # a straggler of the outage that just ended
            self._log.debug("the store is unreachable again: %s", exc)
        else:
            self._since = now
            self._log.warning(
                "%s; the worker retries until the store answers, and its runs go on then",
                str(_root(exc)).rstrip("."),
            )

    def answered(self) -> None:
        """A call succeeded: an outage, if there was one, is over."""
        if self._since is None:
            return
        now = time.monotonic()
        self._log.info("the store answers again after %.1f s; serving", now - self._since)
        self._last, self._since = (self._since, now), None


def _root(exc: StoreUnavailableError) -> StoreUnavailableError:
    """The store's own error under the errors that wrap it (a run's stop names its step)."""
    while isinstance(exc.__cause__, StoreUnavailableError):
        exc = exc.__cause__
    return exc
