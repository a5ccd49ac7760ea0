"""What ``check`` believes a payload carries is what the actions put there.

``phasegraph.analysis._payloads`` keeps the keys each action kind puts in a trigger's
payload; a real ``shell:`` action run with any exit status (and any ``on_exit``
mapping), and a raised error classified as the engine classifies it, carry exactly
those keys: a key ``check`` says is there is there, and one it says is missing is.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from phasegraph.actions import ActionContext
from phasegraph.actions._build import build_action
from phasegraph.actions._failures import ERROR_TRIGGER, classify_error
from phasegraph.analysis._payloads import carried
from phasegraph.errors import ActionError
from phasegraph.model import ActionDef, MachineDef, NodeDef, StateDef, TransitionDef

_TRIGGERS = st.sampled_from(["ok", "pass", "fail", "lint", "skipped"])


def _node(config: dict[str, Any]) -> tuple[NodeDef, MachineDef]:
    action = ActionDef(kind="shell", config=config)
    node = NodeDef(id="n", machine="m", bind={"run": action})
    machine = MachineDef(
        name="m",
        initial="run",
        states={"run": StateDef(name="run", hook="run"), "end": StateDef(name="end")},
        transitions=(TransitionDef(trigger="ok", source=("run",), dest="end"),),
    )
    return node, machine


@settings(max_examples=25, deadline=None)
@given(
    status=st.integers(min_value=0, max_value=5),
    on_exit=st.dictionaries(st.sampled_from(["0", "1", "2", "default"]), _TRIGGERS, max_size=3),
)
def test_a_shell_actions_payload_holds_exactly_the_keys_check_expects(
    status: int, on_exit: dict[str, str]
) -> None:
    config: dict[str, Any] = {"shell": ["sh", "-c", f"exit {status}"]}
    if on_exit:
        config["on_exit"] = on_exit
    node, machine = _node(config)
    ctx = ActionContext(run_id="r", node_id="n", state="run", hook="run", input={}, data={})
    result = asyncio.run(build_action(ActionDef(kind="shell", config=config))(ctx))
    expected = carried(node, machine, "run", result.trigger)
    assert expected is not None
    # Every key the payload holds is one check knows of; a failure's keys are there
    # whenever check counts on them for this trigger and this run failed.
    assert set(result.payload) <= expected
    if status != 0:
        assert set(result.payload) == expected
    else:
        assert set(result.payload) == {"exit", "timed_out"}


def test_an_errors_payload_holds_the_keys_check_expects() -> None:
    node, machine = _node({"shell": "true"})
    expected = carried(node, machine, "run", ERROR_TRIGGER)
    assert expected is not None
    failure = ActionError("boom")
    failure.retry_after = 2.0  # type: ignore[attr-defined]
    failure.status = 503  # type: ignore[attr-defined]
    assert set(classify_error(failure)) == expected
    assert set(classify_error(ValueError("x"))) <= expected
