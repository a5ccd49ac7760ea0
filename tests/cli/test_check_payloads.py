"""``check`` judges what a binding's payload can carry against what the machine reads.

An ``llm:`` prompt reading ``{payload[message]}`` in a state a passing shell check also
enters fails that step at run time; a ``payload:retryable`` guard on a shell action's
``fail`` (whose payload carries only its exit information) is never taken. Both are
``check`` findings with the file, line and the path that leads there; the shipped graphs
have neither. The real command, in a subprocess, on a user's files.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from builders import cli_argv

_MACHINE = """\
machine: review
initial: verify
budgets:
  rounds: {limit: 3, spend_on: [reflect]}
states:
  verify: {hook: verify}
  reflect: {hook: reflect}
  done: {final: success}
  failed: {final: failed}
transitions:
  - {trigger: pass, source: verify, dest: done}
  - {trigger: fail, source: verify, dest: reflect, conditions: ["budget:rounds"]}
  - {trigger: fail, source: verify, dest: failed}
  - {trigger: lint, source: verify, dest: reflect, conditions: ["budget:rounds"]}
  - {trigger: lint, source: verify, dest: failed}
  - {trigger: retry, source: reflect, dest: verify}
  - {trigger: error, source: [verify, reflect], dest: failed}
"""

_GRAPH = """\
graph: g
machines: [./review.yaml]
nodes:
  - id: check
    machine: review
    with: {{llm: {{script: responses.json}}}}
    bind:
      verify: {{shell: [python3, check.py], on_exit: {on_exit}}}
      reflect:
        llm: {{model: writer, prompt: "The check failed: {{payload[message]}}. Why?"}}
        on_outcome: {{answer: retry, compressed: null}}
"""

_REPO = Path(__file__).resolve().parents[2]
_NEW_CODES = {"payload-not-carried", "payload-guard-unsatisfiable", "dependency-writes-on-failure"}


def _phasegraph(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli_argv(*args), cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def _write(tmp_path: Path, machine: str, on_exit: str) -> None:
    (tmp_path / "review.yaml").write_text(machine, encoding="utf-8")
    (tmp_path / "g.yaml").write_text(_GRAPH.format(on_exit=on_exit), encoding="utf-8")
    (tmp_path / "responses.json").write_text("[]", encoding="utf-8")
    (tmp_path / "check.py").write_text("import sys\nsys.exit(0)\n", encoding="utf-8")


def test_a_template_reading_a_key_one_way_in_does_not_carry_is_an_error_and_run_fails_there(
    tmp_path: Path,
) -> None:
    """A passing check (status 0) is mapped to `lint`, which also enters `reflect`: a
    shell payload carries `message` only when the command failed."""
    _write(tmp_path, _MACHINE, "{0: lint, 1: pass, default: fail}")
    checked = _phasegraph(tmp_path, "check", "--strict", "g.yaml")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert (
        "g.yaml:9:7: error: node 'check': the llm action bound to hook 'reflect' reads "
        "{payload[message]}, but state 'reflect' of machine 'review' is also entered on "
        "verify --lint--> reflect, whose payload holds only exit, timed_out: that step fails "
        "filling the template"
    ) in checked.stdout
    found = json.loads(_phasegraph(tmp_path, "check", "--json", "g.yaml").stdout)
    assert [(f["code"], f["file"], f["line"]) for f in found] == [
        ("payload-not-carried", "g.yaml", 9)
    ]
    # What check said is what run meets.
    ran = _phasegraph(tmp_path, "run", "g.yaml")
    assert "template names payload[message] but payload has no key 'message'" in ran.stdout
    assert "0/1 nodes succeeded, 1 failed" in ran.stdout
    # Only failures enter `reflect` when status 0 passes: check passes, and so would run.
    _write(tmp_path, _MACHINE, "{0: pass, 2: lint, default: fail}")
    assert _phasegraph(tmp_path, "check", "--strict", "g.yaml").returncode == 0


def test_a_template_read_in_the_initial_state_is_an_error(tmp_path: Path) -> None:
    machine = _MACHINE.replace("initial: verify", "initial: reflect")
    _write(tmp_path, machine, "{0: pass, default: fail}")
    checked = _phasegraph(tmp_path, "check", "g.yaml")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert (
        "state 'reflect' of machine 'review' is also entered when the node starts, with no payload"
    ) in checked.stdout


def test_a_payload_guard_no_bound_action_can_satisfy_is_a_warning_with_its_path(
    tmp_path: Path,
) -> None:
    """`retryable` is in an error's payload, never in a shell action's `fail`'s."""
    guarded = _MACHINE.replace(
        'dest: reflect, conditions: ["budget:rounds"]}\n  - {trigger: fail, source: verify, '
        "dest: failed}",
        'dest: reflect, conditions: ["payload:retryable", "budget:rounds"]}\n  - {trigger: '
        "fail, source: verify, dest: failed}",
    )
    assert guarded != _MACHINE
    _write(tmp_path, guarded, "{0: pass, 2: lint, default: fail}")
    assert _phasegraph(tmp_path, "check", "g.yaml").returncode == 0  # a warning only
    checked = _phasegraph(tmp_path, "check", "--strict", "g.yaml")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert (
        "review.yaml:12:5: warning: node 'check': transition 'fail' verify -> reflect of "
        "machine 'review' requires payload:retryable, but no action bound to its sources puts "
        "'retryable' in the payload of 'fail' (on verify --fail--> reflect it holds only "
        "action, error_code, exit, message, stderr, timed_out)"
    ) in checked.stdout
    # The same guard on `error` (an action that raised) can hold: no finding.
    on_error = guarded.replace(
        "  - {trigger: error, source: [verify, reflect], dest: failed}\n",
        '  - {trigger: error, source: verify, dest: reflect, conditions: ["payload:retryable",'
        ' "budget:rounds"]}\n  - {trigger: error, source: [verify, reflect], dest: failed}\n',
    ).replace(
        '"payload:retryable", "budget:rounds"]}\n  - {trigger: fail',
        '"budget:rounds"]}\n  - {trigger: fail',
    )
    _write(tmp_path, on_error, "{0: pass, 2: lint, default: fail}")
    checked = _phasegraph(tmp_path, "check", "--strict", "--json", "g.yaml")
    assert not {f["code"] for f in json.loads(checked.stdout)} & _NEW_CODES, checked.stdout


def test_a_python_action_may_carry_anything(tmp_path: Path) -> None:
    """What a function of the user's own returns is not known: nothing is judged."""
    _write(tmp_path, _MACHINE, "{0: lint, 1: pass, default: fail}")
    graph = (tmp_path / "g.yaml").read_text(encoding="utf-8")
    graph = graph.replace(
        "verify: {shell: [python3, check.py], on_exit: {0: lint, 1: pass, default: fail}}",
        "verify: {python: 'checks:verify', triggers: [pass, fail, lint]}",
    )
    (tmp_path / "g.yaml").write_text(graph, encoding="utf-8")
    (tmp_path / "checks.py").write_text(
        "def verify(ctx):\n    return {'trigger': 'lint', 'payload': {'message': 'E501'}}\n",
        encoding="utf-8",
    )
    checked = _phasegraph(tmp_path, "check", "--strict", "--json", "g.yaml")
    assert not {f["code"] for f in json.loads(checked.stdout)} & _NEW_CODES, checked.stdout


def test_the_shipped_graphs_have_no_payload_findings() -> None:
    graphs = sorted(str(p) for p in (_REPO / "graphs").glob("*.yaml"))
    assert graphs
    checked = _phasegraph(_REPO, "check", "--strict", "--json", *graphs)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert not {f["code"] for f in json.loads(checked.stdout)} & _NEW_CODES


_FAILURE_WRITE = """\
graph: fw
nodes:
  - id: build
    machine: fallback_chain
    writes: [report]
    bind:
      main: {shell: [python3, check.py], capture: report}
      recover: {python: "phasegraph.concerns.fallback:recover", triggers: [retry]}
      emergency: {python: "phasegraph.concerns.fallback:emergency", triggers: [fail]}
  - id: notify
    machine: task
    needs: [build]
    bind:
      run: {shell: [echo, "build: {KEY}"]}
"""


def test_a_read_of_a_key_a_dependency_writes_only_when_failing_is_an_error(
    tmp_path: Path,
) -> None:
    """The emergency writes the error record, then the node fails: a node that needs it
    runs only when it succeeded, so the record is never there."""
    (tmp_path / "check.py").write_text("import sys\nsys.exit(0)\n", encoding="utf-8")
    (tmp_path / "fw.yaml").write_text(_FAILURE_WRITE.replace("KEY", "error"), encoding="utf-8")
    checked = _phasegraph(tmp_path, "check", "--json", "fw.yaml")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    (found,) = json.loads(checked.stdout)
    assert (found["code"], found["file"], found["line"]) == (
        "dependency-writes-on-failure",
        "fw.yaml",
        14,
    )
    assert found["message"].startswith(
        "node 'notify' reads {error} in its shell command (hook 'run'), but 'build' writes it "
        "only in state 'emergency', state 'reraise' of machine 'fallback_chain', from which "
        "it can only fail"
    )
    ran = _phasegraph(tmp_path, "run", "fw.yaml")
    assert "notify (run): template names {error} but the run has no such value" in ran.stdout
    # What the main work captures on its way to success is there: check passes.
    (tmp_path / "fw.yaml").write_text(_FAILURE_WRITE.replace("KEY", "report"), encoding="utf-8")
    assert _phasegraph(tmp_path, "check", "--strict", "fw.yaml").returncode == 0


_NESTED = """\
graph: nested
nodes:
  - id: build
    machine: agent_quality_loop
    writes: [conversation]
    with: {llm: {script: responses.json}, budgets: {turns: 4}}
    bind:
      think: {llm: {model: coder, prompt: "Fix it: {payload[feedback]}", tools: [read_file]}}
      act: {tools: conversation}
      verify: {shell: [python3, check.py], on_exit: {0: pass, default: fail}}
      reflect:
        llm: {model: coder, prompt: "The tests failed: {payload[message]}. Why?"}
        on_outcome: {answer: retry, compressed: null}
"""


def test_a_nested_machines_first_state_is_entered_as_the_state_nesting_it(
    tmp_path: Path,
) -> None:
    """`think` is the agent's first state; the agent is the first state of the loop, so a
    node starts there, with no payload: the prompt's `feedback` is not there."""
    (tmp_path / "nested.yaml").write_text(_NESTED, encoding="utf-8")
    (tmp_path / "responses.json").write_text("[]", encoding="utf-8")
    checked = _phasegraph(tmp_path, "check", "nested.yaml")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert (
        "nested.yaml:8:7: error: node 'build': the llm action bound to hook 'think' reads "
        "{payload[feedback]}, but state 'think' of machine 'agent' is also entered when the "
        "node starts, with no payload (entering 'agent_quality_loop' state 'execute', which "
        "nests it)"
    ) in checked.stdout
    # `reflect` reads a failed check's message, and only a failed check enters it: no finding.
    assert "reads {payload[message]}" not in checked.stdout
