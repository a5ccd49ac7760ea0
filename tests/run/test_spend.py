"""The run budget's reservation rule, as a property over any interleaving of nodes.

Nodes reserve (a call's most, after what their step already spent), settle (the step
commits what the answer used, at most what was reserved), fail (the reservation is
released) or crash (a later process charges the reservation at its most), in any order.
The run's spent total plus every reservation outstanding never passes the limit, and a
refusal happens only when the call would not fit.
"""

from __future__ import annotations

from datetime import UTC, datetime
from types import MappingProxyType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phasegraph.errors import ActionError, SpendRefusedError
from phasegraph.model import (
    NodeState,
    NodeStatus,
    Price,
    RunState,
    RunStatus,
    SpendLimit,
    replace,
)
from phasegraph.run._spend import RESERVE_INDEX, reservation, reserve, reserved, totals

LIMIT = 10_000
NODES = ("a", "b", "c")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _state(nodes: dict[str, NodeState]) -> RunState:
    return RunState(
        run_id="r",
        graph="g",
        graph_source="g",
        graph_digest="",
        seq=1,
        status=RunStatus.RUNNING,
        input={},
        data={},
        nodes=MappingProxyType(nodes),
        created_at=NOW,
        updated_at=NOW,
    )


def _charged(node: NodeState, tokens: int) -> NodeState:
    """The node after its step ends: ``tokens`` spent, its ledger dropped."""
    counters = {**node.counters, "tokens": node.counters.get("tokens", 0) + tokens}
    return replace(node, counters=MappingProxyType(counters), ledger=())


OPS = st.lists(
    st.tuples(
        st.sampled_from(NODES),
        st.sampled_from(["reserve", "settle", "fail", "crash"]),
        st.integers(min_value=1, max_value=4_000),  # a call's most
        st.floats(min_value=0, max_value=1),  # the share of it the answer used
    ),
    max_size=60,
)


@given(ops=OPS)
def test_nodes_never_reserve_past_the_limit_together(ops: list) -> None:
    budget = SpendLimit(tokens=LIMIT)
    nodes = {n: NodeState(status=NodeStatus.RUNNING) for n in NODES}
    for node_id, op, most, share in ops:
        state = _state(nodes)
        node = nodes[node_id]
        held = reserved(reservation(node))["tokens"]
        if op == "reserve":
            standing = totals(state, budget)
            found = reserve(
                state,
                budget,
                node_id,
                effect_id=f"r:{node_id}:0",
                call=(("m",), most, 0),
                used={},
            )
            fits = standing["spent"]["tokens"] + standing["reserved"]["tokens"] - held + most
            if isinstance(found, SpendRefusedError):
                assert fits > LIMIT  # refused only what would not fit
                assert found.left["tokens"] == max(0, LIMIT - (fits - most))
            else:
                assert fits <= LIMIT
                assert found.index == RESERVE_INDEX
                assert found.arguments["tokens"] == most  # replaces the step's earlier one
                kept = tuple(e for e in node.ledger if e.index != RESERVE_INDEX)
                nodes[node_id] = replace(node, ledger=(*kept, found))
        elif op == "settle" and held:  # the answer used at most what was reserved
            nodes[node_id] = _charged(node, int(held * share))
        elif op == "fail":  # released: nothing spent
            nodes[node_id] = _charged(node, 0)
        elif op == "crash" and held:  # a later process charges it at its most
            nodes[node_id] = _charged(node, held)
        standing = totals(_state(nodes), budget)
        assert standing["spent"]["tokens"] + standing["reserved"]["tokens"] <= LIMIT
        assert standing["left"]["tokens"] == (
            LIMIT - standing["spent"]["tokens"] - standing["reserved"]["tokens"]
        )


def test_a_money_limit_prices_the_call_and_refuses_an_unpriced_model() -> None:
    budget = SpendLimit(money=0.01, prices=MappingProxyType({"m": Price(input=2, output=10)}))
    state = _state({"a": NodeState(status=NodeStatus.RUNNING)})
    found = reserve(state, budget, "a", effect_id="r:a:0", call=(("m",), 1000, 500), used={})
    assert not isinstance(found, SpendRefusedError)
    assert found.arguments["money"] == 7_000  # 1,000 * 2 + 500 * 10 millionths
    refused = reserve(state, budget, "a", effect_id="r:a:0", call=(("m",), 1000, 900), used={})
    assert isinstance(refused, SpendRefusedError)  # 11,000 millionths > 0.01
    with pytest.raises(ActionError, match=r"has no price in budget\.prices"):
        reserve(state, budget, "a", effect_id="r:a:0", call=(("x",), 1, 1), used={})
