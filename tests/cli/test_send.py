"""``phasegraph send`` through the real command line: taken at once, kept, refused, deduped."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from builders import TESTS, cli_argv

MESSAGES = TESTS / "fixtures" / "messages"


def _cli(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = cli_argv(*args, "--store", f"sqlite:///{workdir / 'runs.db'}")
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=120, check=False, cwd=workdir
    )


def _chat(tmp_path: Path, policy: str = "enqueue") -> Path:
    for name in ("chat.yaml", "chatbot.py"):
        shutil.copy(MESSAGES / name, tmp_path / name)
    graph = tmp_path / "chat.yaml"
    graph.write_text(graph.read_text().replace("busy: enqueue", f"busy: {policy}"))
    return graph


def _said(tmp_path: Path, run_id: str) -> list[str]:
    shown = _cli(tmp_path, "show", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    return list(json.loads(shown.stdout)["data"].get("said", []))


def test_send_answers_at_once_and_takes_a_resent_id_once(tmp_path: Path) -> None:
    graph = _chat(tmp_path)
    started = _cli(tmp_path, "run", str(graph), "--run-id", "c", "-q")
    assert started.returncode == 3
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    assert f"phasegraph send c --text TEXT --store {store}\n" in started.stdout  # not reply
    sent = _cli(tmp_path, "send", "c", "--text", "hello", "--id", "m1", "-q")
    assert sent.returncode == 3, sent.stderr  # taken, answered: the run waits again
    assert sent.stdout.startswith("message m1 to run c taken\nrun c waiting")
    again = _cli(tmp_path, "send", "c", "--text", "hello again", "--id", "m1", "--json")
    assert again.returncode == 3, again.stderr
    view = json.loads(again.stdout)
    assert (view["id"], view["position"], view["duplicate"]) == ("m1", 1, True)
    payload = _cli(tmp_path, "send", "c", "--payload", '{"text": "second"}', "--json")
    assert json.loads(payload.stdout)["position"] == 2
    assert _said(tmp_path, "c") == ["hello", "second"]


def test_send_detached_needs_a_workers_queue(tmp_path: Path) -> None:
    graph = _chat(tmp_path, "reject")
    assert _cli(tmp_path, "run", str(graph), "--run-id", "c", "-q").returncode == 3
    # SQLite has no workers' queue: --detach is refused, nothing kept.
    detached = _cli(tmp_path, "send", "c", "--text", "x", "--detach")
    assert detached.returncode == 2
    assert "worker" in detached.stderr
    assert _said(tmp_path, "c") == []


def test_send_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    graph = _chat(tmp_path, "reject")
    assert _cli(tmp_path, "run", str(graph), "--run-id", "c", "-q").returncode == 3
    for args, said in (
        (("--payload", "[1, 2]"), "--payload: expected a JSON object, not list"),
        (("--payload", "{nope"), "--payload: not JSON"),
        (("--text", "x", "--id", ""), "message id ''"),
    ):
        refused = _cli(tmp_path, "send", "c", *args)
        assert refused.returncode == 2, refused.stdout
        assert said in refused.stderr
        assert "Traceback" not in refused.stderr
    missing = _cli(tmp_path, "send", "nope", "--text", "x")
    assert missing.returncode == 2
    assert "nope" in missing.stderr
    both = _cli(tmp_path, "send", "c", "--text", "x", "--payload", "{}")
    assert both.returncode == 2
    assert "not allowed with argument" in both.stderr
