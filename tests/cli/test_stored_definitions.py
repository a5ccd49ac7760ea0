"""The definition travels with the run, through the real command line.

A run waiting at a gate keeps going as it began when its graph file is deleted or edited
(its prompts included), says so in one line, and moves to another version only through
``phasegraph migrate``, which checks the move first and records it as one step.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from builders import TESTS, cli_argv

FIXTURES = TESTS / "fixtures" / "definitions"


def _cli(store: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    argv = cli_argv(*args, "--store", store)
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, cwd=cwd)


def _copy(tmp_path: Path, *names: str) -> Path:
    folder = tmp_path / "project"
    folder.mkdir(exist_ok=True)
    for name in names:
        shutil.copy(FIXTURES / name, folder / name)
    return folder


def _waiting(tmp_path: Path, graph: Path, run_id: str) -> str:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    started = _cli(store, "run", str(graph), "--run-id", run_id, "-q")
    assert started.returncode == 3, started.stderr  # waits at its gate
    return store


def test_a_run_whose_file_was_deleted_is_answered_replayed_and_forked(tmp_path: Path) -> None:
    folder = _copy(tmp_path, "approval.yaml")
    graph = folder / "approval.yaml"
    store = _waiting(tmp_path, graph, "gone")
    graph.unlink()

    answered = _cli(store, "reply", "gone", "--id", "gone:review:run", "--trigger", "ok")
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.startswith("run gone completed"), answered.stdout
    assert f"the graph file {graph} is gone or does not load" in answered.stderr
    assert "goes on with the definition it stored" in answered.stderr

    replayed = _cli(store, "replay", "gone")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "identical" in replayed.stdout

    forked = _cli(store, "fork", "gone", "--at", "2", "--json")
    assert forked.returncode in (0, 3), forked.stderr
    fork_id = json.loads(forked.stdout)["run_id"]
    fork = json.loads(_cli(store, "status", fork_id, "--json").stdout)
    assert fork["status"] == "waiting"  # the fork was driven on the stored definition too
    again = _cli(store, "reply", fork_id, "--id", f"{fork_id}:review:run", "--trigger", "ok")
    assert again.returncode == 0, again.stderr


def test_an_edited_prompt_does_not_reach_a_waiting_run(tmp_path: Path) -> None:
    folder = _copy(tmp_path, "prompted.yaml", "prompted.responses.json")
    graph = folder / "prompted.yaml"
    store = _waiting(tmp_path, graph, "edited")
    text = graph.read_text()
    graph.write_text(text.replace("OLD", "NEW"))
    (folder / "prompted.responses.json").write_text('[{"content": "NEW script"}]')

    resumed = _cli(store, "reply", "edited", "--id", "edited:approve:run", "--trigger", "ok")
    assert resumed.returncode == 0, resumed.stderr
    assert f"the graph file {graph} differs from the definition run edited follows" in (
        resumed.stderr
    )
    assert f"phasegraph migrate edited --to {graph}" in resumed.stderr

    shown = json.loads(_cli(store, "show", "edited", "--json").stdout)
    said = json.dumps(shown["data"]["conversation"])
    assert "Say the OLD words." in said
    assert "The words, said." in said  # the stored script answered, not the edited one
    assert "NEW" not in said


def test_migrate_checks_the_move_names_what_does_not_fit_and_records_who_moved_it(
    tmp_path: Path,
) -> None:
    folder = _copy(tmp_path, "approval.yaml")
    graph = folder / "approval.yaml"
    store = _waiting(tmp_path, graph, "moving")
    before = json.loads(_cli(store, "status", "moving", "--json").stdout)

    # The waiting state is gone from the new version: refused, naming state and node.
    (folder / "work.yaml").write_text(
        "machine: work\ninitial: doing\nstates:\n  doing: {hook: run}\n  done: {final: success}\n"
        "  failed: {final: failed}\ntransitions:\n  - {trigger: ok, source: doing, dest: done}\n"
        "  - {trigger: fail, source: doing, dest: failed}\n"
    )
    text = graph.read_text().replace("graph: approval", "graph: approval\nmachines: [work.yaml]")
    broken = folder / "broken.yaml"
    broken.write_text(text.replace("machine: task\n    needs:", "machine: work\n    needs:"))
    refused = _cli(store, "migrate", "moving", "--to", str(broken), "--dry-run")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "node 'review' stands in state 'run'" in refused.stdout
    assert "machine 'work' of the new graph does not have" in refused.stdout
    assert f"{folder / 'work.yaml'}:" in refused.stdout  # located in the new files
    assert "nothing changed" in refused.stdout

    # A compatible version (a prompt text changed) fits; a dry run changes nothing.
    changed = folder / "approval_v2.yaml"
    changed.write_text(graph.read_text().replace('text: "{greeting}"', 'text: "Check: {greeting}"'))
    fits = _cli(store, "migrate", "moving", "--to", str(changed), "--dry-run")
    assert fits.returncode == 0, fits.stdout + fits.stderr
    assert "run moving fits" in fits.stdout
    assert json.loads(_cli(store, "status", "moving", "--json").stdout)["seq"] == before["seq"]

    moved = _cli(store, "migrate", "moving", "--to", str(changed))
    assert moved.returncode == 0, moved.stdout + moved.stderr
    steps = json.loads(_cli(store, "history", "moving", "--json").stdout)
    migrate = steps[-1]
    assert migrate["kind"] == "migrate"
    assert migrate["actor"]["name"]  # who moved it
    assert migrate["result"]["from"]["graph_digest"] != migrate["result"]["graph_digest"]
    assert migrate["result"]["graph_source"] == str(changed)

    changed.unlink()  # the new version is stored too: the run needs no file
    done = _cli(store, "reply", "moving", "--id", "moving:review:run", "--trigger", "ok")
    assert done.returncode == 0, done.stderr
    assert _cli(store, "replay", "moving").returncode == 0


def test_the_flags_of_earlier_versions_say_what_replaced_them(tmp_path: Path) -> None:
    folder = _copy(tmp_path, "approval.yaml")
    store = _waiting(tmp_path, folder / "approval.yaml", "old")
    refused = _cli(store, "resume", "old", "--allow-changed")
    assert refused.returncode == 2
    assert "--allow-changed is gone" in refused.stderr
    assert "phasegraph migrate old --to FILE --dry-run" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_all_waiting_runs_of_a_graph_move_in_one_command(tmp_path: Path) -> None:
    folder = _copy(tmp_path, "approval.yaml")
    graph = folder / "approval.yaml"
    store = _waiting(tmp_path, graph, "w1")
    _waiting(tmp_path, graph, "w2")
    changed = folder / "approval_v2.yaml"
    changed.write_text(graph.read_text().replace('text: "{greeting}"', 'text: "v2 {greeting}"'))
    moved = _cli(store, "migrate", "--all-waiting", "approval", "--to", str(changed))
    assert moved.returncode == 0, moved.stdout + moved.stderr
    assert "run w1 moved to" in moved.stdout
    assert "run w2 moved to" in moved.stdout
    assert "2 waiting runs of graph 'approval': 2 fit" in moved.stdout
    for run_id in ("w1", "w2"):
        last = json.loads(_cli(store, "history", run_id, "--json").stdout)[-1]
        assert last["kind"] == "migrate"


def test_check_reads_a_runs_stored_definition_and_checks_a_move_without_making_it(
    tmp_path: Path,
) -> None:
    folder = _copy(tmp_path, "approval.yaml")
    graph = folder / "approval.yaml"
    store = _waiting(tmp_path, graph, "checked")
    text = graph.read_text()
    graph.unlink()

    stored = _cli(store, "check", "--run", "checked")
    assert stored.returncode == 0, stored.stdout + stored.stderr
    assert "checked 1 definition: 0 errors" in stored.stdout

    moved_away = folder / "renamed.yaml"  # the review node is called approve here
    moved_away.write_text(text.replace("id: review", "id: approve"))
    misfit = _cli(store, "check", str(moved_away), "--against", "checked")
    assert misfit.returncode == 1, misfit.stdout + misfit.stderr
    assert "node 'review'" in misfit.stdout
    assert "[run-does-not-fit]" in misfit.stdout
    assert "has no node 'review'" in misfit.stdout

    fits = folder / "fits.yaml"
    fits.write_text(text.replace('text: "{greeting}"', 'text: "now: {greeting}"'))
    fine = _cli(store, "check", str(fits), "--against", "checked")
    assert fine.returncode == 0, fine.stdout + fine.stderr
    history = json.loads(_cli(store, "history", "checked", "--json").stdout)
    assert all(step["kind"] != "migrate" for step in history)  # nothing was moved


def test_renamed_nodes_and_states_move_with_a_renames_file(tmp_path: Path) -> None:
    folder = _copy(tmp_path, "approval.yaml")
    graph = folder / "approval.yaml"
    store = _waiting(tmp_path, graph, "renamed")
    text = graph.read_text()
    renamed = folder / "v2.yaml"
    renamed.write_text(text.replace("id: draft", "id: write").replace("[draft]", "[write]"))

    plain = _cli(store, "migrate", "renamed", "--to", str(renamed), "--dry-run")
    assert plain.returncode == 1
    assert "node 'draft'" in plain.stdout
    assert "renames file (nodes: {draft: NEW_ID})" in plain.stdout

    renames = folder / "renames.yaml"
    renames.write_text("nodes: {draft: write}\n")
    moved = _cli(store, "migrate", "renamed", "--to", str(renamed), "--renames", str(renames))
    assert moved.returncode == 0, moved.stdout + moved.stderr
    nodes = json.loads(_cli(store, "status", "renamed", "--json").stdout)["nodes"]
    assert set(nodes) == {"write", "review"}
    assert nodes["write"]["status"] == "completed"  # the renamed node kept what it did

    gated = folder / "gated.yaml"
    gated.write_text(renamed.read_text().replace("id: review", "id: approve"))
    renames.write_text("nodes: {review: approve}\n")
    refused = _cli(store, "migrate", "renamed", "--to", str(gated), "--renames", str(renames))
    assert refused.returncode == 1
    assert "node 'review' waits at a gate" in refused.stdout

    done = _cli(store, "reply", "renamed", "--id", "renamed:review:run", "--trigger", "ok")
    assert done.returncode == 0, done.stderr
    assert _cli(store, "replay", "renamed").returncode == 0


CODE_GRAPH = """graph: coded
nodes:
  - id: work
    machine: task
    bind:
      run: {python: "beside:ok", triggers: [ok]}
  - id: review
    machine: task
    needs: [work]
    bind:
      run: {human: review, triggers: [ok]}
"""
CODE = """from phasegraph.actions import ActionResult


def ok(ctx):
    return ActionResult(trigger="ok")
"""


def test_a_change_of_the_code_a_run_imports_is_reported_not_refused(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "coded.yaml").write_text(CODE_GRAPH)
    (folder / "beside.py").write_text(CODE)
    store = _waiting(tmp_path, folder / "coded.yaml", "coded")
    (folder / "beside.py").write_text(CODE + "\n# changed since the run started\n")
    answered = _cli(store, "reply", "coded", "--id", "coded:review:run", "--trigger", "ok")
    assert answered.returncode == 0, answered.stderr
    said = f"python module beside ({folder / 'beside.py'}) changed since run coded stored"
    assert said in answered.stderr
    assert "graph file" not in answered.stderr  # the YAML is as it was: nothing to say of it
