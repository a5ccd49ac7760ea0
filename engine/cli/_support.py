"""Shared pieces of the command line: running a command, exit codes, output, inputs.

Exit status: 0 run completed (or command succeeded), 1 run failed or cancelled, 2 bad
input (bad file, unknown run, unreachable or foreign store, illegal reply, ...), 3 run
waiting or parked, 4 stopped but resumable (the run's lease was lost), 130 interrupted
(Ctrl-C), 141 the output's reader went away.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import re
import shlex
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote, urlsplit

from phasegraph._extras import install_hint
from phasegraph._vocabulary import STREAM_RETENTION
from phasegraph.api import Engine, StreamSettings
from phasegraph.cli._gates import gate_lines, open_gates, run_budget, run_json, shown
from phasegraph.cli._handler import Handler
from phasegraph.cli._logs import quiet_drivers
from phasegraph.codec._envelope import check_encodable
from phasegraph.codec._json import json_int, to_json
from phasegraph.errors import (
    CodecError,
    ErrorCode,
    InputError,
    LeaseLostError,
    PhasegraphError,
    RunNotFoundError,
)
from phasegraph.model import Actor, RunState, RunStatus
from phasegraph.run import RunOptions
from phasegraph.store import DEFAULT_STORE_URL, open_store
from phasegraph.store._open import redact_url
from phasegraph.views import jsonable, run_summary

# The progress display (and rich with it) is imported by the commands that drive a run,
# in progress(): the read-only commands (history, show, status) start without it.
if TYPE_CHECKING:
    from phasegraph.cli._progress import Progress

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "EXIT_FOR_CODE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PIPE_CLOSED",
    "EXIT_STOPPED",
    "EXIT_WAITING",
    "LOCAL_PREFIX",
    "emit",
    "emit_bytes",
    "exit_for",
    "finished",
    "interrupted",
    "lease_ttl",
    "local_actor",
    "parse_inputs",
    "progress",
    "report_error",
    "resume_command",
    "run_command",
    "sqlite_file",
    "store_label",
    "with_engine",
]

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_WAITING = 0, 1, 2, 3
EXIT_STOPPED: Final = 4
"""The run stopped unfinished and ``resume`` continues it (its lease was lost)."""
EXIT_INTERRUPTED: Final = 130
"""Ctrl-C: the shells' status for a process ended by SIGINT (128 + 2)."""
EXIT_PIPE_CLOSED: Final = 141
"""The reader of the output went away (``phasegraph history RUN | head``): 128 + SIGPIPE."""

EXIT_FOR_CODE: Final[Mapping[ErrorCode, int]] = MappingProxyType(
    {
        ErrorCode.PHASEGRAPH: EXIT_FAILED,
        ErrorCode.SPEC: EXIT_BAD_INPUT,
        ErrorCode.DEFINITION_UNAVAILABLE: EXIT_BAD_INPUT,
        ErrorCode.INPUT: EXIT_BAD_INPUT,
        ErrorCode.BAD_REQUEST: EXIT_BAD_INPUT,
        ErrorCode.RUN: EXIT_FAILED,
        ErrorCode.ILLEGAL_TRIGGER: EXIT_BAD_INPUT,
        ErrorCode.BUDGET_EXHAUSTED: EXIT_FAILED,
        ErrorCode.SPEND_REFUSED: EXIT_FAILED,
        ErrorCode.ACTION_FAILED: EXIT_FAILED,
        ErrorCode.ACTION_TIMEOUT: EXIT_FAILED,
        ErrorCode.LOOP_DETECTED: EXIT_FAILED,
        ErrorCode.DATA_CONFLICT: EXIT_FAILED,
        ErrorCode.RUN_STATE: EXIT_BAD_INPUT,
        ErrorCode.NOT_A_REVIEWER: EXIT_BAD_INPUT,
        ErrorCode.GATE_ANSWERED: EXIT_BAD_INPUT,
        ErrorCode.STALE_REPLY: EXIT_BAD_INPUT,
        ErrorCode.RUN_BUSY: EXIT_BAD_INPUT,
        ErrorCode.RUN_NOT_FOUND: EXIT_BAD_INPUT,
        ErrorCode.STORE: EXIT_BAD_INPUT,
        ErrorCode.LEASE_HELD: EXIT_BAD_INPUT,
        ErrorCode.LEASE_LOST: EXIT_STOPPED,
        ErrorCode.SEQUENCE_CONFLICT: EXIT_FAILED,
        ErrorCode.JOURNAL_HEAD: EXIT_BAD_INPUT,
        ErrorCode.STORE_UNAVAILABLE: EXIT_BAD_INPUT,
        ErrorCode.CODEC: EXIT_BAD_INPUT,
        ErrorCode.UNSUPPORTED_FORMAT: EXIT_BAD_INPUT,
    }
)
"""Exit status for every error code: 2 when the request was wrong (nothing was committed),
1 when a run failed, 4 when a run stopped and ``resume`` continues it."""

LOCAL_PREFIX: Final = "local:"
"""Names the actor of a command run on the machine that holds the store: ``local:USER``."""


def local_actor() -> Actor:
    """Who runs this command: the operating-system user, as ``local:USER``.

    The command line is a trusted local caller (it holds the store): the actor is recorded
    on the steps it decides (start, reply, cancel, fork) but a gate's reviewers do not
    restrict it.
    """
    import getpass  # here: only the commands that decide something ask

    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no login name and no passwd entry (a bare container)
        user = str(os.getuid()) if hasattr(os, "getuid") else "unknown"
    return Actor(name=LOCAL_PREFIX + user)


def run_command(handler: Handler, args: argparse.Namespace) -> int:
    """Run a command's handler to its end and return the process's exit status.

    A :class:`~phasegraph.errors.PhasegraphError` becomes one line on stderr (and, with
    ``--json``, an error object on stdout) and the exit status of its code
    (:data:`EXIT_FOR_CODE`). Ctrl-C cancels the handler at its current await; nothing
    more is committed, and one line says how to resume the run (exit 130).
    """
    quiet_drivers()
    try:
        code = asyncio.run(handler(args))
    except PhasegraphError as exc:
        return report_error(args, exc)
    except KeyboardInterrupt:
        print(f"phasegraph: {interrupted(args)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader has all it wanted. Point stdout at /dev/null so that flushing it at
        # exit cannot fail a second time, and end quietly, as other tools in a pipe do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_PIPE_CLOSED
    return code


_DRIVING: Final = frozenset({"run", "resume", "reply", "fork"})


def interrupted(args: argparse.Namespace) -> str:
    """What an interrupted command says: the run's last step is kept, and how to go on.

    Only the commands that drive a run name one: ``run`` and ``fork`` (their
    ``args.run_id``, chosen before the run starts), ``resume`` and ``reply`` (``args.run``).
    """
    run_id = getattr(args, "run_id", None) or getattr(args, "run", None)
    if getattr(args, "command", None) not in _DRIVING or not run_id:
        return "interrupted"
    return (
        f"interrupted; run {run_id} keeps its committed steps: "
        f"continue it with '{resume_command(args, run_id)}'"
    )


def resume_command(args: argparse.Namespace, run_id: str) -> str:
    """The exact command that continues ``run_id`` (with ``--store`` if one was given)."""
    return _run_command(args, "resume", run_id)


def status_command(args: argparse.Namespace, run_id: str) -> str:
    """The exact command that shows ``run_id`` (with ``--store`` if one was given)."""
    return _run_command(args, "status", run_id)


def _run_command(args: argparse.Namespace, verb: str, run_id: str) -> str:
    command = ["phasegraph", verb, run_id]
    if args.store != DEFAULT_STORE_URL:
        command += ["--store", args.store]
    return shlex.join(command)


def sqlite_file(url: str) -> Path | None:
    """The database file a ``sqlite:///`` URL names (as the store resolves it), else None."""
    parts = urlsplit(url)
    if parts.scheme != "sqlite" or parts.netloc or len(parts.path) < 2:
        return None
    return Path(unquote(parts.path[1:]))


def store_writable(url: str) -> bool:
    """Whether this process may write the store a URL names (only a SQLite file may not)."""
    path = sqlite_file(url)
    if path is None or not path.exists():
        return True
    return os.access(path, os.W_OK) and os.access(path.absolute().parent, os.W_OK)


def store_label(url: str) -> str:
    """The store a URL names, for messages: a SQLite URL with its absolute file path."""
    path = sqlite_file(url)
    if path is None:
        return redact_url(url)
    return f"{redact_url(url)}, the file {path.resolve()}"


def exit_for(status: RunStatus) -> int:
    """The exit status for a run that stopped in ``status``."""
    if status is RunStatus.COMPLETED:
        return EXIT_OK
    if status in {RunStatus.WAITING, RunStatus.PARKED}:
        return EXIT_WAITING
    return EXIT_FAILED


def emit(args: argparse.Namespace, payload: Any, text: str, *, plain: bool = False) -> None:
    """Print ``payload`` as JSON with ``--json``, else ``text`` (if any).

    ``plain`` says ``payload`` holds JSON types only already (a view), so it is not
    converted again.
    """
    if args.json:
        print(to_json(payload if plain else jsonable(payload)))
    elif text:
        print(text)


def emit_bytes(text: bytes) -> None:
    """Print UTF-8 text already encoded (JSON from :mod:`phasegraph.codec`) and a newline.

    Written to stdout's byte stream as it is, not decoded and encoded again: a long
    history is megabytes. What was printed before is flushed first, so the order holds.
    """
    stream = getattr(sys.stdout, "buffer", None)
    if stream is None:  # a text-only stdout (replaced by a caller): print the text
        print(text.decode())
        return
    sys.stdout.flush()
    stream.write(text)
    stream.write(b"\n")
    stream.flush()


def report_error(args: argparse.Namespace, exc: PhasegraphError) -> int:
    """Print ``exc`` on stderr (with ``--json``, also as JSON on stdout); return its exit status.

    The JSON is ``{"error": {"code", "message", ...}}`` plus whichever of ``location``,
    ``run_id``, ``node_id``, ``seq`` (and the class's own fields) the error carries. An
    unknown run also names the store looked in; a lost lease says how to resume.
    """
    text = str(exc)
    extra: dict[str, Any] = {}
    if exc.code is ErrorCode.RUN_NOT_FOUND:
        extra["store"] = redact_url(args.store)
        if (path := sqlite_file(args.store)) is not None:
            extra["store_file"] = str(path.resolve())
        text += (
            f" (looked in {store_label(args.store)}; --store URL or PHASEGRAPH_STORE names "
            "another store)"
        )
    elif isinstance(exc, LeaseLostError) and exc.run_id and exc.holder:
        # Another process drives the run now: resuming here would only be refused.
        text += f"; where it is now: '{status_command(args, exc.run_id)}'"
    elif exc.code is ErrorCode.LEASE_LOST and exc.run_id:
        resume = f"'{resume_command(args, exc.run_id)}'"
        bare = f"'phasegraph resume {exc.run_id}'"  # as the engine says it, without --store
        if bare in text:
            text = text.replace(bare, resume)
        else:
            text += f"; the run stopped at its last committed step: {resume}"
    print(f"phasegraph: {text}", file=sys.stderr)
    if args.json:
        error = {"code": exc.code, "message": exc.message, **exc.context(), **extra}
        emit(args, {"error": error}, "")
    if exc.code is ErrorCode.STORE_UNAVAILABLE and exc.run_id and exc.seq is not None:
        # A run the store left mid-way (it stopped at its last committed step): resumable.
        return EXIT_STOPPED
    return EXIT_FOR_CODE[exc.code]


def parse_inputs(pairs: Sequence[str], input_file: str | None) -> dict[str, Any]:
    """Parse ``--input KEY=VALUE`` pairs (JSON values when they parse) and ``--input-file``.

    Raises:
        InputError: A malformed pair, an unreadable file, or a value no run can hold (an
            integer of thousands of digits, or past 64 bits).
    """
    values: dict[str, Any] = {}
    if input_file:
        try:
            loaded = json.loads(Path(input_file).read_text(encoding="utf-8"), parse_int=json_int)
        except (OSError, ValueError, RecursionError) as exc:
            raise InputError(f"--input-file {input_file}: {exc}") from None
        if not isinstance(loaded, dict):
            raise InputError(f"--input-file {input_file}: expected a JSON object")
        values.update(loaded)
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise InputError(f"{pair!r}: expected KEY=VALUE")
        try:
            # Numbers, booleans, lists and objects as JSON.
            values[key] = json.loads(raw, parse_int=json_int)
        except json.JSONDecodeError:
            values[key] = raw  # anything else is a plain string
        except ValueError as exc:  # JSON, but a number too long to read
            raise InputError(f"{key}=…: {exc} ({key}='\"…\"')") from None
        except RecursionError:
            raise InputError(f"{key}=…: nested too deeply to read") from None
    try:
        check_encodable(values)  # an integer past 64 bits, say: named by its key, up front
    except CodecError as exc:
        raise InputError(exc.message) from None
    return values


_ERRNO: Final = re.compile(r"\[errno \d+\] ", re.IGNORECASE)


def cannot_listen(host: str, port: int, exc: OSError) -> InputError:
    """The one-line error for an address that cannot be listened on, with its reason.

    asyncio words a refused bind "error while attempting to bind on address (...): address
    already in use" (Python 3.13 adds "[errno 98] "): the reason is its last part, as the
    system says it.
    """
    reason = _ERRNO.sub("", (exc.strerror or str(exc)).rsplit(": ", 1)[-1])
    return InputError(f"cannot listen on {host}:{port}: {reason}; choose another --port or --host")


async def finished(args: argparse.Namespace, engine: Engine, state: RunState) -> int:
    """Report a run that stopped (completed, failed, waiting...) and return its exit status."""
    text = f"run {state.run_id} {state.status}: {run_summary(state)}"
    if state.errors and not args.json:
        text += "".join(f"\n  {e.node} ({e.state}): {e.message}" for e in state.errors)
    if state.status is RunStatus.COMPLETED:
        text += "".join(
            f"\n  {key}: {shown(state.data[key])}" for key in await _outputs(engine, state)
        )
    gates = await open_gates(engine, state)
    text += gate_lines(args, state, gates)
    budget = await run_budget(engine, state)
    # It stopped here: nothing drives it now (a worker or server takes it up only later).
    emit(args, run_json(state, gates, driving=False, budget=budget), text, plain=True)
    return exit_for(state.status)


async def _outputs(engine: Engine, state: RunState) -> tuple[str, ...]:
    """The graph's declared ``output:`` keys the run's data holds (none if unreadable)."""
    try:
        declared = (await engine.prepared_for(state)).definition.output
    except PhasegraphError:
        return ()
    return tuple(key for key in declared if key in state.data)


async def with_engine(
    args: argparse.Namespace,
    body: Callable[[Engine], Awaitable[int]],
    *,
    creates: bool = False,
    read_only: bool = False,
) -> int:
    """Open the store named by ``--store`` and call ``body`` with an engine on it.

    Only a command that ``creates`` runs may create the store: for any other, a SQLite
    file that does not exist holds no run, and is not made. ``read_only`` commands open
    the store so, and work on a store in a read-only location.

    Raises:
        RunNotFoundError: The store does not exist (for a command about one run).
    """
    path = sqlite_file(args.store)
    if not creates and path is not None and not path.exists():
        run_id = getattr(args, "run", None)
        raise RunNotFoundError(f"no run {run_id!r}: the store does not exist", run_id=run_id)
    options = RunOptions(lease_ttl=lease_ttl())
    async with (
        open_store(args.store, read_only=read_only) as store,
        Engine(
            store,
            options=options,
            streams=stream_settings(args),
            tracer_provider=tracer_provider(args),
            trace_content=getattr(args, "otel_content", None),
        ) as engine,
    ):
        return await body(engine)


def stream_settings(args: argparse.Namespace) -> StreamSettings:
    """How the runs a command drives keep their live events.

    From ``--durable-stream`` and ``--stream-retention`` (or env
    ``PHASEGRAPH_STREAM_RETENTION``).

    Raises:
        InputError: The environment's retention is not a whole number >= 1.
    """
    retention = getattr(args, "stream_retention", None)
    if retention is None:
        text = os.environ.get("PHASEGRAPH_STREAM_RETENTION", "").strip()
        if not text:
            retention = STREAM_RETENTION
        elif not text.isdigit() or int(text) < 1:
            raise InputError(f"PHASEGRAPH_STREAM_RETENTION={text!r:.40} is not a whole number >= 1")
        else:
            retention = int(text)
    return StreamSettings(retention=retention, durable=bool(getattr(args, "durable_stream", False)))


def tracer_provider(args: argparse.Namespace) -> Any:
    """The OTLP tracer provider when the command's ``--otel`` asks for traces, else None.

    Raises:
        InputError: The ``otel`` extra is not installed.
    """
    return _otlp_provider() if getattr(args, "otel", False) else None


@functools.cache  # one per process: it exports (and flushes at exit) every engine's spans
def _otlp_provider() -> Any:
    try:
        from phasegraph.run._tracing import otlp_provider
    except ImportError as exc:
        raise InputError(
            f"--otel needs OpenTelemetry ({exc.name} is missing): {install_hint('otel')}"
        ) from exc
    return otlp_provider()


def lease_ttl() -> float:
    """Seconds a run's lease outlives a killed process (env ``PHASEGRAPH_LEASE_TTL``, 30).

    Raises:
        InputError: The variable is not a positive number.
    """
    raw = os.environ.get("PHASEGRAPH_LEASE_TTL", "30")
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise InputError(f"PHASEGRAPH_LEASE_TTL={raw!r}: expected a positive number of seconds")
    return value


async def progress(
    args: argparse.Namespace,
    engine: Engine,
    run_id: str,
    *,
    graph: str | None = None,
    state: RunState | None = None,
) -> Progress:
    """The progress display of a command that drives ``run_id``.

    Args:
        args: The command's arguments (``--quiet``, ``--json``, ``--store``).
        engine: The engine driving the run.
        run_id: The run.
        graph: The graph ``run`` starts (default: the one the run follows).
        state: The run as committed now (default: read from the store).
    """
    from phasegraph.cli._progress import budget_limits, progress_for  # here: see the imports

    if args.quiet or args.json:
        return progress_for(engine.bus, quiet=True)
    state = state or await engine.get(run_id)
    try:
        prepared = engine.prepare(graph) if graph else await engine.prepared_for(state)
        order: tuple[str, ...] = prepared.workflow.order
        name = prepared.definition.name
        limits = budget_limits(prepared)
    except PhasegraphError:
        order, name = tuple(state.nodes), state.graph  # the graph file moved: show what ran
        limits = {}
    where = f" from step {state.seq}" if state.seq else ""
    opening = (
        f"run {run_id} ({name}, {len(order)} nodes){where}: Ctrl-C stops it at its last "
        f"committed step; '{resume_command(args, run_id)}' continues it"
    )
    return progress_for(engine.bus, quiet=False, run_id=run_id, order=order, state=state,
                        opening=opening, limits=limits)  # fmt: skip
