"""``shell:`` actions: run a command without a shell, map its exit status to a trigger.

Templates are split into argv *before* values are substituted, so a value with spaces or
shell metacharacters stays one argument and is never interpreted by a shell.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from phasegraph.actions._base import Action, ActionContext, ActionResult
from phasegraph.actions._orphans import ChildRecord, reap_orphans
from phasegraph.errors import ActionError
from phasegraph.model import TEMPLATE_MAX_CHARS, ActionDef, frozen_map, template_parts

__all__ = ["DEFAULT_COMMAND_TIMEOUT", "EFFECT_ID_ENV", "build_shell_action", "lookup", "render"]

EFFECT_ID_ENV = "PHASEGRAPH_EFFECT_ID"
"""The environment variable that hands a command its effect id (``ctx.effect_id``)."""

DEFAULT_COMMAND_TIMEOUT = 60.0
"""Seconds a command that phasegraph runs for you may take when nothing says otherwise:
the ``run_command`` tool and the team concern's validation and rollback commands. (A
``shell:`` action runs as long as its own ``timeout:`` allows, without limit if it has none.)"""

TAIL_CHARS = 2000
"""How much of stdout/stderr is kept in the step record."""

_DEFAULT_EXIT = {"0": "ok", "default": "fail"}


class _Values(Mapping[str, Any]):
    """The values a template may name; naming a missing one is an :class:`ActionError`."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values = values

    def __getitem__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            known = ", ".join(sorted(self._values)) or "none"
            raise ActionError(
                f"template names {{{key}}} but the run has no such value (known: {known})"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def render(
    template: str, values: Mapping[str, Any], *, escape: Callable[[str], str] | None = None
) -> str:
    """Substitute ``{name}`` placeholders from ``values``; ``{{`` escapes a brace.

    Only plain names are filled (see :func:`~phasegraph.model.template_parts`), and the
    output is capped at :data:`~phasegraph.model.TEMPLATE_MAX_CHARS`.

    Args:
        template: The template.
        values: What placeholders may name (a mapping may raise its own
            :class:`ActionError` for a missing name).
        escape: Applied to each substituted value, e.g. percent-encoding for a URL.

    Raises:
        ActionError: A placeholder names a missing value, the template is malformed, or
            the output would be too long.
    """
    try:
        parts = template_parts(template)
    except ValueError as exc:
        raise ActionError(f"cannot fill template {template!r:.200}: {exc}") from None
    found, size = _Values(values), 0
    pieces: list[str] = []
    for literal, name in parts:
        pieces.append(literal)
        if name is not None:
            value = _lookup(found, name)
            pieces.append(escape(value) if escape is not None else value)
        size += len(literal) + (len(pieces[-1]) if name is not None else 0)
        if size > TEMPLATE_MAX_CHARS:
            raise ActionError(
                f"template {template!r:.200} renders to more than {TEMPLATE_MAX_CHARS} "
                "characters: pass a smaller value"
            )
    return "".join(pieces)


def lookup(values: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    """The value ``{name[key]...}`` names in ``values``: keys index mappings only.

    Args:
        values: What placeholders may name.
        path: The placeholder's name, then its keys (see
            :func:`~phasegraph.model.template_parts`).

    Raises:
        ActionError: The name is missing, or a key is not in the mapping it indexes.
    """
    found = values if isinstance(values, _Values) else _Values(values)
    value = found[path[0]]
    for depth, key in enumerate(path[1:], start=1):
        if not isinstance(value, Mapping) or key not in value:
            shown = path[0] + "".join(f"[{part}]" for part in path[1:depth])
            raise ActionError(f"template names {shown}[{key}] but {shown} has no key {key!r}")
        value = value[key]
    return value


def _lookup(values: Mapping[str, Any], path: tuple[str, ...]) -> str:
    """The text of ``values[name][key]...``: keys index mappings only, never objects."""
    return str(lookup(values, path))


def _argv(command: str | Sequence[str], values: Mapping[str, Any]) -> list[str]:
    tokens = shlex.split(command) if isinstance(command, str) else [str(t) for t in command]
    if not tokens:
        raise ActionError("shell action has an empty command")
    return [render(token, values) for token in tokens]


FAILURE_STDERR_CHARS = 500
"""How much of a failed command's stderr its failure message quotes."""


def _tail(data: bytes) -> str:
    text = data.decode("utf-8", errors="replace")
    return text[-TAIL_CHARS:]


async def _kill_group(process: asyncio.subprocess.Process) -> None:
    # The child leads its own session, so this also reaches everything it spawned.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    await process.wait()


def build_shell_action(definition: ActionDef, base_dir: Path | None) -> Action:
    """Return the action that runs the configured command (``base_dir`` is unused)."""
    config = definition.config
    on_exit = {str(k): str(v) for k, v in (config.get("on_exit") or _DEFAULT_EXIT).items()}
    timeout = config.get("timeout")
    timeout_trigger = config.get("timeout_trigger")
    capture = config.get("capture")

    async def call(ctx: ActionContext) -> ActionResult:
        values = ctx.values()
        argv = _argv(config["shell"], values)
        # A relative cwd is relative to where phasegraph runs, like any command line.
        cwd = render(str(config["cwd"]), values) if config.get("cwd") else None
        env = {
            **os.environ,
            EFFECT_ID_ENV: ctx.effect_id,
            **{k: render(str(v), values) for k, v in (config.get("env") or {}).items()},
        }
        # A copy of this command that a dead driver left running ends before this one.
        await reap_orphans(ctx.run_id, ctx.node_id)
        record = ChildRecord(ctx.run_id, ctx.node_id)
        try:
            # Spawned from the event loop's thread, so the parent-death signal fires when
            # the driver dies, not when some short-lived worker thread ends.
            process = await asyncio.create_subprocess_exec(
                *argv,
                cwd=cwd,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                preexec_fn=record.in_child,
            )
        except OSError as exc:
            why = exc.strerror or str(exc)
            if isinstance(exc, FileNotFoundError) and os.sep not in argv[0]:
                why = f"no program of that name on PATH (is it installed?); {why}"
            raise ActionError(f"cannot start {argv[0]!r}: {why}") from exc
        timed_out = False
        try:
            async with asyncio.timeout(timeout):
                stdout, stderr = await process.communicate()
        except TimeoutError:
            timed_out = True
            await _kill_group(process)
            stdout, stderr = b"", b""
        except BaseException:
            await _kill_group(process)
            raise
        finally:
            record.remove(process.pid)
        status = process.returncode
        if timed_out:
            trigger = timeout_trigger or on_exit.get("default", "fail")
        else:
            trigger = on_exit.get(str(status), on_exit.get("default", "fail"))
        output = {"argv": argv, "exit": status, "stdout": _tail(stdout), "stderr": _tail(stderr)}
        if timed_out:
            output["timed_out"] = timeout
        data = {str(capture): stdout.decode("utf-8", errors="replace").strip()} if capture else {}
        payload: dict[str, Any] = {"exit": status, "timed_out": timed_out}
        if timed_out or status != 0:
            payload |= _failure(argv[0], status, timeout if timed_out else None, stderr)
        return ActionResult(
            trigger=trigger,
            data=frozen_map(data),
            payload=frozen_map(payload),
            output=frozen_map(output),
        )

    return call


def _failure(
    program: str, status: int | None, timed_out: float | None, stderr: bytes
) -> dict[str, Any]:
    """What a failed command tells a fallback chain: exit status and the end of stderr."""
    if timed_out is not None:
        what = f"command {program!r} ran past its timeout of {timed_out:g} s"
    else:
        what = f"command {program!r} exited with status {status}"
    tail = stderr.decode("utf-8", errors="replace").strip()
    if len(tail) > FAILURE_STDERR_CHARS:  # whole lines: a line cut mid-path misleads
        tail = tail[-FAILURE_STDERR_CHARS:]
        tail = tail.partition("\n")[2] or tail
    return {
        "error_code": "action_failed",
        "action": "shell",
        "message": f"{what}: {tail}" if tail else f"{what} (stderr empty)",
        "stderr": tail,
    }
