"""Snapshots that splice in unchanged node chunks are the bytes a full encode gives."""

from __future__ import annotations

from types import MappingProxyType

from hypothesis import given
from hypothesis import strategies as st

from payloads import golden_state
from phasegraph import codec
from phasegraph.codec import _chunks
from phasegraph.model import ChunkedMap, NodeState, NodeStatus, replace, updated_map

STATUSES = list(NodeStatus)


@given(
    st.integers(0, 300),
    st.lists(
        st.lists(st.tuples(st.integers(0, 299), st.sampled_from(STATUSES), st.integers(0, 9))),
        max_size=5,
    ),
)
def test_cached_snapshots_equal_full_encodes(size: int, steps: list[list[tuple]]) -> None:
    base = golden_state()
    ids = [f"n{index:03d}" for index in range(size)]
    nodes = ChunkedMap.of({node_id: NodeState() for node_id in ids})
    state = replace(base, nodes=nodes)
    cache = _chunks.SnapshotCache()
    assert codec.encode_snapshot(state, cache) == codec.encode_snapshot(state)
    for changes in steps:
        moved = {
            ids[index % size]: NodeState(status=status, steps=count, payload=MappingProxyType({}))
            for index, status, count in changes
            if size
        }
        state = replace(state, nodes=updated_map(state.nodes, moved))
        spliced = codec.encode_snapshot(state, cache)
        # Byte for byte the canonical encoding of the same nodes in a plain map.
        plain = replace(state, nodes=MappingProxyType(dict(state.nodes)))
        assert spliced == codec.encode_snapshot(plain)
        assert codec.decode_snapshot(spliced) == state


@given(st.integers(0, 70_000))
def test_map_headers_are_msgpack_headers(size: int) -> None:
    import msgpack

    header = _chunks.map_header(size)
    unpacker = msgpack.Unpacker()
    unpacker.feed(header)
    assert unpacker.read_map_header() == size
