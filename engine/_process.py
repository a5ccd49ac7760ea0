"""Facts about processes on this machine: who we are, and whether a recorded one is gone.

A process is named by :class:`ProcessId`: host, boot id, pid namespace, pid and the
kernel's start time of the process. The pid alone is not enough (pids are reused), nor
is the host name (a container shares its host's boot id but not its pids): only a
process recorded on *this* host, boot and pid namespace can be looked up, and it is
provably gone when no process has its pid, or the one that has it started at another
time, or it is a zombie. Everywhere else (another host, no ``/proc``) nothing is provable
and callers must assume the process lives.

Also here: :func:`die_with_parent`, which makes a spawned child receive SIGKILL when the
thread that spawned it ends (Linux ``PR_SET_PDEATHSIG``), so a killed driver leaves no
command running behind it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "ProcessId",
    "die_with_parent",
    "group_members",
    "is_gone",
    "process_start",
    "this_process",
]

_PROC: Final = Path("/proc")
_PR_SET_PDEATHSIG: Final = 1


@dataclass(frozen=True, slots=True)
class ProcessId:
    """One process, named so that it cannot be confused with a later one of the same pid.

    Attributes:
        host: The host name.
        boot: The kernel's boot id (``/proc/sys/kernel/random/boot_id``); empty if unknown.
        pidns: The pid namespace (``/proc/self/ns/pid``); empty if unknown.
        pid: The process id.
        start: The process start time in clock ticks since boot (``/proc/PID/stat``
            field 22); 0 if unknown.
    """

    host: str
    boot: str
    pidns: str
    pid: int
    start: int

    def encode(self) -> str:
        """One line of text, read back by :meth:`decode`."""
        return f"{self.host} {self.boot or '-'} {self.pidns or '-'} {self.pid} {self.start}"

    @classmethod
    def decode(cls, text: str) -> ProcessId | None:
        """The id :meth:`encode` wrote, or ``None`` for text that is not one."""
        parts = text.split(" ")
        if len(parts) != 5 or not parts[3].isdigit() or not parts[4].isdigit():
            return None
        host, boot, pidns = (part if part != "-" else "" for part in parts[:3])
        return cls(host=host, boot=boot, pidns=pidns, pid=int(parts[3]), start=int(parts[4]))

    def same_machine(self) -> bool:
        """Whether this id's pid can be looked up here: same host, boot and pid namespace."""
        me = this_process()
        return bool(me.boot and me.pidns) and (self.host, self.boot, self.pidns) == (
            me.host,
            me.boot,
            me.pidns,
        )


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return ""


def _pidns() -> str:
    try:
        return os.readlink(_PROC / "self" / "ns" / "pid")
    except OSError:
        return ""


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, process group, start ticks) of a process, or ``None`` if there is none."""
    text = _read(_PROC / str(pid) / "stat")
    # The command name (field 2) may hold spaces and parentheses: split after its end.
    fields = text[text.rfind(")") + 2 :].split(" ") if text else []
    if len(fields) < 20:
        return None
    return fields[0], int(fields[2]), int(fields[19])


def process_start(pid: int) -> int | None:
    """The start time (clock ticks since boot) of a live process; ``None`` if none lives.

    A zombie (a process that ended but whose parent has not reaped it yet) counts as gone.
    """
    found = _stat(pid)
    if found is None or found[0] in ("Z", "X"):
        return None
    return found[2]


def group_members(pgid: int) -> list[int]:
    """The live processes of process group ``pgid`` (scans ``/proc``)."""
    members = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(_PROC):
            if entry.name.isdigit():
                found = _stat(int(entry.name))
                if found is not None and found[1] == pgid and found[0] not in ("Z", "X"):
                    members.append(int(entry.name))
    return members


_me: tuple[int, ProcessId] | None = None


def this_process() -> ProcessId:
    """This process's id (computed once per process; a forked child computes its own)."""
    global _me
    pid = os.getpid()
    if _me is None or _me[0] != pid:
        boot = _read(_PROC / "sys" / "kernel" / "random" / "boot_id")
        me = ProcessId(
            host=socket.gethostname(),
            boot=boot,
            pidns=_pidns(),
            pid=pid,
            start=process_start(pid) or 0,
        )
        _me = (pid, me)
    return _me[1]


def is_gone(process: ProcessId) -> bool:
    """Whether ``process`` has provably ended (see the module doc); ``False`` if unsure."""
    if not process.same_machine() or not process.start:
        return False
    return process_start(process.pid) != process.start


def _prctl() -> Callable[..., int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function: Callable[..., int] = libc.prctl
    except (OSError, AttributeError):  # not Linux: no parent-death signal
        return None
    return function


_PRCTL: Final = _prctl() if os.path.isdir(_PROC / "self") else None


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` making the child get SIGKILL when its spawning thread ends.

    Linux delivers the signal when the *thread* that forked the child exits, so spawn from
    a thread that lives as long as the driver (the event loop's). ``None`` where the
    kernel has no such signal. If the parent died before the child set the signal up, the
    child ends at once.
    """
    prctl = _PRCTL
    if prctl is None:
        return None
    parent = os.getpid()

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent is already gone: nobody would kill us
            os._exit(137)

    return arm
