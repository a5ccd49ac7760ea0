"""The command line at the edges of its process: a closed pipe, a port already taken."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from builders import REPO, cli_argv
from phasegraph.cli._support import cannot_listen

LOOP = REPO / "benchmarks" / "loop.yaml"


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    run_id = "piped-run"
    ran = subprocess.run(
        cli_argv(
            "run", str(LOOP), "--input", "steps=3000", "--run-id", run_id, "-q", "--store", store
        ),
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    # `phasegraph history RUN | head -1`: the reader closes the pipe after one line, long
    # before the ~3,000 lines (far more than a pipe holds) are written.
    with subprocess.Popen(
        cli_argv("history", run_id, "--store", store),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as history:
        assert history.stdout is not None
        assert history.stderr is not None
        first = history.stdout.readline()
        history.stdout.close()
        errors = history.stderr.read().decode()
        assert history.wait() == 141
    assert first.split()[0] == b"0"
    assert errors == ""


def test_serve_on_a_taken_port_says_so_in_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        served = subprocess.run(
            cli_argv("serve", "--port", str(port), "--store", "memory://"),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert served.returncode == 2
    assert "Traceback" not in served.stderr
    assert served.stderr.strip() == (
        f"phasegraph: cannot listen on 127.0.0.1:{port}: address already in use; "
        "choose another --port or --host"
    )


@pytest.mark.parametrize(
    "reason",
    [
        "address already in use",  # Python 3.11 and 3.12
        "[errno 98] address already in use",  # Python 3.13
    ],
)
def test_a_refused_bind_is_said_as_the_system_says_it(reason: str) -> None:
    """asyncio's wording of a refused bind, of any Python this runs on, comes out the same."""
    refused = OSError(98, f"error while attempting to bind on address ('127.0.0.1', 7): {reason}")
    assert cannot_listen("127.0.0.1", 7, refused).message == (
        "cannot listen on 127.0.0.1:7: address already in use; choose another --port or --host"
    )
    plain = OSError(13, "Permission denied")  # a bind refused before asyncio words it
    assert "127.0.0.1:7: Permission denied;" in cannot_listen("127.0.0.1", 7, plain).message
