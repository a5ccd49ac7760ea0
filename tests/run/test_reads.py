"""Reading a run, on every store: ``Engine.get`` gives what the record-by-record way gave,
and ``Engine.history_json`` holds the records ``Engine.history`` returns.

The reference is the read path before records were folded unbuilt: the snapshot decoded,
then every record after it decoded into a ``StepRecord`` and applied with
``apply_records``; the JSON is checked for what it holds (``history_checks``). Runs are
driven by the interpreter (two nodes, data set and appended to, snapshots every few
steps) or committed record by record from generated steps, and payloads of format 1
(written before checksums and appends) are read too.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from types import MappingProxyType
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import engine, graph, prepared
from history_checks import assert_holds
from payloads import (
    format_4_body,
    golden_record_v1,
    golden_state_v5,
    loop_record,
    shape,
)
from phasegraph import codec
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.api import Engine
from phasegraph.codec import _envelope
from phasegraph.errors import CodecError, PhasegraphError
from phasegraph.model import (
    NodeState,
    NodeStatus,
    RunState,
    RunStatus,
    StepRecord,
    apply_records,
    frozen_map,
    replace,
)
from phasegraph.run._stored import run_meta
from phasegraph.store import Commit, RunMeta, Store, open_store
from phasegraph.testing import isolated_redis_store

GOLDEN = Path(__file__).parent.parent / "golden"
T0 = datetime(2025, 3, 1, 9, 30, tzinfo=UTC)
STORES = ["memory", "sqlite", "redis"]


@asynccontextmanager
async def backend(kind: str, tmp: Path, redis_url: str) -> AsyncIterator[Store]:
    if kind == "redis":
        async with isolated_redis_store(redis_url) as store:
            yield store
    else:
        url = "memory://" if kind == "memory" else f"sqlite:///{tmp / 'runs.db'}"
        async with open_store(url) as store:
            yield store


async def replayed(store: Store, run_id: str, seq: int | None = None) -> RunState:
    """The run state at ``seq`` the record-by-record way: every record built and applied."""
    stored = await store.read(run_id, seq)
    snapshot = _envelope.read_snapshot(stored.snapshot)
    referred = {need: (await store.read(run_id, need)).snapshot for need in snapshot.needs}
    state = snapshot.state(referred)
    return apply_records(state, [codec.decode_record(blob) for blob in stored.records])


async def assert_json_holds_history(
    engine: Engine, run_id: str, start: int, stop: int | None
) -> bytes:
    """``history_json`` holds the records ``history`` returns for the window; its text."""
    text = await engine.history_json(run_id, start=start, stop=stop)
    assert_holds(text, await engine.history(run_id, start=start, stop=stop))
    return text


async def assert_reads_as_replayed(store: Store, run_id: str) -> None:
    """Every seq reads as replayed, and the history JSON of some windows as rendered."""
    eng = Engine(store)
    head = (await store.read(run_id)).seq
    for seq in [*range(head + 1), None]:
        got, expected = await eng.get(run_id, seq), await replayed(store, run_id, seq)
        assert got == expected, seq
        assert shape(got) == shape(expected), seq
    windows = [(0, None), (1, head), (head // 2, None), (head, head + 5), (3, 1)]
    for start, stop in windows:
        await assert_json_holds_history(eng, run_id, start, stop)


# --------------------------------------------------------------------------- driven runs


def counting_graph() -> Any:
    """Two looping nodes: ``a`` sets keys (bytes among them) and appends to ``log``; then ``b``."""

    async def work(ctx: ActionContext) -> ActionResult:
        n = ctx.counters["steps"]
        if n > 40:
            return ActionResult(trigger="stop", data={"done": True})
        data = {"count": n, f"k{n % 3}": [n, str(n), b"\x00" * (n % 2)], "log": [n]}
        return ActionResult(trigger="again", data=data, output={"n": n})

    async def tail(ctx: ActionContext) -> ActionResult:
        n = ctx.counters["steps"]
        return ActionResult(trigger="stop" if n > 5 else "again", data={"tail": n})

    definition = graph([("a", []), ("b", ["a"])], machine="loop", reducers={"log": "append"})
    return prepared(definition, {("a", "work"): work, ("b", "work"): tail})


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize("every", [1, 4, 64])
async def test_a_driven_run_reads_at_every_seq_as_replayed(
    kind: str, every: int, tmp_path: Path, redis_url: str
) -> None:
    async with backend(kind, tmp_path, redis_url) as store:
        eng = engine(store, checkpoint_every=every)
        async with eng.start(counting_graph()) as run:
            async for _ in run:
                assert await eng.get(run.run_id) == run.state
        assert run.state.status is RunStatus.COMPLETED
        await assert_reads_as_replayed(store, run.run_id)


# --------------------------------------------------------------------------- generated runs

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=6)
    | st.binary(max_size=4)
    | st.datetimes(
        min_value=datetime(2000, 1, 1),
        max_value=datetime(2100, 1, 1),
        timezones=st.sampled_from([UTC, timezone(timedelta(hours=-3))]),
    )
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner, max_size=2)
    ),
    max_leaves=5,
)
MAPS = st.dictionaries(st.sampled_from(["x", "y", "z"]), VALUES, max_size=2)
NODES = st.builds(
    NodeState,
    status=st.sampled_from(NodeStatus),
    path=st.lists(st.sampled_from(["work", "done", "r"]), max_size=2).map(tuple),
    counters=st.dictionaries(st.sampled_from(["steps", "tries"]), st.integers(0, 99)),
    steps=st.integers(0, 99),
    payload=MAPS,
)
STEPS = st.fixed_dictionaries(
    {
        "node": st.sampled_from([None, "a", "b"]),
        "result": MAPS,
        "data": MAPS,
        "appended": st.none() | st.lists(VALUES, max_size=2),
        "nodes": st.dictionaries(st.sampled_from(["a", "b"]), NODES, max_size=2),
        "status": st.sampled_from([RunStatus.RUNNING, RunStatus.WAITING]),
        "events": st.lists(MAPS, max_size=1).map(tuple),
    }
)


def start_state(run_id: str) -> RunState:
    return RunState(
        run_id=run_id,
        graph="g",
        graph_source="g.yaml",
        graph_digest="d",
        seq=0,
        status=RunStatus.RUNNING,
        input=frozen_map({"n": 1}),
        data=frozen_map({"log": []}),
        nodes=MappingProxyType({"a": NodeState(), "b": NodeState()}),
        created_at=T0,
        updated_at=T0,
    )


def generated_records(steps: Sequence[dict[str, Any]]) -> list[StepRecord]:
    records = [StepRecord(seq=0, time=T0, kind="created")]
    for seq, step in enumerate(steps, 1):
        step = dict(step)
        appended = step.pop("appended")
        records.append(
            StepRecord(
                seq=seq,
                time=T0 + timedelta(seconds=seq, microseconds=seq % 3),
                kind="transition",
                appended=frozen_map({"log": appended} if appended is not None else {}),
                **step,
            )
        )
    return records


async def commit_generated(
    store: Store, run_id: str, records: list[StepRecord], snapshots: set[int]
) -> None:
    """Commit ``records`` and, at each seq of ``snapshots`` (and 0), the state they reach."""
    state = start_state(run_id)
    lease = await store.acquire(run_id, "test", 30)
    for record in records:
        if record.seq:
            state = apply_records(state, [codec.decode_record(codec.encode_record(record))])
        snapshot = codec.encode_snapshot(state) if record.seq in snapshots | {0} else None
        blob = codec.encode_record(record)
        await store.commit(
            lease, Commit(seq=record.seq, record=blob, snapshot=snapshot, meta=run_meta(state))
        )
    await store.release(lease)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    kind=st.sampled_from(STORES),
    steps=st.lists(STEPS, max_size=12),
    snapshots=st.sets(st.integers(1, 12), max_size=3),
)
def test_generated_runs_read_at_every_seq_as_replayed(
    kind: str, steps: list[dict[str, Any]], snapshots: set[int], tmp_path: Path, redis_url: str
) -> None:
    async def main() -> None:
        run_id = f"gen-{kind}"
        path = tmp_path / f"{len(steps)}-{sorted(snapshots)}"
        path.mkdir(exist_ok=True)
        (path / "runs.db").unlink(missing_ok=True)
        async with backend(kind, path, redis_url) as store:
            await commit_generated(store, run_id, generated_records(steps), snapshots)
            await assert_reads_as_replayed(store, run_id)

    asyncio.run(main())


# --------------------------------------------------------------------------- format 1


def at(seq: int, record: bytes, snapshot: bytes | None, meta: RunMeta) -> Commit:
    """The commit of ``record`` (and ``snapshot``) at ``seq``, ``meta`` moved to it."""
    return Commit(seq=seq, record=record, snapshot=snapshot, meta=replace(meta, seq=seq))


def format_1(record: StepRecord) -> bytes:
    """``record`` as format 1 wrote it: no checksum, no ``appended`` field and no ledgers."""
    body = format_4_body(msgpack.unpackb(codec.encode_record(record), timestamp=3)["body"])
    del body["a"], body["l"]
    body["ns"] = {
        key: {k: v for k, v in node.items() if k != "l"} for key, node in body["ns"].items()
    }
    return msgpack.packb({"body": body, "kind": "record", "v": 1}, datetime=True)


@pytest.mark.parametrize("kind", STORES)
async def test_a_run_written_in_format_1_still_reads(
    kind: str, tmp_path: Path, redis_url: str
) -> None:
    """Format-1 records and snapshots (no checksums, no appends) read as they did."""
    golden = golden_state_v5()  # snapshot_v1.bin holds this state (no plans), at seq 7
    records = [StepRecord(seq=0, time=golden.created_at, kind="created")]
    records += [loop_record(seq) for seq in range(1, 7)]
    old = golden.run_id
    async with backend(kind, tmp_path, redis_url) as store:
        lease = await store.acquire(old, "test", 30)
        meta = run_meta(golden)
        snapshot_v1 = (GOLDEN / "snapshot_v1.bin").read_bytes()
        first = codec.encode_snapshot(start_state(old))
        for record in records:
            blob = format_1(record)
            snap = first if record.seq == 0 else None
            await store.commit(lease, at(record.seq, blob, snap, meta))
        await store.commit(lease, at(7, format_1(loop_record(7)), snapshot_v1, meta))
        v1_record = (GOLDEN / "record_v1.bin").read_bytes()
        assert golden_record_v1().seq == 8
        await store.commit(lease, at(8, v1_record, None, meta))
        eng = Engine(store)
        head = await eng.get(old)
        assert head == await replayed(store, old)
        assert head == apply_records(golden, [golden_record_v1()])
        for seq in range(1, 7):  # replayed from the seq-0 snapshot through format-1 records
            assert await eng.get(old, seq) == await replayed(store, old, seq)
        json = await assert_json_holds_history(eng, old, 0, None)
        assert b'"seq": 8' in json


# --------------------------------------------------------------------------- errors


def flipped(blob: bytes) -> bytes:
    return blob[:20] + bytes([blob[20] ^ 1]) + blob[21:]


def misnumbered(record: StepRecord, seq: int) -> bytes:
    """A valid record that says it is at ``seq`` (a journal with a hole in it)."""
    body = msgpack.unpackb(codec.encode_record(record), timestamp=3)["body"]
    body["q"] = seq
    entries = msgpack.packb({"body": body, "kind": "record", "v": 2}, datetime=True)[1:]
    return b"\x84" + entries + b"\xa1z\xce" + zlib.crc32(entries).to_bytes(4, "big")


async def outcome_of(call: Any) -> tuple[Any, ...]:
    try:
        value = await call
    except PhasegraphError as exc:
        return type(exc), str(exc), exc.run_id, exc.seq
    return ("read", value)


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize("bad", ["flipped", "misnumbered", "newer", "misnumbered-then-flipped"])
async def test_a_bad_record_is_refused_as_the_record_by_record_way_refuses_it(
    kind: str, bad: str, tmp_path: Path, redis_url: str
) -> None:
    records = generated_records(
        [
            {
                "node": "a",
                "result": {},
                "data": {"x": 1},
                "appended": None,
                "nodes": {},
                "status": RunStatus.RUNNING,
                "events": (),
            }
        ]
        * 5
    )
    async with backend(kind, tmp_path, redis_url) as store:
        await commit_generated(store, "r", records[:3], set())
        lease = await store.acquire("r", "test", 30)
        blob = codec.encode_record(records[3])
        if bad == "flipped":
            blob = flipped(blob)
        elif bad.startswith("misnumbered"):
            blob = misnumbered(records[3], 4)
        else:
            blob = msgpack.packb({"body": {}, "kind": "record", "v": codec.FORMAT_VERSION + 1})
        meta = run_meta(start_state("r"))
        await store.commit(lease, at(3, blob, None, meta))
        last = codec.encode_record(records[4])
        if bad == "misnumbered-then-flipped":  # the first problem in seq order is named
            last = flipped(last)
        await store.commit(lease, at(4, last, None, meta))
        eng = Engine(store)
        refused = await outcome_of(eng.get("r"))
        assert refused == await outcome_of(replayed_as_load(store, "r"))
        assert issubclass(refused[0], CodecError)
        assert refused[2:] == ("r", 3)
        assert await outcome_of(eng.history_json("r")) == await outcome_of(eng.history("r"))
        await assert_json_holds_history(eng, "r", 0, 3)


async def replayed_as_load(store: Store, run_id: str) -> RunState:
    """The record-by-record way with the errors ``load`` gave: each record decoded in turn."""
    from phasegraph.run._stored import decode_stored, missing_record

    stored = await store.read(run_id)
    state = codec.decode_snapshot(stored.snapshot)
    records = []
    for offset, blob in enumerate(stored.records, stored.snapshot_seq + 1):
        record = decode_stored(run_id, offset, blob, codec.decode_record)
        if record.seq != offset:
            raise missing_record(run_id, offset, record.seq)
        records.append(record)
    return apply_records(state, records)
