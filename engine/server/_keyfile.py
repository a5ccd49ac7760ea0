"""A file the server checks credentials against: re-read when it changes, 503 while broken.

The token file (``--tokens``) and a JWKS file (``--jwks``) are read at start-up, where
one that cannot be read stops the server with its name, and again whenever they change
on disk (modification time, size or inode), so tokens and keys are added, rotated and
revoked without a restart. One that becomes unreadable or malformed while the server
runs checks no credential until it is fixed: every credential it would check is answered
503 with the file and what is wrong with it (:class:`SignInUnavailable`), not 401 — the
client is not at fault, and a refusal would count against its address. It fails closed:
the keys last read are not used meanwhile, so a revocation never waits for a clean edit.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from phasegraph.errors import InputError
from phasegraph.server._principal import SignInUnavailable

__all__ = ["KeyFile"]

_T = TypeVar("_T")


class KeyFile(Generic[_T]):
    """One key file, read by ``read`` and read again whenever it changes on disk.

    Args:
        path: The file.
        read: Reads and parses it; raises :class:`InputError` naming the file and what
            is wrong with it (a missing file is for ``read`` to judge).

    Raises:
        InputError: The file cannot be read now, at start-up.
    """

    def __init__(self, path: Path, read: Callable[[Path], _T]) -> None:
        self.path = path
        self._read = read
        self._stamp: object = object()  # equal to no stamp: the first look reads
        self._loaded: tuple[_T] | None = None  # what the file held at the last good read
        self._problem = ""  # why it cannot be read, while it cannot
        self._reload()
        if self._loaded is None:
            raise InputError(self._problem)  # at start-up, say it rather than refuse everyone

    def keys(self) -> _T:
        """What the file holds now (read again first if it changed since the last look).

        Raises:
            SignInUnavailable: The file cannot be read or parsed now; names it.
        """
        self._reload()
        if self._loaded is None:
            raise SignInUnavailable(
                f"{self._problem}; the server checks no credential against it until it is fixed"
            )
        return self._loaded[0]

    def _reload(self) -> None:
        stamp = self._file_stamp()
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            self._loaded = (self._read(self.path),)
        except InputError as exc:
            self._loaded, self._problem = None, exc.message  # fail closed: forget the old keys

    def _file_stamp(self) -> object:
        """What changes when the file does: its time, size and inode (``None``: missing)."""
        try:
            status = os.stat(self.path)
        except FileNotFoundError:
            return None
        except OSError:
            return object()  # cannot even be looked at: read again, and let ``read`` say why
        return (status.st_mtime_ns, status.st_size, status.st_ino)
