"""Record a run as a cassette: its entries, read from its store, every secret masked."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Final

from phasegraph.actions.llm._endpoint import SETTINGS_KEY
from phasegraph.api import Engine
from phasegraph.core._secrets import SecretMasker
from phasegraph.model import GraphDef
from phasegraph.testing.cassettes._entries import entries_of
from phasegraph.testing.cassettes._format import Cassette
from phasegraph.views import jsonable

__all__ = ["record_run", "secrets_of"]

_VARIABLE: Final = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def secrets_of(definition: GraphDef) -> SecretMasker:
    """The masker of a graph's secrets: secret-named variables, and those bindings read.

    An ``http:`` binding's ``headers_from_env`` and an ``llm:`` binding's ``api_key_env``
    name variables whose values are secrets whatever their names.
    """
    named: set[str] = set()
    for node in definition.nodes:
        for binding in node.bind.values():
            for template in (binding.config.get("headers_from_env") or {}).values():
                named.update(_VARIABLE.findall(str(template)))
        llm = node.settings.get(SETTINGS_KEY)
        if isinstance(llm, Mapping) and isinstance(llm.get("api_key_env"), str):
            named.add(llm["api_key_env"])
    return SecretMasker(os.environ, named)


async def record_run(engine: Engine, run_id: str) -> Cassette:
    """A cassette of run ``run_id`` as its store holds it, secrets masked.

    Raises:
        RunNotFoundError: No such run.
        CodecError: A stored record is corrupt or of a newer format.
    """
    first = await engine.get(run_id, 0)
    prepared = await engine.prepared_for(first)
    records = await engine.history(run_id, start=1)
    masker = secrets_of(prepared.definition)
    entries = entries_of(prepared, first, records, masker)
    return Cassette(
        graph=first.graph,
        source=first.graph_source,
        graph_digest=first.graph_digest,
        run=run_id,
        input=masker.value(jsonable(first.input)),
        entries=tuple(entries),
        status=str(records[-1].status) if records else str(first.status),
    )
