"""``phasegraph check`` on graphs whose runs take messages, through the command line."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from builders import TESTS, cli_argv

CHECK = TESTS / "fixtures" / "messages" / "check"
MESSAGES = TESTS / "fixtures" / "messages"


def _check(path: str) -> tuple[int, list[dict[str, Any]]]:
    done = subprocess.run(
        cli_argv("check", path, "--json"), capture_output=True, text=True, timeout=120, check=False
    )
    assert "Traceback" not in done.stderr
    findings: list[dict[str, Any]] = json.loads(done.stdout)
    return done.returncode, findings


def test_a_chat_graph_takes_its_messages_in_every_state() -> None:
    for graph in ("chat.yaml", "chat_llm.yaml"):
        code, findings = _check(str(MESSAGES / graph))
        assert (code, findings) == (0, []), findings


def test_a_graph_no_gate_of_which_takes_a_message_is_an_error() -> None:
    code, findings = _check(str(CHECK / "no_gate.yaml"))
    assert code == 1
    assert [f["code"] for f in findings] == ["messages-never-taken"]
    assert "no gate accepts 'message': every message would wait for ever" in findings[0]["message"]


def test_a_state_past_every_gate_names_where_a_message_waits_for_ever() -> None:
    code, findings = _check(str(CHECK / "waits.yaml"))
    assert code == 0  # a warning: --strict fails on it
    assert [(f["code"], f["severity"]) for f in findings] == [("message-waits-for-ever", "warning")]
    message = findings[0]["message"]
    assert "in state 'work' waits for ever" in message
    assert "shortest trace: listen --message--> work" in message
    assert findings[0]["line"] == 5


def test_a_gate_busy_in_a_graph_that_takes_no_messages_is_an_error() -> None:
    code, findings = _check(str(CHECK / "gate_only.yaml"))
    assert code == 1
    assert [f["code"] for f in findings] == ["gate-busy-ignored"]
    assert "declare `busy:` on the graph" in findings[0]["message"]
    assert findings[0]["line"] == 6
