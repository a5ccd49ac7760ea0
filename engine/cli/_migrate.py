"""The ``migrate`` command, and what ``resume`` and ``reply`` say about a changed graph file.

A run follows the definition it stored when it was created: an edited or deleted graph
file does not change it. ``resume`` and ``reply`` say so in one line each (and name the
command that moves it); ``migrate`` checks that the run fits another definition and, when
it does (and ``--dry-run`` is not given), moves it there with one committed step.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from phasegraph.api import Engine
from phasegraph.cli._handler import Handlers
from phasegraph.cli._support import (
    EXIT_FAILED,
    EXIT_OK,
    emit,
    local_actor,
    with_engine,
)
from phasegraph.errors import InputError, PhasegraphError
from phasegraph.model import RunState, RunStatus
from phasegraph.views import migration_view

if TYPE_CHECKING:
    from phasegraph.run._migrate import Migration, Renames

__all__ = ["HANDLERS", "refuse_gone_flags", "say_drift"]

_PAGE = 500  # runs listed at a time by --all-waiting


def refuse_gone_flags(args: argparse.Namespace) -> None:
    """Refuse ``--allow-changed`` and ``resume --graph`` with what replaced them.

    Raises:
        InputError: One was given.
    """
    if getattr(args, "allow_changed", False) or getattr(args, "gone_graph", None):
        given = "--allow-changed" if getattr(args, "allow_changed", False) else "--graph"
        raise InputError(
            f"{given} is gone: a run goes on with the definition it stored when it started, "
            "whatever its graph file says now; to move it to another version, check the move "
            f"with 'phasegraph migrate {args.run} --to FILE --dry-run', then make it without "
            "--dry-run"
        )


async def say_drift(args: argparse.Namespace, engine: Engine, state: RunState) -> None:
    """One line on stderr for each way the files on disk differ from what a run follows.

    ``state`` is the run's head as the command read it (not read again here).
    """
    if getattr(args, "quiet", False):
        return
    from phasegraph.run._definitions import drift  # here: only a command that drives reads it

    run_id = state.run_id
    if not state.definition:
        return  # an older run: opening it checks its file (and pins it)

    def digest_now() -> str | None:
        try:
            return engine.prepare(state.graph_source).definition.digest
        except PhasegraphError:
            return None

    try:
        stored = await engine.definitions.stored(state.definition, run_id)
    except PhasegraphError:
        return  # opening the run says what is wrong with its definition
    for line in drift(state, stored, digest_now):
        print(f"phasegraph: {line}", file=sys.stderr, flush=True)


def _renames(args: argparse.Namespace) -> Renames | None:
    if args.renames is None:
        return None
    from phasegraph.run._migrate import read_renames

    return read_renames(Path(args.renames))


async def _cmd_migrate(args: argparse.Namespace) -> int:
    if (args.run is None) == (args.all_waiting is None):
        raise InputError(
            "name one run ('phasegraph migrate RUN --to FILE') or every waiting run of a "
            "graph ('phasegraph migrate --all-waiting GRAPH --to FILE'), not both"
        )
    renames = _renames(args)

    async def body(engine: Engine) -> int:
        if args.run is not None:
            migration = await engine.migrate(
                args.run, args.to, renames=renames, dry_run=args.dry_run, actor=local_actor()
            )
            emit(args, migration_view(migration), _text(args, migration))
            return EXIT_OK if migration.fits else EXIT_FAILED
        migrations = []
        for run_id in await _waiting(engine, args.all_waiting):
            try:
                migration = await engine.migrate(
                    run_id, args.to, renames=renames, dry_run=args.dry_run, actor=local_actor()
                )
            except PhasegraphError as exc:  # one run's trouble is that run's line
                if not args.json:
                    print(f"run {run_id}: not moved: {exc}")
                migrations.append({"run_id": run_id, "fits": False, "error": str(exc)})
                continue
            migrations.append(migration_view(migration))
            if not args.json:
                print(_text(args, migration))
        moved = sum(1 for m in migrations if m.get("applied"))
        fits = sum(1 for m in migrations if m.get("fits"))
        summary = (
            f"{len(migrations)} waiting runs of graph {args.all_waiting!r}: {fits} fit "
            f"{args.to}" + ("" if args.dry_run else f", {moved} moved")
        )
        emit(args, migrations, summary)
        return EXIT_OK if fits == len(migrations) else EXIT_FAILED

    return await with_engine(args, body)


async def _waiting(engine: Engine, graph: str) -> list[str]:
    """Every waiting or parked run of the graph called ``graph``."""
    found: list[str] = []
    for status in (RunStatus.WAITING, RunStatus.PARKED):
        offset = 0
        while True:
            page = await engine.list_runs(status=status, limit=_PAGE, offset=offset)
            found += [meta.run_id for meta in page if meta.graph == graph]
            if len(page) < _PAGE:
                break
            offset += _PAGE
    return sorted(found)


def _text(args: argparse.Namespace, migration: Migration) -> str:
    run, to = migration.run_id, args.to
    versions = f"version {migration.from_digest[:12]} -> {migration.to_digest[:12]}"
    if migration.problems:
        lines = [str(problem) for problem in migration.problems]
        count = len(lines)
        lines.append(
            f"run {run} does not fit {to} ({versions}): {count} "
            f"problem{'s' * (count != 1)}; nothing changed"
        )
        return "\n".join(lines)
    if not migration.applied:
        command = shlex.join(["phasegraph", "migrate", run, "--to", to])
        return f"run {run} fits {to} ({versions}); move it with: {command}"
    return (
        f"run {run} moved to {to} ({versions}) at step {migration.seq}; it goes on "
        f"with 'phasegraph resume {run}'"
    )


HANDLERS: Handlers = MappingProxyType({"migrate": _cmd_migrate})
"""This module's command handlers by command name (see :mod:`phasegraph.cli._commands`)."""
