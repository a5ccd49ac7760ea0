"""The ``store`` command: ``phasegraph store migrate [URL]`` lays out a store's tables now.

A Postgres store creates or migrates its tables on first use anyway (under an advisory
lock, so concurrent first users wait for one another); ``migrate`` does it on purpose,
from a deploy step or by a person who holds the rights to create them, and says which
version it found and left. The other stores keep no schema to migrate.
"""

from __future__ import annotations

import argparse
from types import MappingProxyType

from phasegraph.cli._handler import Handlers
from phasegraph.cli._support import EXIT_OK, emit
from phasegraph.store import open_store
from phasegraph.store._open import redact_url

__all__ = ["HANDLERS"]


async def _cmd_store(args: argparse.Namespace) -> int:
    url = args.url or args.store
    where = redact_url(url)
    async with open_store(url) as store:
        migrate = getattr(store, "migrate", None)
        if migrate is None:
            emit(
                args,
                {"store": where, "migrated": False, "version": None},
                f"{where}: nothing to migrate (only a Postgres store keeps a schema)",
            )
            return EXIT_OK
        found, now = await migrate()
    if found == now:
        text = f"{where}: the schema is at version {now} already; nothing to do"
    elif found == 0:
        text = f"{where}: created the schema (version {now})"
    else:
        text = f"{where}: migrated the schema from version {found} to {now}"
    emit(args, {"store": where, "migrated": found != now, "version": now, "found": found}, text)
    return EXIT_OK


HANDLERS: Handlers = MappingProxyType({"store": _cmd_store})
"""This module's command handlers by command name (see :mod:`phasegraph.cli._commands`)."""
