"""Property tests for your own machines and graphs, driven by hypothesis.

Point a factory at a definition and keep what it returns as a pytest test::

    from phasegraph.testing._contract import graph_properties, machine_properties

    test_review_loop = machine_properties("states/review_loop.yaml")
    test_publish = graph_properties("graphs/publish.yaml", max_examples=100)

Each example draws, for every node, a script of :class:`Outcome` values: which of the
triggers legal in the node's current state its action returns (only those the bound
action declares, plus ``error`` when the state accepts it, as a raising action would),
and truth values for the ``payload:`` predicates. The real :class:`~phasegraph.Engine`
runs the graph on a memory store with these scripted actions in place of the bound ones
(no middleware, no run input), and the example checks that:

1. only declared states are ever reached;
2. no budget is ever exceeded;
3. every node ends in a final state (a node that fails because its trigger was refused
   fails the property) within :func:`~phasegraph.analysis.step_bound` steps, derived from
   the budgets: ``T + (T + 1) * child`` with ``T = (units + 1) * non-final states``;
4. stopping after every step and resuming from the stored snapshot ends the same way as
   not stopping (same node states, same transitions per node);
5. replaying the recorded run (:meth:`~phasegraph.Engine.replay`) is identical.

A script shorter than a node's run is used again from its start, so short scripts reach
budget exhaustion and expose loops that never end. The definition must also pass
``phasegraph check`` without errors.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

import hypothesis
from hypothesis import HealthCheck
from hypothesis import strategies as st

from phasegraph.testing._outcomes import (
    Outcome,
    Script,
    graph_outcomes,
    outcomes,
    scripted_actions,
)
from phasegraph.testing._runs import (
    PropertyFailed,
    Subject,
    graph_subject,
    machine_subject,
    run_example,
)

__all__ = [
    "PROPERTIES",
    "Outcome",
    "PropertyFailed",
    "PropertyStats",
    "PropertyTest",
    "Script",
    "graph_outcomes",
    "graph_properties",
    "machine_properties",
    "outcomes",
    "scripted_actions",
]

PROPERTIES = (
    "passes phasegraph check",
    "only declared states are reached",
    "budgets are never exceeded",
    "every node reaches a final state within the bound derived from its budgets",
    "stopping after every step and resuming gives the same result",
    "replaying the recorded run is identical",
)
"""What the generated tests check, in the order they check it."""


@dataclass(slots=True)
class PropertyStats:
    """Counts kept by a generated test (read them after it ran).

    Attributes:
        examples: Examples run so far (shrinking included).
    """

    examples: int = 0


# --------------------------------------------------------------------------- factories


class PropertyTest(Protocol):
    """A generated test: call it (pytest does) to run every property."""

    stats: PropertyStats
    properties: tuple[str, ...]

    def __call__(self) -> None:
        """Run the properties; raise :class:`PropertyFailed` with a counterexample."""
        ...


def _property_test(
    load: Callable[[], Subject], label: str, max_examples: int, max_steps: int
) -> PropertyTest:
    stats = PropertyStats()
    name = "properties_of_" + re.sub(r"\W", "_", Path(label).stem if "." in label else label)

    def test() -> None:
        __tracebackhide__ = True  # pytest shows the finding and its trace, not kit source
        subject = load()
        if subject.errors:
            raise PropertyFailed(
                f"{subject.label} does not pass `phasegraph check`:\n  "
                + "\n  ".join(subject.errors)
            ) from None

        def example(script: Script, checkpoint_every: int) -> None:
            stats.examples += 1
            asyncio.run(run_example(subject, script, checkpoint_every))

        # Named after the definition: it shows in counterexamples and keys hypothesis's
        # example database apart from other definitions'.
        example.__name__ = example.__qualname__ = name
        run = hypothesis.settings(
            max_examples=max_examples,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )(
            hypothesis.given(
                script=graph_outcomes(subject.definition, max_steps=max_steps),
                checkpoint_every=st.sampled_from((1, 3, 64)),
            )(example)
        )
        try:
            run()
        except PropertyFailed as exc:
            # Raised afresh: the kit's frames say nothing about the user's definition;
            # hypothesis's notes (the minimal script) are kept.
            failure = PropertyFailed(str(exc))
            for note in getattr(exc, "__notes__", []):
                failure.add_note(note)
            raise failure from None

    test.__name__ = test.__qualname__ = f"test_{name}"
    vars(test).update(stats=stats, properties=PROPERTIES)
    return cast(PropertyTest, test)


def machine_properties(
    source: str | Path,
    *,
    max_examples: int = 50,
    max_steps: int = 12,
    settings: Mapping[str, Any] | None = None,
    budget_cap: int | None = None,
) -> PropertyTest:
    """A pytest test checking :data:`PROPERTIES` of one machine, run as a one-node graph.

    Args:
        source: A machine file (relative to where pytest runs) or a built-in name.
        max_examples: Hypothesis examples to run.
        max_steps: Longest script drawn per node (scripts repeat, so runs go longer).
        settings: The node's ``with`` settings (for ``setting:`` predicates and budgets).
        budget_cap: Lower every budget limit to at most this, to keep long loops short.

    Returns:
        A test function; nothing is loaded until it runs.
    """
    label = str(source)
    return _property_test(
        lambda: machine_subject(source, settings or {}, budget_cap), label, max_examples, max_steps
    )


def graph_properties(
    source: str | Path,
    *,
    max_examples: int = 50,
    max_steps: int = 12,
    budget_cap: int | None = None,
) -> PropertyTest:
    """A pytest test checking :data:`PROPERTIES` of a graph, every node scripted at once.

    Args:
        source: A graph file (relative to where pytest runs) or a built-in name.
        max_examples: Hypothesis examples to run.
        max_steps: Longest script drawn per node (scripts repeat, so runs go longer).
        budget_cap: Lower every budget limit to at most this, to keep long loops short.

    Returns:
        A test function; nothing is loaded until it runs.
    """
    return _property_test(
        lambda: graph_subject(source, budget_cap), str(source), max_examples, max_steps
    )
