"""The compiled-graph cache: a graph file loaded once is read back while its files are unchanged.

Loading a graph file (its YAML, the format checks, its machines) and the libraries that
takes (``yaml``, ``pydantic``, ``jsonschema``) are most of what ``phasegraph run`` costs
before its first step. :func:`load_graph` keeps what it loaded as bytes
(:mod:`phasegraph.codec._definitions`: msgspec, never pickle) in the cache folder, under
a key made of the graph file's path and content hash and of phasegraph's own loader
files. An entry lists every file the definition was read from (the graph file and each
machine file, built-in ones included) with its content hash, and is used only while each
file still hashes the same: an edited, moved or deleted file is a miss.

A run's stored definition (:mod:`phasegraph.run._definitions`) is kept the same way
(:func:`load_stored`), under the key it is stored by: its files never change, so its
entry needs no file hashes.

Anything wrong with an entry (unreadable, stale, written by another phasegraph) is a miss,
and a miss loads the graph the full way and writes the entry anew, atomically (a rename).
A graph that does not load is never kept: its errors are found again, the same way. A
folder that cannot be written is a cache that keeps nothing; one keeps :data:`KEPT`
graphs and as many inputs, the most recently written.

The same folder remembers which run inputs passed a graph's ``input:`` schema
(:func:`valid_before`, :func:`remember_valid`): validation is a pure function of the
schema and the input, and the validator (``jsonschema``) costs more to import than the
rest of a short run, so a run started again with an input that passed that schema before
is not checked again. An entry is an empty file named by the hash of both (and of the
loader), written only after the input passed.

The folder: ``PHASEGRAPH_CACHE_DIR`` (set but empty: no cache), else
``$XDG_CACHE_HOME/phasegraph/graphs``, else ``~/.cache/phasegraph/graphs``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from phasegraph.codec._definitions import decode_graph, encode_graph
from phasegraph.core._sources import current
from phasegraph.errors import CodecError
from phasegraph.model import GraphDef
from phasegraph.spec._catalog import builtin, is_name

__all__ = [
    "CACHE_ENV",
    "KEPT",
    "cache_dir",
    "load_graph",
    "load_stored",
    "remember_valid",
    "valid_before",
]

CACHE_ENV: Final = "PHASEGRAPH_CACHE_DIR"
KEPT: Final = 256
"""Entries of each kind the folder keeps (a server taking uploads writes one per graph):
writing one more forgets the least recently written."""
_PACKAGE: Final = Path(__file__).resolve().parents[1]
_LOADER: Final = ("spec", "core", "codec", "model.py", "errors.py", "_vocabulary.py")
"""What a definition is made by: when any of these files changes, every entry is stale."""


def cache_dir() -> Path | None:
    """The folder entries are kept in (``None``: the cache is off)."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen is not None:
        return Path(chosen) if chosen else None
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "phasegraph" / "graphs"


@functools.cache
def _loader_stamp() -> str:
    """Names, sizes and modification times of the loader's files (one stat each)."""
    stamps = [sys.version, str(_PACKAGE)]
    for name in _LOADER:
        path = _PACKAGE / name
        if path.is_dir():
            files = sorted(e.path for e in os.scandir(path) if e.name.endswith(".py"))
        else:
            files = [str(path)]
        for file in files:
            stat = os.stat(file)
            stamps.append(f"{file}:{stat.st_size}:{stat.st_mtime_ns}")
    return "\n".join(stamps)


def _hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError:
        return None


def load_graph(source: str | Path) -> GraphDef:
    """Load and validate a workflow graph and every machine it uses.

    A graph loaded before whose files are all unchanged is read back from the cache
    (see the module docstring): the same definition, without parsing anything again.

    Args:
        source: A path to a graph file, or the name of a built-in graph (no ``/``, no
            ``.yaml`` suffix).

    Returns:
        The frozen graph definition; ``machines`` holds every machine its nodes use,
        nested ones included, and ``digest`` changes with any change to any of them.

    Raises:
        SpecError: Every problem of the graph file and of the machines it uses.
    """
    path = builtin(source, "graphs", "graph") if is_name(source) else Path(source)
    if current() is not None:
        return _load(source)  # a run's stored files are read: the disk says nothing of them
    folder, text = cache_dir(), _read(str(path))
    if folder is None or text is None:
        return _load(source)
    key = _hash(f"{_loader_stamp()}\n{path}\n{os.path.abspath(path)}\n".encode() + text)
    entry = folder / f"{key}.graph"
    definition = _recall(entry)
    if definition is None:
        definition = _load(source)
        if _read(str(path)) == text:  # not edited while it loaded
            _keep(entry, definition, path, text)
    return definition


def _load(source: str | Path) -> GraphDef:
    from phasegraph.spec._loader import load_graph as load  # the full way: see the docstring

    return load(source)


def _recall(entry: Path) -> GraphDef | None:
    """The definition kept in ``entry`` if every file it was read from is unchanged."""
    data = _read(str(entry))
    if data is None:
        return None
    header, _, body = data.partition(b"\n")
    try:
        files = json.loads(header)
        if not all(_hash(_read(name) or b"") == digest for name, digest in files[1:]):
            return None
        return decode_graph(body)
    except (ValueError, TypeError, CodecError):
        return None


def load_stored(key: str, folder: Path, load: Callable[[], GraphDef]) -> GraphDef:
    """A run's stored definition ``key``, as ``load`` loads it from its stored files.

    Stored files never change (``key`` is their digest), so an entry for ``key`` placed
    in ``folder`` is read back whenever phasegraph's loader is unchanged: resuming a run
    costs what resuming from an unchanged graph file costs.
    """
    cache = cache_dir()
    if cache is None:
        return load()
    stamp = f"{_loader_stamp()}\nstored:{key}\n{os.path.abspath(folder)}\n"
    entry = cache / f"{_hash(stamp.encode())}.graph"
    definition = _recall(entry)
    if definition is None:
        definition = load()
        _write(entry, [["stored", key]], definition)
    return definition


def _keep(entry: Path, definition: GraphDef, path: Path, text: bytes) -> None:
    """Write ``entry``: the files the definition was read from, then the definition."""
    machines = {m.location.path for m in definition.machines.values() if m.location}
    files = [[os.path.abspath(path), _hash(text)]]
    for name in sorted(os.path.abspath(m) for m in machines):
        data = _read(name)
        if data is None:
            return  # a machine file that went away: nothing worth keeping
        files.append([name, _hash(data)])
    _write(entry, files, definition)


def _write(entry: Path, files: list[list[str]], definition: GraphDef) -> None:
    """Write ``entry`` atomically: ``files`` (the first names the entry), the definition."""
    data = json.dumps(files).encode() + b"\n" + encode_graph(definition)
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=entry.parent, suffix=".part")
    except OSError:
        return  # a folder that cannot be written keeps nothing; loading still worked
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
        os.replace(temporary, entry)
    except OSError:
        Path(temporary).unlink(missing_ok=True)
    _forget_oldest(entry.parent, ".graph")


def _forget_oldest(folder: Path, suffix: str) -> None:
    """Delete the oldest entries past :data:`KEPT` (another process may delete them too)."""
    try:
        entries = [e for e in os.scandir(folder) if e.name.endswith(suffix)]
        if len(entries) <= KEPT:
            return
        entries.sort(key=lambda e: e.stat().st_mtime_ns)
        for old in entries[: len(entries) - KEPT]:
            os.unlink(old.path)
    except OSError:
        pass  # gone already, or not ours to delete: the next write tries again


def _verdict(schema: Mapping[str, Any], run_input: Mapping[str, Any]) -> Path | None:
    """The file that says ``run_input`` passed ``schema`` (None: not one to remember)."""
    folder = cache_dir()
    if folder is None:
        return None
    try:
        text = json.dumps([dict(schema), dict(run_input)], sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return None  # not plain JSON (an embedder's own objects): always checked
    stamp = f"{_loader_stamp()}\n{_validator_stamp()}\n{text}"
    return folder / "inputs" / f"{_hash(stamp.encode())}.input"


@functools.cache
def _validator_stamp() -> str:
    """Where the installed validator is and when it was installed (found, not imported)."""
    found = importlib.util.find_spec("jsonschema")
    origin = found.origin if found is not None else None
    if origin is None:
        return ""
    return f"{origin}:{os.stat(origin).st_mtime_ns}"


def valid_before(schema: Mapping[str, Any], run_input: Mapping[str, Any]) -> bool:
    """Whether ``run_input`` passed ``schema`` before (so it passes now)."""
    verdict = _verdict(schema, run_input)
    return verdict is not None and verdict.is_file()


def remember_valid(schema: Mapping[str, Any], run_input: Mapping[str, Any]) -> None:
    """Remember that ``run_input`` passed ``schema`` (nothing if it cannot be kept)."""
    verdict = _verdict(schema, run_input)
    if verdict is not None:
        try:
            verdict.parent.mkdir(parents=True, exist_ok=True)
            verdict.touch()
        except OSError:
            return  # a folder that cannot be written: the input is checked every time
        _forget_oldest(verdict.parent, ".input")
