"""Budgets are explored symbolically: a limit far above what the machine's guards can
tell apart costs no more configurations than a small one, findings at the limit keep a
readable trace, and a space too large to explore whole is a note, never a defect."""

from __future__ import annotations

import itertools
from pathlib import Path
from types import MappingProxyType

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from phasegraph.analysis import _explore as explore
from phasegraph.analysis import check
from phasegraph.analysis._explore import EXACT_SPACE, Assumption, Explorer, Space, window
from phasegraph.cli import main
from phasegraph.model import BudgetDef, MachineDef, NodeOutcome, StateDef, TransitionDef
from phasegraph.spec._loader import load_machine_family, machine_source


def _configurations(name: str, limit: int, exact_space: int | None = EXACT_SPACE) -> int:
    """Configurations of a graph node on machine ``name`` with that limit."""
    _, family = load_machine_family(name)
    space = Explorer(family, exact_space=exact_space).explore(
        name, Assumption(MappingProxyType({"budgets": {"steps": limit}}))
    )
    assert not space.truncated
    assert sorted(space.outcomes) == ["failed", "success"]
    return len(space.parent)


@pytest.mark.parametrize("limit", [10_000, 1_000_000, 10**12])
def test_a_long_loop_explores_in_as_many_configurations_as_a_short_one(limit: int) -> None:
    assert _configurations("loop", limit) == _configurations("loop", 5) == 7


def test_limits_are_counted_unit_by_unit_while_the_space_stays_small() -> None:
    # Each unit is a configuration of its own: work at 1..n spent, then done and exhausted.
    assert [_configurations("loop", n) for n in (1, 2, 3, 4, 300)] == [3, 4, 5, 6, 302]
    assert _configurations("loop", 300, exact_space=0) == 7


def _graph(tmp_path: Path, machine: str, steps: int) -> Path:
    (tmp_path / "acts.py").write_text("def work(ctx):\n    return 'stop'\n", encoding="utf-8")
    machines = "machines: [./loop.yaml]\n" if (tmp_path / "loop.yaml").exists() else ""
    path = tmp_path / "graph.yaml"
    path.write_text(
        f"graph: grind\n{machines}nodes:\n  - id: grind\n    machine: {machine}\n"
        f"    with: {{budgets: {{steps: {steps}}}}}\n"
        "    bind:\n      work: {python: 'acts:work', triggers: [again, stop]}\n",
        encoding="utf-8",
    )
    return path


def test_the_documented_million_step_loop_checks_clean(tmp_path: Path) -> None:
    assert check(_graph(tmp_path, "loop", 1_000_000)).findings == ()


def _mutant_loop(tmp_path: Path, old: str, new: str) -> None:
    text = machine_source("loop").read_text(encoding="utf-8")
    assert old in text
    (tmp_path / "loop.yaml").write_text(text.replace(old, new), encoding="utf-8")


def test_a_gap_at_a_huge_limit_is_found_with_a_folded_trace(tmp_path: Path) -> None:
    """Without the `exhausted` fallback, `again` is refused once a million steps are spent."""
    _mutant_loop(
        tmp_path,
        '  - {trigger: again, source: work, dest: exhausted, unless: ["budget:steps"]}\n',
        "",
    )
    [gap] = [
        f for f in check(_graph(tmp_path, "loop", 1_000_000)).findings if f.code == "guard-gap"
    ]
    assert "trigger 'again' in state 'work' is refused by every guard with budget steps spent" in (
        gap.message
    )
    assert (
        "shortest trace: work --again [repeated until steps has 3 of 1000000 left]--> work "
        "(--again--> work) x3 --again--> refused"
    ) in gap.message


def test_a_guard_flipped_at_a_huge_limit_leaves_a_dead_transition(tmp_path: Path) -> None:
    """`again` to `work` only when the budget is spent: the engine's own guard (never
    enter a state whose budget is spent) makes it dead, at any limit."""
    _mutant_loop(
        tmp_path,
        '{trigger: again, source: work, dest: work, conditions: ["budget:steps"]}',
        '{trigger: again, source: work, dest: work, unless: ["budget:steps"]}',
    )
    (tmp_path / "loop.yaml").write_text(
        (tmp_path / "loop.yaml")
        .read_text(encoding="utf-8")
        .replace("limit: 1000", "limit: 1000000"),
        encoding="utf-8",
    )
    codes = {f.code for f in check(tmp_path / "loop.yaml").findings}
    assert {"dead-transition", "guard-gap"} <= codes
    assert "exploration-bounded" not in codes


def test_a_loop_spending_nothing_is_unbounded_beside_a_huge_budget(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(
        "machine: m\ninitial: a\nbudgets:\n  n: {limit: 1000000, spend_on: [a]}\n"
        "states:\n  a: {hook: a}\n  b: {hook: b}\n  c: {hook: c}\n  done: {final: success}\n"
        "transitions:\n"
        "  - {trigger: go, source: a, dest: b}\n"
        "  - {trigger: again, source: b, dest: a}\n"
        "  - {trigger: spin, source: b, dest: c}\n"
        "  - {trigger: spin, source: c, dest: b}\n"
        "  - {trigger: ok, source: [a, b, c], dest: done}\n",
        encoding="utf-8",
    )
    [loop] = [f for f in check(path).findings if f.code == "unbounded-cycle"]
    assert "can loop b -> c -> b for ever" in loop.message


def test_an_incomplete_exploration_is_a_note_that_strict_passes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(explore, "MAX_CONFIGURATIONS", 4)
    [note] = [f for f in check("loop").findings if f.code == "exploration-bounded"]
    assert note.severity == "note"
    assert "incomplete" in note.message
    assert "not a defect" in note.message
    assert main(["check", "--strict", "loop"]) == 0
    out = capsys.readouterr().out
    assert "note: machine 'loop': incomplete" in out
    assert (
        out.splitlines()[-1] == "checked 1 definition: 0 errors, 0 warnings, 1 note (not defects)"
    )


# --------------------------------------------------------------------------- random machines

_TRIGGERS = ("go", "back", "done")


@st.composite
def _machines(draw: st.DrawFn) -> MachineDef:
    """Small random machines whose budget limits are all above the window (symbolic)."""
    names = [f"s{i}" for i in range(draw(st.integers(2, 5)))]
    finals = set(draw(st.lists(st.sampled_from(names[1:]), max_size=2, unique=True)))
    states = {
        s: StateDef(
            name=s,
            final=NodeOutcome.SUCCESS if s in finals else None,
            hook=s if s not in finals else None,
        )
        for s in names
    }
    live = [s for s in names if s not in finals]
    window = max(3, len(live))
    budgets = {
        f"b{i}": BudgetDef(
            name=f"b{i}",
            limit=draw(st.integers(window + 2, window + 5)),
            spend_on=tuple(
                draw(st.lists(st.sampled_from(live), min_size=1, max_size=2, unique=True))
            ),
        )
        for i in range(draw(st.integers(1, 2)))
    }
    predicates = [f"budget:{b}" for b in budgets] + ["payload:ok"]
    transitions = tuple(
        TransitionDef(
            trigger=draw(st.sampled_from(_TRIGGERS)),
            source=tuple(
                draw(st.lists(st.sampled_from(live), min_size=1, max_size=2, unique=True))
            ),
            dest=draw(st.sampled_from(names)),
            conditions=tuple(draw(st.lists(st.sampled_from(predicates), max_size=1))),
            unless=tuple(draw(st.lists(st.sampled_from(predicates), max_size=1))),
        )
        for _ in range(draw(st.integers(1, 7)))
    )
    return MachineDef(
        name="random",
        initial="s0",
        states=MappingProxyType(states),
        transitions=transitions,
        budgets=MappingProxyType(budgets),
    )


def _seen(space: Space) -> tuple[set[object], ...]:
    """What findings are made of: transitions fired, outcomes, refused moves, states."""
    return (
        set(space.fired),
        set(space.outcomes),
        set(space.gaps),
        {c.state for c in space.parent},
        # A cycle found, or nothing: "no cycle" is not a finding a sound abstraction owes.
        {"cycle"} if space.cycle() is not None else set(),
    )


def _explored(machine: MachineDef, shifts: tuple[int, ...], *, exact: bool) -> Space:
    limits = {
        name: b.limit + shift
        for (name, b), shift in zip(machine.budgets.items(), shifts, strict=True)
    }
    assumption = Assumption(MappingProxyType({"budgets": limits}))
    counted = Explorer({machine.name: machine}, exact_space=None if exact else 0)
    return counted.explore(machine.name, assumption)


# Two budgets spent together, the smaller one running out first: an exact count never
# reaches s1 (so finds no cycle); symbolic counts cannot order them and find one.
_ORDER_UNKNOWN = MachineDef(
    name="random",
    initial="s0",
    states=MappingProxyType({s: StateDef(name=s, hook=s) for s in ("s0", "s1")}),
    transitions=(
        TransitionDef(trigger="go", source=("s0", "s1"), dest="s1", unless=("budget:b0",)),
        TransitionDef(trigger="go", source=("s0",), dest="s0"),
    ),
    budgets=MappingProxyType(
        {
            "b0": BudgetDef(name="b0", limit=6, spend_on=("s0",)),
            "b1": BudgetDef(name="b1", limit=5, spend_on=("s0",)),
        }
    ),
)


@settings(max_examples=150)
@given(machine=_machines())
@example(machine=_ORDER_UNKNOWN)
def test_symbolic_budgets_miss_nothing_an_exact_count_finds(machine: MachineDef) -> None:
    unchanged = (0,) * len(machine.budgets)
    symbolic = _explored(machine, unchanged, exact=False)
    exact = _explored(machine, unchanged, exact=True)
    assert not exact.truncated
    for found, counted in zip(_seen(symbolic), _seen(exact), strict=True):
        assert counted <= found


@settings(max_examples=40)
@given(machine=_machines())
def test_symbolic_budgets_find_only_what_some_limits_above_the_window_do(
    machine: MachineDef,
) -> None:
    """Far from its limit a counter stands for every count there, each budget on its own:
    what symbolic exploration finds, an exact count finds with some limits above the
    window."""
    symbolic = _seen(_explored(machine, (0,) * len(machine.budgets), exact=False))
    lowest = window(machine) + 2
    ranges = [range(lowest - b.limit, 10) for b in machine.budgets.values()]
    union: list[set[object]] = [set() for _ in symbolic]
    for shifts in itertools.product(*ranges):
        for merged, counted in zip(
            union, _seen(_explored(machine, shifts, exact=True)), strict=True
        ):
            merged |= counted
    for found, merged in zip(symbolic, union, strict=True):
        assert found <= merged


def test_a_node_is_explored_at_its_own_limits_where_that_is_cheap(tmp_path: Path) -> None:
    """`work` spends `a` and `check` spends `b`, alternately, `a` first: with equal
    limits `b` is never spent in `work`, so `go` is never refused there. Symbolic counts
    (either budget may be the first to run out) would report that refusal; the node's
    own limits, counted unit by unit, do not."""
    (tmp_path / "laps.yaml").write_text(
        "machine: laps\ninitial: work\nbudgets:\n"
        "  a: {limit: 10, spend_on: [work]}\n  b: {limit: 10, spend_on: [check]}\n"
        "states:\n  work: {hook: work}\n  check: {hook: check}\n  done: {final: success}\n"
        "transitions:\n"
        "  - {trigger: go, source: work, dest: check}\n"
        "  - {trigger: stop, source: work, dest: done}\n"
        "  - {trigger: back, source: check, dest: work}\n"
        "  - {trigger: back, source: check, dest: done}\n",
        encoding="utf-8",
    )
    (tmp_path / "acts.py").write_text("def act(ctx):\n    return 'stop'\n", encoding="utf-8")
    graph = tmp_path / "graph.yaml"
    graph.write_text(
        "graph: laps\nmachines: [./laps.yaml]\nnodes:\n  - id: lap\n    machine: laps\n"
        "    with: {budgets: {a: 10, b: 10}}\n    bind:\n"
        "      work: {python: 'acts:act', triggers: [go, stop]}\n"
        "      check: {python: 'acts:act', triggers: [back]}\n",
        encoding="utf-8",
    )
    assert check(graph).findings == ()
    _, family = load_machine_family(tmp_path / "laps.yaml")
    limits = Assumption(MappingProxyType({"budgets": {"a": 10, "b": 10}}))
    symbolic = Explorer(family, exact_space=0).explore("laps", limits)
    assert ("work", "go") in symbolic.gaps
    assert ("work", "go") not in Explorer(family, exact_space=EXACT_SPACE).explore(
        "laps", limits
    ).gaps
