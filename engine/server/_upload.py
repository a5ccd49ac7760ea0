"""Graphs uploaded over HTTP: size and shape limits, the loader, then a policy check.

An uploaded graph is text from a client. It is loaded as text (so every problem is
located as ``graph_yaml:LINE:COL``, the request field, never a server path) with YAML
limits tighter than for files: nesting no deeper than the policy allows and no aliases
at all (an alias can repeat a subtree exponentially often — cheap to send, ruinous to
expand); and as text it may use built-in machines only. A graph that loads is still
refused if it imports a ``python:`` module the server was not told to allow, runs
``shell:`` commands on a server that does not allow them, or its ``input:`` schema uses
references. Only then is it written to the server's upload folder under its content
hash and loaded from there: runs record where their graph came from, so a restarted
server can resume them.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from phasegraph.core._plans import plan_templates
from phasegraph.errors import Problem, SourceLocation, SpecError
from phasegraph.model import GraphDef
from phasegraph.spec import YamlLimits, load_graph, load_graph_text

__all__ = ["UPLOAD_FIELD", "UploadPolicy", "load_upload"]

UPLOAD_FIELD: Final = "graph_yaml"
"""The request field that carries an uploaded graph; problems are located in it."""

_UPLOAD_KINDS: Final = frozenset({"python", "shell", "human"})
_REFERENCES: Final = frozenset({"$ref", "$dynamicRef", "$recursiveRef"})


@dataclass(frozen=True, slots=True, kw_only=True)
class UploadPolicy:
    """What an uploaded graph may be and do.

    Attributes:
        upload_dir: Where accepted graphs are kept (runs refer to them by path).
        max_bytes: Largest accepted graph, UTF-8 encoded.
        max_depth: Deepest accepted nesting of YAML collections.
        allow_python_modules: Modules ``python:`` actions may import (exact names).
        allow_shell: Whether ``shell:`` actions are accepted.
    """

    upload_dir: Path
    max_bytes: int = 256 * 1024
    max_depth: int = 32
    allow_python_modules: frozenset[str] = frozenset()
    allow_shell: bool = False


def _limits(max_depth: int) -> YamlLimits:
    # Uploads refuse every alias: each one is reported, and nothing is expanded.
    return YamlLimits(max_depth=max_depth, max_aliases=0)


def load_upload(text: str, policy: UploadPolicy) -> GraphDef:
    """Check, store and load an uploaded graph.

    Blocking (file I/O and parsing): call it in a worker thread.

    Raises:
        SpecError: The text is too large, too deep, uses aliases or machine files, does
            not load, or uses actions the policy refuses; every problem at once, each
            located in ``graph_yaml``. Nothing is stored then.
    """
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > policy.max_bytes:
        raise SpecError(
            [Problem(f"the graph is {size} bytes; at most {policy.max_bytes} are accepted")]
        )
    definition = load_graph_text(text, name=UPLOAD_FIELD, limits=_limits(policy.max_depth))
    problems = _policy_problems(definition, policy)
    if problems:
        raise SpecError(problems)
    # The kept file is the same text, so it loads the same; runs record its path.
    return load_graph(_keep(text, policy.upload_dir))


def _keep(text: str, folder: Path) -> Path:
    """Write ``text`` under its content hash (atomically), unless it is there already."""
    data = text.encode("utf-8", "surrogatepass")
    folder = folder.resolve()  # runs record this path: it must not depend on the cwd
    path = folder / f"upload-{hashlib.sha256(data).hexdigest()[:32]}.yaml"
    if path.is_file():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".upload-", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return path


def _policy_problems(definition: GraphDef, policy: UploadPolicy) -> list[Problem]:
    problems = _input_schema_problems(definition.input_schema)
    allowed = ", ".join(sorted(policy.allow_python_modules)) or "none"
    # A plan's template binds actions too: every child runs them.
    planned = plan_templates(definition.nodes)
    templates = [template for template, _ in planned]
    for _, binding in planned:
        problems += _input_schema_problems(binding.config.get("plan", {}).get("settings"))
    for node in (*definition.nodes, *templates):
        for hook, action in node.bind.items():
            where = f"node {node.id!r}, hook {hook!r}"
            if action.kind == "python":
                module = str(action.config.get("python", "")).partition(":")[0]
                if module not in policy.allow_python_modules:
                    text = (
                        f"{where}: python module {module!r} is not allowed in uploaded graphs "
                        f"(allowed: {allowed}); start the server with --allow-python {module}"
                    )
                    problems.append(Problem(text, action.location))
            elif action.kind == "shell" and not policy.allow_shell:
                text = (
                    f"{where}: shell actions are not allowed in uploaded graphs; start the "
                    "server with --allow-shell"
                )
                problems.append(Problem(text, action.location))
            elif action.kind == "plan":
                continue  # its template's bindings are judged as a node's
            elif action.kind not in _UPLOAD_KINDS:  # a kind added later is refused until vetted
                text = f"{where}: {action.kind} actions are not accepted in uploaded graphs"
                problems.append(Problem(text, action.location))
    return problems


def _input_schema_problems(schema: Mapping[str, Any] | None) -> list[Problem]:
    """The graph's `input:` must not use references (the loader checked the rest).

    A local reference is sound, but an uploaded schema is small enough to write out in
    full, and without references there is nothing to resolve at all.
    """
    used = sorted(_REFERENCES & _keys(schema or {}))
    if used:
        text = f"input: {', '.join(used)} is not accepted in uploaded graphs; write it out"
        return [Problem(text, SourceLocation(UPLOAD_FIELD))]
    return []


def _keys(value: Any) -> set[str]:
    """Every mapping key anywhere in ``value`` (iteratively: no recursion limit)."""
    found: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            found.update(str(key) for key in item)
            stack += list(item.values())
        elif isinstance(item, list | tuple):
            stack += list(item)
    return found
