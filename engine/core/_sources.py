"""Where the loader reads a definition's files: the disk, or a run's stored copy of them.

A run keeps the files its graph was loaded from (the graph, its machine files, built-in
ones included, its response scripts) in its store (:mod:`phasegraph.run._definitions`).
To load that definition again, the loader reads those texts instead of the disk: inside
:func:`reading`, :func:`read_bytes` and :func:`is_file` answer from the stored copy for
every path it holds, and from the disk for the rest (Python action modules, which are
referenced, never stored). The stored files are laid out as they were: around the run's
graph file, and in the built-in folders of this installation.

The copy in effect is a context variable, set only while a stored definition is loaded
and its actions built (an action that reads a file later, such as a response script,
takes the copy in effect when it is built: :func:`current`).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

__all__ = [
    "BUILTIN",
    "StoredFiles",
    "builtin_overrides",
    "current",
    "is_file",
    "read_bytes",
    "reading",
]

BUILTIN: Final = "<builtin>/"
"""How a stored file name marks a built-in file: ``<builtin>/states/agent.yaml``."""


class StoredFiles:
    """A definition's stored files, placed as the loader will look for them.

    Args:
        files: File name → text, as :func:`~phasegraph.run._definitions.gather` names
            them: relative to the graph file's folder, or ``<builtin>/KIND/NAME``.
        folder: The graph file's folder (where the relative names are placed).
        builtin_dir: Where this installation keeps built-in files of a kind.
    """

    __slots__ = ("builtins", "by_path")

    def __init__(
        self, files: Mapping[str, str], folder: Path, builtin_dir: Mapping[str, Path]
    ) -> None:
        self.by_path: dict[str, bytes] = {}
        self.builtins: dict[str, dict[str, Path]] = {}
        for name, text in files.items():
            if name.startswith(BUILTIN):
                kind, _, file = name[len(BUILTIN) :].partition("/")
                path = builtin_dir[kind] / file
                self.builtins.setdefault(kind, {})[Path(file).stem] = path
            else:
                path = folder / name
            self.by_path[os.path.normpath(path)] = text.encode("utf-8")


_CURRENT: Final[contextvars.ContextVar[StoredFiles | None]] = contextvars.ContextVar(
    "phasegraph_stored_files", default=None
)


@contextlib.contextmanager
def reading(files: StoredFiles) -> Iterator[None]:
    """Read ``files`` instead of the disk where they have the path asked for."""
    token = _CURRENT.set(files)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current() -> StoredFiles | None:
    """The stored files in effect (``None``: the disk alone)."""
    return _CURRENT.get()


def read_bytes(path: Path, files: StoredFiles | None = None) -> bytes:
    """The file at ``path``: its stored copy if there is one in effect, else the disk's.

    Raises:
        OSError: Neither has it.
    """
    stored = files if files is not None else _CURRENT.get()
    if stored is not None:
        found = stored.by_path.get(os.path.normpath(path))
        if found is not None:
            return found
    return path.read_bytes()


def is_file(path: Path) -> bool:
    """Whether :func:`read_bytes` can read ``path``."""
    stored = _CURRENT.get()
    if stored is not None and os.path.normpath(path) in stored.by_path:
        return True
    return path.is_file()


def builtin_overrides(kind: str) -> Mapping[str, Path]:
    """Built-in files of ``kind`` the stored copy in effect has (name → path)."""
    stored = _CURRENT.get()
    return {} if stored is None else stored.builtins.get(kind, {})
