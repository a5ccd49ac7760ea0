"""Child runs as the YAML declares them: where a ``graph:`` binding's graph is found.

A node whose state is bound to ``graph:`` runs a graph as a run of its own and waits
for it (see :mod:`phasegraph.run._children`). The graph is named the way ``phasegraph
run`` names one: a bare name (no ``/``, no ``.yaml`` suffix) is a built-in graph, and
anything else a file, relative to the folder of the graph that binds it. The loader
refuses a binding whose graph is not there, located at the binding, so ``run`` and
``check`` refuse it alike; ``check`` also loads the graph and reports what is wrong in it.
"""

from __future__ import annotations

from pathlib import Path

from phasegraph.core._sources import is_file
from phasegraph.spec._catalog import builtin_graphs, is_name
from phasegraph.spec._suggest import did_you_mean

__all__ = ["child_graph_problem", "child_graph_source"]


def child_graph_source(graph: str, folder: Path | None) -> str:
    """The graph a ``graph:`` binding names: a built-in's name, or the file's absolute path.

    Args:
        graph: The binding's ``graph`` as written.
        folder: The folder of the graph file that binds it (``None``: a graph given as
            text, whose relative paths have no folder to start from).
    """
    if is_name(graph):
        return graph
    path = Path(graph)
    if not path.is_absolute() and folder is not None:
        path = folder / path
    return str(path.resolve())


def child_graph_problem(graph: str, folder: Path | None) -> str | None:
    """What is wrong with where a ``graph:`` binding's graph is (``None``: it is there).

    Args:
        graph: The binding's ``graph`` as written.
        folder: As for :func:`child_graph_source`.
    """
    if is_name(graph):
        known = builtin_graphs()
        if graph in known:
            return None
        return (
            f"no built-in graph is called {graph!r}: to run a file, give a path containing "
            f"'/' or ending in .yaml (built-in graphs: {', '.join(known) or 'none'})"
            + did_you_mean(graph, known)
        )
    if folder is None and not Path(graph).is_absolute():
        return (
            f"graph {graph!r} is a relative path, but a graph given as text has no folder to "
            "find it from: give an absolute path or a built-in graph's name"
        )
    path = Path(child_graph_source(graph, folder))
    if not is_file(path):
        return f"graph file {graph!r} not found at {path} (paths are relative to this file)"
    return None
