"""The ``tokens`` command: add, list and revoke the named tokens of a token file.

``add`` prints the new token's secret once on stdout (the file keeps only its salted
hash); a server started with ``serve --tokens FILE`` sees every change on its next
request, so a revoked token stops working without a restart.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Final

from phasegraph.cli._handler import Handlers
from phasegraph.cli._support import EXIT_OK
from phasegraph.errors import InputError
from phasegraph.server._tokens import TokenBook, TokenEntry, edit_book, load_book

__all__ = ["HANDLERS", "parse_age"]

_AGE: Final = re.compile(r"([0-9]{1,9})([smhd])")
_UNIT: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_age(text: str) -> float:
    """Seconds in an age like ``3600s``, ``90m``, ``12h`` or ``30d``.

    Raises:
        InputError: Not such an age.
    """
    match = _AGE.fullmatch(text.strip())
    if match is None or int(match.group(1)) == 0:
        raise InputError(f"--expires {text!r:.40}: expected a number and a unit, e.g. 30d or 12h")
    return int(match.group(1)) * _UNIT[match.group(2)]


def _file(args: argparse.Namespace) -> Path:
    if not args.file:
        raise InputError("name the token file with --file FILE (or env PHASEGRAPH_TOKENS_FILE)")
    return Path(args.file)


def _name(args: argparse.Namespace) -> str:
    if not args.name:
        raise InputError(f"'tokens {args.action}' needs the token's NAME")
    return str(args.name)


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _add(args: argparse.Namespace, path: Path, now: float) -> None:
    expires = now + parse_age(args.expires) if args.expires else None
    name, scopes, groups = _name(args), tuple(args.scope), tuple(args.group)
    secret = edit_book(path, lambda book: book.add(name, scopes, groups, now=now, expires=expires))
    if args.json:
        print(json.dumps({"name": args.name, "token": secret, "expires": expires}))
    else:
        print(secret)
    if not args.quiet:
        print(
            f"added token {args.name!r} to {path} (expires {_when(expires)}); its secret is "
            "shown this once",
            file=sys.stderr,
        )


def _listing(entry: TokenEntry, now: float) -> dict[str, object]:
    expired = entry.expires is not None and now >= entry.expires
    return {
        "name": entry.name,
        "scopes": list(entry.scopes),
        "groups": list(entry.groups),
        "created": entry.created,
        "expires": entry.expires,
        "expired": expired,
    }


def _list(args: argparse.Namespace, book: TokenBook, now: float) -> None:
    rows = [_listing(entry, now) for entry in book.entries]
    if args.json:
        print(json.dumps(rows))
        return
    if not rows:
        print("no tokens")
    for row, entry in zip(rows, book.entries, strict=True):
        state = "EXPIRED" if row["expired"] else f"expires {_when(entry.expires)}"
        groups = ",".join(entry.groups) or "-"
        print(f"{entry.name}\t{' '.join(entry.scopes)}\tgroups {groups}\t{state}")


async def _cmd_tokens(args: argparse.Namespace) -> int:
    path = _file(args)
    now = time.time()
    if args.action != "add" and (args.scope or args.group or args.expires):
        raise InputError("--scope, --group and --expires go with 'tokens add'")
    if args.action == "add":
        _add(args, path, now)
    elif args.action == "list":
        _list(args, load_book(path), now)
    else:
        name = _name(args)
        edit_book(path, lambda book: (book.revoke(name), None))
        if args.json:
            print(json.dumps({"revoked": name}))
        elif not args.quiet:
            print(f"revoked token {name!r}; a server reading {path} refuses it from now on")
    return EXIT_OK


HANDLERS: Handlers = MappingProxyType({"tokens": _cmd_tokens})
"""This module's command handlers by command name (see :mod:`phasegraph.cli._commands`)."""
