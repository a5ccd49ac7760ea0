"""Engine.history and the stores' history reads: order, windows, batches, unreadable records."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgpack
import pytest

from history_checks import assert_holds
from phasegraph import codec
from phasegraph.api import Engine
from phasegraph.errors import CodecError, UnsupportedFormatError
from phasegraph.model import StepRecord
from phasegraph.store import Store, open_store
from phasegraph.testing import make_commit

T0 = datetime(2025, 3, 1, 9, 30, tzinfo=UTC)


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path}/runs.db"
    async with open_store(url) as opened:
        yield opened


def record(seq: int) -> StepRecord:
    return StepRecord(seq=seq, time=T0 + timedelta(seconds=seq), kind="status")


async def commit_records(store: Store, blobs: list[bytes]) -> None:
    lease = await store.acquire("r", "w", 30)
    for seq, blob in enumerate(blobs):
        await store.commit(lease, make_commit("r", seq, record=blob))


async def test_history_decodes_every_record_in_order(store: Store) -> None:
    await commit_records(store, [codec.encode_record(record(seq)) for seq in range(5)])
    engine = Engine(store)
    assert await engine.history("r") == [record(seq) for seq in range(5)]
    assert await engine.history("r", start=2, stop=4) == [record(2), record(3)]
    assert await engine.history("r", start=4, stop=2) == []
    assert gc.isenabled()


@pytest.mark.parametrize(
    ("bad", "error", "fragment"),
    [
        (codec.encode_record(record(2))[:-3], CodecError, "not valid msgpack"),
        (b"\xc1", CodecError, "not valid msgpack"),
        (
            msgpack.packb({"body": {}, "kind": "record", "v": codec.FORMAT_VERSION + 1}),
            UnsupportedFormatError,
            "upgrade phasegraph",
        ),
    ],
    ids=["truncated", "not-msgpack", "newer-format"],
)
async def test_an_unreadable_record_names_the_run_and_its_seq(
    store: Store, bad: bytes, error: type[CodecError], fragment: str
) -> None:
    await commit_records(store, [codec.encode_record(record(seq)) for seq in range(2)] + [bad])
    engine = Engine(store)
    with pytest.raises(error) as caught:
        await engine.history("r")
    assert type(caught.value) is error
    assert (caught.value.run_id, caught.value.seq) == ("r", 2)
    message = str(caught.value)
    assert message.startswith("run 'r': the step record at seq 2 cannot be read: ")
    assert fragment in message
    assert gc.isenabled()
    assert await engine.history("r", stop=2) == [record(0), record(1)]


async def test_long_histories_cross_every_batch_boundary(store: Store) -> None:
    """The SQLite store reads in growing batches (256, 1024, 4096, ...): no row lost."""
    count = 256 + 1024 + 10
    lease = await store.acquire("r", "w", 30)
    for seq in range(count):
        await store.commit(lease, make_commit("r", seq))
    assert [item async for item in store.history("r")] == [
        (seq, b"record-%d" % seq) for seq in range(count)
    ]
    window = [seq async for seq, _ in store.history("r", start=250, stop=1290)]
    assert window == list(range(250, 1290))
    assert [seq async for seq, _ in store.history("r", start=-5, stop=3)] == [0, 1, 2]
    assert [seq async for seq, _ in store.history("r", start=3, stop=-1)] == []
    assert [seq async for seq, _ in store.history("r", start=count - 2)] == [count - 2, count - 1]


async def test_history_json_renders_a_long_history_page_by_page_as_one(store: Store) -> None:
    """``history --json`` text crosses every page of records rendered at once unchanged,
    and an unreadable record far into it is named as ``history`` names it."""
    count = 700
    blobs = [codec.encode_record(record(seq)) for seq in range(count)]
    await commit_records(store, blobs)
    engine = Engine(store)
    whole = await engine.history_json("r")
    assert_holds(whole, [record(seq) for seq in range(count)])
    for start, stop in [(0, None), (250, 530), (256, 512), (511, 513), (699, None)]:
        window = await engine.history_json("r", start=start, stop=stop)
        assert_holds(window, [record(seq) for seq in range(start, stop or count)])
        # The same items, cut from the whole text: no page boundary shows.
        assert window.strip(b"[]\n") in whole
    assert gc.isenabled()


async def test_history_json_names_an_unreadable_record_far_into_a_history(store: Store) -> None:
    blobs = [codec.encode_record(record(seq)) for seq in range(600)]
    blobs[400] = blobs[400][:-3]
    await commit_records(store, blobs)
    engine = Engine(store)
    with pytest.raises(CodecError) as caught:
        await engine.history_json("r")
    assert (caught.value.run_id, caught.value.seq) == ("r", 400)
    with pytest.raises(CodecError) as again:
        await engine.history("r")
    assert str(caught.value) == str(again.value)
    assert gc.isenabled()
    assert_holds(await engine.history_json("r", stop=400), [record(seq) for seq in range(400)])
