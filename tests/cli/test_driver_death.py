"""A driver killed with SIGKILL: ``resume`` takes over at once and no command runs twice.

The real CLI runs a graph whose one node runs a ``shell:`` command; the test SIGKILLs
the CLI while the command runs, then runs ``phasegraph resume`` at once. The killed
driver's lease still has most of its 30 s to live, but its holder is provably dead (this
host, this boot, its pid gone), so the resume is not refused; the command it left behind
died with it (parent-death signal), and what that command had started in the background
is killed before the action runs again.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from builders import cli_argv

GRAPH = """\
graph: driver_death
nodes:
  - id: slow
    machine: task
    bind:
      run:
        shell: [sh, -c, {script}]
"""
# The command notes its pid and starts a background job (another process of its group)
# that notes its own pid, waits for the test's go-ahead file and appends a line to the
# marker file; the command waits for the job.
SCRIPT = (
    'echo $$ > "$OUTER"; '
    'sh -c \'echo $$ > "$INNER"; while [ ! -e "$GO" ]; do sleep 0.02; done; '
    'echo ran >> "$MARKER"\' & wait'
)


def _wait_for(predicate: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.005)


class _Driver:
    """``phasegraph run`` of the one-node graph in a subprocess, and its files."""

    def __init__(self, workdir: Path, store: str) -> None:
        self.workdir = workdir
        self.store = store
        self.run_id = "death-" + uuid.uuid4().hex[:8]
        self.graph = workdir / "graph.yaml"
        self.graph.write_text(GRAPH.format(script=json.dumps(SCRIPT)), encoding="utf-8")
        self.outer, self.inner, self.marker = (workdir / n for n in ("outer", "inner", "marker"))
        self.go = workdir / "go"
        self.env = {
            **os.environ,
            "OUTER": str(self.outer),
            "INNER": str(self.inner),
            "MARKER": str(self.marker),
            "GO": str(self.go),
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = cli_argv("run", str(self.graph), "--store", self.store, "--run-id", self.run_id)
        self.process = subprocess.Popen(
            [*argv, "-q"], cwd=self.workdir, env=self.env, stdout=subprocess.DEVNULL
        )
        _wait_for(lambda: _pid(self.inner) is not None, "the command's background job")

    def kill(self) -> float:
        """SIGKILL the driver; return when it happened (monotonic)."""
        assert self.process is not None
        assert self.process.poll() is None
        self.process.kill()
        killed = time.monotonic()
        self.process.wait()
        return killed

    def resume(self) -> tuple[float, subprocess.CompletedProcess[bytes]]:
        """Resume the run; let the command finish once the resumed one started.

        Returns the seconds from the call to the resumed command's start (the resume's
        process start, its lease takeover and the clean-up of a left-over job included),
        and the finished resume.
        """
        killed_command = _pid(self.outer)
        argv = cli_argv("resume", self.run_id, "--store", self.store, "-q", "--json")
        called = time.monotonic()
        with subprocess.Popen(
            argv, cwd=self.workdir, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        ) as resume:
            _wait_for(
                lambda: _pid(self.outer) not in (None, killed_command) or resume.poll() is not None,
                "the resumed command to start",
            )
            took = time.monotonic() - called
            self.go.touch()  # now any job still alive would write its line
            out, err = resume.communicate(timeout=60)
        return took, subprocess.CompletedProcess(argv, resume.returncode, out, err)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _pid(path: Path) -> int | None:
    text = path.read_text(encoding="ascii").strip() if path.exists() else ""
    return int(text) if text.isdigit() else None


def _alive(pid: int) -> bool:
    """Whether a process with this pid lives (a zombie, ended but not reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


@pytest.fixture
def sqlite_driver(tmp_path: Path) -> Iterator[_Driver]:
    driver = _Driver(tmp_path, f"sqlite:///{tmp_path / 'runs.db'}")
    yield driver
    driver.close()


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def test_resume_right_after_sigkill_takes_over(request, tmp_path, backend):
    if backend == "sqlite":
        store = f"sqlite:///{tmp_path / 'runs.db'}"
    else:
        store = f"{request.getfixturevalue('redis_url')}?prefix=pgdeath{uuid.uuid4().hex[:10]}"
    driver = _Driver(tmp_path, store)
    try:
        driver.start()
        killed = driver.kill()
        # The killed driver's lease has nearly 30 s to live: resume does not wait for it.
        took, resumed = driver.resume()
        after_kill = time.monotonic() - killed
    finally:
        driver.close()
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert json.loads(resumed.stdout)["status"] == "completed"
    assert driver.marker.read_text(encoding="ascii") == "ran\n"
    print(
        f"\n{backend}: the resumed command started {took:.2f} s after 'resume' was called "
        f"(the run completed {after_kill:.2f} s after the SIGKILL)"
    )


def test_a_command_dies_with_its_driver_and_runs_once_on_resume(sqlite_driver):
    driver = sqlite_driver
    driver.start()
    outer, inner = _pid(driver.outer), _pid(driver.inner)
    assert outer is not None
    assert inner is not None
    driver.kill()
    # The command itself got the parent-death signal ...
    _wait_for(lambda: not _alive(outer), "the command to die with its driver", timeout=5)
    # ... while its background job, in the command's own session, outlived it.
    assert _alive(inner)
    _, resumed = driver.resume()
    assert resumed.returncode == 0, resumed.stderr.decode()
    # Before the action ran again, the dead driver's leftover job was killed: only the
    # resumed command's job wrote its line.
    assert not _alive(inner)
    assert _pid(driver.inner) != inner
    assert driver.marker.read_text(encoding="ascii") == "ran\n"
