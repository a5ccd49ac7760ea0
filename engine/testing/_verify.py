"""``phasegraph test``: properties that can fail for the user's own graph or machine.

The first four are proved, not sampled: they come from the exhaustive exploration
``phasegraph check`` runs (every state x budget counter x guard value); the last two run
the graph's own actions, once uninterrupted, then with a crash injected before each
commit.

1. **check**: the definition passes ``phasegraph check`` (errors fail; warnings are shown);
2. **liveness**: from every reachable configuration a final state can still be reached,
   and no trigger the actions may return is refused by every guard;
3. **termination**: no loop can repeat without spending a budget, so every node ends
   within what its budgets allow (shown per node and level, in the budgets' own units:
   see :mod:`phasegraph.testing._bounds`);
4. **outcomes**: every outcome a final state declares can be reached;
4b. **plans** (graphs with plans only): every plan is tried in made-up shapes of 0, 1
   and many items, with and without needs, with scripted actions (see
   :mod:`phasegraph.testing._plans`);
5. **examples**: every example the machines declare (``examples:`` in a machine file)
   behaves as stated when fired through the engine's own stepping (see
   :mod:`phasegraph.testing._examples`); the transitions (from each source) no example
   takes and the budgets none runs out at its default limit are named;
6. **run** (graphs only): an uninterrupted run of the graph's own actions does not fail
   (a failed run is shown with its steps and error log), or ends as ``expect`` says for
   a graph meant to end so (one that shows a failure being handled);
7. **crash-equivalence** (graphs only): a run crashed before any commit and resumed ends
   as an uninterrupted run does (see :mod:`phasegraph.testing._crash`).

Each result is handed on as soon as it is known (``on_result``): the four proofs come
from one ``check``, in a second or so, the examples in milliseconds; the runs take longer.

Use :func:`verify` from code, :func:`graph_test` / :func:`machine_test` as pytest tests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from phasegraph.analysis import Code, Report, Severity, check
from phasegraph.analysis._check import machine_family, resolve
from phasegraph.model import MachineDef
from phasegraph.spec import load_graph
from phasegraph.testing._bounds import machine_bounds, node_bounds
from phasegraph.testing._crash import RunTrace, crash_equivalence, uninterrupted_run
from phasegraph.testing._examples import coverage, goals, machine_examples, run_examples
from phasegraph.testing._plans import explore_plans
from phasegraph.testing._runs import PropertyFailed

__all__ = ["PropertyResult", "graph_test", "machine_test", "verify"]

_LIVENESS = {
    Code.NO_FINAL,
    Code.GUARD_GAP,
    Code.CANNOT_LEAVE,
    Code.OUTCOME_NOT_ACCEPTED,
    Code.TRIGGER_NOT_ACCEPTED,
}
_TERMINATION = {Code.UNBOUNDED}
_OUTCOMES = {Code.OUTCOME_UNREACHABLE}


@dataclass(frozen=True, slots=True)
class PropertyResult:
    """One property and its verdict.

    Attributes:
        name: The property, e.g. ``liveness``.
        claim: What it says, in words.
        ok: Whether it holds.
        details: Why not (findings with their traces), or what it established.
    """

    name: str
    claim: str
    ok: bool
    details: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        """The result as a JSON object."""
        return {
            "property": self.name,
            "claim": self.claim,
            "ok": self.ok,
            "details": list(self.details),
        }


def _from_findings(
    name: str, claim: str, report: Report, codes: set[Code], extra: tuple[str, ...] = ()
) -> PropertyResult:
    hits = [str(f) for f in report.findings if f.code in codes and f.severity is Severity.ERROR]
    return PropertyResult(name, claim, not hits, tuple(hits) or extra)


def _bounds(target: str | Path, kind: str | None) -> tuple[str, ...]:
    if kind == "graph":
        definition = load_graph(target)
        return tuple(
            line
            for n in definition.nodes
            for line in node_bounds(n.id, n.machine, definition.machines, n.settings)
        )
    root, family = machine_family(resolve(target).source)
    return tuple(machine_bounds(root.name, family))


def verify(
    target: str | Path,
    run_input: Mapping[str, Any] | None = None,
    *,
    crash: bool = True,
    approve: bool = False,
    expect: str | None = None,
    on_result: Callable[[PropertyResult], None] | None = None,
) -> list[PropertyResult]:
    """Every property of a graph or machine (a built-in name or a path).

    Args:
        target: The definition.
        run_input: The run's input, for the runs of a graph's own actions.
        crash: Run the graph's own actions: the run and crash-equivalence properties
            (graphs only).
        approve: In those runs, answer every gate that accepts ``confirm`` with it.
        expect: The status the uninterrupted run must end with (``completed``,
            ``failed``, ``waiting``...); by default any but failed or cancelled.
        on_result: Called with each result as soon as it is known (to show progress).

    Raises:
        InputError: The target cannot be read.
    """
    results: list[PropertyResult] = []

    def done(result: PropertyResult) -> None:
        results.append(result)
        if on_result is not None:
            on_result(result)

    report = check(target)
    kind = resolve(target).kind
    errors = [str(f) for f in report.findings if f.severity is Severity.ERROR]
    others = [str(f) for f in report.findings if f.severity is not Severity.ERROR]
    done(
        PropertyResult(
            "check",
            "the definition passes `phasegraph check`",
            not errors,
            tuple(errors + others),
        )
    )
    loads = kind is not None and not any(
        f.code
        in {Code.YAML, Code.INVALID, Code.UNKNOWN_MACHINE, Code.NESTING_CYCLE, Code.DAG_CYCLE}
        for f in report.findings
    )
    done(
        _from_findings(
            "liveness",
            "every reachable state can still finish, and no returned trigger is refused",
            report,
            _LIVENESS,
        )
    )
    termination = _from_findings(
        "termination",
        "no loop repeats without spending a budget: every node ends within its bound",
        report,
        _TERMINATION,
    )
    if termination.ok and loads:
        termination = PropertyResult(
            termination.name, termination.claim, True, _bounds(target, kind)
        )
    done(termination)
    done(_from_findings("outcomes", "every declared outcome can be reached", report, _OUTCOMES))
    done(_examples(target, kind, loads))
    if kind == "graph" and loads and not errors:
        planned = _plans(target)
        if planned is not None:
            done(planned)
    if kind == "graph" and crash:
        trace = _run(
            target, run_input, runnable=not errors, approve=approve, expect=expect, done=done
        )
        done(_crash(target, run_input, trace, approve=approve))
    return results


def _examples(target: str | Path, kind: str | None, loads: bool) -> PropertyResult:
    name, claim = "examples", "every declared example behaves as stated"
    if not loads:
        return PropertyResult(name, claim, False, ("not run: the definition does not load",))
    machines: Mapping[str, MachineDef]
    if kind == "graph":
        machines = load_graph(target).machines
    else:
        machines = machine_family(resolve(target).source)[1]
    examples = [e for machine in machines.values() for e in machine_examples(machine)]
    if not examples:
        return PropertyResult(name, claim, True, ("no machine declares `examples:`",))
    results = list(run_examples(examples, machines))
    failures = [r.failure for r in results if r.failure is not None]
    described = [m for m in machines if any(e.machine == m for e in examples)]
    shown = {m: machines[m] for m in described}
    missed = coverage(shown, results, machines)
    every = [goal for m in shown.values() for goal in goals(m, machines)]
    wanted = sum(not goal.budget for goal in every)
    taken = wanted - sum(not goal.budget for goal in missed)
    budgets = len(every) - wanted
    run_out = budgets - sum(goal.budget for goal in missed)
    details = [
        f"{len(results) - len(failures)} of {len(results)} examples hold; they take {taken} "
        f"of the {wanted} transitions of {', '.join(described)} (each from each of its "
        f"sources) and run out {run_out} of the {budgets} budgets at their default limits"
    ]
    details += [goal.describe(shown) for goal in missed]
    return PropertyResult(name, claim, not failures, (*failures, *details))


def _plans(target: str | Path) -> PropertyResult | None:
    """Every plan of the graph tried in made-up shapes (``None``: the graph has no plan)."""
    runs, failures = explore_plans(load_graph(target))
    if not runs:
        return None
    claim = (
        "every plan, of 0, 1 and many items, with and without needs, is committed before its "
        "children run, keeps their order and limit, and ends as its children do"
    )
    details = (*failures, f"{runs - len(failures)} of {runs} made-up plans hold")
    return PropertyResult("plans", claim, not failures, details)


def _run(
    target: str | Path,
    run_input: Mapping[str, Any] | None,
    *,
    runnable: bool,
    approve: bool,
    expect: str | None,
    done: Callable[[PropertyResult], None],
) -> RunTrace | None:
    name = "run"
    claim = "an uninterrupted run of the graph's own actions does not fail"
    if expect is not None:
        claim = f"an uninterrupted run of the graph's own actions ends {expect}"
    if not runnable:
        done(PropertyResult(name, claim, False, ("not run: the graph does not pass check",)))
        return None
    trace = uninterrupted_run(str(target), run_input, approve=approve)
    if expect is not None:
        if trace.status == expect:
            detail = f"the run ended {trace.status} after {trace.commits} commits, as expected"
            done(PropertyResult(name, claim, True, (detail,)))
        else:
            expected = f"expected to end {expect}"
            done(PropertyResult(name, claim, False, (trace.describe(), expected)))
    elif trace.failed:
        done(PropertyResult(name, claim, False, (trace.describe(),)))
    elif trace.status in {"waiting", "parked"}:
        hint = "" if approve else " (--approve answers every gate that accepts confirm)"
        detail = f"the run stopped {trace.status} at a gate after {trace.commits} commits{hint}"
        done(PropertyResult(name, claim, True, (detail,)))
    else:
        done(PropertyResult(name, claim, True, (f"the run ended {trace.status}",)))
    return trace


def _crash(
    target: str | Path,
    run_input: Mapping[str, Any] | None,
    trace: RunTrace | None,
    *,
    approve: bool,
) -> PropertyResult:
    name = "crash-equivalence"
    claim = "a run crashed before any commit and resumed ends as an uninterrupted run"
    if trace is None:
        return PropertyResult(name, claim, False, ("not run: the graph does not pass check",))
    report = crash_equivalence(str(target), run_input, approve=approve, first=trace)
    details = [
        f"{report.crashes} crash points tried over {report.commits} commits "
        f"(the uninterrupted run ended {report.status}); {report.folders}"
    ]
    if report.varying is not None:
        varying = report.varying
        details.append(
            f"two uninterrupted runs wrote different data at {varying.where()} (e.g. "
            f"{varying.expected} / {varying.actual}), so the crashed runs were compared on "
            "triggers and states only"
        )
    if report.first is not None:
        return PropertyResult(name, claim, False, (str(report.first), *details))
    return PropertyResult(name, claim, True, tuple(details))


def failure_text(label: str, results: list[PropertyResult]) -> str:
    """The failed properties of ``label`` as a message a person can act on."""
    lines = [f"{label}: {sum(not r.ok for r in results)} of {len(results)} properties fail"]
    for result in results:
        if result.ok:
            continue
        lines.append(f"- {result.name}: {result.claim}: FAILED")
        lines += ["    " + d.replace("\n", "\n    ") for d in result.details]
    return "\n".join(lines)


class VerifyTest(Protocol):
    """A generated pytest test: call it to check every property."""

    def __call__(self) -> None:
        """Run the properties; raise :class:`PropertyFailed` naming each failure."""
        ...


def _test(label: str, run: Callable[[], list[PropertyResult]]) -> VerifyTest:
    def test() -> None:
        __tracebackhide__ = True  # pytest shows the finding, not the kit's frames
        results = run()
        if not all(r.ok for r in results):
            raise PropertyFailed(failure_text(label, results)) from None

    stem = Path(label).stem if "." in label else label
    test.__name__ = test.__qualname__ = "test_properties_of_" + "".join(
        c if c.isalnum() else "_" for c in stem
    )
    return test


def graph_test(
    source: str | Path,
    run_input: Mapping[str, Any] | None = None,
    *,
    approve: bool = False,
    expect: str | None = None,
) -> VerifyTest:
    """A pytest test proving every property of a graph, crash-equivalence included.

    ``approve`` and ``expect`` are :func:`verify`'s. Example::

        test_publish = graph_test("graphs/publish.yaml", {"topic": "x"})
    """
    return _test(str(source), lambda: verify(source, run_input, approve=approve, expect=expect))


def machine_test(source: str | Path) -> VerifyTest:
    """A pytest test proving liveness, termination and outcomes of a machine, and its examples."""
    return _test(str(source), lambda: verify(source, crash=False))
