"""Tools through ``ctx.tool``: built-ins, per-phase whitelists, command filters, workspaces.

Scenarios from source note 002 (SOLO phase constraints, U1 read_file and U2/U3 phase
policy and enforcement) and note 001 U1 (path safety), each driven through the real
interpreter on a memory store.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from builders import engine, prepared
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.errors import SpecError
from phasegraph.model import (
    GraphDef,
    MachineDef,
    NodeDef,
    NodeOutcome,
    NodeStatus,
    RunStatus,
    StateDef,
    TransitionDef,
)
from phasegraph.spec import load_machine
from phasegraph.store.memory import MemoryStore
from phasegraph.tools._symbols import find_symbols

Call = tuple[str, dict[str, Any]]


def concern_graph(*nodes: NodeDef, extra: Sequence[MachineDef] = ()) -> GraphDef:
    """A graph of built-in machines (nested ones included) and ``extra`` ones."""
    machines: dict[str, MachineDef] = {m.name: m for m in extra}
    walked: set[str] = set()

    def add(name: str) -> None:
        if name in walked:
            return
        walked.add(name)
        if name not in machines:
            machines[name] = load_machine(name)
        for state in machines[name].states.values():
            if state.machine:
                add(state.machine)

    for node in nodes:
        add(node.machine)
    return GraphDef(
        name="tools",
        nodes=nodes,
        machines=MappingProxyType(machines),
        digest="tools",
    )


PLANNING_RULES = {
    "planning": {
        "tools": ["read_file", "list_files", "run_command"],
        "deny_commands": ["rm", "mv", ">", ">>"],
    },
    "building": {"tools": ["read_file", "write_file", "list_files", "run_command"]},
    "verification": {
        "tools": ["read_file", "run_command"],
        "allow_commands": ["git", "true", "pytest"],
    },
    "delivery": {"tools": "*"},
}


def solo_node(settings: Mapping[str, Any]) -> NodeDef:
    return NodeDef(id="agent", machine="solo_phases", settings=MappingProxyType(dict(settings)))


async def run_solo(
    settings: Mapping[str, Any], per_phase: Mapping[str, Sequence[Call]]
) -> tuple[dict[str, list[Mapping[str, Any]]], Any, list[Any]]:
    """Run solo_phases; each phase makes its calls once, then advances (done in delivery)."""
    results: dict[str, list[Mapping[str, Any]]] = {}

    async def agent(ctx: ActionContext) -> ActionResult:
        phase = ctx.state
        results[phase] = [
            await ctx.tool(name, **dict(args)) for name, args in per_phase.get(phase, ())
        ]
        return ActionResult(trigger="done" if phase == "delivery" else "advance")

    hooks = ("planning", "building", "verification", "delivery")
    definition = prepared(concern_graph(solo_node(settings)), {("agent", h): agent for h in hooks})
    async with MemoryStore() as store:
        eng = engine(store)
        state = await eng.run(definition)
        history = await eng.history(state.run_id)
    return results, state, history


async def run_calls(calls: Sequence[Call], settings: Mapping[str, Any] | None = None):
    """Make ``calls`` from one task node (no phase rules unless ``settings`` has some)."""
    results, _, _ = await run_solo(settings or {}, {"planning": calls})
    return results["planning"]


# --------------------------------------------------------------------------- built-ins


def resolved(path: Path) -> str:
    return str(path.resolve())


async def test_read_file_returns_whole_file_and_line_ranges(tmp_path: Path):
    """Note 002 U1 characterization: no slice → the full file; lines slice 1-based."""
    (tmp_path / "mod.py").write_text("a = 1\nb = 2\nc = 3\n")
    (tmp_path / "empty.txt").write_text("")
    whole, middle, empty = await run_calls(
        [
            ("read_file", {"cwd": str(tmp_path), "path": "mod.py"}),
            ("read_file", {"cwd": str(tmp_path), "path": "mod.py", "start_line": 2, "end_line": 2}),
            ("read_file", {"cwd": str(tmp_path), "path": "empty.txt"}),
        ]
    )
    assert whole["text"] == "a = 1\nb = 2\nc = 3\n"
    assert whole["lines"] == 3
    assert middle["text"] == "b = 2\n"
    assert empty["text"] == ""


async def test_read_file_errors_are_structured_results(tmp_path: Path):
    """Note 002 U1 error paths: a missing path and a directory give error results."""
    (tmp_path / "folder").mkdir()
    missing, folder = await run_calls(
        [
            ("read_file", {"cwd": str(tmp_path), "path": "nope.py"}),
            ("read_file", {"cwd": str(tmp_path), "path": "folder"}),
        ]
    )
    assert missing["error"] == folder["error"] == "not_found"
    assert "nope.py" in missing["message"]


async def test_write_then_list_files(tmp_path: Path):
    written, listed, deep = await run_calls(
        [
            ("write_file", {"cwd": str(tmp_path), "path": "pkg/mod.py", "text": "x = 1\n"}),
            ("list_files", {"cwd": str(tmp_path)}),
            ("list_files", {"cwd": str(tmp_path), "recursive": True}),
        ]
    )
    assert written == {"path": "pkg/mod.py", "bytes": 6}
    assert (tmp_path / "pkg" / "mod.py").read_text() == "x = 1\n"
    assert listed["files"] == ["pkg/"]
    assert deep["files"] == ["pkg/", "pkg/mod.py"]


async def test_paths_cannot_leave_the_root(tmp_path: Path):
    """Note 001 U1: traversal, absolute paths and symlink escapes are rejected."""
    root = tmp_path / "root"
    root.mkdir()
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    (root / "link").symlink_to(outside)
    results = await run_calls(
        [
            ("read_file", {"cwd": str(root), "path": "../../etc/passwd"}),
            ("read_file", {"cwd": str(root), "path": "/etc/passwd"}),
            ("read_file", {"cwd": str(root), "path": "link"}),
            ("write_file", {"cwd": str(root), "path": "../escape.txt", "text": "x"}),
        ]
    )
    assert [r["error"] for r in results] == ["outside_workspace"] * 4
    assert not (tmp_path / "escape.txt").exists()


async def test_workspace_confines_cwd(tmp_path: Path):
    (tmp_path / "inside").mkdir()
    settings = {"workspace": str(tmp_path / "inside")}
    ok, escaped = await run_calls(
        [
            ("list_files", {}),
            ("list_files", {"cwd": str(tmp_path)}),
        ],
        settings,
    )
    assert ok == {"path": ".", "files": []}
    assert escaped["error"] == "outside_workspace"


async def test_run_command_runs_argv_in_cwd_without_a_shell(tmp_path: Path):
    listed, failed, braces, literal = await run_calls(
        [
            ("run_command", {"cwd": str(tmp_path), "argv": ["pwd"]}),
            ("run_command", {"argv": ["false"]}),
            ("run_command", {"argv": ["python3", "-c", "print({1: 2})"]}),
            ("run_command", {"argv": ["echo", "$HOME;", "rm", "-rf", "x"]}),
        ]
    )
    assert listed["exit"] == 0
    assert listed["stdout"].strip() == resolved(tmp_path)
    assert failed["exit"] == 1
    assert braces["stdout"].strip() == "{1: 2}"
    assert literal["stdout"].strip() == "$HOME; rm -rf x"  # one argv, never a shell


async def test_run_command_timeout_kills_and_reports(tmp_path: Path):
    """Like note 000's executor timeout: a slow command is killed and reported."""
    (slow,) = await run_calls(
        [("run_command", {"argv": ["sleep", "10"], "timeout": 0.2, "cwd": str(tmp_path)})]
    )
    assert slow["timed_out"] is True
    assert slow["exit"] != 0


async def test_run_command_refuses_a_string_and_reports_missing_programs():
    as_string, missing = await run_calls(
        [
            ("run_command", {"argv": "ls -l"}),
            ("run_command", {"argv": ["no-such-program-pg"]}),
        ]
    )
    assert as_string["error"] == "bad_arguments"
    assert missing["error"] == "cannot_start"


async def test_unknown_tool_fails_the_node_naming_known_tools():
    """Note 002 U3 error path: a tool that does not exist is not a phase matter."""

    async def agent(ctx: ActionContext) -> ActionResult:
        await ctx.tool("teleport")
        return ActionResult(trigger="advance")

    hooks = ("planning", "building", "verification", "delivery")
    definition = prepared(concern_graph(solo_node({})), {("agent", h): agent for h in hooks})
    async with MemoryStore() as store:
        state = await engine(store).run(definition)
    assert state.status is RunStatus.FAILED
    assert "unknown tool 'teleport'" in (state.nodes["agent"].error or "")
    assert "read_file" in (state.nodes["agent"].error or "")


# --------------------------------------------------------------------------- phase rules


async def test_no_phase_rules_allow_every_tool_in_every_phase(tmp_path: Path):
    """Note 002 U3 characterization: without a policy nothing is enforced."""
    write = ("write_file", {"cwd": str(tmp_path), "path": "f.txt", "text": "x"})
    results, state, history = await run_solo({}, {"planning": [write], "verification": [write]})
    assert state.status is RunStatus.COMPLETED
    assert results["planning"][0] == {"path": "f.txt", "bytes": 1}
    assert not [e for r in history for e in r.events if e["kind"] == "phase_violation"]


async def test_planning_allows_reading_but_refuses_writes_with_a_structured_error(tmp_path: Path):
    """Note 002 U2/U3: read_file is allowed in planning; write_file is not dispatched there,
    the caller gets a phase_violation result, a phase_violation event is recorded, and the
    loop continues; after advancing, building allows write_file."""
    (tmp_path / "a.txt").write_text("hello")
    read = ("read_file", {"cwd": str(tmp_path), "path": "a.txt"})
    write = ("write_file", {"cwd": str(tmp_path), "path": "b.txt", "text": "x"})
    results, state, history = await run_solo(
        {"phases": PLANNING_RULES}, {"planning": [read, write], "building": [write]}
    )
    assert results["planning"][0]["text"] == "hello"
    refused = results["planning"][1]
    assert refused["error"] == "phase_violation"
    assert refused["tool"] == "write_file"
    assert refused["phase"] == "planning"
    assert refused["allowed"] == ["list_files", "read_file", "run_command"]
    assert results["building"][0] == {"path": "b.txt", "bytes": 1}
    events = [e for r in history for e in r.events if e["kind"] == "phase_violation"]
    assert [(e["tool"], e["phase"]) for e in events] == [("write_file", "planning")]
    assert state.status is RunStatus.COMPLETED


async def test_delivery_wildcard_allows_every_tool(tmp_path: Path):
    """Note 002 U3: the Delivery phase whitelist is "*"."""
    calls = [
        ("write_file", {"cwd": str(tmp_path), "path": "out.txt", "text": "done"}),
        ("run_command", {"cwd": str(tmp_path), "argv": ["rm", "out.txt"]}),
    ]
    results, state, _ = await run_solo({"phases": PLANNING_RULES}, {"delivery": calls})
    assert [r.get("error") for r in results["delivery"]] == [None, None]
    assert not (tmp_path / "out.txt").exists()
    assert state.status is RunStatus.COMPLETED


async def test_planning_command_filter_blocks_rm_mv_and_redirections(tmp_path: Path):
    """Note 002 KTD5/U3: in planning, `rm file` (also via a path or `sh -c`) and `>`/`>>`
    redirections are blocked and not executed; read-only commands run."""
    victim = tmp_path / "keep.txt"
    victim.write_text("keep")
    cwd = str(tmp_path)
    calls = [
        ("run_command", {"cwd": cwd, "argv": ["rm", "keep.txt"]}),
        ("run_command", {"cwd": cwd, "argv": ["/bin/rm", "keep.txt"]}),
        ("run_command", {"cwd": cwd, "argv": ["sh", "-c", "echo x > keep.txt"]}),
        ("run_command", {"cwd": cwd, "argv": ["sh", "-c", "echo x >> keep.txt"]}),
        ("run_command", {"cwd": cwd, "argv": ["mv", "keep.txt", "gone.txt"]}),
        ("run_command", {"cwd": cwd, "argv": ["ls"]}),
    ]
    results, _, history = await run_solo({"phases": PLANNING_RULES}, {"planning": calls})
    refused = results["planning"][:5]
    assert [r["error"] for r in refused] == ["phase_violation"] * 5
    assert [r["denied"] for r in refused] == ["rm", "/bin/rm", ">", ">>", "mv"]
    assert results["planning"][5]["stdout"].strip() == "keep.txt"
    assert victim.read_text() == "keep"
    events = [e for r in history for e in r.events if e["kind"] == "phase_violation"]
    assert len(events) == 5


async def test_verification_allows_only_listed_programs(tmp_path: Path):
    calls = [
        ("run_command", {"cwd": str(tmp_path), "argv": ["true"]}),
        ("run_command", {"cwd": str(tmp_path), "argv": ["python3", "-c", "print(1)"]}),
        ("write_file", {"cwd": str(tmp_path), "path": "x", "text": ""}),
    ]
    results, _, _ = await run_solo({"phases": PLANNING_RULES}, {"verification": calls})
    allowed, program, write = results["verification"]
    assert allowed["exit"] == 0
    assert program["error"] == "phase_violation"
    assert program["denied"] == "python3"
    assert write["error"] == "phase_violation"
    assert write["allowed"] == ["read_file", "run_command"]


async def test_states_not_listed_allow_nothing_unless_a_default_is_given(tmp_path: Path):
    """A policy fails closed: a state it does not cover gets no tools, unless "*" covers it."""
    listing = [("list_files", {"cwd": str(tmp_path)})]
    closed, _, _ = await run_solo({"phases": {"delivery": {"tools": "*"}}}, {"planning": listing})
    assert closed["planning"][0]["error"] == "phase_violation"
    assert closed["planning"][0]["allowed"] == []
    rules = {"delivery": {"tools": "*"}, "*": {"tools": ["list_files"]}}
    opened, _, _ = await run_solo({"phases": rules}, {"planning": listing})
    assert opened["planning"][0]["files"] == []


@pytest.mark.parametrize(
    ("phases", "expected"),
    [
        ({"planning": {"tools": []}}, "non-empty list"),
        ({"planning": {"tools": ["read_file", "summon"]}}, "unknown tool 'summon'"),
        ({"plannnig": {"tools": "*"}}, "has no state 'plannnig'"),
        ({"planning": {"tools": "*", "deny_commands": "rm"}}, "deny_commands must be a list"),
        ({"planning": {"tools": "*", "colour": "red"}}, "unknown key 'colour'"),
        ({"planning": ["read_file"]}, "must be a mapping"),
    ],
)
def test_bad_phase_rules_are_refused_before_the_run(phases, expected):
    """Note 002 U2 error paths: an empty whitelist, a bad phase name or a malformed filter
    fails fast, when the graph is prepared."""
    with pytest.raises(SpecError, match=expected) as caught:
        prepared(concern_graph(solo_node({"phases": phases})), {})
    assert "node 'agent': with.phases" in str(caught.value)


async def test_a_phase_covers_the_states_of_a_machine_nested_in_it(tmp_path: Path):
    """The phase of a call is the innermost state of the node's path that the rules list."""
    outer = MachineDef(
        name="outer",
        initial="work",
        states=MappingProxyType(
            {
                "work": StateDef(name="work", machine="solo_phases"),
                "done": StateDef(name="done", final=NodeOutcome.SUCCESS),
            }
        ),
        transitions=(TransitionDef(trigger="success", source=("work",), dest="done"),),
    )
    seen: dict[str, list[Mapping[str, Any]]] = {}

    async def agent(ctx: ActionContext) -> ActionResult:
        seen[ctx.state] = [
            await ctx.tool("list_files", cwd=str(tmp_path)),
            await ctx.tool("write_file", cwd=str(tmp_path), path="x", text=""),
        ]
        return ActionResult(trigger="done" if ctx.state.endswith("delivery") else "advance")

    rules = {"work": {"tools": ["list_files"]}, "delivery": {"tools": "*"}}
    node = NodeDef(id="agent", machine="outer", settings=MappingProxyType({"phases": rules}))
    definition = concern_graph(node, extra=[outer])
    hooks = ("planning", "building", "verification", "delivery")
    async with MemoryStore() as store:
        state = await engine(store).run(prepared(definition, {("agent", h): agent for h in hooks}))
    assert state.nodes["agent"].status is NodeStatus.COMPLETED
    assert seen["work/planning"][0]["files"] == []
    assert seen["work/planning"][1]["phase"] == "work"
    assert seen["work/delivery"][1] == {"path": "x", "bytes": 0}
    assert os.listdir(tmp_path) == ["x"]


async def test_solo_preset_matches_the_default_whitelist(tmp_path: Path):
    """Note 002 U2 defaults (KTD5): planning reads (no rm/mv/redirection), building writes,
    verification runs commands read-only, delivery allows all tools."""
    cwd = str(tmp_path)
    write = ("write_file", {"cwd": cwd, "path": "f.txt", "text": "x"})
    rm = ("run_command", {"cwd": cwd, "argv": ["rm", "f.txt"]})
    read = ("read_file", {"cwd": cwd, "path": "f.txt"})
    results, _, _ = await run_solo(
        {"phases": "solo"},
        {"planning": [write], "building": [write], "verification": [read, rm], "delivery": [rm]},
    )
    assert results["planning"][0]["error"] == "phase_violation"
    assert results["planning"][0]["allowed"] == [
        "advance",
        "list_files",
        "read_file",
        "run_command",
    ]
    assert results["building"][0] == {"path": "f.txt", "bytes": 1}
    assert results["verification"][0]["text"] == "x"
    assert results["verification"][1]["denied"] == "rm"
    assert results["delivery"][0]["exit"] == 0
    assert not (tmp_path / "f.txt").exists()


def test_unknown_preset_is_refused():
    with pytest.raises(SpecError, match="name a preset"):
        prepared(concern_graph(solo_node({"phases": "strict"})), {})


def test_a_workspace_alone_is_checked_before_the_run():
    # A node with a workspace but no phases still has rules: they are read when the
    # graph is prepared, not when its first tool is called.
    with pytest.raises(SpecError, match="workspace must be a folder path"):
        prepared(concern_graph(solo_node({"workspace": 5})), {})


# --------------------------------------------------------------------------- symbols

PY_SOURCE = '''import os


class MyClass:
    """Outer."""

    class Inner:
        pass

    def method(self):
        return 1


@decorated
def my_func(x):
    return x + 1


def tail():
    pass
'''

TS_SOURCE = """import { h } from "x";

export const renderComponent = (props: Props): string => {
  if (props.ok) {
    return "ok";
  }
  return "no";
};

export function helper(a: number) {
  return a;
}
"""

GO_SOURCE = """package main

type Server struct {
\tport int
}

func (s *Server) HandleRequest(w Writer) {
\tif s.port > 0 {
\t\tw.Write("x")
\t}
}

func main() {}
"""


async def test_read_file_symbol_slices_one_definition(tmp_path: Path):
    """Note 002 U1 happy paths: symbol="MyClass" → the class only (nested class included);
    symbol="my_func" → the function (with its decorator); a TypeScript arrow function and
    a Go method by name."""
    for name, text in {"m.py": PY_SOURCE, "c.ts": TS_SOURCE, "s.go": GO_SOURCE}.items():
        (tmp_path / name).write_text(text)
    cwd = str(tmp_path)
    cls, func, arrow, method, struct = await run_calls(
        [
            ("read_file", {"cwd": cwd, "path": "m.py", "symbol": "MyClass"}),
            ("read_file", {"cwd": cwd, "path": "m.py", "symbol": "my_func"}),
            ("read_file", {"cwd": cwd, "path": "c.ts", "symbol": "renderComponent"}),
            ("read_file", {"cwd": cwd, "path": "s.go", "symbol": "HandleRequest"}),
            ("read_file", {"cwd": cwd, "path": "s.go", "symbol": "Server"}),
        ]
    )
    assert cls["text"].startswith("class MyClass:")
    assert "class Inner:" in cls["text"]
    assert "return 1" in cls["text"]
    assert "my_func" not in cls["text"]
    assert (cls["start_line"], cls["end_line"]) == (4, 11)
    assert func["text"] == "@decorated\ndef my_func(x):\n    return x + 1\n"
    assert arrow["text"].startswith("export const renderComponent")
    assert arrow["text"].rstrip().endswith("};")
    assert "helper" not in arrow["text"]
    assert method["text"].startswith("func (s *Server) HandleRequest")
    assert method["text"].rstrip().endswith("}")
    assert "func main" not in method["text"]
    assert struct["text"] == "type Server struct {\n\tport int\n}\n"


async def test_read_file_symbol_edge_cases(tmp_path: Path):
    """Note 002 U1 edge cases: an unknown symbol lists the available ones; an unsupported
    extension returns the whole file with a note; end_line caps a symbol's range."""
    (tmp_path / "m.py").write_text(PY_SOURCE)
    (tmp_path / "notes.md").write_text("# notes\n")
    (tmp_path / "broken.py").write_text("def (:\n")
    cwd = str(tmp_path)
    missing, markdown, capped, broken = await run_calls(
        [
            ("read_file", {"cwd": cwd, "path": "m.py", "symbol": "nonexistent"}),
            ("read_file", {"cwd": cwd, "path": "notes.md", "symbol": "x"}),
            ("read_file", {"cwd": cwd, "path": "m.py", "symbol": "MyClass", "end_line": 5}),
            ("read_file", {"cwd": cwd, "path": "broken.py", "symbol": "x"}),
        ]
    )
    assert missing["error"] == "symbol_not_found"
    assert "available: Inner, MyClass, method, my_func, tail" in missing["message"]
    assert markdown["text"] == "# notes\n"
    assert markdown["note"] == "symbol extraction not supported for .md"
    assert capped["text"] == 'class MyClass:\n    """Outer."""\n'
    assert broken["text"] == "def (:\n"
    assert "cannot parse" in broken["note"]


def test_symbols_of_rust_and_java():
    rust = (
        "pub struct Point {\n    x: i32,\n}\n\n"
        "impl Point {\n    pub fn norm(&self) -> i32 {\n        self.x\n    }\n}\n"
    )
    java = "public class Greeter {\n    public String greet(String who) {\n"
    java += "        return who;\n    }\n}\n"
    assert find_symbols("p.rs", rust) == {"Point": (1, 3), "norm": (6, 8)}
    assert find_symbols("G.java", java) == {"Greeter": (1, 5), "greet": (2, 4)}
    assert find_symbols("notes.txt", "x") is None
