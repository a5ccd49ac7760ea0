"""The built-in machines and the concern actions that serve their hooks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from phasegraph.cli._describe import describe_concern, describe_machine
from phasegraph.model import MachineDef
from phasegraph.spec import load_machine
from phasegraph.spec._concerns import CONCERN_TRIGGERS
from phasegraph.spec._loader import builtin_machines
from refpages._described import description_markdown
from refpages._markdown import generated_from

__all__ = ["page", "render"]


def render(machines: Sequence[MachineDef], concerns: Sequence[str]) -> str:
    """The page for ``machines`` and the concern actions ``concerns`` (``module:function``)."""
    by_name: Mapping[str, MachineDef] = {m.name: m for m in machines}
    parts = [
        "# Built-in machines",
        "",
        "The machines phasegraph ships (`states/*.yaml`): use one by name in a graph "
        "node's `machine:`. `phasegraph machines NAME` prints the same description in a "
        "terminal.",
        "",
        generated_from("states/*.yaml", "phasegraph.concerns"),
    ]
    parts += [description_markdown(describe_machine(m)) for m in machines]
    parts += [
        "## Concern actions",
        "",
        "Small `python:` actions for the hooks of the machines above; bind one by its "
        'target, e.g. `recover: {python: "phasegraph.concerns.fallback:recover"}`.',
        "",
    ]
    parts += [description_markdown(describe_concern(t, by_name), level=3) for t in concerns]
    return "\n".join(parts)


def page() -> str:
    """The page for every built-in machine and concern action."""
    return render([load_machine(name) for name in builtin_machines()], sorted(CONCERN_TRIGGERS))
