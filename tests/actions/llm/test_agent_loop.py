"""The agent machine with real ``llm:`` and ``tools:`` actions, against the scripted model.

The real ``openai`` client talks to :class:`ScriptedModelServer` over a loopback socket.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from model_kit import agent_node, call, graph_text, roles, run_agent, tool_result
from phasegraph.actions import ActionContext
from phasegraph.actions._build import build_action
from phasegraph.api import Engine
from phasegraph.errors import ActionError
from phasegraph.events import Event, EventId, live_event
from phasegraph.model import ActionDef, NodeOutcome, RunStatus
from phasegraph.server._events import frame
from phasegraph.server._feed import EventFeed
from phasegraph.spec import load_graph_text
from phasegraph.store import open_store


async def test_think_act_think_answers_and_records_every_turn(serve, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("forty-two", encoding="utf-8")
    server = await serve(
        [
            {"tool_calls": [call("read_file", path="notes.txt")], "usage": {"prompt_tokens": 30}},
            {"content": "The answer is forty-two.", "usage": {"completion_tokens": 7}},
        ]
    )
    node = agent_node({"system": "You are terse."}, settings={"workspace": str(tmp_path)})
    state, history = await run_agent(graph_text(node), {"task": "What do the notes say?"})

    assert state.status is RunStatus.COMPLETED
    conversation = state.data["conversation"]
    assert roles(conversation) == ["user", "assistant", "tool", "assistant"]
    assert conversation[0]["content"] == "What do the notes say?"
    assert tool_result(conversation[2])["text"] == "forty-two"
    assert conversation[2]["tool_call_id"] == conversation[1]["tool_calls"][0]["id"]
    assert conversation[3]["content"] == "The answer is forty-two."
    # The model saw the system message and, on the second turn, the tool's result.
    first, second = server.requests
    assert first["messages"][0] == {"role": "system", "content": "You are terse."}
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool"]
    # Each model response is in its step record; its usage is counted in the counters.
    thinks = [r for r in history if r.source == ("think",)]
    assert [r.trigger for r in thinks] == ["tool_calls", "answer"]
    assert thinks[0].result["output"]["usage"]["prompt_tokens"] == 30
    assert thinks[1].result["output"]["usage"]["completion_tokens"] == 7
    used = sum(r.result["output"]["usage"]["total_tokens"] for r in thinks)
    assert state.nodes["agent"].counters["tokens"] == used
    assert state.nodes["agent"].counters["turns"] == 2


async def test_the_model_sees_only_the_tools_its_phase_allows(serve, tmp_path: Path) -> None:
    server = await serve(
        [
            {"tool_calls": [call("write_file", path="x.txt", text="no")]},
            {"content": "I may not write in this phase."},
        ]
    )
    settings = {"workspace": str(tmp_path), "phases": {"think": {"tools": ["read_file"]}}}
    node = agent_node(settings=settings)
    node["with"]["phases"]["act"] = {"tools": ["read_file"]}
    state, history = await run_agent(graph_text(node))

    offered = [t["function"]["name"] for t in server.requests[0]["tools"]]
    assert offered == ["read_file"]
    # The model called write_file anyway: refused, told why, and the loop went on.
    refused = tool_result(state.data["conversation"][2])
    assert refused["error"] == "phase_violation"
    assert refused["tool"] == "write_file"
    assert not (tmp_path / "x.txt").exists()
    assert state.status is RunStatus.COMPLETED
    events = [e["kind"] for r in history for e in r.events]
    assert "phase_violation" in events


async def test_a_refused_once_call_commits_no_intent_and_is_logged_refused(
    serve, tmp_path: Path
) -> None:
    """The rules come before the intent: a call never attempted is never asked about."""
    commit = call("run_command", argv=["git", "commit", "-m", "x"])
    await serve([{"tool_calls": [commit, call("read_file", path="a.txt")]}, {"content": "ok"}])
    (tmp_path / "a.txt").write_text("a", encoding="utf-8")
    settings = {"workspace": str(tmp_path), "phases": {"act": {"tools": ["read_file"]}}}
    state, history = await run_agent(graph_text(agent_node(settings=settings)))

    assert state.status is RunStatus.COMPLETED
    assert tool_result(state.data["conversation"][2])["error"] == "phase_violation"
    # Nothing of the refused call is in the ledger: no intent, no result; the allowed
    # read's result is (index 1).
    ledger = [(r.kind, r.ledger.tool, r.ledger.index) for r in history if r.ledger]
    assert ledger == [("effect", "read_file", 1)]
    refused = [e for r in history for e in r.events if e["kind"] == "phase_violation"]
    assert [e["tool"] for e in refused] == ["run_command"]


async def test_a_repeated_call_is_corrected_in_the_conversation_then_stopped(
    serve, tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("a", encoding="utf-8")
    same = {"tool_calls": [call("read_file", path="a.txt")]}
    server = await serve([same, same, same, {"content": "unreachable"}])
    node = agent_node(settings={"workspace": str(tmp_path)})
    state, history = await run_agent(graph_text(node, middleware=["loop_detection"]))

    # First repeat: the corrective message is injected into the conversation, and the
    # model reads it on its next turn. The repeat after that raises the loop error.
    conversation = state.data["conversation"]
    corrective = [m for m in conversation if m["role"] == "user"][1:]
    assert len(corrective) == 1
    assert "change your approach" in corrective[0]["content"]
    assert corrective[0] in server.requests[2]["messages"]
    assert state.nodes["agent"].outcome is NodeOutcome.FAILED
    assert state.nodes["agent"].path == ("errored",)
    [failed] = [r for r in history if r.trigger == "error"]
    assert failed.result["payload"]["error_code"] == "loop_detected"
    assert server.request_count == 3


async def test_advance_is_a_tool_where_the_phase_lists_it(serve, tmp_path: Path) -> None:
    server = await serve([{"tool_calls": [call("advance")]}])
    settings = {"workspace": str(tmp_path), "phases": {"*": {"tools": ["read_file", "advance"]}}}
    node = agent_node({"tools": ["read_file", "write_file", "advance"]}, settings=settings)
    state, history = await run_agent(graph_text(node))

    assert [t["function"]["name"] for t in server.requests[0]["tools"]] == [
        "read_file",
        "advance",
    ]
    assert state.nodes["agent"].path == ("done",)
    assert [r.trigger for r in history if r.source == ("act",) and r.kind == "transition"] == [
        "advance"
    ]


async def test_streamed_text_is_live_with_ids_and_folded_into_the_committed_turn(serve) -> None:
    await serve([{"content": "one two three"}])
    node = agent_node({"stream": True, "tools": []})
    definition = load_graph_text(graph_text(node), name="agent_graph.yaml")
    seen: list[Event] = []
    async with open_store("memory://") as store:
        engine = Engine(store)
        engine.bus.subscribe(seen.append)
        state = await engine.run(definition, {"task": "count"})
        history = await engine.history(state.run_id)
    deltas = [e for e in seen if e.kind == "llm_delta"]
    assert all(e.live for e in deltas)
    assert "".join(e.fields["text"] for e in deltas) == "one two three"
    # Every event has an id, and the ids order the events as they were published.
    ids = [EventId.of(e) for e in seen]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    # Deltas come before the step that commits the message, and never into the history:
    # the step commits the turn's whole text instead.
    answered = next(e for e in seen if e.kind == "transition" and e.fields["trigger"] == "answer")
    assert seen.index(deltas[-1]) < seen.index(answered)
    assert not [e for r in history for e in r.events if e["kind"] == "llm_delta"]
    texts = [e for r in history for e in r.events if e["kind"] == "llm_text"]
    assert [t["text"] for t in texts] == ["one two three"]
    assert state.data["conversation"][-1] == {"role": "assistant", "content": "one two three"}
    assert engine.streams.retained(state.run_id) is None  # folded: nothing kept


async def test_a_token_budget_stops_the_agent(serve, tmp_path: Path) -> None:
    loop = {
        "tool_calls": [call("list_files")],
        "usage": {"prompt_tokens": 60, "completion_tokens": 0},
    }
    other = {
        "tool_calls": [call("list_files", recursive=True)],
        "usage": {"prompt_tokens": 60, "completion_tokens": 0},
    }
    server = await serve([loop, other, loop, other])
    settings = {"workspace": str(tmp_path), "budgets": {"tokens": 150}}
    node = agent_node({"tools": ["list_files"]}, settings=settings)
    state, _ = await run_agent(graph_text(node))
    assert state.nodes["agent"].outcome is NodeOutcome.GAVE_UP
    assert state.nodes["agent"].counters["tokens"] >= 150
    assert server.request_count == 3


async def test_the_turn_budget_ends_in_gave_up(serve, tmp_path: Path) -> None:
    script = [{"tool_calls": [call("list_files", path=str(n))]} for n in range(5)]
    server = await serve(script)
    settings = {"workspace": str(tmp_path), "budgets": {"turns": 2}}
    state, _ = await run_agent(graph_text(agent_node({"tools": ["list_files"]}, settings=settings)))
    assert state.nodes["agent"].outcome is NodeOutcome.GAVE_UP
    assert state.nodes["agent"].path == ("gave_up",)
    assert server.request_count == 2


async def test_offline_script_beside_the_graph(tmp_path: Path) -> None:
    script = [{"content": "from the script"}]
    (tmp_path / "answers.json").write_text(json.dumps(script), encoding="utf-8")
    node = agent_node({"tools": []}, settings={"llm": {"script": "answers.json"}})
    path = tmp_path / "graph.yaml"
    state, _ = await run_agent(graph_text(node), path=path)
    assert state.data["conversation"][-1]["content"] == "from the script"


async def test_tools_without_a_tool_call_to_run_fail_with_a_clear_message() -> None:
    action = build_action(ActionDef(kind="tools", config={"tools": "conversation"}))
    ctx = ActionContext(
        run_id="r",
        node_id="n",
        state="act",
        hook="act",
        input={},
        data={"conversation": [{"role": "user", "content": "hi"}]},
    )
    with pytest.raises(ActionError, match="is not an assistant message with tool calls"):
        await action(ctx)


async def test_live_events_reach_the_event_stream_with_their_id() -> None:
    # The HTTP event stream: a live event is framed with its id, after its step's events,
    # so a reconnecting client resumes after it; the feed takes it once.
    async with open_store("memory://") as store:
        engine = Engine(store)
        definition = load_graph_text(
            graph_text({"id": "t", "machine": "task", "bind": {"run": {"shell": "true"}}}),
            name="g.yaml",
        )
        state = await engine.run(definition)
        live = live_event(state, "t", "llm_delta", {"text": "hel"}, EventId(state.seq, 1, 1, 1))
        assert frame(live).startswith(f"id: {state.seq}+1.1\nevent: llm_delta\ndata: ".encode())
        feed = EventFeed(engine, state.run_id, None, 10)
        assert feed.take([live], overflowed=False) is None  # its step was never read: a hole
        committed = await feed.catch_up()
        assert feed.take([live], overflowed=False) == [live]
        assert feed.take([live], overflowed=False) == []  # once
    assert feed.reached == state.seq
    assert [EventId.of(e) for e in [*committed, live]] == sorted(
        EventId.of(e) for e in [*committed, live]
    )


async def test_each_turn_records_the_prompt_as_sent(serve, tmp_path: Path) -> None:
    server = await serve([{"tool_calls": [call("read_file", path="x.txt")]}, {"content": "Done."}])
    llm = {"system": "You help {who}.", "prompt": "Task: {task}"}
    node = agent_node(llm, settings={"workspace": str(tmp_path)})
    state, history = await run_agent(graph_text(node), {"task": "read x", "who": "ada"})

    assert state.status is RunStatus.COMPLETED
    first, second = (r.result["output"] for r in history if r.source == ("think",))
    # Both templates rendered, as the model got them on the turn that sent them.
    assert first["system"] == "You help ada."
    assert first["prompt"] == "Task: read x"
    assert server.requests[0]["messages"][:2] == [
        {"role": "system", "content": first["system"]},
        {"role": "user", "content": first["prompt"]},
    ]
    # The second turn answers the tool's result: the system message again, no new prompt.
    assert second["system"] == "You help ada."
    assert "prompt" not in second
