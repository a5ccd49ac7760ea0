"""Child runs: a node runs a graph as a run of its own, and waits for it like for a person.

A node whose state is bound to ``graph:`` does not run an action. When it enters the
state the step builder opens a gate on it, an :class:`~phasegraph.model.Interrupt` of
kind :data:`CHILD_RUN` whose id is ``RUN:NODE:HOOK`` and whose payload names the child
run (its id, graph, input and the key its results go to), and the node waits: the run
holds no process while it does. The child run's id is derived from the parent run, the
node and the step that opened the gate (:func:`child_run_id`), so whoever launches it,
and however often, launches the same run.

Everything here is pure: the step builder asks :func:`child_interrupt` for the gate;
whoever drives runs (:mod:`phasegraph.worker._children`) launches the child the payload
names, records its parent in its seq-0 record (:class:`ParentLink`), and once the child
ended answers the gate with :func:`child_answer`: ``completed`` (its ``output:`` keys
written to the binding's ``into`` key as a mapping) or ``failed``. The answer quotes
the step that opened the gate, so a second answer of the same opening is refused.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from phasegraph.actions import ActionResult
from phasegraph.actions._shell import lookup, render
from phasegraph.errors import ActionError
from phasegraph.model import (
    EMPTY,
    TEMPLATE_MAX_CHARS,
    ActionDef,
    Interrupt,
    RunState,
    RunStatus,
    StepRecord,
    frozen_map,
    template_parts,
)
from phasegraph.spec._children import child_graph_source

__all__ = [
    "CHILD_RUN",
    "COMPLETED",
    "FAILED",
    "ChildGraph",
    "ParentLink",
    "child_answer",
    "child_failed",
    "child_graph",
    "child_interrupt",
    "child_run_id",
]

CHILD_RUN: Final = "child_run"
"""The interrupt kind of a gate that waits for a child run."""
COMPLETED: Final = "completed"
"""What a ``graph:`` binding fires when its child run completed."""
FAILED: Final = "failed"
"""What it fires when its child run ended otherwise, or could not start."""

_MAX_ID: Final = 128  # phasegraph.run.RUN_ID_PATTERN: at most 128 characters
_DIGEST_CHARS: Final = 24
_LINK: Final = "child_of"  # the key of a child's seq-0 record result naming its parent


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildGraph:
    """A ``graph:`` binding, compiled once when its graph is prepared.

    Attributes:
        graph: The graph the child runs: a built-in's name, or a file's absolute path.
        input: The child's input as declared: ``{name}`` templates.
        into: The data key the child's ``output:`` keys are written to, if any.
    """

    graph: str
    input: Mapping[str, Any]
    into: str | None


def child_graph(definition: ActionDef, folder: Path | None) -> ChildGraph:
    """Compile a ``graph:`` binding (validated when its graph loaded).

    Args:
        definition: The binding.
        folder: The folder of the graph file that binds it (a relative path starts there).
    """
    config: Mapping[str, Any] = definition.config["graph"]
    return ChildGraph(
        graph=child_graph_source(str(config["graph"]), folder),
        input=frozen_map(config.get("input")),
        into=config.get("into"),
    )


def child_run_id(run_id: str, node_id: str, seq: int) -> str:
    """The id of the child run that node ``node_id`` of ``run_id`` starts at step ``seq``.

    ``RUN.NODE.SEQ``; past the 128 characters a run id may have, its tail is replaced by a
    digest of the whole, so distinct gates still name distinct runs.
    """
    full = f"{run_id}.{node_id}.{seq}"
    if len(full) <= _MAX_ID:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:_DIGEST_CHARS]
    head = full[: _MAX_ID - _DIGEST_CHARS - 1].rstrip("._-")
    return f"{head}.{digest}"


def child_interrupt(
    binding: ChildGraph,
    state: RunState,
    node_id: str,
    hook: str,
    *,
    item: Any,
    now: datetime,
) -> Interrupt:
    """The gate a node opens on entering a state bound to ``binding``, at step ``state.seq + 1``.

    Args:
        binding: The node's ``graph:`` binding there.
        state: The run state before the step.
        node_id: The node.
        hook: The hook of its state.
        item: The node's plan item (``{item}``), or ``None``.
        now: The step's time.

    Raises:
        ActionError: The input's templates cannot be filled.
    """
    values = {**state.input, **state.data}
    if item is not None:
        values["item"] = item
    payload: dict[str, Any] = {
        "run": child_run_id(state.run_id, node_id, state.seq + 1),
        "graph": binding.graph,
        "input": _filled(dict(binding.input), values, [TEMPLATE_MAX_CHARS]),
    }
    if binding.into is not None:
        payload["into"] = binding.into
    return Interrupt(
        id=f"{state.run_id}:{node_id}:{hook}",
        node=node_id,
        kind=CHILD_RUN,
        payload=frozen_map(payload),
        created_at=now,
    )


def _filled(value: Any, values: Mapping[str, Any], budget: list[int]) -> Any:
    """``value`` with its templates filled; a string that is one placeholder alone is the value.

    ``"{item}"`` hands the child the item itself (a mapping, a number), not its text; a
    string with more in it is rendered as text.
    """
    if isinstance(value, str):
        try:
            parts = template_parts(value)
        except ValueError as exc:
            raise ActionError(f"cannot fill template {value!r:.200}: {exc}") from None
        if len(parts) == 1 and not parts[0][0] and parts[0][1] is not None:
            return lookup(values, parts[0][1])
        text = render(value, values)
        budget[0] -= len(text)
        if budget[0] < 0:
            raise ActionError(
                f"the child run's input renders to more than {TEMPLATE_MAX_CHARS} characters "
                "of text: pass the values themselves ('{name}' alone)"
            )
        return text
    if isinstance(value, Mapping):
        return {str(k): _filled(v, values, budget) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_filled(v, values, budget) for v in value]
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class ParentLink:
    """Which gate a child run answers when it ends: kept in the child's seq-0 record.

    Attributes:
        run: The parent run.
        node: The node that waits.
        interrupt: The gate's id.
        step: The step that opened the gate (the answer quotes it).
        into: The parent's data key for the child's results, if any.
    """

    run: str
    node: str
    interrupt: str
    step: int
    into: str | None = None

    @classmethod
    def of_gate(cls, run_id: str, interrupt: Interrupt) -> ParentLink:
        """The link of the child run that ``interrupt`` (a :data:`CHILD_RUN` gate) waits for."""
        into = interrupt.payload.get("into")
        return cls(
            run=run_id,
            node=interrupt.node,
            interrupt=interrupt.id,
            step=interrupt.seq,
            into=into if isinstance(into, str) else None,
        )

    def result(self) -> Mapping[str, Any]:
        """What the child's seq-0 record keeps as its ``result`` (``child_of``)."""
        link: dict[str, Any] = {
            "run": self.run,
            "node": self.node,
            "interrupt": self.interrupt,
            "step": self.step,
        }
        if self.into is not None:
            link["into"] = self.into
        return frozen_map({_LINK: link})

    @classmethod
    def of_record(cls, record: StepRecord) -> ParentLink | None:
        """The parent a run's seq-0 record names (``None``: the run is no child)."""
        link = record.result.get(_LINK) if record.seq == 0 else None
        if not isinstance(link, Mapping):
            return None
        run, node, interrupt, step = (link.get(k) for k in ("run", "node", "interrupt", "step"))
        into = link.get("into")
        if not (isinstance(run, str) and isinstance(node, str) and isinstance(interrupt, str)):
            return None
        if type(step) is not int:
            return None
        return cls(
            run=run,
            node=node,
            interrupt=interrupt,
            step=step,
            into=into if isinstance(into, str) else None,
        )


def child_answer(child: RunState, outputs: Sequence[str], into: str | None) -> ActionResult:
    """The answer to a gate whose child run ended as ``child`` is.

    ``completed`` with the child's id and status as payload and, with ``into``, its
    ``outputs`` keys (those it wrote) as the data ``{into: {KEY: VALUE}}``; else
    ``failed`` with its id, status and why.

    Raises:
        ValueError: The child has not ended.
    """
    if not child.status.terminal:
        raise ValueError(f"run {child.run_id!r} has not ended ({child.status})")
    said: dict[str, Any] = {"run": child.run_id, "status": str(child.status)}
    if child.status is RunStatus.COMPLETED:
        data = EMPTY
        if into is not None:
            results = {key: child.data[key] for key in outputs if key in child.data}
            data = frozen_map({into: results})
        return ActionResult(trigger=COMPLETED, payload=frozen_map(said), data=data)
    said["message"] = _why(child)
    return ActionResult(trigger=FAILED, payload=frozen_map(said))


def child_failed(run_id: str, status: str, why: str) -> ActionResult:
    """A ``failed`` answer said outright, with the child's id, ``status`` and ``why``.

    For a child that could not start (``not started``) or whose results cannot be read.
    """
    said = {"run": run_id, "status": status, "message": why}
    return ActionResult(trigger=FAILED, payload=frozen_map(said))


def _why(child: RunState) -> str:
    """Why a child run did not complete: its last error, else its status."""
    failures = [e.message for e in child.errors if e.severity != "warning"]
    if failures:
        return f"child run {child.run_id!r} {child.status}: {failures[-1]}"
    reasons = [node.error for node in child.nodes.values() if node.error]
    if reasons:
        return f"child run {child.run_id!r} {child.status}: {reasons[0]}"
    return f"child run {child.run_id!r} ended {child.status}"
