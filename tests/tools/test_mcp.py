"""Tools from MCP servers, against real servers from PyPI: mcp-server-time and
mcp-server-git over stdio, and mcp-server-time over the SDK's streamable HTTP transport.

The graph's ``mcp:`` settings are checked when it loads (no server started); a run's
sessions start on first use, render their templates from the run, restart after the
server dies and close with the run.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from builders import cli_argv, engine, prepared, returning
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.errors import ActionError, SpecError
from phasegraph.model import Effect, RunStatus
from phasegraph.spec import load_graph_text
from phasegraph.store.memory import MemoryStore
from phasegraph.tools._mcp import McpServer
from phasegraph.tools._mcp._servers import McpServers
from phasegraph.tools._registry import PHASE_VIOLATION, build_tools

BIN = str(Path(sys.executable).parent)
GRAPHS = Path(__file__).resolve().parents[2] / "graphs"
TIME_TOOLS = ["get_current_time", "convert_time"]


@pytest.fixture(autouse=True)
def servers_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The servers' console scripts are installed beside this Python."""
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")


def time_server(**settings: Any) -> McpServers:
    config = {"command": ["mcp-server-time"], "tools": TIME_TOOLS, **settings}
    return McpServers({"time": McpServer.of("time", config)})


def graph_text(mcp: str, phases: str = "") -> str:
    return f"""\
graph: g
mcp:
{mcp}
nodes:
  - id: agent
    machine: solo_agent
    with:
      phases:
        planning: {{tools: [read_file, advance{phases}]}}
        delivery: {{tools: "*"}}
    bind:
      think: {{python: "m:f", triggers: [answer, tool_calls]}}
      act: {{python: "m:f", triggers: [observed, advance]}}
      verify: {{python: "m:f", triggers: [pass, fail]}}
      reflect: {{python: "m:f", triggers: [retry]}}
"""


def solo_actions(think: Any) -> dict[tuple[str, str], Any]:
    """The solo_agent node's hooks in code: ``think`` does the work, the rest move on."""
    return {
        ("agent", "think"): think,
        ("agent", "act"): returning("observed"),
        ("agent", "verify"): returning("pass"),
        ("agent", "reflect"): returning("retry"),
    }


TIME_MCP = "  time: {command: [mcp-server-time], tools: [get_current_time, convert_time]}"


# --------------------------------------------------------------------------- settings


@pytest.mark.parametrize(
    ("mcp", "message", "line"),
    [
        (
            "  t: {command: [x], url: 'http://h/mcp', tools: [a]}",
            "exactly one of `command` and `url`",
            3,
        ),
        ("  t: {tools: [a]}", "exactly one of `command` and `url`", 3),
        ("  t: {command: [x]}", "tools", 3),
        ("  t: {command: [x], tools: []}", "tools", 3),
        ("  t: {url: 'http://h/mcp', cwd: /tmp, tools: [a]}", "`cwd` applies to the other", 3),
        ("  t: {command: [x], tools: [a], effects: {b: none}}", "'b', not in this server", 3),
        ("  t: {command: [x], tools: [a], effects: {a: twice}}", "twice", 3),
        ("  t: {command: [x], tools: [a], timeout: 0}", "greater than 0", 3),
        ("  t: {command: ['{unclosed'], tools: [a]}", "not a valid template", 3),
        ("  t: {command: [x], tools: [a.b]}", "'a.b' is not a valid name", 3),
        (
            "  t: {command: [x], tools: [a, b]}\n  u: {command: [y], tools: [c, b]}",
            "MCP servers 't' and 'u' both offer tool 'b'",
            4,
        ),
    ],
)
def test_each_mistake_in_mcp_is_one_located_problem(mcp: str, message: str, line: int) -> None:
    with pytest.raises(SpecError) as caught:
        load_graph_text(graph_text(mcp), name="g.yaml")
    problems = caught.value.problems
    assert len(problems) == 1, problems
    assert message in problems[0].message
    assert problems[0].location is not None
    assert problems[0].location.line == line


def test_a_server_tool_named_like_a_built_in_is_refused_naming_both() -> None:
    definition = load_graph_text(
        graph_text("  files: {command: [x], tools: [read_file]}"), name="g.yaml"
    )
    with pytest.raises(SpecError) as caught:
        build_tools(definition)
    (problem,) = caught.value.problems
    assert "mcp.files.tools: 'read_file' is a built-in tool" in problem.message
    assert "MCP server 'files'" in problem.message
    assert str(problem.location) == "g.yaml"


def test_phase_whitelists_name_server_tools_without_starting_a_server() -> None:
    definition = load_graph_text(
        graph_text("  t: {command: [no-such-server], tools: [ping]}", ", ping"), name="g.yaml"
    )
    assert "ping" in build_tools(definition).names  # the program does not exist: not started
    wrong = load_graph_text(
        graph_text("  t: {command: [no-such-server], tools: [ping]}", ", pong"), name="g.yaml"
    )
    with pytest.raises(SpecError, match=r"unknown tool 'pong' \(known: .*ping"):
        build_tools(wrong)


def test_servers_are_part_of_the_digest_and_no_servers_change_nothing() -> None:
    plain = load_graph_text(graph_text(TIME_MCP).replace(f"mcp:\n{TIME_MCP}\n", ""), name="g")
    empty = load_graph_text(
        graph_text(TIME_MCP).replace(f"mcp:\n{TIME_MCP}\n", "mcp: {}\n"), name="g"
    )
    with_servers = load_graph_text(graph_text(TIME_MCP), name="g")
    assert not plain.mcp
    assert empty.digest == plain.digest  # graphs written before `mcp:` keep their digest
    assert with_servers.digest != plain.digest
    assert dict(with_servers.mcp["time"])["tools"] == TIME_TOOLS


# --------------------------------------------------------------------------- stdio


async def test_tools_are_described_from_the_listing_and_called() -> None:
    servers = time_server(command=["mcp-server-time", "--local-timezone", "{tz}"])
    try:
        entry = await servers.describe("r1", {"tz": "Asia/Tokyo"}, "get_current_time")
        function = entry["function"]
        assert function["name"] == "get_current_time"
        assert function["parameters"]["required"] == ["timezone"]
        # The template was rendered from the run's values: the server says so itself.
        assert "Asia/Tokyo" in json.dumps(function["parameters"])
        result = await servers.call("r1", {}, "get_current_time", {"timezone": "UTC"}, "")
        assert result["structured"]["timezone"] == "UTC"
        assert json.loads(result["text"])["timezone"] == "UTC"
        refused = await servers.call("r1", {}, "get_current_time", {"timezone": "Mars/Base"}, "")
        assert refused["error"] == "tool_error"
        assert "Mars/Base" in refused["message"]
    finally:
        await servers.close_run("r1")


async def test_effect_kinds_come_from_the_graph_then_the_server_hints() -> None:
    servers = time_server(effects={"convert_time": "once"})
    assert servers.effect("get_current_time") is Effect.ONCE  # nothing listed yet
    try:
        await servers.call("r", {}, "get_current_time", {"timezone": "UTC"}, "")
        assert servers.effect("get_current_time") is Effect.NONE  # readOnlyHint
        assert servers.effect("convert_time") is Effect.ONCE  # declared wins
    finally:
        await servers.close_run("r")


async def test_a_call_past_its_timeout_is_an_error_result() -> None:
    servers = time_server(timeout=1e-6)  # the clock runs out before any answer can come
    try:
        result = await servers.call("r", {}, "get_current_time", {"timezone": "UTC"}, "")
        assert result == {
            "error": "timeout",
            "message": "MCP server 'time' did not answer 'get_current_time' within 1e-06 s",
        }
    finally:
        await servers.close_run("r")


async def test_a_server_killed_mid_call_is_reported_then_started_again() -> None:
    servers = time_server()
    try:
        await servers.call("r", {}, "get_current_time", {"timezone": "UTC"}, "")
        session = servers.sessions("r")["time"]
        assert session.live is not None
        assert session.live.process is not None
        first = session.live.process
        os.kill(first.pid, signal.SIGSTOP)  # it cannot answer: the call stays in flight
        call = asyncio.create_task(
            servers.call("r", {}, "get_current_time", {"timezone": "UTC"}, "")
        )
        while not session.in_flight:  # noqa: ASYNC110 (a counter, not an event, says it)
            await asyncio.sleep(0.01)
        os.kill(first.pid, signal.SIGKILL)
        died = await call
        assert died["error"] == "server_exited"
        assert died["message"].startswith(
            "MCP server 'time' ended (killed by SIGKILL) during the call to 'get_current_time'"
        )
        again = await servers.call("r", {}, "get_current_time", {"timezone": "UTC"}, "")
        assert again["structured"]["timezone"] == "UTC"
        assert session.live is not None
        assert session.live.process is not None
        assert session.live.process.pid != first.pid
    finally:
        await servers.close_run("r")


async def test_each_run_has_its_own_session_closed_with_the_run() -> None:
    servers = time_server(command=["mcp-server-time", "--local-timezone", "{tz}"])
    try:
        for run, tz in (("a", "Asia/Tokyo"), ("b", "Europe/Paris")):
            await servers.call(run, {"tz": tz}, "get_current_time", {"timezone": "UTC"}, "")
        processes = {}
        for run in ("a", "b"):
            live = servers.sessions(run)["time"].live
            assert live is not None
            assert live.process is not None
            processes[run] = live.process
        proc = Path(f"/proc/{processes['b'].pid}/cmdline")
        command = (await asyncio.to_thread(proc.read_bytes)).split(b"\0")
        assert b"Europe/Paris" in command
        await servers.close_run("a")
        assert processes["a"].returncode is not None
        assert processes["b"].returncode is None
        assert not servers.sessions("a")
    finally:
        await servers.close_run("a")
        await servers.close_run("b")
    assert processes["b"].returncode is not None


@pytest.mark.parametrize(
    ("settings", "values", "message"),
    [
        (
            {"command": ["mcp-server-time", "--local-timezone", "{tz}"]},
            {"tz": "Mars/Base"},
            "MCP server 'time' exited (exit status 1) before it answered; its stderr ends: "
            "Error: invalid --local-timezone 'Mars/Base'",
        ),
        (
            {"command": ["no-such-mcp-server"]},
            {},
            "MCP server 'time' could not be started: [Errno 2] No such file or directory",
        ),
        (
            {"tools": [*TIME_TOOLS, "get_weather"]},
            {},
            "MCP server 'time' has no tool 'get_weather' (it offers: convert_time, "
            "get_current_time)",
        ),
        (
            {"command": ["mcp-server-time", "--local-timezone", "{tz}"]},
            {},
            "MCP server 'time': template names {tz} but the run has no such value",
        ),
    ],
)
async def test_a_server_that_cannot_start_is_one_clear_error(
    settings: dict[str, Any], values: Mapping[str, Any], message: str
) -> None:
    servers = time_server(**settings)
    try:
        with pytest.raises(ActionError) as caught:
            await servers.call("r", values, "get_current_time", {"timezone": "UTC"}, "")
        assert caught.value.message.startswith(message), caught.value.message
    finally:
        await servers.close_run("r")


# --------------------------------------------------------------------------- the factory


async def test_server_tools_pass_the_phase_rules_and_close_with_the_run() -> None:
    """Through the interpreter: refused in planning, called in delivery, closed at the end."""
    definition = load_graph_text(graph_text(TIME_MCP), name="g.yaml")
    seen: dict[str, Any] = {}

    async def think(ctx: ActionContext) -> ActionResult:
        phase = ctx.state.split("/")[0]
        if phase == "planning":
            seen["planning"] = await ctx.tool("get_current_time", timezone="UTC")
            seen["offered"] = [t["function"]["name"] for t in await ctx.offer(TIME_TOOLS)]
        elif phase == "delivery":
            seen["delivery"] = await ctx.tool("get_current_time", timezone="UTC")
            seen["described"] = await ctx.offer(["get_current_time"])
            assert prepared_graph.tools.servers is not None
            live = prepared_graph.tools.servers.sessions(ctx.run_id)["time"].live
            seen["process"] = live.process if live else None
        return ActionResult(trigger="answer")

    prepared_graph = prepared(definition, solo_actions(think))
    store = MemoryStore()
    async with store:
        state = await engine(store).run(prepared_graph)
    assert state.status is RunStatus.COMPLETED, state
    assert seen["planning"]["error"] == PHASE_VIOLATION
    assert seen["offered"] == []  # the phase refuses both: the model is not shown them
    assert seen["delivery"]["structured"]["timezone"] == "UTC"
    assert seen["described"][0]["function"]["parameters"]["required"] == ["timezone"]
    assert seen["process"] is not None
    assert seen["process"].returncode is not None  # the run let go: its server ended


async def test_loop_detection_watches_server_tools() -> None:
    text = graph_text(TIME_MCP, ", get_current_time")
    text = text.replace("nodes:", "middleware: [loop_detection]\nnodes:")
    definition = load_graph_text(text, name="g.yaml")
    results: list[Mapping[str, Any]] = []

    async def think(ctx: ActionContext) -> ActionResult:
        if not results:
            for _ in range(2):
                results.append(await ctx.tool("get_current_time", timezone="UTC"))
        return ActionResult(trigger="answer")

    store = MemoryStore()
    async with store:
        await engine(store).run(prepared(definition, solo_actions(think)))
    assert "loop_warning" not in results[0]
    assert "get_current_time" in results[1]["loop_warning"]


# --------------------------------------------------------------------------- HTTP


@pytest.fixture
def time_over_http(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """mcp-server-time over streamable HTTP on a free port: its URL and its request log."""
    log, said = tmp_path / "requests.jsonl", tmp_path / "stderr.txt"
    script = Path(__file__).with_name("mcp_time_http.py")
    with said.open("wb") as stderr:
        server = subprocess.Popen(
            [sys.executable, str(script), str(log)], stdout=subprocess.DEVNULL, stderr=stderr
        )
    try:
        while not (found := re.search(r"running on (http://127\.0\.0\.1:\d+)", said.read_text())):
            assert server.poll() is None, said.read_text()
            time.sleep(0.05)
        yield f"{found[1]}/mcp", log
    finally:
        server.terminate()
        server.wait()


async def test_over_http_the_effect_id_is_the_idempotency_key(
    time_over_http: tuple[str, Path],
) -> None:
    url, log = time_over_http
    settings = {"url": url, "headers": {"X-Run": "{who}"}, "tools": TIME_TOOLS}
    servers = McpServers({"time": McpServer.of("time", settings)})
    try:
        result = await servers.call(
            "r", {"who": "run-r"}, "get_current_time", {"timezone": "UTC"}, "r:agent:3:1"
        )
        assert result["structured"]["timezone"] == "UTC"
        await servers.call("r", {}, "get_current_time", {"timezone": "UTC"}, "")
    finally:
        await servers.close_run("r")
    calls = [
        r for r in map(json.loads, log.read_text().splitlines()) if r["method"] == "tools/call"
    ]
    assert calls == [
        {
            "method": "tools/call",
            "idempotency_key": "r:agent:3:1",
            "meta": {"phasegraph/effect_id": "r:agent:3:1"},
            "x_run": "run-r",
        },
        {"method": "tools/call", "idempotency_key": None, "meta": None, "x_run": "run-r"},
    ]


async def test_a_tools_action_sends_each_call_its_effect_id(
    time_over_http: tuple[str, Path],
) -> None:
    """Through the interpreter: the ledger's effect id of the call reaches the server."""
    url, log = time_over_http
    text = """\
graph: g
mcp:
  time: {url: "http://{mcp_host}/mcp", tools: [get_current_time]}
nodes:
  - id: agent
    machine: agent
    bind:
      think: {python: "m:f", triggers: [answer, tool_calls]}
      act: {tools: conversation}
"""
    definition = load_graph_text(text, name="g.yaml")
    call = {
        "id": "c1",
        "function": {"name": "get_current_time", "arguments": '{"timezone": "UTC"}'},
    }

    async def think(ctx: ActionContext) -> ActionResult:
        if ctx.data.get("conversation"):
            return ActionResult(trigger="answer")
        message = {"role": "assistant", "content": "", "tool_calls": [call]}
        return ActionResult(trigger="tool_calls", data={"conversation": [message]})

    store = MemoryStore()
    async with store:
        state = await engine(store).run(
            prepared(definition, {("agent", "think"): think}),
            {"mcp_host": url.removeprefix("http://").removesuffix("/mcp")},
        )
    assert state.status is RunStatus.COMPLETED, state
    answer = json.loads(state.data["conversation"][1]["content"])
    assert answer["structured"]["timezone"] == "UTC"
    (sent,) = [
        r for r in map(json.loads, log.read_text().splitlines()) if r["method"] == "tools/call"
    ]
    assert re.fullmatch(rf"{re.escape(state.run_id)}:agent:\d+:0", sent["idempotency_key"])
    assert sent["meta"] == {"phasegraph/effect_id": sent["idempotency_key"]}


# --------------------------------------------------------------------------- the example


def git(repo: Path, *argv: str) -> str:
    return subprocess.run(
        ["git", *argv], cwd=repo, check=True, capture_output=True, text=True
    ).stdout


def test_the_git_agent_commits_once_through_mcp_server_git(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    for name in ("PHASEGRAPH_LLM_BASE_URL", "OPENAI_BASE_URL"):
        env.pop(name, None)
    graph = str(GRAPHS / "git_agent.yaml")
    checked = subprocess.run(
        cli_argv("check", "--strict", graph), env=env, capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    ran = subprocess.run(
        cli_argv("run", graph, "--store", "memory://", "--input", f"workdir={tmp_path}"),
        env=env,
        capture_output=True,
        text=True,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    # The commit tried while planning was refused, and the model was told.
    assert "phase_violation tool 'git_commit' is not allowed in phase 'planning'" in ran.stderr
    (repo,) = tmp_path.iterdir()
    assert git(repo, "log", "--format=%s").splitlines() == [
        "Set the version to 1.1.0",
        "Version 1.0.0",
    ]
    assert git(repo, "show", "HEAD:VERSION") == "1.1.0\n"
    assert git(repo, "status", "--porcelain") == ""


def test_the_git_agent_killed_after_its_commit_asks_and_commits_once(tmp_path: Path) -> None:
    """SIGKILL after git_commit made the commit, before its result was recorded: the
    resumed run asks (the commit is a once effect), the answer says it happened, and
    the repository has the one commit."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    for name in ("PHASEGRAPH_LLM_BASE_URL", "OPENAI_BASE_URL"):
        env.pop(name, None)
    store, run_id = f"sqlite:///{tmp_path / 'runs.db'}", "git-run"
    work = tmp_path / "work"
    drive = Path(__file__).parents[1] / "fixtures" / "mcp" / "drive_git.py"
    killed = subprocess.run(
        [sys.executable, str(drive), store, run_id, str(work)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    (repo,) = work.iterdir()
    assert len(git(repo, "log", "--format=%s").splitlines()) == 2  # the commit happened

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        argv = cli_argv(*args, "--store", store)
        return subprocess.run(argv, env=env, capture_output=True, text=True)

    resumed = cli("resume", run_id, "--json", "--quiet")
    assert resumed.returncode == 3, resumed.stderr  # waiting: it asks
    (gate,) = json.loads(resumed.stdout)["interrupts"]
    assert gate["kind"] == "outcome_unknown"
    assert gate["payload"]["tool"] == "git_commit"
    assert gate["payload"]["arguments"]["message"] == "Set the version to 1.1.0"
    result = 'result={"text": "committed"}'
    replied = cli("reply", run_id, "--id", gate["id"], "--trigger", "happened", "--payload", result)
    assert replied.returncode == 0, replied.stdout + replied.stderr
    assert git(repo, "log", "--format=%s").splitlines() == [
        "Set the version to 1.1.0",
        "Version 1.0.0",
    ]
