"""Messages sent to a run through the Python API: kept in its inbox, taken in order, once.

The chat fixture waits at a gate for a message, answers it by appending it to ``said``
and waits again; its graph's ``busy:`` is rewritten per test.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from phasegraph.api import Engine
from phasegraph.errors import IllegalTriggerError, InputError, RunBusyError, RunStateError
from phasegraph.model import RunStatus
from phasegraph.spec import load_graph
from phasegraph.store.base import ForwardingStore
from phasegraph.store.memory import MemoryStore

FIXTURES = Path(__file__).parent.parent / "fixtures" / "messages"


@pytest.fixture
def chat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("chat.yaml", "chatbot.py"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path / "chat.yaml"


def _copy(graph: Path, name: str, *changes: tuple[str, str]) -> Path:
    text = graph.read_text()
    for old, new in changes:
        text = text.replace(old, new)
    copy = graph.with_name(name)
    copy.write_text(text)
    return copy


def _with(graph: Path, old: str, new: str) -> Path:
    graph.write_text(graph.read_text().replace(old, new))
    return graph


async def test_messages_are_answered_in_order_and_once_each(chat: Path) -> None:
    async with MemoryStore() as store:
        engine = Engine(store)
        waiting = await engine.run(load_graph(chat), {}, run_id="r")
        assert waiting.status is RunStatus.WAITING
        first = await engine.send("r", {"text": "one"}, message_id="m1")
        assert (first.position, first.taken, first.duplicate) == (1, True, False)
        again = await engine.send("r", {"text": "one, resent"}, message_id="m1")
        assert (again.position, again.duplicate) == (1, True)
        second = await engine.send("r", {"text": "two"})
        assert second.position == 2
        assert second.taken
        assert second.state.data["said"] == ["one", "two"]
        assert second.state.status is RunStatus.WAITING
        taken = [
            event["message"]["id"]
            for record in await engine.history("r")
            for event in record.events
            if "message" in event
        ]
        assert taken == ["m1", second.id]
        assert await store.messages("r") == []


async def test_a_message_that_finds_the_run_busy_waits_for_the_gate(chat: Path) -> None:
    """Under enqueue, messages a busy process was sent are kept, and come in order."""
    async with MemoryStore() as store:
        engine = Engine(store)
        await engine.run(load_graph(chat), {}, run_id="r")
        # Queued without driving: as if a process were busy with the run.
        one = await engine.send("r", {"text": "one"}, drive=False)
        two = await engine.send("r", {"text": "two"}, drive=False)
        assert (one.position, two.position) == (1, 2)
        assert [m.id for m in await store.messages("r")] == [one.id, two.id]
        state = await engine.resume("r")
        assert state.data["said"] == ["one", "two"]
        assert await store.messages("r") == []


async def test_reject_names_the_step_the_run_is_on(chat: Path) -> None:
    graph = _with(chat, "busy: enqueue", "busy: reject")
    async with MemoryStore() as store:
        engine = Engine(store)
        await engine.run(load_graph(graph), {}, run_id="r")
        await engine.send("r", {"text": "one"}, drive=False)  # the gate takes it: kept
        with pytest.raises(RunBusyError, match=r"run 'r' has 1 message\(s\) still to take"):
            await engine.send("r", {"text": "two"}, drive=False)
        assert len(await store.messages("r")) == 1
        state = await engine.resume("r")
        assert state.data["said"] == ["one"]


@pytest.mark.parametrize(
    ("graph_busy", "gate_busy"), [("reject", ""), ("enqueue", ", busy: reject")]
)
async def test_reject_while_a_node_is_busy(tmp_path: Path, graph_busy: str, gate_busy: str) -> None:
    """A run busy at a node refuses a message, by the graph's policy or its gate's."""
    graph = tmp_path / "two.yaml"
    graph.write_text(
        f"graph: two\nbusy: {graph_busy}\nnodes:\n"
        "  - id: chat\n    machine: chat\n    bind:\n"
        f"      listen: {{human: chat, triggers: [message, bye]{gate_busy}}}\n"
        "      think: {shell: [sleep, '30'], on_exit: {'0': answer, default: error}}\n"
    )
    async with MemoryStore() as store:
        engine = Engine(store)
        async with engine.start(load_graph(graph), {}, run_id="r") as run:
            await run.drive()  # waits at listen
        await engine.send("r", {"text": "go"}, drive=False)
        async with engine.open("r") as run:
            await run.next()  # takes the message: chat is now thinking
            assert run.state.nodes["chat"].path == ("think",)
            with pytest.raises(RunBusyError) as refused:
                await engine.post_message("r", {"text": "two"})
        assert refused.value.node == "chat"
        assert refused.value.state == "think"
        assert "busy at node 'chat', state 'think'" in str(refused.value)


async def test_a_message_delivered_before_a_crash_is_not_taken_again(chat: Path) -> None:
    """The step that delivers a message is committed before the message is marked
    taken; a process that stops in between leaves it marked untaken, and the next
    opening of the run sees that its last step took it."""

    class _DiesBeforeTaking(ForwardingStore):
        dead = False

        async def take_messages(self, run_id: str, position: int) -> None:
            if not self.dead:
                self.dead = True
                raise SystemExit("killed between the commit and the take")
            await self.inner.take_messages(run_id, position)

    async with MemoryStore() as memory:
        store = _DiesBeforeTaking(memory)
        engine = Engine(store)
        await engine.run(load_graph(chat), {}, run_id="r")
        with pytest.raises(SystemExit):
            await engine.send("r", {"text": "once"}, message_id="m")
        assert [m.id for m in await memory.messages("r")] == ["m"]  # not marked taken
        state = await Engine(memory).resume("r")
        assert state.data["said"] == ["once"]
        assert await memory.messages("r") == []


async def test_messages_are_refused_where_nothing_takes_them(chat: Path) -> None:
    plain = _copy(chat, "plain.yaml", ("busy: enqueue\n", ""), ("graph: chat", "graph: plain"))
    async with MemoryStore() as store:
        engine = Engine(store)
        await engine.run(load_graph(plain), {}, run_id="plain")
        with pytest.raises(RunStateError, match="graph 'plain' declares no `busy:`"):
            await engine.send("plain", {"text": "hello"})
        await engine.run(load_graph(chat), {}, run_id="ended")
        with pytest.raises(InputError, match="message id"):
            await engine.send("ended", {"text": "hello"}, message_id="")
        with pytest.raises(InputError, match="cannot be stored"):
            await engine.send("ended", {"text": {1, 2}})
        await engine.reply("ended", "ended:chat:listen", "bye")
        with pytest.raises(RunStateError, match="already completed; it takes no more"):
            await engine.send("ended", {"text": "hello"})


@pytest.fixture
def writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("turns.yaml", "writer.yaml", "writer.py"):
        shutil.copy(FIXTURES / "turns" / name, tmp_path / name)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path / "writer.yaml"


async def _mid_turn(engine: Engine, graph: Path) -> None:
    """A run that took two messages and is half-way through the second turn.

    The first turn wrote ``draft`` and ``final``; the second has drafted ``two``
    and is about to polish it.
    """
    await engine.run(load_graph(graph), {}, run_id="r")
    await engine.send("r", {"text": "one"})
    await engine.send("r", {"text": "two"}, drive=False)
    async with engine.open("r") as run:
        await run.next()  # the gate takes "two"
        await run.next()  # drafted: polish is due
    assert (await engine.get("r")).data == {"draft": "two", "final": "one!"}


async def test_rollback_discards_the_turn_in_flight_back_to_its_gate(writer: Path) -> None:
    async with MemoryStore() as store:
        engine = Engine(store)
        await _mid_turn(engine, writer)
        before = await engine.get("r")
        await engine.send("r", {"text": "three"}, drive=False)
        async with engine.open("r") as run:
            taken = await run.next()  # a rollback step, then the gate takes "three"
            assert taken is not None
            await run.drive()
        rolled = (await engine.history("r", start=before.seq + 1))[0]
        back = await engine.get("r", rolled.seq)
        after = await engine.get("r")
    assert rolled.kind == "rollback"
    assert rolled.events[0]["to"] == before.seq - 2  # the step before "two" was taken
    assert back.data == {"draft": "one", "final": "one!"}  # as the turn began
    assert back.nodes["write"].path == ("listen",)
    assert (taken.kind, taken.seq, taken.events[0]["message"]["position"]) == (
        "reply",
        rolled.seq + 1,
        3,
    )
    assert after.data == {"draft": "three", "final": "three!"}


async def test_interrupt_hands_the_message_to_the_busy_state(writer: Path) -> None:
    graph = _with(writer, "busy: rollback", "busy: interrupt")
    async with MemoryStore() as store:
        engine = Engine(store)
        await _mid_turn(engine, graph)
        await engine.send("r", {"text": "three"}, drive=False)
        async with engine.open("r") as run:
            taken = await run.next()
            assert taken is not None
            assert (taken.kind, taken.source, taken.dest) == ("reply", ("polish",), ("draft",))
            assert run.state.data["draft"] == "two"  # kept: the turn was cut, not undone
            await run.drive()
        assert (await engine.get("r")).data == {"draft": "three", "final": "three!"}


async def test_a_message_refused_where_it_is_taken_does_not_hold_up_the_next(
    tmp_path: Path,
) -> None:
    """A message the machine refuses when it comes to take it (here: no turn left) is
    refused to its sender and taken all the same: the inbox is not stuck behind it."""
    (tmp_path / "short.yaml").write_text(
        "machine: short\ninitial: listen\nbudgets:\n  turns: {limit: 1, spend_on: [think]}\n"
        "states:\n  listen: {hook: listen}\n  think: {hook: think}\n"
        "transitions:\n"
        "  - {trigger: message, source: listen, dest: think, conditions: ['budget:turns']}\n"
        "  - {trigger: answer, source: think, dest: listen}\n"
    )
    graph = tmp_path / "short_chat.yaml"
    graph.write_text(
        "graph: short_chat\nbusy: enqueue\nmachines: [short.yaml]\nnodes:\n"
        "  - id: chat\n    machine: short\n    bind:\n"
        "      listen: {human: chat, triggers: [message]}\n"
        "      think: {shell: [echo], on_exit: {'0': answer, default: answer}}\n"
    )
    async with MemoryStore() as store:
        engine = Engine(store)
        await engine.run(load_graph(graph), {}, run_id="r")
        assert (await engine.send("r", {"text": "one"})).taken
        with pytest.raises(IllegalTriggerError, match="refused by every guard"):
            await engine.send("r", {"text": "two"})
        assert await store.messages("r") == []
        assert (await engine.get("r")).status is RunStatus.WAITING
