"""The crash check's runs each work in a folder of their own, removed when they end.

Runs of the graph's own actions go on at once: sharing one folder, an agent that writes a
file saw the file another run wrote, and a correct graph was reported as broken. And a
key an ``append`` reducer gathers from parallel nodes is compared as a multiset: which
node finishes first is timing, not behaviour.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from phasegraph.testing import _folders, crash_equivalence
from phasegraph.testing._crash import _json
from phasegraph.testing._folders import Folders

_FILES = """
graph: files
nodes:
  - id: write
    machine: task
    bind:
      run:
        # Logs where it works and a temporary folder it makes (one line, one write: runs
        # log at once), then writes a file there.
        shell: [sh, -c, 'echo "$(pwd) $(mktemp -d)" >> "$1" && echo hi > out.txt', sh, "{log}"]
        on_exit: {0: ok, default: fail}
  - id: read
    machine: task
    needs: [write]
    bind:
      run: {shell: [cat, out.txt], on_exit: {0: ok, default: fail}}
"""


def test_each_run_works_in_a_copy_of_its_own_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here, log = tmp_path / "here", tmp_path / "log.txt"
    here.mkdir()
    (here / "files.yaml").write_text(_FILES)
    monkeypatch.chdir(here)
    # A temporary folder of this test's own: other tests' runs make and remove theirs in
    # the system's at the same time.
    system_tmp = tmp_path / "tmp"
    system_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(system_tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again

    report = crash_equivalence("files.yaml", {"log": str(log)})

    assert report.first is None, str(report.first)
    assert "each run worked in a copy of this folder of its own" in report.folders
    pairs = [line.split(" ") for line in log.read_text().splitlines()]
    folders, scratch = {pair[0] for pair in pairs}, {pair[1] for pair in pairs}
    # Two uninterrupted runs and one a crash point, each in its own folder (a resumed
    # run works where its crashed attempt did), none of them this one.
    assert len(folders) == report.crashes + 2
    assert str(here) not in folders
    assert not (here / "out.txt").exists()
    # What they made is gone: their folders, and what they made in their temporary one.
    assert not any(Path(p).exists() for p in folders | scratch)
    assert all(Path(p).is_relative_to(system_tmp) for p in folders)
    assert list(system_tmp.iterdir()) == []


_APPENDS = """
graph: appends
reducers: {items: append}
nodes:
  - {id: a, machine: task, writes: [items], bind: {run: {python: "slow:a", triggers: [ok]}}}
  - {id: b, machine: task, writes: [items], bind: {run: {python: "slow:b", triggers: [ok]}}}
  - {id: c, machine: task, writes: [items], bind: {run: {python: "slow:c", triggers: [ok]}}}
"""

_SLOW = '''
"""Each finishes after a wait that depends on the process: the order varies by run."""

import asyncio
import os

from phasegraph import ActionResult


async def _appended(name: str, rank: int) -> ActionResult:
    await asyncio.sleep(((os.getpid() + rank) % 3) * 0.02)
    return ActionResult(trigger="ok", data={"items": [name]})


async def a(ctx):
    return await _appended("a", 0)


async def b(ctx):
    return await _appended("b", 1)


async def c(ctx):
    return await _appended("c", 2)
'''


def test_parallel_appends_compare_as_a_multiset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "appends.yaml").write_text(_APPENDS)
    (tmp_path / "slow.py").write_text(_SLOW)
    monkeypatch.chdir(tmp_path)

    report = crash_equivalence("appends.yaml")

    assert report.first is None, str(report.first)
    assert report.varying is None, str(report.varying)


def test_an_appended_key_is_written_as_its_items_in_one_order() -> None:
    one = _json({"items": ["b", {"x": 1}, "a"], "other": [2, 1]}, frozenset({"items"}))
    two = _json({"items": [{"x": 1}, "a", "b"], "other": [2, 1]}, frozenset({"items"}))
    assert one == two
    # A key no append reducer gathers keeps its order: that order is the action's.
    assert _json({"other": [1, 2]}, frozenset({"items"})) != _json(
        {"other": [2, 1]}, frozenset({"items"})
    )


def test_a_file_that_vanishes_while_a_run_copies_the_folder_is_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's scratch file, gone before the copy reached it, is no error."""
    origin, folder = tmp_path / "origin", tmp_path / "run"
    origin.mkdir()
    folder.mkdir()
    (origin / "kept.txt").write_text("kept")
    (origin / "gone.part").write_text("about to go")
    copy = shutil.copy2

    def copy_then_lose(source: object, target: object, **options: object) -> object:
        if str(getattr(source, "path", source)).endswith("gone.part"):
            Path(str(getattr(source, "path", source))).unlink()  # its owner removed it
        return copy(source, target)  # type: ignore[arg-type]

    monkeypatch.setattr(_folders.shutil, "copy2", copy_then_lose)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TMPDIR", str(tmp_path))

    entered = Folders(origin).enter(folder, "graph.yaml")

    assert entered == "graph.yaml"  # no such file: named as given
    assert Path.cwd() == folder / "work"
    assert (folder / "work" / "kept.txt").read_text() == "kept"
    assert not (folder / "work" / "gone.part").exists()
