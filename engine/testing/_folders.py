"""Working folders of the crash check's runs: each run works in a copy of its own.

The crash check runs a graph's own actions several times at once. Actions write files
(an agent's notes, a scratch repository): run in one folder, each run would see the files
the others wrote, and a correct graph would be reported as one whose resumed run
differs. So each run works in a fresh temporary folder holding a copy of the folder the
check was started in (version-control, virtual-environment and cache folders left out),
with a temporary folder of its own (``TMPDIR``), and both are removed when the run ends,
whether it finished or was stopped. A folder too big to copy for every run is shared, as
before, and the report says so.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["Folders", "working_folders"]

_SKIPPED: Final = (
    ".git",
    ".hg",
    ".svn",
    ".venv*",
    "venv",
    "node_modules",
    "__pycache__",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
)
"""Folders left out of each copy: no run reads them as its own files."""

_MAX_FILES: Final = 2_000
_MAX_BYTES: Final = 64 * 1024 * 1024
"""A folder past either is shared by every run rather than copied for each."""


@dataclass(frozen=True, slots=True)
class Folders:
    """Where the runs of one crash check work.

    Attributes:
        origin: The folder each run works in a copy of; ``None``: every run works in
            the current folder, shared.
        why: Why they share it, when they do.
    """

    origin: Path | None
    why: str = ""

    def describe(self) -> str:
        """Where the runs worked, in words, for the report."""
        if self.origin is None:
            return f"every run worked in this folder, shared ({self.why})"
        return (
            "each run worked in a copy of this folder of its own, with its own temporary "
            "folder, both removed afterwards"
        )

    def make(self) -> Path | None:
        """A fresh folder for one run (``None`` when runs share the current folder)."""
        if self.origin is None:
            return None
        return Path(tempfile.mkdtemp(prefix="phasegraph-test-"))

    def enter(self, folder: Path | None, source: str) -> str:
        """Fill ``folder`` and work in it (in the run's own process); the graph's source there.

        A graph file inside the copied folder is read from the copy; a built-in name or
        a file elsewhere is read where it is.
        """
        if folder is None or self.origin is None:
            return source
        work, scratch = folder / "work", folder / "tmp"
        _copy(self.origin, work)
        scratch.mkdir()
        os.environ["TMPDIR"] = str(scratch)
        tempfile.tempdir = None  # read TMPDIR again
        os.chdir(work)
        path = Path(source)
        if not path.is_file():
            return source
        try:
            return str(work / path.resolve().relative_to(self.origin))
        except ValueError:
            return str(path.resolve())

    @staticmethod
    def remove(folder: Path | None) -> None:
        """Remove what :meth:`make` made and the run wrote in it."""
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def _copy(origin: Path, work: Path) -> None:
    """Copy ``origin``; a file that vanished meanwhile (another process's scratch) is skipped.

    Raises:
        shutil.Error: A file that is there could not be copied.
    """
    try:
        shutil.copytree(origin, work, symlinks=True, ignore=_ignored, copy_function=shutil.copy2)
    except shutil.Error as exc:
        kept = [e for e in exc.args[0] if Path(e[0]).exists() or os.path.islink(e[0])]
        if kept:
            raise shutil.Error(kept) from None


def _ignored(_: str, names: list[str]) -> set[str]:
    return {name for name in names if any(fnmatch.fnmatch(name, p) for p in _SKIPPED)}


def working_folders(private: bool = True) -> Folders:
    """How the runs of a crash check started here will work.

    Args:
        private: Whether runs may work in copies at all (they share the folder when
            they run in this process, one after another).
    """
    if not private:
        return Folders(None, "the runs ran one after another in this process")
    origin = Path.cwd().resolve()
    files = size = 0
    for root, folders, names in os.walk(origin):
        folders[:] = [f for f in folders if f not in _ignored(root, folders)]
        for name in names:
            files += 1
            try:
                size += (Path(root) / name).lstat().st_size
            except OSError:
                continue
            if files > _MAX_FILES or size > _MAX_BYTES:
                return Folders(None, "it is too big to copy for every run")
    return Folders(origin)
