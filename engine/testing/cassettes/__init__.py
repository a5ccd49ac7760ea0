"""Cassettes: a recorded run kept as a regression test, and driven again offline.

``phasegraph record RUN --out FILE`` writes a run's answers from outside (model messages,
tool results, http and shell results, replies) as a cassette (:mod:`._format`,
:mod:`._record`, :mod:`._entries`);
``phasegraph test GRAPH --cassette FILE`` (or ``--from-run RUN``) drives the current graph
against it (:mod:`._play`) and reports changed requests and the first divergence
(:mod:`._compare`). In pytest, :func:`assert_cassette` checks one file, and the plugin
:mod:`phasegraph.testing.cassettes.plugin` collects every ``*.cassette.yaml`` as a test.

May import :mod:`phasegraph.api` and everything below it; owns nothing new (``aiohttp``
for the model endpoint, as the scripted model server does).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from phasegraph.testing.cassettes._compare import CassetteReport, Change, Divergence
from phasegraph.testing.cassettes._format import (
    CASSETTE_VERSION,
    KINDS,
    Cassette,
    Entry,
    read_cassette,
    write_cassette,
)
from phasegraph.testing.cassettes._play import play_cassette, update_cassette
from phasegraph.testing.cassettes._record import record_run, secrets_of

__all__ = [
    "CASSETTE_SUFFIX",
    "CASSETTE_VERSION",
    "KINDS",
    "Cassette",
    "CassetteReport",
    "Change",
    "Divergence",
    "Entry",
    "assert_cassette",
    "cassette_files",
    "check_cassette",
    "graph_of",
    "play_cassette",
    "read_cassette",
    "record_run",
    "relative_source",
    "secrets_of",
    "update_cassette",
    "write_cassette",
]

CASSETTE_SUFFIX = ".cassette.yaml"
"""The file name ending the pytest plugin collects."""


def graph_of(cassette: Cassette) -> str:
    """The graph a cassette names: a built-in name, or its path beside the cassette file."""
    source = cassette.source
    if cassette.path is None or not source.endswith((".yaml", ".yml")):
        return source
    return str(Path(cassette.path).parent / source)


def cassette_files(folder: str | Path) -> list[Path]:
    """Every ``*.cassette.yaml`` under ``folder``, sorted (for ``pytest.mark.parametrize``)."""
    return sorted(Path(folder).rglob(f"*{CASSETTE_SUFFIX}"))


def check_cassette(path: str | Path, graph: str | Path | None = None) -> CassetteReport:
    """Drive ``graph`` (default: the one the cassette names) against the cassette at ``path``.

    Synchronous, for tests: it runs its own event loop.

    Raises:
        InputError: The file is missing, the graph is not the recorded one, or
            ``PHASEGRAPH_LLM_BASE_URL`` is set.
        SpecError: The cassette or the graph is invalid.
    """
    cassette = read_cassette(Path(path))
    return asyncio.run(play_cassette(cassette, graph or graph_of(cassette)))


def assert_cassette(path: str | Path, graph: str | Path | None = None) -> CassetteReport:
    """As :func:`check_cassette`, raising ``AssertionError`` with the report on a divergence."""
    report = check_cassette(path, graph)
    if not report.passed:
        raise AssertionError(report.text())
    return report


def relative_source(source: str, out: Path) -> str:
    """``source`` as a cassette written to ``out`` names it: a path relative to its folder."""
    if not source.endswith((".yaml", ".yml")):
        return source
    return os.path.relpath(Path(source).resolve(), out.resolve().parent)
