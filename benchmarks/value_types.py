"""What building a frozen value costs: phasegraph's ``Value`` against a frozen dataclass.

Run from the repository root::

    .venv/bin/python benchmarks/value_types.py [--number 200000]

Each model type that a step builds is timed (``timeit``, best of 7) as it is and as a
``@dataclass(frozen=True, slots=True, kw_only=True)`` with the same fields and defaults,
given the same keyword arguments; the ratio is what a dataclass would cost per value.
Times move with the machine's load; the ratios are the figure to read.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import timeit
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from phasegraph.actions import ActionContext, ActionResult
from phasegraph.model import NodeState, NodeStatus, RunState, RunStatus, StepRecord, Value

NOW = datetime(2025, 1, 1, tzinfo=UTC)
EMPTY: Any = MappingProxyType({})
NODE = NodeState(status=NodeStatus.RUNNING, path=("work",), steps=3)

CASES: dict[type[Value], dict[str, Any]] = {
    NodeState: {"status": NodeStatus.RUNNING, "path": ("work",), "steps": 3, "payload": EMPTY},
    ActionResult: {"trigger": "done", "data": EMPTY},
    StepRecord: {
        "seq": 5,
        "time": NOW,
        "kind": "transition",
        "node": "a",
        "source": ("work",),
        "trigger": "done",
        "dest": ("done",),
        "nodes": MappingProxyType({"a": NODE}),
        "status": RunStatus.RUNNING,
    },
    RunState: {
        "run_id": "r",
        "graph": "g",
        "graph_source": "g.yaml",
        "graph_digest": "d",
        "seq": 5,
        "status": RunStatus.RUNNING,
        "input": EMPTY,
        "data": EMPTY,
        "nodes": MappingProxyType({"a": NODE}),
        "created_at": NOW,
        "updated_at": NOW,
    },
    ActionContext: {
        "run_id": "r",
        "node_id": "a",
        "state": "work",
        "hook": "run",
        "input": EMPTY,
        "data": EMPTY,
        "steps": 3,
        "attempt": 1,
    },
}


def as_dataclass(cls: type[Value]) -> type:
    """A frozen, slotted, keyword-only dataclass with ``cls``'s fields and defaults."""
    fields: list[Any] = []
    for name, parameter in inspect.signature(cls).parameters.items():
        if parameter.default is parameter.empty:
            fields.append((name, Any))
        else:
            fields.append((name, Any, _default(parameter.default)))
    return dataclasses.make_dataclass(cls.__name__, fields, frozen=True, slots=True, kw_only=True)


def _default(value: Any) -> Any:
    """A dataclass field defaulting to ``value``; an unhashable one (a map) by a factory."""
    try:
        hash(value)
    except TypeError:
        return dataclasses.field(default_factory=lambda: value)
    return dataclasses.field(default=value)


def best(build: Any, kwargs: dict[str, Any], number: int) -> float:
    """Nanoseconds per call of ``build(**kwargs)``, best of 7."""
    return min(timeit.repeat(lambda: build(**kwargs), number=number, repeat=7)) / number * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=200_000)
    args = parser.parse_args()
    print(f"{'type':14} {'Value':>9} {'dataclass':>10} {'ratio':>6}")
    for cls, kwargs in CASES.items():
        ours = best(cls, kwargs, args.number)
        theirs = best(as_dataclass(cls), kwargs, args.number)
        print(f"{cls.__name__:14} {ours:7.0f}ns {theirs:8.0f}ns {theirs / ours:5.1f}x")


if __name__ == "__main__":
    main()
