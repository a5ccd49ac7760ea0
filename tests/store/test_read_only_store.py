"""Commands that only read open a SQLite store read-only, so a read-only store can be read.

The suite may run as root, whom file modes do not stop: the commands then run under
``setpriv`` with every capability dropped, where a root process obeys the modes like
anyone else. A probe in the same sandbox proves that the location is truly read-only.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from builders import cli_argv
from phasegraph.errors import StoreError
from phasegraph.store import open_store
from phasegraph.testing import make_commit

READ_ONLY_COMMANDS = [
    (["status"], "completed"),
    (["status", "kept"], "4/4 nodes succeeded"),
    (["history", "kept"], "deliver"),
    (["show", "kept"], '"run_id": "kept"'),
    (["errors", "kept"], "no errors"),
    (["replay", "kept"], "identical"),
]


def sandboxed(argv: list[str]) -> list[str]:
    """``argv`` run so that file modes bind it, as root too."""
    if os.geteuid() != 0:
        return argv
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: file modes cannot be enforced")
    return [setpriv, "--inh-caps=-all", "--bounding-set=-all", "--", *argv]


@pytest.fixture(scope="module")
def read_only_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A store holding one finished run, in a folder and file nobody may write."""
    folder = tmp_path_factory.mktemp("read-only") / "store"
    path = folder / "runs.db"
    done = subprocess.run(
        cli_argv("run", "hello", "--run-id", "kept", "-q", "--store", f"sqlite:///{path}"),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["runs.db"]  # the writer closed cleanly
    path.chmod(0o444)
    folder.chmod(0o555)
    try:
        _prove_read_only(path)
        yield path
    finally:
        folder.chmod(0o755)
        path.chmod(0o644)


def _prove_read_only(path: Path) -> None:
    """In the sandbox the commands run in, nothing can be created there nor appended."""
    probe = path.parent / "probe"
    touched = subprocess.run(sandboxed(["touch", str(probe)]), capture_output=True, check=False)
    assert touched.returncode != 0
    assert not probe.exists()
    appended = subprocess.run(
        sandboxed(["sh", "-c", f"echo x >> '{path}'"]), capture_output=True, check=False
    )
    assert appended.returncode != 0


@pytest.mark.parametrize(("command", "shown"), READ_ONLY_COMMANDS)
def test_read_only_commands_read_a_read_only_store(
    read_only_store: Path, command: list[str], shown: str
) -> None:
    before = hashlib.sha256(read_only_store.read_bytes()).hexdigest()
    done = subprocess.run(
        sandboxed(cli_argv(*command, "--store", f"sqlite:///{read_only_store}")),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert shown in done.stdout
    assert hashlib.sha256(read_only_store.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in read_only_store.parent.iterdir()) == ["runs.db"]


async def test_a_read_only_store_reads_a_live_writers_commits_and_refuses_writes(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    async with open_store(url) as writer, open_store(url, read_only=True) as reader:
        lease = await writer.acquire("r", "w", 30)
        await writer.commit(lease, make_commit("r", 0))
        assert [meta.run_id for meta in await reader.list_runs()] == ["r"]
        await writer.commit(lease, make_commit("r", 1))
        assert (await reader.read("r")).seq == 1  # the writer's WAL is read, not skipped
        with pytest.raises(StoreError, match="opened read-only"):
            await reader.acquire("r2", "w", 30)
