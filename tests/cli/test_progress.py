"""Progress on a terminal (a real pseudo-terminal) and the result a finished run shows."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import termios
from pathlib import Path

from builders import TESTS, cli_argv

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
    assert re.search(r"review +waiting", shown), shown
