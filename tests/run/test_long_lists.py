"""Long lists cost what they add: records carry appended items, snapshots share segments.

A node's action grows, replaces, patches and truncates a list (as a model loop grows its
conversation), and an ``append`` reducer key grows beside it. Whatever the sequence, the
run read back at every seq — ``Engine.get`` and the history replayed from seq 0 — holds
exactly the lists the action built, and a growing list is written about twice in all.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import engine, graph, prepared
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.api import Engine
from phasegraph.codec import _envelope
from phasegraph.model import NodeDef, apply_records, extension
from phasegraph.run import PreparedGraph
from phasegraph.store import Commit, ForwardingStore, Lease, Store, open_store
from phasegraph.testing import isolated_redis_store

Op = tuple[str, int]
OPS = st.one_of(
    st.tuples(st.just("append"), st.integers(0, 3)),
    st.tuples(st.just("replace"), st.integers(0, 12)),
    st.tuples(st.just("patch"), st.integers(0, 50)),
    st.tuples(st.just("truncate"), st.integers(0, 50)),
    st.tuples(st.just("same"), st.just(0)),
    st.tuples(st.just("reduce"), st.integers(1, 3)),
)


def item(step: int, index: int) -> Any:
    """A ~1 KiB item (a few of them pass the segment threshold), or a small scalar."""
    if index % 5 == 4:
        return [1, 1.0, True][step % 3]  # equal in Python, different on the wire
    return {"role": "user" if index % 2 else "assistant", "text": f"{step}:{index} " * 200}


def after(values: dict[str, list[Any]], op: Op, step: int) -> dict[str, list[Any]]:
    """The test's own model of what the action does to the data at op number ``step``."""
    kind, n = op
    conv = list(values.get("conv", []))
    out = dict(values)
    if kind == "append":
        out["conv"] = conv + [item(step, i) for i in range(n)]
    elif kind == "replace":
        out["conv"] = [item(step, i) for i in range(n)]
    elif kind == "patch" and conv:
        conv[n % len(conv)] = item(step, n % 5)
        out["conv"] = conv
    elif kind == "truncate":
        out["conv"] = conv[: n % (len(conv) + 1)]
    elif kind == "same":
        out["conv"] = conv
    elif kind == "reduce":
        out["log"] = values.get("log", []) + [item(step, i) for i in range(n)]
    return out


def scripted(ops: list[Op]) -> Callable[[ActionContext], Any]:
    async def action(ctx: ActionContext) -> ActionResult:
        step = ctx.counters["steps"] - 1
        if step >= len(ops):
            return ActionResult(trigger="stop")
        kind, n = ops[step]
        if kind == "reduce":  # the update is the new items; the reducer appends them
            return ActionResult(trigger="again", data={"log": [item(step, i) for i in range(n)]})
        current = {"conv": list(ctx.data["conv"])} if "conv" in ctx.data else {}
        if kind == "patch" and not current.get("conv"):
            return ActionResult(trigger="again")
        return ActionResult(trigger="again", data={"conv": after(current, ops[step], step)["conv"]})

    return action


def talker(ops: list[Op]) -> PreparedGraph:
    definition = graph(
        [NodeDef(id="talk", machine="loop")], machine="loop", reducers={"log": "append"}
    )
    return prepared(definition, {("talk", "work"): scripted(ops)})


@asynccontextmanager
async def backend(kind: str, redis_url: str | None = None) -> AsyncIterator[Store]:
    if kind == "memory":
        async with open_store("memory://") as store:
            yield store
    elif kind == "redis":
        assert redis_url is not None
        async with isolated_redis_store(redis_url) as store:
            yield store
    else:
        with tempfile.TemporaryDirectory() as tmp:
            async with open_store(f"sqlite:///{Path(tmp) / 'runs.db'}") as store:
                yield store


async def run_and_check(store: Store, ops: list[Op], crash_at: int | None) -> None:
    eng = engine(store, checkpoint_every=1)
    prepared_graph = talker(ops)
    expected: dict[int, dict[str, list[Any]]] = {0: {}}
    model: dict[str, list[Any]] = {}
    done = 0

    def follow(record: Any) -> None:
        nonlocal model, done
        if record.trigger == "again":
            model = after(model, ops[done], done)
            done += 1
        expected[record.seq] = model

    async with eng.start(prepared_graph) as run:
        run_id = run.run_id
        async for record in run:
            follow(record)
            if crash_at is not None and record.seq >= crash_at:
                break  # leave the block: a crash after this commit
    if crash_at is not None:  # a new engine resumes from the stored snapshots
        again = engine(store, checkpoint_every=1)
        async with again.open(run_id, graph=prepared_graph) as run:
            async for record in run:
                follow(record)
    eng = Engine(store)
    head = max(expected)
    for seq in range(head + 1):
        assert dict((await eng.get(run_id, seq)).data) == expected[seq], seq
    first = state = await eng.get(run_id, 0)
    records = await eng.history(run_id, start=1)
    for record in records:
        state = apply_records(state, [record])
        assert dict(state.data) == expected[record.seq], record.seq
        for key, items in record.appended.items():  # only what the step added
            assert len(items) <= 3, (key, record.seq)
    assert apply_records(first, records) == state  # folded at once, as a head read does
    assert dict(state.writers) == dict(apply_records(first, records).writers)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    kind=st.sampled_from(["memory", "sqlite"]),
    ops=st.lists(OPS, min_size=1, max_size=40),
    crash=st.none() | st.integers(2, 40),
)
def test_every_seq_reads_back_the_exact_lists(kind: str, ops: list[Op], crash: int | None) -> None:
    async def main() -> None:
        async with backend(kind) as store:
            await run_and_check(store, ops, crash)

    asyncio.run(main())


def test_the_same_on_redis(redis_url: str) -> None:
    ops: list[Op] = [("append", 3)] * 12 + [("patch", 7), ("same", 0), ("reduce", 2)]
    ops += [("append", 2)] * 12 + [("truncate", 20), ("append", 1)] * 3

    async def main() -> None:
        async with backend("redis", redis_url) as store:
            await run_and_check(store, ops, crash_at=20)

    asyncio.run(main())


# --------------------------------------------------------------------------- bytes


class Counting(ForwardingStore):
    """Counts the payload bytes of every commit of the store it wraps."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.records = 0
        self.snapshots = 0

    async def commit(self, lease: Lease, commit: Commit) -> None:
        await super().commit(lease, commit)
        self.records += len(commit.record)
        self.snapshots += len(commit.snapshot or b"")


@pytest.mark.parametrize("resume_every", [None, 50])
async def test_a_growing_conversation_is_written_about_twice(
    tmp_path: Path, resume_every: int | None
) -> None:
    """300 messages of 1 KiB: records and snapshots together stay within 2.3x the list.

    Resuming (a new process, a human reply) continues from the stored segments rather
    than writing the list again.
    """
    turns = 300
    ops: list[Op] = [("append", 1)] * turns
    async with open_store(f"sqlite:///{tmp_path}/runs.db") as inner:
        store = Counting(inner)
        eng = engine(store)
        prepared_graph = talker(ops)
        async with eng.start(prepared_graph) as run:
            run_id = run.run_id
            async for record in run:
                if resume_every and record.seq % resume_every == 0:
                    break
        while resume_every and not (await eng.get(run_id)).status.terminal:
            async with engine(store).open(run_id, graph=prepared_graph) as run:
                async for record in run:
                    if record.seq % resume_every == 0:
                        break
        conversation = (await eng.get(run_id)).data["conv"]
    assert len(conversation) == turns
    size = len(_envelope.encode_value(conversation))
    assert store.records < 1.3 * size  # each item once, plus each step's own fields
    assert store.records + store.snapshots < 2.3 * size


def test_extension_is_strict_about_types() -> None:
    assert extension([1, "a"], [1, "a", 2]) == [2]
    assert extension([1, "a"], [1, "a"]) == []
    assert extension([1], [True, 2]) is None
    assert extension([1.0], [1, 2]) is None
    assert extension([0.0], [-0.0, 2]) is None
    assert extension([{"a": 1}], [{"a": True}]) is None
    assert extension([{"a": [1]}], [{"a": (1,)}, 5]) == [5]  # written alike
    assert extension([], [1]) is None  # an empty list is written whole
    assert extension([1, 2], [1]) is None
    assert extension("ab", "abc") is None
