"""``phasegraph test``: prove a graph's or machine's properties (see phasegraph.testing)."""

from __future__ import annotations

import argparse
import json
from types import MappingProxyType
from typing import TYPE_CHECKING

from phasegraph._extras import install_hint
from phasegraph.cli._handler import Handlers
from phasegraph.cli._support import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, parse_inputs

if TYPE_CHECKING:
    from phasegraph.testing import PropertyResult

__all__ = ["HANDLERS"]


async def _cmd_test(args: argparse.Namespace) -> int:
    try:
        from phasegraph.testing import verify
    except ImportError as exc:  # the test extra (hypothesis, pytest) is not installed
        needs = install_hint("test", "hypothesis", "pytest")
        print(f"phasegraph test needs hypothesis and pytest ({exc}): {needs}")
        return EXIT_BAD_INPUT
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


HANDLERS: Handlers = MappingProxyType({"test": _cmd_test})
"""This module's command handlers by command name (see :mod:`phasegraph.cli._commands`)."""
