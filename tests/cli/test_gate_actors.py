"""Who decided what, through the real command line: the local user is recorded on the
steps it starts and answers, a reply applies once, and ``check`` refuses bad reviewers."""

from __future__ import annotations

import getpass
import json
import subprocess
from pathlib import Path

from builders import TESTS, cli_argv

GATES = TESTS / "fixtures" / "gates"


def _cli(store: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = cli_argv(*args, "--store", store)
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def test_the_local_user_is_on_the_record_and_a_reply_applies_once(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    me = {"name": f"local:{getpass.getuser()}", "groups": []}
    started = _cli(store, "run", str(GATES / "reviewed.yaml"), "--run-id", "r1", "-q")
    assert started.returncode == 3, started.stderr
    assert "reviewers: alice, group:release" in started.stdout
    (gate,) = json.loads(_cli(store, "status", "r1", "--json").stdout)["interrupts"]
    assert gate["reviewers"] == ["alice", "group:release"]
    step = gate["seq"]

    reply = ["reply", "r1", "--id", gate["id"], "--trigger", "ok"]
    stale = _cli(store, *reply, "--step", str(step + 7))
    assert stale.returncode == 2
    assert f"as opened at step {step + 7}, but the gate pending now was opened at step {step}" in (
        stale.stderr
    )
    # The command line is a trusted local caller: the gate's reviewers do not stop it.
    answered = _cli(store, *reply, "--step", str(step))
    assert answered.returncode == 0, answered.stderr
    again = _cli(store, *reply, "--step", str(step))
    assert again.returncode == 2
    assert f"was answered already, at step {step + 1} (ok) by '{me['name']}'" in again.stderr

    records = json.loads(_cli(store, "history", "r1", "--json").stdout)
    actors = {r["seq"]: r["actor"] for r in records if r["actor"] is not None}
    assert actors == {0: me, step + 1: me}
    assert [r["kind"] for r in records if r["actor"]] == ["created", "reply"]
    text = _cli(store, "history", "r1").stdout.splitlines()
    assert text[0].endswith(f"by {me['name']}")
    assert text[step + 1].endswith(f"by {me['name']}")
    assert not text[1].endswith(f"by {me['name']}")


def test_check_refuses_a_bad_reviewers_list_naming_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    text = (GATES / "reviewed.yaml").read_text(encoding="utf-8")
    bad.write_text(text.replace('[alice, "group:release"]', '[alice, "", alice]'))
    checked = subprocess.run(
        cli_argv("check", str(bad)), capture_output=True, text=True, timeout=120, check=False
    )
    assert checked.returncode != 0
    out = checked.stdout + checked.stderr
    assert f"{bad}:15:" in out
    assert "reviewers[1]" in out
    assert "Traceback" not in out
    bad.write_text(text.replace('reviewers: [alice, "group:release"]', "reviewers: []"))
    empty = subprocess.run(
        cli_argv("check", str(bad)), capture_output=True, text=True, timeout=120, check=False
    )
    assert empty.returncode != 0
    assert "reviewers: Value should have at least 1 item" in empty.stdout + empty.stderr
    bad.write_text(text.replace("reviewers:", "reviewer:"))
    misspelt = subprocess.run(
        cli_argv("check", str(bad)), capture_output=True, text=True, timeout=120, check=False
    )
    assert "did you mean 'reviewers'?" in misspelt.stdout + misspelt.stderr
