"""``phasegraph test`` and ``record``: properties, and recorded runs as tests.

``test`` proves a graph's or machine's properties (see phasegraph.testing), or drives a
graph against a recorded run (``--from-run``, ``--cassette``); ``record`` writes a run's
cassette (see phasegraph.testing.cassettes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from phasegraph._extras import install_hint
from phasegraph.cli._handler import Handlers
from phasegraph.cli._support import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    emit,
    parse_inputs,
    with_engine,
)
from phasegraph.errors import InputError

if TYPE_CHECKING:
    from phasegraph.api import Engine
    from phasegraph.testing import PropertyResult
    from phasegraph.testing.cassettes import Cassette

__all__ = ["HANDLERS"]


def _missing_extra(exc: ImportError) -> int:
    needs = install_hint("test", "hypothesis", "pytest")
    print(f"phasegraph test needs hypothesis and pytest ({exc}): {needs}")
    return EXIT_BAD_INPUT


async def _cmd_test(args: argparse.Namespace) -> int:
    try:
        from phasegraph.testing import verify
    except ImportError as exc:  # the test extra (hypothesis, pytest) is not installed
        return _missing_extra(exc)
    if args.run or args.cassette:
        return await _replayed(args)
    if args.update:
        raise InputError("--update re-records a cassette: give it with --cassette FILE")
    if args.draft_examples:
        return _draft(args.target)
    run_input = parse_inputs(args.input, args.input_file)
    # Each result is printed as it is known: the runs of the graph's actions take a while.
    shown = None if args.json else _show
    results = verify(
        args.target,
        run_input,
        crash=not args.no_crash,
        approve=args.approve,
        expect=args.expect,
        on_result=shown,
    )
    failed = sum(not r.ok for r in results)
    if args.json:
        print(json.dumps([r.to_json() for r in results], indent=2, sort_keys=True))
    else:
        print(
            f"{args.target}: {len(results)} properties, {len(results) - failed} hold, {failed} fail"
        )
    return EXIT_FAILED if failed else EXIT_OK


async def _replayed(args: argparse.Namespace) -> int:
    """``test GRAPH --from-run RUN`` or ``--cassette FILE`` (``--update``)."""
    from phasegraph.actions.llm._endpoint import BASE_URL_ENV
    from phasegraph.testing import cassettes

    if args.update and not args.cassette:
        raise InputError("--update rewrites a cassette file: give it with --cassette FILE")
    if args.cassette:
        cassette = cassettes.read_cassette(Path(args.cassette))
    else:
        cassette = await _recorded(args, args.run)
    if args.update:
        fresh, status = await cassettes.update_cassette(cassette, args.target)
        out = Path(args.cassette)
        cassettes.write_cassette(_sourced(fresh, _source(args.target), out), out)
        text = f"re-recorded {out}: {len(fresh.entries)} entries from a live run ({status})"
        emit(args, {"cassette": str(out), "entries": len(fresh.entries), "status": status}, text)
        return EXIT_OK
    if os.environ.pop(BASE_URL_ENV, None):  # this process only: the test is offline
        print(f"({BASE_URL_ENV} ignored: the cassette answers model calls)", file=sys.stderr)
    report = await cassettes.play_cassette(cassette, args.target)
    emit(args, report.to_json(), report.text())
    return EXIT_OK if report.passed else EXIT_FAILED


async def _recorded(args: argparse.Namespace, run_id: str) -> Cassette:
    """The cassette of run ``run_id`` in ``--store``."""
    from phasegraph.testing.cassettes import record_run

    found: list[Cassette] = []

    async def body(engine: Engine) -> int:
        found.append(await record_run(engine, run_id))
        return EXIT_OK

    await with_engine(args, body, read_only=True)
    return found[0]


def _source(target: str) -> str:
    """A graph argument as a cassette names it: a built-in name, or the file's path."""
    return str(Path(target).resolve()) if target.endswith((".yaml", ".yml")) else target


def _sourced(cassette: Cassette, source: str, out: Path) -> Cassette:
    """``cassette`` naming ``source`` as seen from the folder of ``out``."""
    from phasegraph.testing.cassettes import relative_source

    return replace(cassette, source=relative_source(source, out))


async def _cmd_record(args: argparse.Namespace) -> int:
    try:
        from phasegraph.testing.cassettes import write_cassette
    except ImportError as exc:  # the test extra (hypothesis, pytest) is not installed
        return _missing_extra(exc)
    cassette = await _recorded(args, args.run)
    out = Path(args.out)
    write_cassette(_sourced(cassette, cassette.source, out), out)
    counts: dict[str, int] = {}
    for entry in cassette.entries:
        counts[entry.kind] = counts.get(entry.kind, 0) + 1
    shown = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
    text = f"recorded run {args.run} to {out}: {len(cassette.entries)} entries ({shown})"
    emit(args, {"cassette": str(out), "entries": len(cassette.entries), "kinds": counts}, text)
    return EXIT_OK


def _draft(target: str) -> int:
    from phasegraph.analysis._check import resolve
    from phasegraph.testing._drafts import draft_examples

    if resolve(target).kind != "machine":
        print(f"{target}: --draft-examples drafts a machine's examples; name a machine file")
        return EXIT_BAD_INPUT
    print(draft_examples(target), end="")
    return EXIT_OK


def _show(result: PropertyResult) -> None:
    lines = [f"{'ok    ' if result.ok else 'FAILED'}  {result.name}: {result.claim}"]
    lines += ["          " + detail.replace("\n", "\n          ") for detail in result.details]
    print("\n".join(lines), flush=True)


HANDLERS: Handlers = MappingProxyType({"test": _cmd_test, "record": _cmd_record})
"""This module's command handlers by command name (see :mod:`phasegraph.cli._commands`)."""
