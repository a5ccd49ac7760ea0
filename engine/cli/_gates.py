"""What a waiting run asks: each open gate, the answers it accepts and how to give them."""

from __future__ import annotations

import argparse
import json
import shlex
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from phasegraph.api import Engine
from phasegraph.errors import PhasegraphError
from phasegraph.model import Interrupt, RunState
from phasegraph.store import DEFAULT_STORE_URL
from phasegraph.views import run_view

__all__ = [
    "OpenGate",
    "gate_lines",
    "open_gates",
    "reply_command",
    "run_budget",
    "run_json",
    "shown",
]

_VALUE_CHARS: Final = 400
"""How much of one payload value the text output shows (``--json`` shows all)."""


# A plain class, not a dataclass: every run command defines it, and a dataclass costs its
# start more to define (dataclasses writes and compiles its methods) than it saves.
class OpenGate:
    """A pending interrupt and the triggers a reply may fire on it.

    Attributes:
        interrupt: The pending interrupt.
        answers: Triggers a person may answer with, in the gate's declared order
            (``timeout`` is left out: the deadline fires it). Empty when the graph
            could not be loaded to ask.
        message: The answer a message sent to the run fires (``phasegraph send``),
            when the gate takes messages.
    """

    __slots__ = ("answers", "interrupt", "message")

    def __init__(
        self, *, interrupt: Interrupt, answers: tuple[str, ...], message: str | None = None
    ) -> None:
        self.interrupt: Final = interrupt
        self.answers: Final = answers
        self.message: Final = message


async def open_gates(engine: Engine, state: RunState) -> list[OpenGate]:
    """The run's pending interrupts with the answers each accepts, in id order."""
    if not state.interrupts:
        return []
    # Here, not at the top: a command that shows no gate (history) starts without actions.
    from phasegraph.run._gates import gate_answers

    try:
        prepared = await engine.prepared_for(state)
    except PhasegraphError:
        prepared = None  # its definition cannot be loaded here: say what we can without it
    answers = gate_answers(prepared, state)
    busy = None if prepared is None else prepared.definition.busy
    message = None if busy is None else busy.trigger
    return [
        OpenGate(
            interrupt=state.interrupts[interrupt_id],
            answers=answers[interrupt_id],
            message=message if message in answers[interrupt_id] else None,
        )
        for interrupt_id in sorted(state.interrupts)
    ]


def run_json(
    state: RunState,
    gates: Sequence[OpenGate],
    *,
    driving: bool,
    budget: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The run as ``--json`` prints it: :func:`~phasegraph.views.run_view`, as over HTTP."""
    answers = {gate.interrupt.id: gate.answers for gate in gates}
    return run_view(state, driving=driving, answers=answers, budget=budget)


async def run_budget(engine: Engine, state: RunState) -> dict[str, Any] | None:
    """The run's budget as it stands (``None``: no budget, nothing spent).

    Read from the run's stored definition; a run whose definition cannot be loaded here
    shows what it spent, without limits.
    """
    from phasegraph.run._spend import budget_view  # only a command that shows a run needs it

    try:
        prepared = await engine.prepared_for(state)
    except PhasegraphError:
        return budget_view(state, None)
    return budget_view(state, prepared.definition.budget)


def reply_command(args: argparse.Namespace, run_id: str, interrupt: Interrupt, trigger: str) -> str:
    """The exact ``phasegraph reply`` command that answers ``interrupt`` with ``trigger``."""
    # Here, not at the top: only a run with an open gate gets this far.
    from phasegraph.run._effects import HAPPENED, OUTCOME_UNKNOWN
    from phasegraph.run._spend_gate import BUDGET_GATE, MORE

    words = ["phasegraph", "reply", run_id, "--id", interrupt.id]
    if trigger == "confirm":
        words.append("--confirm")
    elif trigger == "reject":
        words += ["--reject", "FEEDBACK"]
    elif trigger == MORE and interrupt.kind == BUDGET_GATE:
        words += ["--trigger", trigger, "--payload", "tokens=N"]
    elif trigger == HAPPENED and interrupt.kind == OUTCOME_UNKNOWN:
        # A tool call's answer is its result; an action's own effect, the trigger it returned.
        said = "result=JSON" if interrupt.payload.get("tool") else "trigger=NAME"
        words += ["--trigger", trigger, "--payload", said]
    else:
        words += ["--trigger", trigger]
    if args.store != DEFAULT_STORE_URL:
        words += ["--store", args.store]
    if hands_to_workers(args):
        words.append("--detach")  # else answering would drive the whole run right here
    text = shlex.join(words)
    return text.replace("'FEEDBACK'", "FEEDBACK")


def _answer_command(args: argparse.Namespace, run_id: str, gate: OpenGate, trigger: str) -> str:
    """The command that answers ``gate`` with ``trigger``: a message is sent, not replied."""
    if trigger != gate.message:
        return reply_command(args, run_id, gate.interrupt, trigger)
    words = ["phasegraph", "send", run_id, "--text", "TEXT"]
    if args.store != DEFAULT_STORE_URL:
        words += ["--store", args.store]
    if hands_to_workers(args):
        words.append("--detach")
    return shlex.join(words)


def hands_to_workers(args: argparse.Namespace) -> bool:
    """Whether the run shown is the workers' (``--detach`` given, or said by the caller)."""
    return bool(getattr(args, "detach", False) or getattr(args, "workers_drive", False))


def _due(args: argparse.Namespace, run_id: str, deadline: datetime) -> str:
    """When the gate times out; a deadline already passed says what fires it, and when."""
    if deadline > datetime.now(UTC):
        return f"; times out at {deadline:%Y-%m-%d %H:%M:%S %Z}"
    command = ["phasegraph", "resume", run_id]
    if args.store != DEFAULT_STORE_URL:
        command += ["--store", args.store]
    if hands_to_workers(args):
        command.append("--detach")
    return (
        f"; its deadline passed at {deadline:%Y-%m-%d %H:%M:%S %Z}: the timeout fires when a "
        f"process next drives the run (a server or worker on this store, or "
        f"'{shlex.join(command)}')"
    )


def gate_lines(args: argparse.Namespace, state: RunState, gates: Sequence[OpenGate]) -> str:
    """Each open gate: who asks, what to judge, and the commands that answer it."""
    if not gates:
        return ""
    from phasegraph.run._children import CHILD_RUN  # here: only a run with gates gets here

    lines = []
    for gate in gates:
        interrupt = gate.interrupt
        if interrupt.kind == CHILD_RUN:
            lines.append(_child_line(args, interrupt))
            continue
        due = _due(args, state.run_id, interrupt.deadline) if interrupt.deadline else ""
        lines.append(
            f"\n  node {interrupt.node} waits at its {interrupt.kind} gate (id {interrupt.id}{due})"
        )
        if interrupt.reviewers:
            lines.append(f"\n    reviewers: {', '.join(interrupt.reviewers)}")
        if interrupt.payload:
            lines.append("\n    to judge:")
            lines += [f"\n      {key}: {shown(value)}" for key, value in interrupt.payload.items()]
        if gate.answers:
            lines.append(f"\n    it accepts {', '.join(gate.answers)}; answer with one of:")
            lines += [
                f"\n      {_answer_command(args, state.run_id, gate, trigger)}"
                for trigger in gate.answers
            ]
        else:
            lines.append(
                "\n    answer with: "
                + reply_command(args, state.run_id, interrupt, "NAME").replace(
                    "--trigger NAME", "--trigger NAME (a trigger its state accepts)"
                )
            )
    return "".join(lines)


def _child_line(args: argparse.Namespace, interrupt: Interrupt) -> str:
    """A gate that waits for a child run: which, and how to look at it (nobody answers it)."""
    child = str(interrupt.payload.get("run", ""))
    words = ["phasegraph", "status", child]
    if args.store != DEFAULT_STORE_URL:
        words += ["--store", args.store]
    graph = interrupt.payload.get("graph", "")
    return f"\n  node {interrupt.node} waits for child run {child} ({graph}): {shlex.join(words)}"


def shown(value: Any) -> str:
    """A value as one readable string: text as is, the rest as JSON; long ones cut."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    if len(text) > _VALUE_CHARS:
        text = f"{text[:_VALUE_CHARS]}... ({len(text)} characters; --json shows all)"
    return text.replace("\n", "\n        ")
