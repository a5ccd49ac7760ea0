"""Markdown tables for ``compare.py``: one per workload, then the issue's targets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bench_common import Latency, Result

__all__ = ["Target", "dag_table", "latency_table", "loop_table", "targets_table"]

PG = "phasegraph"
RATIO_HEADER = "phasegraph ÷ this"


@dataclass(frozen=True, slots=True)
class Target:
    """One of the issue's targets and what this run measured for it."""

    what: str
    goal: str
    measured: float | None
    limit: float
    higher_is_better: bool = False
    unit: str = ""

    @property
    def met(self) -> str:
        if self.measured is None:
            return "n/a"
        ok = self.measured >= self.limit if self.higher_is_better else self.measured <= self.limit
        return "yes" if ok else "**no**"


def _num(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "—"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def _ratio(mine: float | None, theirs: float, higher_is_better: bool = False) -> str:
    """phasegraph's cost as a multiple of this row's (below 1: phasegraph is cheaper)."""
    if mine is None or theirs <= 0 or mine <= 0:
        return "—"
    ratio = theirs / mine if higher_is_better else mine / theirs
    return f"{ratio:.2f}"


def _peer(rows: Sequence[Result], row: Result) -> float | None:
    if row.system == PG or row.peer is None:
        return None
    for other in rows:
        if other.system == PG and other.store == row.peer:
            return other.us_per_step
    return None


def _table(header: list[str], lines: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(cells) + " |" for cells in lines]
    return out


def loop_table(title: str, rows: Sequence[Result]) -> list[str]:
    """A loop section: µs/step, ratio to phasegraph on the same kind of store, bytes/step."""
    header = ["system", "store", "µs/step", RATIO_HEADER, "payload B/step", "written B/step"]
    header.append("notes")
    lines = []
    for row in rows:
        counted = row.counted
        lines.append(
            [
                row.system,
                row.store,
                _num(row.us_per_step),
                _ratio(_peer(rows, row), row.us_per_step),
                _num(counted.payload if counted else None, 0),
                _num(counted.written if counted else None, 0),
                row.note,
            ]
        )
    return [f"### {title}", "", *_table(header, lines), ""]


def dag_table(title: str, rows: Sequence[Result], nodes: int) -> list[str]:
    """The DAG section: ms per run and µs per node (a run's time over its ``nodes``)."""
    header = ["system", "store", "ms/run", "µs/node", RATIO_HEADER, "notes"]
    lines = [
        [
            row.system,
            row.store,
            _num(row.us_per_step * row.steps / 1e3),
            _num(row.us_per_step * row.steps / nodes),
            _ratio(_peer(rows, row), row.us_per_step),
            row.note,
        ]
        for row in rows
    ]
    return [f"### {title}", "", *_table(header, lines), ""]


def latency_table(title: str, rows: Sequence[Latency]) -> list[str]:
    """Resume/history latencies or throughputs, compared within the same operation."""
    header = ["operation", "system", "store", "median", RATIO_HEADER, "notes"]
    lines = []
    for row in rows:
        mine = None
        if row.system != PG:
            mine = next(
                (
                    r.value
                    for r in rows
                    if r.system == PG and r.store == row.peer and r.section == row.section
                ),
                None,
            )
        lines.append(
            [
                row.section,
                row.system,
                row.store,
                f"{_num(row.value, 2)} {row.unit}",
                _ratio(mine, row.value, row.unit == "steps/s"),
                row.note,
            ]
        )
    return [f"### {title}", "", *_table(header, lines), ""]


def targets_table(targets: Sequence[Target]) -> list[str]:
    """The issue's targets against this run's medians."""
    lines = [[t.what, t.goal, f"{_num(t.measured, 2)} {t.unit}".strip(), t.met] for t in targets]
    return ["### Targets (issue 7)", "", *_table(["target", "goal", "measured", "met"], lines), ""]
