"""A message may arrive between any two steps: whatever the order, each is taken once.

Hypothesis interleaves sending messages with the run's steps (a message arriving in
every state the chat machine passes through: at its gate, while it thinks, right after
it answered), then lets the run go on until it waits. Under ``enqueue`` every message is
answered, once, in the order sent; under ``interrupt`` and ``rollback`` each is still
taken once and in order, and one that comes while the node thinks replaces the message
it was thinking about, so what is answered is an ordered part of what was sent, ending
with the last.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phasegraph.api import Engine
from phasegraph.model import GraphDef, RunStatus
from phasegraph.spec import load_graph
from phasegraph.store.memory import MemoryStore

FIXTURES = Path(__file__).parent.parent / "fixtures" / "messages"
_MOVES = st.lists(st.sampled_from(["send", "step"]), min_size=1, max_size=14)


@pytest.fixture(scope="module")
def graphs() -> Iterator[dict[str, GraphDef]]:
    folder = Path(tempfile.mkdtemp())
    shutil.copy(FIXTURES / "chatbot.py", folder / "chatbot.py")
    text = (FIXTURES / "chat.yaml").read_text()
    loaded = {}
    for policy in ("enqueue", "interrupt", "rollback"):
        path = folder / f"chat_{policy}.yaml"
        path.write_text(text.replace("busy: enqueue", f"busy: {policy}"))
        loaded[policy] = load_graph(path)
    sys.path.insert(0, str(folder))
    try:
        yield loaded
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("chatbot", None)
        shutil.rmtree(folder)


async def _converse(graph: GraphDef, moves: list[str]) -> tuple[list[str], list[str], list[str]]:
    """What was sent, what was answered, and the ids of the messages taken, in order."""
    async with MemoryStore() as store:
        engine = Engine(store)
        await engine.run(graph, {}, run_id="r")
        sent: list[tuple[str, str]] = []
        async with engine.open("r") as run:
            for index, move in enumerate(moves):
                if move == "send":
                    posted = await engine.post_message("r", {"text": f"m{index}"})
                    sent.append((posted.id, f"m{index}"))
                    run.expect_message()
                else:
                    await run.next()
            await run.drive()
            state = run.state
        assert state.status is RunStatus.WAITING
        assert await store.messages("r") == []
        taken = [
            event["message"]["id"]
            for record in await engine.history("r")
            for event in record.events
            if "message" in event
        ]
        assert taken == [message_id for message_id, _ in sent]
        return [text for _, text in sent], list(state.data.get("said", [])), taken


@settings(max_examples=40)
@given(moves=_MOVES)
def test_under_enqueue_every_message_is_answered_once_in_order(
    graphs: dict[str, GraphDef], moves: list[str]
) -> None:
    sent, said, _ = asyncio.run(_converse(graphs["enqueue"], moves))
    assert said == sent


@settings(max_examples=40)
@given(moves=_MOVES, policy=st.sampled_from(["interrupt", "rollback"]))
def test_when_a_message_cuts_in_the_last_is_answered_and_none_twice(
    graphs: dict[str, GraphDef], moves: list[str], policy: str
) -> None:
    sent, said, _ = asyncio.run(_converse(graphs[policy], moves))
    assert said == [text for text in sent if text in said]  # in order, none twice
    assert said[-1:] == sent[-1:]
