"""``phasegraph test``: prove a graph's or machine's properties (see phasegraph.testing)."""

from __future__ import annotations

import argparse
import json
from types import MappingProxyType

from phasegraph.cli._handler import Handlers
from phasegraph.cli._support import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, parse_inputs

__all__ = ["HANDLERS"]


async def _cmd_test(args: argparse.Namespace) -> int:
    try:
        from phasegraph.testing import verify
    except ImportError as exc:  # the test extra (hypothesis, pytest) is not installed
        print(f"phasegraph test needs the test extra: pip install 'phasegraph[test]' ({exc})")
        return EXIT_BAD_INPUT
    run_input = parse_inputs(args.input, args.input_file)
    results = verify(args.target, run_input, crash=not args.no_crash, approve=args.approve)
    failed = sum(not r.ok for r in results)
    if args.json:
        print(json.dumps([r.to_json() for r in results], indent=2, sort_keys=True))
    else:
        for result in results:
            print(f"{'ok    ' if result.ok else 'FAILED'}  {result.name}: {result.claim}")
            for detail in result.details:
                print("          " + detail.replace("\n", "\n          "))
        print(
            f"{args.target}: {len(results)} properties, {len(results) - failed} hold, {failed} fail"
        )
    return EXIT_FAILED if failed else EXIT_OK


HANDLERS: Handlers = MappingProxyType({"test": _cmd_test})
"""This module's command handlers by command name (see :mod:`phasegraph.cli._commands`)."""
