"""``GET /runs/{run_id}/gates/{gate_id}/files``: the text of files a gate's payload names.

A review gate often names what to judge by its file name (``payload: {notes: notes.md}``);
the reviewer needs the notes, not their name. Each top-level string of an open gate's
payload that names a file in the run's working folder is read, as it is now, and shown:
at most :data:`MAX_BYTES` of it, as text (a file with a NUL byte is not text and is left
out). The working folder is the gate node's ``with.workspace`` (from the server's working
directory), else the server's working directory: where a run started from a graph file
there works.

Only what a gate names is read, and only inside that folder: a relative path, no ``..``,
no hidden part (``.env``, ``.git/...``), a regular file once symbolic links are followed.
A run of an uploaded graph names none: whoever may upload a graph could otherwise read
any file of the server's folder through a gate of their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any, Final

from aiohttp import web

from phasegraph.errors import PhasegraphError, RunStateError
from phasegraph.model import RunState
from phasegraph.server._support import ENGINE, SETTINGS, ok

__all__ = ["MAX_BYTES", "routes"]

MAX_BYTES: Final = 64 * 1024
"""The most of one file shown; the rest is said to be cut."""
_MAX_NAME: Final = 255


async def get_gate_files(request: web.Request) -> web.Response:
    """The files an open gate's payload names, read from the run's working folder."""
    engine = request.app[ENGINE]
    state = await engine.get(request.match_info["run_id"])
    gate_id = request.match_info["gate_id"]
    interrupt = state.interrupts.get(gate_id)
    if interrupt is None:
        raise RunStateError(
            f"run {state.run_id!r} has no open gate {gate_id!r}", run_id=state.run_id
        )
    files: list[dict[str, Any]] = []
    folder = _folder(request, state, interrupt.node)
    if folder is not None:
        for key, value in interrupt.payload.items():
            found = _read(folder, value) if isinstance(value, str) else None
            if found is not None:
                files.append({"key": str(key), "path": value, **found})
    return ok({"run_id": state.run_id, "gate": gate_id, "files": files})


def _folder(request: web.Request, state: RunState, node_id: str) -> Path | None:
    """The folder the gate's node works in; ``None`` for a run of an uploaded graph."""
    uploads = request.app[SETTINGS].upload_dir.resolve()
    if Path(state.graph_source).resolve().is_relative_to(uploads):
        return None
    workspace = None
    try:
        prepared = request.app[ENGINE].prepare(state.graph_source)
    except PhasegraphError:
        prepared = None  # the graph moved or broke: its nodes' settings are unknown
    if prepared is not None:
        node = next((n for n in prepared.definition.nodes if n.id == node_id), None)
        workspace = None if node is None else node.settings.get("workspace")
    base = Path.cwd()
    return (base / workspace).resolve() if isinstance(workspace, str) else base.resolve()


def _read(folder: Path, name: str) -> Mapping[str, Any] | None:
    """The file ``name`` names inside ``folder`` as text, or ``None`` (not one it may show)."""
    if not name or len(name) > _MAX_NAME or "\\" in name or "\0" in name:
        return None
    path = PurePosixPath(name)
    if path.is_absolute() or any(part in ("..", "") or part.startswith(".") for part in path.parts):
        return None
    try:
        real = (folder / path).resolve(strict=True)
        if not real.is_relative_to(folder) or not real.is_file():
            return None
        size = real.stat().st_size
        with real.open("rb") as handle:
            head = handle.read(MAX_BYTES)
    except (OSError, ValueError):
        return None
    if b"\0" in head:
        return None
    return {
        "text": head.decode("utf-8", errors="replace"),
        "bytes": size,
        "truncated": size > len(head),
    }


def routes() -> list[web.RouteDef]:
    """This module's routes."""
    return [web.get("/runs/{run_id}/gates/{gate_id}/files", get_gate_files, allow_head=False)]
