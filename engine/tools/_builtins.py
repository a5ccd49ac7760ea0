"""The built-in tools: read, write and list files, and run a command (argv, no shell).

Each tool is ``async (scope, **arguments) -> mapping``. The :class:`Scope` is the folder
the call works in; relative paths resolve against it and no path may leave it (symlinks
are resolved before the check). Expected failures come back as data,
``{"error": CODE, "message": ...}``, so an agent can read them and try something else.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from types import MappingProxyType
from typing import Any

from phasegraph.actions import ActionContext, declare_effect
from phasegraph.actions._shell import (
    DEFAULT_COMMAND_TIMEOUT,
    EFFECT_ID_ENV,
    build_shell_action,
)
from phasegraph.errors import ActionError
from phasegraph.model import EMPTY, ActionDef, Effect

__all__ = [
    "BUILTIN_TOOLS",
    "Scope",
    "Tool",
    "ToolRefused",
    "error_result",
    "list_files",
    "read_file",
    "run_command",
    "write_file",
]


# Not a PhasegraphError: never escapes a tool call (it becomes a result the agent reads).
class ToolRefused(Exception):
    """A tool call that cannot be served; becomes a structured error result.

    Attributes:
        code: The ``error`` value of the result (``not_found``, ``outside_workspace``...).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Scope:
    """The folder one tool call works in; nothing outside it is reachable.

    Attributes:
        root: An absolute, resolved folder.
        effect_id: The call's effect id (``run:node:step:index``), the same for every
            attempt at it: hand it to a service that deduplicates (see
            :class:`~phasegraph.model.Effect`).
    """

    root: Path
    effect_id: str = ""

    def locate(self, path: str) -> Path:
        """Resolve ``path`` (relative to the root) and refuse it if it leaves the root."""
        target = (self.root / path).resolve()
        if not target.is_relative_to(self.root):
            raise ToolRefused("outside_workspace", f"{path!r} is outside {str(self.root)!r}")
        return target


Tool = Callable[..., Awaitable[Mapping[str, Any]]]
"""A tool: ``async (scope, **arguments) -> JSON-like mapping``."""


# --------------------------------------------------------------------------- built-ins


@dataclass(frozen=True, slots=True)
class _Lines:
    """Which lines of a file a read asks for."""

    start: int | None
    end: int | None
    symbol: str | None


def _symbol_range(path: str, text: str, symbol: str) -> tuple[int, int | None, dict[str, Any]]:
    """The lines of ``symbol`` (and notes for the result); refuses an unknown name."""
    # Here: the symbol finder (``ast`` and a regex per language) serves this tool only.
    from phasegraph.tools._symbols import find_symbols

    try:
        spans = find_symbols(path, text)
    except SyntaxError as exc:
        return 1, None, {"note": f"cannot parse {path!r} ({exc.msg}); the whole file is returned"}
    if spans is None:
        suffix = PurePath(path).suffix or "(none)"
        return 1, None, {"note": f"symbol extraction not supported for {suffix}"}
    if symbol not in spans:
        available = ", ".join(sorted(spans)) or "none"
        raise ToolRefused(
            "symbol_not_found", f"no symbol {symbol!r} in {path!r}; available: {available}"
        )
    first, last = spans[symbol]
    return first, last, {"symbol": symbol}


def _read(scope: Scope, path: str, wanted: _Lines) -> Any:
    target = scope.locate(path)
    if not target.is_file():
        raise ToolRefused("not_found", f"no file {path!r} under {str(scope.root)!r}")
    text = target.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    first, last = 1, None
    extra: dict[str, Any] = {}
    if wanted.symbol:
        first, last, extra = _symbol_range(path, text, wanted.symbol)
    # Explicit line bounds narrow the range further (a symbol capped at end_line).
    first = max(first, wanted.start or 1, 1)
    if wanted.end is not None:
        last = wanted.end if last is None else min(last, wanted.end)
    chosen = lines[first - 1 : last]
    end = first + len(chosen) - 1
    result = {"path": path, "text": "".join(chosen), "lines": len(lines), "start_line": first}
    return {**result, "end_line": end, **extra}


@declare_effect(Effect.NONE)
async def read_file(
    scope: Scope,
    *,
    path: str,
    symbol: str | None = None,
    start_line: int | None = None,
    end_line: int | None = None,
) -> Mapping[str, Any]:
    """Read a UTF-8 text file: all of it, one definition (``symbol``), or lines.

    ``symbol`` names a function, class or type (Python, JavaScript/TypeScript, Go, Rust,
    Java); an unknown name is refused with the names that exist; another language gives
    the whole file with a ``note``. ``start_line``/``end_line`` (1-based, inclusive)
    narrow the result further.
    """
    return await _guarded(_read, scope, path, _Lines(start=start_line, end=end_line, symbol=symbol))


def _write(scope: Scope, path: str, text: str) -> Any:
    target = scope.locate(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return {"path": path, "bytes": len(text.encode("utf-8"))}


@declare_effect(Effect.IDEMPOTENT)
async def write_file(scope: Scope, *, path: str, text: str) -> Mapping[str, Any]:
    """Create or replace a UTF-8 text file (parent folders are created)."""
    return await _guarded(_write, scope, path, text)


def _list(scope: Scope, path: str, recursive: bool) -> Any:
    folder = scope.locate(path)
    if not folder.is_dir():
        raise ToolRefused("not_found", f"no folder {path!r} under {str(scope.root)!r}")
    found = folder.rglob("*") if recursive else folder.iterdir()
    names = sorted(
        str(p.relative_to(folder)) + ("/" if p.is_dir() else "")
        for p in found
        if ".git" not in p.relative_to(folder).parts
    )
    return {"path": path, "files": names}


@declare_effect(Effect.NONE)
async def list_files(
    scope: Scope, *, path: str = ".", recursive: bool = False
) -> Mapping[str, Any]:
    """List a folder (``recursive`` walks it; ``.git`` is left out); folders end in ``/``."""
    return await _guarded(_list, scope, path, recursive)


def _literal(text: str) -> str:
    # The shell action renders `{name}` templates; a tool's arguments are literal text.
    return text.replace("{", "{{").replace("}", "}}")


@declare_effect(Effect.ONCE)
async def run_command(
    scope: Scope,
    *,
    argv: Sequence[str],
    # Forwarded to the shell action, which enforces it with asyncio.timeout.
    timeout: float = DEFAULT_COMMAND_TIMEOUT,  # noqa: ASYNC109
    env: Mapping[str, str] | None = None,
) -> Mapping[str, Any]:
    """Run ``argv`` (no shell) in the scope's root; returns exit status and output tails.

    The command runs exactly as a ``shell:`` action does: its own process group, killed
    as a whole on timeout.
    """
    if isinstance(argv, str) or not argv:
        return error_result(
            "bad_arguments", "argv must be a non-empty list of strings, not a string"
        )
    config = {
        "shell": [_literal(str(a)) for a in argv],
        "cwd": _literal(str(scope.root)),
        "timeout": timeout,
        "env": {
            **{k: _literal(str(v)) for k, v in (env or {}).items()},
            EFFECT_ID_ENV: _literal(scope.effect_id),
        },
    }
    action = build_shell_action(ActionDef(kind="shell", config=config), None)
    context = ActionContext(run_id="", node_id="", state="", hook="", input=EMPTY, data=EMPTY)
    try:
        result = await action(context)
    except ActionError as exc:
        return error_result("cannot_start", exc.message)
    output = dict(result.output)
    return {
        "argv": list(argv),
        "exit": output["exit"],
        "stdout": output["stdout"],
        "stderr": output["stderr"],
        "timed_out": "timed_out" in output,
    }


BUILTIN_TOOLS: Mapping[str, Tool] = MappingProxyType(
    {
        "list_files": list_files,
        "read_file": read_file,
        "run_command": run_command,
        "write_file": write_file,
    }
)
"""The tools every graph has, by name."""


def error_result(code: str, message: str) -> Mapping[str, Any]:
    """The structured result of a call that could not be served."""
    return {"error": code, "message": message}


async def _guarded(body: Callable[..., Any], *args: Any) -> Mapping[str, Any]:
    """Run a blocking file-system body in a worker thread; expected failures become data."""
    try:
        result: Mapping[str, Any] = await asyncio.to_thread(body, *args)
    except ToolRefused as exc:
        return error_result(exc.code, str(exc))
    except UnicodeDecodeError as exc:
        return error_result("not_text", f"not UTF-8 text: {exc.reason}")
    except OSError as exc:
        return error_result("os_error", f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": "))
    return result
