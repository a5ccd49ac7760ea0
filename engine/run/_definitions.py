"""The definition travels with the run: its files stored by content, and loaded back from there.

Creating a run keeps the files its graph was loaded from in the run's store — the graph
file, every machine file its nodes use (built-in ones too, so an upgrade of phasegraph
does not change a waiting run's machines), each response script and child graph file it
names — as one :class:`~phasegraph.codec._stored_definition.StoredDefinition`, under the
sha256 of its bytes, once per distinct content. The run is pinned to that key
(``RunState.definition``): resuming, answering, replaying and forking it load the stored
files, never the graph file on disk, so a run whose file was edited or deleted goes on
as it began. Moving a run to another definition is a checked ``migrate`` step
(:mod:`phasegraph.run._migrate`).

Python action code is referenced, not stored: its modules are imported from the graph
file's folder (or the import path) as they are now. Each module's file digest is stored,
so that a change of code is reported when the run is driven again (:func:`drift`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from phasegraph.codec._stored_definition import (
    StoredDefinition,
    decode_definition,
    encode_definition,
)
from phasegraph.core._plans import plan_templates
from phasegraph.core._sources import BUILTIN, StoredFiles, reading
from phasegraph.errors import DefinitionUnavailableError, Problem, RunStateError, SpecError
from phasegraph.model import ActionDef, GraphDef, NodeDef, RunState
from phasegraph.spec._catalog import builtin_dir, is_name

if TYPE_CHECKING:
    from phasegraph.run._prepare import PreparedGraph
    from phasegraph.store.base import Store

__all__ = ["Definitions", "drift", "gather", "graph_folder", "stored_files"]

_KINDS: Final = ("states", "graphs")
_LIMIT: Final = 256  # prepared definitions an engine keeps


def _hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def graph_folder(graph_source: str) -> Path:
    """The folder a run's graph file is in (the built-in graphs' for a built-in's name)."""
    if is_name(graph_source):
        return builtin_dir("graphs")
    return Path(os.path.abspath(graph_source)).parent


def _stored_name(path: str, folder: Path, builtins: Mapping[str, Path]) -> str:
    """How a file is named in a stored definition (see :class:`StoredDefinition`)."""
    absolute = os.path.abspath(path)
    for kind, where in builtins.items():
        if os.path.dirname(absolute) == str(where):
            return f"{BUILTIN}{kind}/{os.path.basename(absolute)}"
    return Path(os.path.relpath(absolute, folder)).as_posix()


def _scripts_and_children(definition: GraphDef, folder: Path) -> list[Path]:
    """The response scripts and child graph files the graph's nodes name."""
    nodes: list[NodeDef] = list(definition.nodes)
    nodes += [template for template, _ in plan_templates(definition.nodes)]
    found: list[Path] = []
    for node in nodes:
        llm = node.settings.get("llm")
        if isinstance(llm, Mapping) and isinstance(llm.get("script"), str):
            found.append(folder / str(llm["script"]))
        for action in node.bind.values():
            graph = _child_graph(action)
            if graph is not None and not is_name(graph):
                found.append(folder / graph)
    return [path for path in found if path.is_file()]


def _child_graph(action: ActionDef) -> str | None:
    if action.kind != "graph":
        return None
    config = action.config.get("graph")
    graph = config.get("graph") if isinstance(config, Mapping) else None
    return str(graph) if isinstance(graph, str) else None


def _modules(definition: GraphDef) -> list[str]:
    """The Python modules the graph's actions import (``python:`` and ``reconcile:``)."""
    modules: set[str] = set()
    nodes = [*definition.nodes, *(template for template, _ in plan_templates(definition.nodes))]
    for node in nodes:
        for action in node.bind.values():
            for key in ("python", "reconcile"):
                target = action.config.get(key)
                if isinstance(target, str) and ":" in target:
                    modules.add(target.partition(":")[0])
    return sorted(modules)


def _module_file(module: str, folder: Path) -> Path | None:
    beside = folder.joinpath(*module.split(".")).with_suffix(".py")
    if beside.is_file():
        return beside
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    origin = spec.origin if spec is not None else None
    return Path(origin) if origin and os.path.isfile(origin) else None


def _code(definition: GraphDef, folder: Path) -> dict[str, str]:
    """Module → sha256 of its file, for every module the graph's actions import."""
    code: dict[str, str] = {}
    for module in _modules(definition):
        path = _module_file(module, folder)
        if path is not None:
            code[module] = _hash(path.read_bytes())
    return code


def gather(definition: GraphDef) -> tuple[str, bytes]:
    """The key and bytes of ``definition``'s files, read now (see the module doc).

    Raises:
        OSError: A file it was loaded from cannot be read any more.
    """
    if definition.location is None:
        raise OSError(f"graph {definition.name!r} was given as text: it has no files")
    graph_path = os.path.abspath(definition.location.path)
    folder = Path(graph_path).parent
    builtins = {kind: builtin_dir(kind).resolve() for kind in _KINDS}
    paths = {graph_path}
    paths |= {os.path.abspath(m.location.path) for m in definition.machines.values() if m.location}
    paths |= {os.path.abspath(p) for p in _scripts_and_children(definition, folder)}
    files = {
        _stored_name(path, folder, builtins): Path(path).read_text(encoding="utf-8")
        for path in sorted(paths)
    }
    stored = StoredDefinition(
        graph=_stored_name(graph_path, folder, builtins),
        files=dict(sorted(files.items())),
        code=_code(definition, folder),
    )
    body = encode_definition(stored)
    return _hash(body), body


def drift(
    state: RunState, stored: StoredDefinition, digest_now: Callable[[], str | None]
) -> list[str]:
    """One line each for what differs on disk from what the run follows (nothing: ``[]``).

    ``digest_now`` loads the run's graph file as it is now and gives its digest (``None``:
    the file is gone or does not load).
    """
    lines: list[str] = []
    source = state.graph_source
    if not is_name(source):
        now = digest_now()
        if now is None:
            lines.append(
                f"the graph file {source} is gone or does not load; run {state.run_id} goes on "
                f"with the definition it stored (version {state.graph_digest[:12]})"
            )
        elif now != state.graph_digest:
            lines.append(
                f"the graph file {source} differs from the definition run {state.run_id} "
                f"follows (version {state.graph_digest[:12]}, the file's {now[:12]}): the run "
                f"goes on as it began; to move it to the file: phasegraph migrate "
                f"{state.run_id} --to {source}"
            )
    folder = graph_folder(source)
    for module, digest in sorted(stored.code.items()):
        path = _module_file(module, folder)
        if path is None:
            lines.append(f"python module {module} of run {state.run_id} cannot be found")
        elif _hash(path.read_bytes()) != digest:
            lines.append(
                f"python module {module} ({path}) changed since run {state.run_id} stored "
                "its definition: its actions run the code as it is now"
            )
    return lines


def stored_files(stored: StoredDefinition, source: str) -> tuple[StoredFiles, Path]:
    """``stored``'s files placed around the graph file at ``source``, and that file's path."""
    folder = graph_folder(source)
    builtins = {kind: builtin_dir(kind) for kind in _KINDS}
    graph = stored.graph
    if graph.startswith(BUILTIN):
        kind, _, name = graph[len(BUILTIN) :].partition("/")
        path = builtins[kind] / name
    else:
        path = folder / graph
    return StoredFiles(stored.files, folder, builtins), path


class Definitions:
    """An engine's stored definitions: pinned when runs are created, loaded to drive them.

    Args:
        store: Where definitions are kept (beside the runs).
        prepare: Compiles a loaded definition for a graph source (the engine's, so its
            middleware applies).
    """

    def __init__(self, store: Store, prepare: Callable[[GraphDef, str], PreparedGraph]) -> None:
        self._store = store
        self._prepare = prepare
        # (source, digest) → key and bytes (None: not its files, never stored)
        self._keys: dict[tuple[str, str], tuple[str, bytes] | None] = {}
        self._kept: set[str] = set()  # keys known to be in the store
        self._prepared: dict[tuple[str, str], PreparedGraph] = {}  # (key, source) → graph
        self._stored: dict[str, StoredDefinition] = {}

    async def pin(self, prepared: PreparedGraph) -> str:
        """The key of ``prepared``'s definition, stored first if the store lacks it.

        A definition stored before costs one small read (``has_definition``), no write.
        A definition that is not its files (built in Python, or from text; or a file
        edited while it was read) is not stored: ``""``, and its runs follow what they
        are given (see :meth:`~phasegraph.api.Engine.open`).

        Raises:
            OSError: A file of the definition cannot be read any more.
        """
        found = self._gathered(prepared)
        if found is None:
            return ""
        key, body = found
        if key not in self._kept:
            if not await self._store.has_definition(key):
                if not self._loads_as(key, body, prepared):
                    self._keys[(prepared.source, prepared.definition.digest)] = None
                    return ""
                await self._store.put_definition(key, body)
            self._kept.add(key)
        return key

    def _gathered(self, prepared: PreparedGraph) -> tuple[str, bytes] | None:
        """The key and bytes of ``prepared``'s files, read once per engine (None: it has none)."""
        definition = prepared.definition
        memo = (prepared.source, definition.digest)
        if memo in self._keys:
            return self._keys[memo]
        if definition.location is None or not os.path.isfile(definition.location.path):
            return None
        found = self._keys[memo] = gather(definition)
        _trim(self._keys)
        return found

    def _loads_as(self, key: str, body: bytes, prepared: PreparedGraph) -> bool:
        """Whether the files gathered load as the definition they were read for.

        Else a run would be pinned to a definition it never started with (a file edited
        between the load and the read, or a definition built in Python whose location
        names some file). Loaded once per new definition, and kept.
        """
        stored = decode_definition(body, key)
        try:
            loaded = self.load(key, stored, prepared.source)
        except SpecError:
            return False
        if loaded.definition.digest != prepared.definition.digest:
            return False
        self._stored[key] = stored
        self._prepared[(key, prepared.source)] = loaded
        return True

    async def stored(self, key: str, run_id: str) -> StoredDefinition:
        """The stored definition ``key`` (of run ``run_id``, which messages name).

        Raises:
            RunStateError: The store does not have it.
            CodecError: It is damaged or of a newer layout.
        """
        found = self._stored.get(key)
        if found is None:
            body = await self._store.get_definition(key)
            if body is None:
                raise RunStateError(
                    f"run {run_id!r} follows the stored definition {key[:12]}, which its "
                    "store does not have (was the store restored without it?)",
                    run_id=run_id,
                )
            found = self._stored[key] = decode_definition(body, key)
            self._kept.add(key)
            _trim(self._stored)
        return found

    async def prepared(self, state: RunState) -> PreparedGraph:
        """The graph ``state``'s run follows, loaded from its stored definition.

        Raises:
            RunStateError: The run is not pinned, or its definition is not in the store.
            DefinitionUnavailableError: The stored definition does not load here (a
                Python module it imports is missing, say); the problems name its files.
            CodecError: The stored definition is damaged or of a newer layout.
        """
        key, source = state.definition, state.graph_source
        if not key:
            raise RunStateError(f"run {state.run_id!r} is not pinned to a stored definition")
        memo = (key, source)
        prepared = self._prepared.get(memo)
        if prepared is None:
            stored = await self.stored(key, state.run_id)
            try:
                prepared = self.load(key, stored, source)
            except SpecError as exc:
                head = Problem(
                    f"run {state.run_id} follows version {state.graph_digest[:12]} of graph "
                    f"{state.graph!r} (stored definition {key[:12]}), which does not load "
                    "here:"
                )
                raise DefinitionUnavailableError(
                    [head, *exc.problems], run_id=state.run_id
                ) from None
            self._prepared[memo] = prepared
            _trim(self._prepared)
        return prepared

    def load(self, key: str, stored: StoredDefinition, source: str) -> PreparedGraph:
        """Load and compile ``stored`` (kept as ``key``) as the graph at ``source``."""
        from phasegraph.spec._cache import load_stored

        files, path = stored_files(stored, source)
        folder = graph_folder(source)
        with reading(files):  # actions built now read the stored files too (scripts)
            definition = load_stored(key, folder, lambda: _load_graph(path))
            return self._prepare(definition, source)


def _load_graph(path: Path) -> GraphDef:
    from phasegraph.spec._loader import load_graph  # only on a miss of the compiled cache

    return load_graph(path)


def _trim(cache: dict[Any, Any]) -> None:
    while len(cache) > _LIMIT:
        del cache[next(iter(cache))]
