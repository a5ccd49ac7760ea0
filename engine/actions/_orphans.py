"""No orphans: a command outlives its driver only until the action runs again.

A ``shell:`` command runs in its own session (so a timeout can kill everything it
started) and gets SIGKILL when its driver dies (:func:`~phasegraph._process.die_with_parent`).
That signal reaches the command itself, not what it started in the background. So while
a command runs, a small record of it — driver and command as
:class:`~phasegraph._process.ProcessId`, one file per command — sits in this user's
runtime directory; it is removed when the command has ended. Before a node's command
starts, :func:`reap_orphans` reads that node's records: a record whose driver has
provably died names a process group that may still be alive, and that group is killed
(and waited for) so an action never runs beside a leftover copy of itself. A record of a
live driver is left alone (the same run id may be driven from another store).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import os
import signal
import tempfile
from pathlib import Path
from typing import Final

from phasegraph._process import (
    ProcessId,
    die_with_parent,
    group_members,
    is_gone,
    process_start,
    this_process,
)

__all__ = ["ChildRecord", "reap_orphans"]

_GONE_WAIT: Final = 2.0  # seconds to wait for a killed group to be gone
_POLL: Final = 0.01


def _records_dir(run_id: str, node_id: str) -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    key = hashlib.sha256(f"{run_id}\0{node_id}".encode()).hexdigest()[:32]
    return Path(base) / f"phasegraph-{os.getuid()}" / "children" / key


class ChildRecord:
    """The record of one command: written by the child itself before it runs the command.

    The child writes it (:meth:`in_child`, the ``preexec_fn``) after it armed its
    parent-death signal and before it executes the command, so a driver killed at any
    moment after the spawn leaves either no command or a command with its record.
    """

    def __init__(self, run_id: str, node_id: str) -> None:
        folder = _records_dir(run_id, node_id)
        self._folder: Path | None = folder
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError:  # best effort: a command must not fail for want of its record
            self._folder = None
        self._driver = this_process()
        self._arm = die_with_parent()

    def in_child(self) -> None:
        """Run in the forked child before exec: arm the signal, then write the record."""
        if self._arm is not None:
            self._arm()
        if self._folder is None:
            return
        # Plain os calls only: this runs between fork and exec.
        pid = os.getpid()
        child = dataclasses.replace(self._driver, pid=pid, start=_own_start())
        text = f"{self._driver.encode()}\n{child.encode()}\n".encode("ascii", "replace")
        try:
            fd = os.open(self._folder / str(pid), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, text)
            finally:
                os.close(fd)
        except OSError:
            pass

    def remove(self, pid: int) -> None:
        """Forget the command ``pid`` (it has ended, its group killed if need be)."""
        if self._folder is not None:
            with contextlib.suppress(OSError):
                (self._folder / str(pid)).unlink()
                self._folder.rmdir()  # only if empty: leave no folder per finished node


def _own_start() -> int:
    """This process's start time in clock ticks (field 22 of /proc/self/stat); 0 if unknown."""
    try:
        fd = os.open("/proc/self/stat", os.O_RDONLY)
        try:
            stat = os.read(fd, 4096)
        finally:
            os.close(fd)
        return int(stat[stat.rfind(b")") + 2 :].split(b" ")[19])
    except (OSError, ValueError, IndexError):
        return 0


async def reap_orphans(run_id: str, node_id: str) -> None:
    """Kill what a dead driver's command of this node left running; forget its records."""
    folder = _records_dir(run_id, node_id)
    try:
        entries = list(folder.iterdir())
    except OSError:
        return
    for path in entries:
        driver, child = _read(path)
        if driver is None or child is None:
            with contextlib.suppress(OSError):
                path.unlink()  # not a record we wrote
            continue
        if not is_gone(driver):
            continue  # a live driver (or one we cannot check) still owns it
        await _kill_group(child)
        with contextlib.suppress(OSError):
            path.unlink()


def _read(path: Path) -> tuple[ProcessId | None, ProcessId | None]:
    try:
        lines = path.read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError):
        return None, None
    if len(lines) != 2:
        return None, None
    return ProcessId.decode(lines[0]), ProcessId.decode(lines[1])


async def _kill_group(child: ProcessId) -> None:
    """Kill the process group ``child`` led, if it is still that group, and wait till empty.

    The group's id is the child's pid. If a process with that pid lives but started at
    another time, the number was reused (which the kernel allows only once the old group
    is empty): nothing of ours is left.
    """
    if not child.same_machine():
        return
    leader = process_start(child.pid)
    if leader is not None and leader != child.start:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _GONE_WAIT
    while group_members(child.pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)
        if loop.time() > deadline:
            return
        await asyncio.sleep(_POLL)
