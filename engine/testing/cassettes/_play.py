"""Drive a graph against a cassette: the outside world answered from the recording.

The graph runs for real in a memory store, with the run's recorded input, under a
middleware (:class:`_Player`) that answers what would leave the machine:

- ``llm:`` calls are pointed at :class:`CassetteModel`, which answers each node's hook's
  N-th call with the recorded message, whatever the request says (a changed prompt gets
  the answer it got before, and the change is reported);
- ``http:`` and ``shell:`` actions are not run: their recorded results are returned;
- gates are answered with the recorded replies, node by node, in order.

Everything else (python actions, the tools the model calls) runs, and what it does is
checked against the recording by :func:`~phasegraph.testing.cassettes._compare.compare`.

``update`` drives the graph the same way except that nothing is answered from the
recording but the replies: model calls go to the live endpoint (``PHASEGRAPH_LLM_BASE_URL``
or the graph's own ``with.llm``), and a new cassette is recorded from that run.
"""

from __future__ import annotations

import os
from typing import Final

from phasegraph.actions import ActionContext, ActionResult, CallNext
from phasegraph.actions.llm._endpoint import BASE_URL_ENV, SETTINGS_KEY
from phasegraph.api import Engine, GraphSource
from phasegraph.errors import ActionError, InputError, PhasegraphError
from phasegraph.model import RunState, RunStatus, frozen_map, replace
from phasegraph.run import PreparedGraph
from phasegraph.store import open_store
from phasegraph.testing.cassettes._compare import CassetteReport, compare
from phasegraph.testing.cassettes._entries import entries_of
from phasegraph.testing.cassettes._format import Cassette, Entry
from phasegraph.testing.cassettes._record import secrets_of
from phasegraph.testing.cassettes._server import CassetteModel

__all__ = ["play_cassette", "update_cassette"]

_WAITS: Final = (RunStatus.WAITING, RunStatus.PARKED)


class _Player:
    """The middleware that answers a test's calls from the cassette."""

    def __init__(self, cassette: Cassette, model: CassetteModel | None) -> None:
        self._model = model
        self._fed = {
            (e.node, e.hook, e.turn): e for e in cassette.entries if e.kind in ("http", "shell")
        }
        self._kinds: dict[tuple[str, str], str] = {}
        self._turns: dict[tuple[str, str], int] = {}
        self.missing: list[str] = []

    def bind(self, prepared: PreparedGraph) -> None:
        """Learn which hooks call a model, a URL or a command."""
        for node in prepared.definition.nodes:
            for hook, binding in node.bind.items():
                self._kinds[(node.id, hook)] = binding.kind

    async def __call__(self, ctx: ActionContext, call_next: CallNext) -> ActionResult:
        key = (ctx.node_id, ctx.hook)
        turn = self._turns[key] = self._turns.get(key, 0) + 1
        kind = self._kinds.get(key)
        if kind == "llm" and self._model is not None:
            url = self._model.base_url_for(ctx.node_id, ctx.hook, turn)
            settings = frozen_map({**ctx.settings, SETTINGS_KEY: {"base_url": url}})
            return await call_next(replace(ctx, settings=settings))
        if kind in ("http", "shell") and self._model is not None:
            return self._fed_result(ctx, kind, turn)
        return await call_next(ctx)

    def _fed_result(self, ctx: ActionContext, kind: str, turn: int) -> ActionResult:
        entry = self._fed.get((ctx.node_id, ctx.hook, turn))
        if entry is None:
            where = f"node {ctx.node_id!r}, hook {ctx.hook!r}, turn {turn}"
            self.missing.append(f"{where} (an {kind} action)")
            raise ActionError(f"the cassette has no {kind} result for {where}", node_id=ctx.node_id)
        answer = entry.answer
        if "error" in answer:
            raise ActionError(str(answer["error"]), node_id=ctx.node_id)
        return ActionResult(
            trigger=str(answer.get("trigger", "")),
            data=frozen_map(answer.get("data")),
            payload=frozen_map(answer.get("payload")),
            output=frozen_map(answer.get("output")),
        )


async def _answer_gates(
    engine: Engine, state: RunState, cassette: Cassette, missing: list[str]
) -> RunState:
    """Answer every gate the run opens with the recorded replies, node by node."""
    replies: dict[str, list[Entry]] = {}
    for entry in cassette.entries:
        if entry.kind == "reply":
            replies.setdefault(entry.node, []).append(entry)
    while state.status in _WAITS and state.interrupts:
        gate = next(iter(state.interrupts.values()))
        recorded = replies.get(gate.node) or []
        if not recorded:
            # A recording that ended waiting for a person ends the test there too.
            if cassette.status not in _WAITS:
                missing.append(f"node {gate.node!r}, gate {gate.kind!r} (a reply)")
            break
        answer = recorded.pop(0).answer
        trigger = str(answer.get("trigger", ""))
        try:
            state = await engine.reply(
                state.run_id,
                gate.id,
                trigger,
                payload=answer.get("payload"),
                data=answer.get("data"),
            )
        except PhasegraphError as exc:  # the graph changed: its gate takes another answer
            missing.append(f"node {gate.node!r}, gate {gate.kind!r}: the recorded reply "
                           f"{trigger!r} is refused ({exc})")  # fmt: skip
            break
    return state


async def _drive(
    cassette: Cassette, graph: GraphSource, model: CassetteModel | None
) -> tuple[PreparedGraph, list[Entry], RunState, list[str]]:
    """Run ``graph`` on the cassette's input in a memory store; return what it did."""
    player = _Player(cassette, model)
    async with open_store("memory://") as store, Engine(store, middleware=(player,)) as engine:
        prepared = engine.prepare(graph)
        if prepared.definition.name != cassette.graph:
            raise InputError(
                f"the cassette {cassette.shown!r} was recorded from graph {cassette.graph!r}, "
                f"not {prepared.definition.name!r}: name the graph it was recorded from"
            )
        player.bind(prepared)
        state = await engine.run(prepared, dict(cassette.input))
        state = await _answer_gates(engine, state, cassette, player.missing)
        first = await engine.get(state.run_id, 0)
        records = await engine.history(state.run_id, start=1)
        # A re-recorded cassette is written down: its secrets are masked.
        masker = secrets_of(prepared.definition) if model is None else None
        entries = entries_of(prepared, first, records, masker)
    missing = [*player.missing]
    if model is not None:
        missing += [f"node {n!r}, hook {h!r}, turn {t} (a model call)" for n, h, t in model.missing]
    return prepared, entries, state, missing


async def play_cassette(cassette: Cassette, graph: GraphSource) -> CassetteReport:
    """Drive ``graph`` against ``cassette`` offline and report how it compares.

    Raises:
        InputError: ``graph`` is not the graph the cassette was recorded from, or
            ``PHASEGRAPH_LLM_BASE_URL`` is set (it would send model calls to that
            endpoint instead of the cassette).
        SpecError: The graph is invalid.
    """
    if os.environ.get(BASE_URL_ENV):
        raise InputError(
            f"{BASE_URL_ENV} is set: model calls would go there, not to the cassette; "
            "unset it to test offline (or re-record with --update)"
        )
    async with CassetteModel(cassette) as model:
        prepared, played, state, missing = await _drive(cassette, graph, model)
    same, changed, divergence = compare(cassette.entries, played, missing)
    return CassetteReport(
        graph=prepared.definition.name,
        cassette=cassette.shown,
        entries=same,
        recorded=len(cassette.entries),
        status=str(state.status),
        graph_changed=prepared.definition.digest != cassette.graph_digest,
        changed=changed,
        divergence=divergence,
    )


async def update_cassette(cassette: Cassette, graph: GraphSource) -> tuple[Cassette, str]:
    """Record ``cassette`` again from a live run of ``graph`` (replies as recorded).

    Returns:
        The new cassette, and how its run ended (``completed``, ``failed``, ...).

    Raises:
        InputError: ``graph`` is not the graph the cassette was recorded from.
        SpecError: The graph is invalid.
    """
    prepared, entries, state, _ = await _drive(cassette, graph, None)
    fresh = Cassette(
        graph=prepared.definition.name,
        source=cassette.source,
        graph_digest=prepared.definition.digest,
        run=state.run_id,
        input=cassette.input,
        entries=tuple(entries),
        status=str(state.status),
    )
    return fresh, str(state.status)
