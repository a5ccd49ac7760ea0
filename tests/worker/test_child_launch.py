"""Child runs after the parent's commit: launched, answered once, driven in one process.

The rules of :mod:`phasegraph.worker._children` on the memory and SQLite stores, each
crash window opened by hand: the parent's gate committed and no child launched yet; a
child ended and nobody told its parent; the same end told many times. The drives are
the one run driver's, over a mailbox that records what it is asked (or the in-process
one of :func:`~phasegraph.worker.drive_locally`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phasegraph import Engine, open_store
from phasegraph.errors import PhasegraphError, RunNotFoundError
from phasegraph.model import NodeStatus, RunState, RunStatus, StepRecord
from phasegraph.run._children import CHILD_RUN, ParentLink
from phasegraph.worker import drive_locally
from phasegraph.worker._children import ChildRuns, parent_of
from phasegraph.worker._driver import RunDriver
from phasegraph.worker._mailbox import Cancel, Outcome, Reply

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "children"
MAP = FIXTURES / "map.yaml"
LOG = logging.getLogger("phasegraph.worker")


class Recorder:
    """A mailbox that keeps what it is asked: launches, and replies until applied."""

    def __init__(self) -> None:
        self.launched: list[str] = []
        self.posted: dict[str, list[Reply]] = {}
        self.told: list[tuple[str, Reply]] = []
        self.refused: list[PhasegraphError] = []  # a queue's mailbox logs each as a warning

    async def replies(self, run_id: str) -> Sequence[Reply]:
        return list(self.posted.get(run_id, ()))

    async def replies_done(self, run_id: str, outcomes: Sequence[Outcome]) -> None:
        self.refused += [o for o in outcomes if isinstance(o, PhasegraphError)]
        del self.posted[run_id][: len(outcomes)]

    async def cancel_requested(self, run_id: str) -> Cancel | None:
        return None

    async def cancel_done(self, run_id: str, outcome: Outcome) -> None:
        """Never asked: no cancel is requested."""

    async def wake_at(self, run_id: str, when: datetime | None) -> None:
        """No deadlines here."""

    def left(self, run_id: str, why: PhasegraphError) -> None:
        """Mail stays for the next drive."""

    async def launch(self, run_id: str) -> None:
        self.launched.append(run_id)

    async def answer(self, run_id: str, reply: Reply) -> None:
        self.posted.setdefault(run_id, []).append(reply)
        self.told.append((run_id, reply))


@pytest.fixture(params=["memory", "sqlite"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    """An engine on a memory store, and on a SQLite file."""
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"
    async with open_store(url) as store, Engine(store) as made:
        yield made


def gates(state: RunState) -> dict[str, str]:
    """Gate id → the child run it waits for."""
    return {
        gate.id: str(gate.payload["run"])
        for gate in state.interrupts.values()
        if gate.kind == CHILD_RUN
    }


def gates_opened(history: list[StepRecord]) -> list[str]:
    """The child runs the run's gates waited for, in the order they opened."""
    return [
        str(event["payload"]["run"])
        for record in history
        for event in record.events
        if event.get("kind") == f"{CHILD_RUN}_request"
    ]


def replies(history: list[StepRecord]) -> list[str]:
    """The gates answered by the run's reply steps, in order."""
    return [
        str(event["id"])
        for record in history
        if record.kind == "reply"
        for event in record.events
        if event.get("kind") == f"{CHILD_RUN}_reply"
    ]


async def test_the_gate_commits_before_its_child_exists_and_the_next_drive_launches_it(
    engine: Engine,
) -> None:
    # Driven by a plain Engine.run, nothing launches: the window between the parent's
    # commit and the launch, left open as a crash would leave it.
    state = await engine.run(MAP, {"n": 2, "width": 2})
    assert state.status is RunStatus.WAITING
    children = gates(state)
    assert len(children) == 2
    for child in children.values():
        with pytest.raises(RunNotFoundError):
            await engine.get(child)
    mail = Recorder()
    await RunDriver(engine, mail, log=LOG).drive(state.run_id)
    assert set(mail.launched) == set(children.values())
    for gate_id, child in children.items():
        (created,) = await engine.history(child)  # created, launched, not driven yet
        gate = state.interrupts[gate_id]
        assert ParentLink.of_record(created) == ParentLink(
            run=state.run_id, node=gate.node, interrupt=gate_id, step=gate.seq, into="out"
        )
        assert (await engine.get(child)).input == {"item": int(gate.node.rsplit(".")[-1])}


async def test_a_waiting_child_holds_its_place_among_the_plans_children_in_flight(
    engine: Engine,
) -> None:
    state = await engine.run(MAP, {"n": 3, "width": 1})
    # One child in flight (waiting for its child run); the others cannot start, so the
    # run waits: it is not left "running" with nothing to do.
    assert state.status is RunStatus.WAITING
    assert len(gates(state)) == 1
    pending = sorted(n for n, node in state.nodes.items() if node.status is NodeStatus.PENDING)
    assert pending == ["each.1", "each.2"]
    after = await drive_locally(engine, state.run_id)
    assert after.data["outs"] == [{"value": 0}, {"value": 1}, {"value": 2}]


async def test_two_drivers_launching_one_child_create_it_once(engine: Engine) -> None:
    state = await engine.run(MAP, {"n": 3, "width": 3})
    mails = [Recorder(), Recorder()]
    looked = [ChildRuns(engine, mail, log=LOG).look(state) for mail in mails]
    assert await asyncio.gather(*looked) == [False, False]
    for child in gates(state).values():
        assert len(await engine.history(child)) == 1
        assert all(child in mail.launched for mail in mails)  # both see to it: queued once


async def ended_untold(engine: Engine, run_input: dict[str, Any]) -> tuple[RunState, list[str]]:
    """A parent waiting for child runs that ended with nobody telling it (a crash after
    each child's last commit)."""
    state = await engine.run(MAP, run_input)
    await ChildRuns(engine, Recorder(), log=LOG).look(state)
    children = list(gates(state).values())
    for child in children:
        await engine.resume(child)
    return state, children


async def test_every_notice_of_a_childs_end_is_answered_once(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="phasegraph")
    state, children = await ended_untold(engine, {"n": 2, "width": 2})
    mail = Recorder()
    told = ChildRuns(engine, mail, log=LOG)
    for child in [*children, *children, *reversed(children)]:  # at least once: thrice here
        assert await told.ended(await engine.get(child)) == state.run_id
    # The parent's own drive also finds them ended, and answers them again.
    driven = await RunDriver(engine, mail, log=LOG).drive(state.run_id)
    assert driven.state is not None
    assert driven.state.status is RunStatus.COMPLETED
    assert driven.state.data["outs"] == [{"value": 0}, {"value": 1}]
    assert len(mail.told) == 8  # six notices, and the parent's two
    assert mail.refused == []  # the notices past the first were dropped, not refused
    assert sorted(replies(await engine.history(state.run_id))) == sorted(gates(state))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # quietly


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
async def test_any_order_and_number_of_notices_answers_each_gate_once(data: st.DataObject) -> None:
    items = data.draw(st.lists(st.integers(-2, 9), min_size=1, max_size=4), label="items")
    async with open_store("memory://") as store:
        engine = Engine(store)
        state, children = await ended_untold(engine, {"n": 0, "items": items, "width": 4})
        copies = data.draw(
            st.lists(st.integers(1, 3), min_size=len(children), max_size=len(children))
        )
        notices = [
            child for child, count in zip(children, copies, strict=True) for _ in range(count)
        ]
        notices = data.draw(st.permutations(notices), label="order")
        mail = Recorder()
        for child in notices:
            await ChildRuns(engine, mail, log=LOG).ended(await engine.get(child))
        driven = await RunDriver(engine, mail, log=LOG).drive(state.run_id)
        after = driven.state
        assert after is not None
        assert sorted(replies(await engine.history(state.run_id))) == sorted(gates(state))
        ok = all(item >= 0 for item in items)
        assert after.status is (RunStatus.COMPLETED if ok else RunStatus.FAILED)
        if ok:
            assert after.data["outs"] == [{"value": item} for item in items]
        assert mail.posted[state.run_id] == []  # every notice dealt with
        assert mail.refused == []


async def test_a_failed_child_fails_its_gate_and_says_why(engine: Engine) -> None:
    state = await engine.run(MAP, {"n": 0, "items": [1, -1], "width": 2})
    after = await drive_locally(engine, state.run_id)
    assert after.status is RunStatus.FAILED
    assert after.nodes["each.0"].status is NodeStatus.COMPLETED
    failed = after.nodes["each.1"]
    assert failed.status is NodeStatus.FAILED
    assert failed.payload["status"] == "failed"
    assert "item -1 is negative" in failed.payload["message"]
    logged = [e.message for e in after.errors if e.node == "each.1"]
    assert any("item -1 is negative" in message for message in logged)


async def test_a_child_that_cannot_start_fails_its_gate_at_once(
    engine: Engine, tmp_path: Path
) -> None:
    graph = tmp_path / "bad_input.yaml"
    graph.write_text(
        "graph: bad_input\nnodes:\n  - id: sub\n    machine: child_run\n    bind:\n"
        f"      run: {{graph: {{graph: {FIXTURES / 'item.yaml'}, input: {{item: text}}}}}}\n"
    )
    state = await engine.run(graph)
    after = await drive_locally(engine, state.run_id)
    assert after.status is RunStatus.FAILED
    said = after.nodes["sub"].payload
    assert said["status"] == "not started"
    assert "cannot start" in said["message"]
    assert "input.item" in said["message"]  # the schema's own words
    with pytest.raises(RunNotFoundError):
        await engine.get(str(said["run"]))


async def test_a_cancelled_parent_drops_its_childrens_ends_quietly(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="phasegraph")
    state, children = await ended_untold(engine, {"n": 2, "width": 2})
    await engine.cancel(state.run_id, "not needed")
    mail = Recorder()
    for child in children:
        await ChildRuns(engine, mail, log=LOG).ended(await engine.get(child))
    await RunDriver(engine, mail, log=LOG).drive(state.run_id)
    assert replies(await engine.history(state.run_id)) == []
    assert (await engine.get(state.run_id)).status is RunStatus.CANCELLED
    assert mail.posted[state.run_id] == []
    assert mail.refused == []
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_driven_locally_a_map_of_child_runs_completes_in_item_order(engine: Engine) -> None:
    state = await engine.run(MAP, {"n": 6, "width": 2})
    after = await drive_locally(engine, state.run_id, max_runs=3)
    assert after.status is RunStatus.COMPLETED
    assert after.data["outs"] == [{"value": item} for item in range(6)]
    for child in [
        e["payload"]["run"]
        for r in await engine.history(state.run_id)
        for e in r.events
        if e.get("kind") == "child_run_request"
    ]:
        history = await engine.history(child)
        assert sum(record.status.terminal for record in history) == 1
        assert await parent_of(engine, child) is not None


async def test_runs_of_runs_complete_in_one_process(engine: Engine) -> None:
    state = await engine.run(FIXTURES / "nested.yaml", {"n": 3})
    after = await drive_locally(engine, state.run_id)
    assert after.status is RunStatus.COMPLETED
    assert after.data["result"] == {"outs": [{"value": 0}, {"value": 1}, {"value": 2}]}


async def test_a_child_answered_by_a_person_hands_its_parent_the_answer(engine: Engine) -> None:
    state = await drive_locally(engine, (await engine.run(FIXTURES / "asks.yaml")).run_id)
    assert state.status is RunStatus.WAITING  # its child waits for a person
    (child,) = gates(state).values()
    asked = await engine.get(child)
    (gate,) = asked.interrupts
    await engine.reply(child, gate, "ok", data={"answer": 42})
    after = await drive_locally(engine, child)  # the child ended: its parent goes on
    assert after.status is RunStatus.COMPLETED
    parent = await engine.get(state.run_id)
    assert parent.status is RunStatus.COMPLETED
    assert parent.data["got"] == {"answer": 42}
