"""Which process holds a lease, and whether it provably died (so its lease can go at once).

An owner string as stored with a lease is a display name (``host:pid`` unless the
caller chose one), optionally followed by :data:`HOLDER_SEPARATOR` and the holder
process's :class:`~phasegraph._process.ProcessId`. Only the name is ever shown. A live
lease whose recorded holder ran on this host, boot and pid namespace and whose process
has ended is dead weight: ``acquire`` takes it over at once instead of waiting for its
expiry. A holder on another host, a live one, or an owner without a holder keeps the
fencing rule (the lease is refused until it expires).
"""

from __future__ import annotations

from typing import Final

from phasegraph._process import ProcessId, is_gone, this_process

__all__ = ["HOLDER_SEPARATOR", "holder_gone", "owner_label", "owner_with_holder"]

HOLDER_SEPARATOR: Final = "\x1f"
"""Between an owner's display name and its holder process (ASCII unit separator)."""


def owner_with_holder(name: str) -> str:
    """``name`` followed by this process as the holder (the name loses any separator)."""
    label = name.replace(HOLDER_SEPARATOR, " ")
    return f"{label}{HOLDER_SEPARATOR}{this_process().encode()}"


def owner_label(owner: str) -> str:
    """The display name of an owner string (without its holder)."""
    return owner.partition(HOLDER_SEPARATOR)[0]


def holder_gone(owner: str) -> bool:
    """Whether the owner's recorded holder process has provably ended (see module doc)."""
    _, found, text = owner.partition(HOLDER_SEPARATOR)
    holder = ProcessId.decode(text) if found else None
    return holder is not None and is_gone(holder)
