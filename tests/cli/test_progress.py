"""Progress on a terminal (a real pseudo-terminal) and the result a finished run shows."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import struct
import subprocess
import termios
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from builders import TESTS, cli_argv
from phasegraph.cli._progress import _Board
from phasegraph.events import Event

GATES = TESTS / "fixtures" / "gates"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


def _on_a_terminal(*args: str) -> tuple[int, str]:
    """Run the command line with stdout and stderr on a pseudo-terminal; what it showed."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    env = {**os.environ, "COLUMNS": "160", "TERM": "xterm"}
    process = subprocess.Popen(cli_argv(*args), stdout=follower, stderr=follower, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return process.wait(timeout=120), _ANSI.sub("", b"".join(chunks).decode("utf-8", "replace"))


def test_a_run_on_a_terminal_names_itself_lists_every_node_and_shows_its_result(
    tmp_path: Path,
) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    code, shown = _on_a_terminal("run", "hello", "--run-id", "h", "--input", "who=ada",
                                 "--store", store)  # fmt: skip
    assert code == 0
    assert (
        "run h (hello, 4 nodes): Ctrl-C stops it at its last committed step; "
        f"'phasegraph resume h --store {store}' continues it" in shown
    )
    # The first frame: every node, pending ones too, in DAG order; done/total; elapsed.
    assert re.search(r"run h · step 0 · 0/4 nodes done · \d+\.\d s", shown), shown
    assert re.search(r"plan +pending.*\n.*shout +pending.*\n.*count +pending.*\n.*deliver +pending",
                     shown), shown  # fmt: skip
    assert "4/4 nodes done" in shown or "run h completed: 4/4 nodes succeeded" in shown
    # The graph declares `output: [message]`: the run ends with its result.
    assert "run h completed: 4/4 nodes succeeded\n  message: hello, ada! (8 letters)" in shown


def test_a_reply_on_a_terminal_starts_from_what_the_run_already_did(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    gate = str(GATES / "okfail.yaml")
    started = subprocess.run(
        cli_argv("run", gate, "--run-id", "g", "--store", store, "-q"),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert started.returncode == 3
    code, shown = _on_a_terminal("reply", "g", "--id", "g:review:run", "--trigger", "ok",
                                 "--store", store)  # fmt: skip
    assert code == 0
    assert "run g (okfail_gate, 2 nodes) from step 4:" in shown
    assert re.search(r"run g · step 4 · 1/2 nodes done", shown), shown
    assert re.search(r"draft +completed +done +1", shown), shown  # not blank, not stale
    assert re.search(r"review +waiting +run +0", shown), shown
    # The reply moved the gate's node on: its state and steps follow, not the wait's.
    assert re.search(r"review +completed +done +1", shown), shown


def test_a_reply_piped_shows_one_line_per_node_event(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    gate = str(GATES / "okfail.yaml")
    run = cli_argv("run", gate, "--run-id", "g", "--store", store, "-q")
    assert subprocess.run(run, capture_output=True, timeout=120, check=False).returncode == 3
    replied = subprocess.run(
        cli_argv("reply", "g", "--id", "g:review:run", "--trigger", "ok", "--store", store),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert replied.returncode == 0, replied.stderr
    assert replied.stderr.splitlines()[1:] == [
        "[   5] review: review_reply",
        "[   5] review: completed (success)",
    ]


def test_an_agent_on_a_terminal_shows_its_turns_tokens_and_budgets_left(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    code, shown = _on_a_terminal("run", "research_agent", "--run-id", "r", "--store", store)
    assert code == 0, shown
    header = re.compile(r"node +status +state +steps +turns +tokens +budget left")
    assert header.search(shown), shown
    # The research node's `with: {budgets: {turns: 12, tokens: 200000}}`, counted down; the
    # turns column is the model's answers in its conversation (the llm action's count).
    row = re.compile(r"research +completed +done +(\d+) +(\d+) +([\d.]+k) +"
                     r"turns (\d+)/12, tokens ([\d.]+)k/200k")  # fmt: skip
    final = row.findall(shown)
    assert final, shown
    _steps, turns, tokens, turns_left, tokens_left = final[-1]
    assert int(turns) > 0
    assert 0 < int(turns_left) < 12
    assert 0 < float(tokens_left) < 200
    assert float(tokens.removesuffix("k")) > 0
    # A node that runs no model shows blank model cells, not zeros.
    assert re.search(r"sources +completed +done +1 *\n", shown), shown


def _event(kind: str, node: str, seq: int, **fields: Any) -> Event:
    return Event(id=f"{seq}-0", kind=kind, run_id="r", seq=seq, time=datetime.now(UTC),
                 node=node, fields=fields)  # fmt: skip


def _rendered(board: _Board, width: int) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(board.table())
    return out.getvalue()


def test_the_table_counts_down_budgets_and_sums_tokens_over_nested_levels() -> None:
    limits = {"agent": {"turns": 20, "tokens": 100_000_000, "execute/turns": 3}, "plain": {}}
    board = _Board("r", ["agent", "plain"], None, limits)
    before = _rendered(board, 160)
    assert re.search(r"agent +pending +0 +turns 20/20, tokens 100M/100M, execute/turns 3/3",
                     before), before  # fmt: skip
    assert "tokens " not in before.splitlines()[0]  # no model column before a model answered
    board.update(_event("node_started", "agent", 1, state="think", counters={"turns": 1}))
    board.update(_event("transition", "agent", 2, dest="execute/think",
                        counters={"turns": 1, "tokens": 1200, "execute/tokens": 34},
                        payload={"turn": 1, "tool_calls": 0}))  # fmt: skip
    shown = _rendered(board, 160)
    assert re.search(r"node +status +state +steps +turns +tokens +budget left", shown), shown
    assert re.search(r"agent +running +execute/think +1 +1 +1\.23k +turns 19/20, "
                     r"tokens 100M/100M, execute/turns 3/3", shown), shown  # fmt: skip
    assert re.search(r"plain +pending +0 *\n", shown), shown
    # A narrow terminal wraps cells; every node still has its row.
    narrow = _rendered(board, 60)
    assert all(re.search(rf"^ *{node} ", narrow, re.M) for node in ("agent", "plain")), narrow


def test_a_reply_leaves_the_gate_state_behind() -> None:
    board = _Board("r", ["review"], None, {})
    board.update(_event("node_started", "review", 1, state="review_pending"))
    board.update(_event("spec_review_request", "review", 2))
    assert re.search(r"review +waiting +review_pending +0", _rendered(board, 100))
    board.update(_event("transition", "review", 3, source="review_pending", dest="approved"))
    board.update(_event("spec_review_reply", "review", 3))
    assert re.search(r"review +running +approved +1", _rendered(board, 100))
