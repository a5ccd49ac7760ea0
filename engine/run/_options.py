"""How runs are written and where they get time and ids (injected, so tests control both)."""

from __future__ import annotations

import os
import re
import secrets
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final, Protocol

from phasegraph.errors import InputError
from phasegraph.events import EventBus
from phasegraph.run._checkpoint import CheckpointPolicy
from phasegraph.store import Store
from phasegraph.store._holder import owner_with_holder

if TYPE_CHECKING:
    from phasegraph.run._stream import StreamLog

__all__ = [
    "RUN_ID_PATTERN",
    "Clock",
    "IdFactory",
    "RunEnvironment",
    "RunOptions",
    "SystemClock",
    "TimeOrderedIds",
    "check_run_id",
]

RUN_ID_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""What a run id may be (whole match): the one rule of the CLI, the server and the API."""


def check_run_id(run_id: str) -> str:
    """Return ``run_id`` if it follows :data:`RUN_ID_PATTERN`.

    Raises:
        InputError: It does not.
    """
    if not RUN_ID_PATTERN.fullmatch(run_id):
        raise InputError(
            f"run id {run_id!r} is not allowed: use 1 to 128 letters, digits, '.', '_' "
            "or '-', starting with a letter or digit",
            run_id=run_id,
        )
    return run_id


class Clock(Protocol):
    """Where the engine gets the time (injected so tests control it)."""

    def now(self) -> datetime:
        """The current time, timezone-aware."""
        ...


class SystemClock:
    """The real clock, in UTC."""

    def now(self) -> datetime:
        """The current time, timezone-aware."""
        return datetime.now(UTC)


class IdFactory(Protocol):
    """Where the engine gets new run ids (injected so tests control them)."""

    def new_run_id(self) -> str:
        """A fresh, unique run id."""
        ...


class TimeOrderedIds:
    """Run ids that sort by creation time: ``20261122T024501-1f3a9c2b7d04``.

    48 random bits per second keep collisions negligible even for thousands of runs
    started in the same second.
    """

    def new_run_id(self) -> str:
        """A fresh, unique run id."""
        return f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{secrets.token_hex(6)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOptions:
    """How runs are written.

    Attributes:
        checkpoint_every: Write a full snapshot this often, in steps (records in between
            hold only what changed); a large state waits until the records since the last
            snapshot add up to half its size, up to eight times as long. A small state is
            written sooner, once the records since outweigh it eight times over (but not
            before an eighth of this), so a read of the head applies few records.
        lease_ttl: Seconds a lease lasts without renewal.
        owner: Who holds the lease, shown to a refused second writer.
    """

    checkpoint_every: int = 64
    lease_ttl: float = 30.0
    owner: str = ""

    def checkpoint_policy(self) -> CheckpointPolicy:
        """When a commit carries a full snapshot, at ``checkpoint_every``."""
        return CheckpointPolicy(every=self.checkpoint_every)

    def owner_name(self) -> str:
        """The lease owner: ``owner`` (default ``host:pid``) and this process as holder.

        The holder lets a later ``resume`` on this machine take the lease over at once
        when this process has died (see :func:`~phasegraph.store.holder_gone`).
        """
        return owner_with_holder(self.owner or f"{socket.gethostname()}:{os.getpid()}")


# A plain class, not a dataclass: defining a dataclass costs every run's start more
# (dataclasses writes and compiles its methods) than it saves here.
class RunEnvironment:
    """What every run an engine drives shares: where it commits, its clock, its events.

    Attributes:
        store: Where the run's steps are committed.
        clock: The time source of its steps.
        bus: Receives the run's events, once each step is committed.
        streams: Numbers and keeps the live events of its actions (a model's streamed
            text) until their turns commit.
    """

    __slots__ = ("bus", "clock", "store", "streams")

    def __init__(self, *, store: Store, clock: Clock, bus: EventBus, streams: StreamLog) -> None:
        self.store: Final = store
        self.clock: Final = clock
        self.bus: Final = bus
        self.streams: Final = streams
